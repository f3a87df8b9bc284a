"""The reference Markov chain: the post's tables, exact enumeration, direct sampling and sequence TV."""
import itertools

import pytest
import torch
from stats import rate_bound, tv_bound

import specdec_lib.markov.chain as C
from specdec_lib.sampling import overlap

CH = C.reference_chain()


def test_reference_chain_is_the_posts():
    g = torch.Generator().manual_seed(1)
    P = torch.softmax(torch.randn(5, 5, generator=g) * 1.6, -1)
    assert torch.equal(CH.P, P)
    assert CH.P.shape == CH.Q.shape == CH.Q_bad.shape == (5, 5)
    assert (CH.start, CH.horizon, CH.k) == (0, 3, 4)
    # the post measured first-position acceptance 0.792 (good draft) and 0.468 (bad) from 4,000 draws each;
    # the exact overlaps must lie within 5 sd of those measurements
    for measured, q in [(0.792, CH.Q), (0.468, CH.Q_bad)]:
        beta = overlap(CH.P[0], q[0])
        assert abs(beta - measured) < rate_bound(beta, 4000)
    assert round(overlap(CH.P[0], CH.Q[0]), 3) == 0.791 and round(overlap(CH.P[0], CH.Q_bad[0]), 3) == 0.477


def test_exact_distribution_matches_brute_force_product():
    exact = C.sequence_law(CH.P, start=0, horizon=3)
    assert exact.shape == (5, 5, 5) and exact.dtype == torch.float64
    assert exact.sum().item() == pytest.approx(1.0, abs=1e-6)  # float32 rows sum to 1 within ~1e-7
    for s in itertools.product(range(5), repeat=3):
        pr, cur = 1.0, 0
        for t in s:
            pr *= float(CH.P[cur, t])
            cur = t
        assert exact[s].item() == pytest.approx(pr, rel=1e-6)


def test_exact_distribution_horizon_one_and_other_start():
    assert torch.allclose(C.sequence_law(CH.P, start=2, horizon=1), CH.P[2].double())
    assert C.sequence_law(CH.P, start=4, horizon=4).shape == (5,) * 4


N = 200_000


@pytest.mark.stat
def test_direct_sample_is_exact_and_draft_is_not():
    exact = C.sequence_law(CH.P, start=0, horizon=3)
    g = torch.Generator().manual_seed(0)
    s = C.direct_sample(CH.P, start=0, horizon=3, num_samples=N, generator=g)
    assert s.shape == (N, 3) and s.dtype == torch.long
    assert C.sequence_tv(s, exact) < tv_bound(exact, N)
    # negative control: sampling the draft chain instead fails the same test
    assert C.sequence_tv(C.direct_sample(CH.Q, start=0, horizon=3, num_samples=N, generator=g),
                                         exact) > tv_bound(exact, N)


def test_sequence_tv_of_exact_counts_is_zero():
    samples = torch.tensor(list(itertools.product(range(2), repeat=2)))  # each of 4 sequences once
    assert C.sequence_tv(samples, torch.full((2, 2), 0.25, dtype=torch.float64)) == 0.0
    assert C.sequence_tv(torch.tensor([[0, 0]]), torch.full((2, 2), 0.25)) == pytest.approx(0.75)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: C.sequence_law(CH.P[:, :4], start=0, horizon=3), ValueError, "P must sum to 1"),
    (lambda: C.sequence_law(CH.P[:4] / 1, start=0, horizon=3), ValueError, "square"),
    (lambda: C.sequence_law(CH.P, start=5, horizon=3), ValueError, "start must be a token id"),
    (lambda: C.sequence_law(CH.P, start=0, horizon=0), ValueError, "horizon must be >= 1"),
    (lambda: C.direct_sample(CH.P, start=0, horizon=3, num_samples=0), ValueError, "num_samples must be >= 1"),
    (lambda: C.direct_sample(CH.P, start=0, horizon=3, num_samples=10, generator="seed"), TypeError, "generator"),
    (lambda: C.sequence_tv(torch.zeros(3, 2, dtype=torch.long), torch.full((5,) * 3, 1 / 125)), ValueError, "horizon"),
    (lambda: C.sequence_tv(torch.full((3, 3), 7), torch.full((5,) * 3, 1 / 125)), ValueError, "token ids"),
    (lambda: C.sequence_tv(torch.zeros(3, 3), torch.full((5,) * 3, 1 / 125)), TypeError, "integer tensor"),
    (lambda: C.sequence_tv(torch.zeros(3, 3, dtype=torch.long), torch.full((5,) * 3, 0.1)), ValueError,
     "exact must sum"),
    (lambda: C.random_table(5, seed=1.5, sharpness=1.0), TypeError, "seed must be an integer"),
])
def test_chain_validation(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
