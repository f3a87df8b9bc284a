"""The noise thresholds themselves: exact samplers stay under them, and they shrink like 1/sqrt(n)."""
import pytest
import torch

import specdec_lib as sd
from specdec_lib.noise import rate_noise, tv_noise_bound, tv_noise_mean


@pytest.mark.stat
def test_bound_holds_for_exact_samples_and_mean_bound_holds_on_average():
    p = torch.tensor([0.5, 0.2, 0.2, 0.05, 0.05], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    runs = 200
    for n in (100, 1000, 10_000):
        draws = sd.sample_from(p, num_samples=runs * n, generator=g).view(runs, n)  # 200 independent runs of n draws
        freq = torch.nn.functional.one_hot(draws, 5).double().mean(1)  # (runs, V)
        tvs = 0.5 * (freq - p).abs().sum(-1)
        assert tvs.max().item() < tv_noise_bound(p, n)
        # the mean of 200 TVs has sd at most 1/(2 sqrt(200 n)) (McDiarmid variance bound): allow 5 of them
        assert tvs.mean().item() < tv_noise_mean(p, n) + 5 / (2 * (runs * n) ** 0.5)


@pytest.mark.stat
def test_bound_catches_a_small_bias_at_large_n_only():
    # negative control: a sampler off by TV 0.02 passes at n = 1,000 but fails at n = 200,000
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    biased = torch.tensor([0.52, 0.28, 0.2], dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    small = sd.total_variation(sd.empirical(sd.sample_from(biased, num_samples=1000, generator=g), 3), p)
    large = sd.total_variation(sd.empirical(sd.sample_from(biased, num_samples=200_000, generator=g), 3), p)
    assert small < tv_noise_bound(p, 1000) and large > tv_noise_bound(p, 200_000)


def test_scaling_and_validation():
    p = torch.full((4,), 0.25)
    assert tv_noise_bound(p, 400) == pytest.approx(2 * tv_noise_bound(p, 1600))
    assert rate_noise(0.5, 100) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        tv_noise_bound(p, 0)
    with pytest.raises(ValueError, match="delta must lie in"):
        tv_noise_bound(p, 10, delta=0.0)
    with pytest.raises(ValueError, match="exact must sum to 1"):
        tv_noise_bound(p * 2, 10)
    with pytest.raises(ValueError, match="rate must lie in"):
        rate_noise(1.5, 10)


def test_mean_bound_validation():
    p = torch.full((4,), 0.25)
    assert tv_noise_mean(p, 100) == pytest.approx(0.5 * 4 * (0.25 * 0.75 / 100) ** 0.5)  # valid input: unchanged
    with pytest.raises(ValueError, match="num_samples must be >= 1, got 0"):
        tv_noise_mean(p, 0)  # used to return inf
    with pytest.raises(TypeError, match="num_samples must be an integer"):
        tv_noise_mean(p, 10.0)
    with pytest.raises(ValueError, match="exact must sum to 1"):
        tv_noise_mean(p * 2, 10)
    with pytest.raises(TypeError, match="exact must be a torch.Tensor"):
        tv_noise_mean([0.5, 0.5], 10)
