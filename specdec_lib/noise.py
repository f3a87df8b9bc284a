"""How far a correct sampler lands from its target by chance: thresholds derived from the sample size."""
from __future__ import annotations

import math

import torch

from ._checks import check_distribution, check_int, check_real

__all__ = ["DELTA", "tv_noise_bound", "tv_noise_mean", "rate_noise"]

DELTA = 1e-6  # the chance a correct sampler may exceed a threshold


def tv_noise_bound(exact: torch.Tensor, num_samples: int, delta: float = DELTA) -> float:
    """A TV that the empirical distribution of n = num_samples exact samples exceeds with probability below delta.

    E[TV] = 1/2 sum E|f_i - p_i| <= 1/2 sum sqrt(p_i (1 - p_i) / n) by Jensen, and one sample moves the
    empirical TV by at most 1/n, so McDiarmid gives P(TV - E[TV] >= t) <= exp(-2 n t^2):
    t = sqrt(ln(1/delta) / (2 n)).
    """
    p = check_distribution("exact", exact.reshape(-1) if isinstance(exact, torch.Tensor) else exact).double()
    n = check_int("num_samples", num_samples, minimum=1)
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    return tv_noise_mean(p, n) + math.sqrt(math.log(1 / delta) / (2 * n))


def tv_noise_mean(exact: torch.Tensor, num_samples: int) -> float:
    """Upper bound 1/2 sum sqrt(p (1 - p) / n) on the expected TV of n = num_samples exact samples (the noise floor)."""
    p = check_distribution("exact", exact.reshape(-1) if isinstance(exact, torch.Tensor) else exact).double()
    n = check_int("num_samples", num_samples, minimum=1)
    return 0.5 * torch.sqrt(p * (1 - p) / n).sum().item()


def rate_noise(rate: float, num_samples: int) -> float:
    """Standard deviation sqrt(rate (1 - rate) / n) of the mean of n = num_samples Bernoulli(rate) flags."""
    rate = check_real("rate", rate, low=0.0, high=1.0)
    n = check_int("num_samples", num_samples, minimum=1)
    return math.sqrt(rate * (1 - rate) / n)
