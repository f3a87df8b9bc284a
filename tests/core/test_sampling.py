"""Act I: residual, acceptance in log space, the single-position sampler and its negative controls."""
import math

import pytest
import torch
from stats import rate_bound, tv_bound

import specdec_lib.sampling as S

post_pair = S.post_pair


def test_post_shared_mass_table():
    p, q = post_pair()
    assert [round(v, 4) for v in p.tolist()] == [0.7333, 0.0562, 0.0040, 0.1879, 0.0186]
    assert [round(v, 4) for v in q.tolist()] == [0.0233, 0.2899, 0.5328, 0.0602, 0.0937]
    assert round(S.overlap(p, q), 4) == 0.1623
    assert S.overlap(p, q) == pytest.approx(1 - S.total_variation(p, q), abs=1e-6)  # float32 p, q sum to 1 within ~1e-7


def test_residual_is_normalised_positive_part():
    p, q = post_pair()
    r = S.residual(p, q)
    want = torch.clamp(p - q, min=0)
    assert torch.allclose(r, want / want.sum())
    assert r.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert (r[q >= p] == 0).all()


def test_residual_p_equals_q_is_not_nan():
    p, _ = post_pair()
    r = S.residual(p, p.clone())
    assert torch.isfinite(r).all()
    assert torch.equal(r, p)


def test_residual_batched_rows():
    p, q = post_pair()
    r = S.residual(torch.stack([p, p]), torch.stack([q, p]))
    assert torch.allclose(r[0], S.residual(p, q)) and torch.equal(r[1], p)


def test_acceptance_probability_values():
    p, q = post_pair()
    x = torch.arange(5)
    a = S.acceptance_probability(p, q, x)
    assert torch.allclose(a, torch.clamp(p / q, max=1.0), atol=1e-6)
    assert S.acceptance_probability(p, q, 0).item() == 1.0  # p(0) > q(0): always kept
    # passes exactly min(p, q) of mass: q(x) * a(x) = min(p(x), q(x))
    assert torch.allclose(q * a, torch.minimum(p, q), atol=1e-7)


def test_acceptance_probability_log_space_extremes():
    p = torch.tensor([1e-30, 1 - 1e-30, 0.0], dtype=torch.float64)
    q = torch.tensor([1 - 2e-300, 1e-300, 1e-300], dtype=torch.float64)
    a = S.acceptance_probability(p, q, torch.tensor([0, 1, 2]))
    assert torch.isfinite(a).all()
    assert a[1].item() == 1.0  # ratio 1e300 would overflow float32; clamped exactly in log space
    assert a[2].item() == 0.0  # p(x) = 0: never accepted
    assert a[0].item() == pytest.approx(1e-30, rel=1e-9)


def test_acceptance_probability_rejects_q_zero_at_x():
    p = torch.tensor([0.5, 0.5])
    q = torch.tensor([1.0, 0.0])
    with pytest.raises(ValueError, match=r"q\(x\) must be > 0"):
        S.acceptance_probability(p, q, 1)


@pytest.mark.parametrize("bad, match", [
    (torch.tensor([0.5, float("nan"), 0.5]), "p must be finite"),
    (torch.tensor([0.5, float("inf"), 0.5]), "p must be finite"),
    (torch.tensor([1.2, -0.2, 0.0]), "p must be non-negative"),
    (torch.tensor([0.5, 0.4, 0.0]), "p must sum to 1"),
])
def test_bad_distributions_are_named(bad, match):
    q = torch.tensor([0.2, 0.3, 0.5])
    for fn in (S.residual, S.overlap, lambda a, b: S.speculative_sample(a, b, num_samples=3)):
        with pytest.raises(ValueError, match=match):
            fn(bad, q)


def test_shape_type_and_argument_errors():
    p, q = post_pair()
    with pytest.raises(ValueError, match="same shape"):
        S.residual(p, q[:4] / q[:4].sum())
    with pytest.raises(TypeError, match="p must be a torch.Tensor"):
        S.residual([0.5, 0.5], q)
    with pytest.raises(TypeError, match="floating-point"):
        S.residual(torch.tensor([1, 0]), torch.tensor([1, 0]))
    for n in (0, -3):
        with pytest.raises(ValueError, match="num_samples must be >= 1"):
            S.speculative_sample(p, q, num_samples=n)
    with pytest.raises(TypeError, match="num_samples must be an integer"):
        S.speculative_sample(p, q, num_samples=10.0)
    with pytest.raises(ValueError, match="mode must be one of 'correct', 'target_on_reject', 'always_accept'"):
        S.speculative_sample(p, q, num_samples=10, mode="sloppy")
    with pytest.raises(TypeError, match="generator"):
        S.speculative_sample(p, q, num_samples=10, generator=0)
    with pytest.raises(ValueError, match="x must hold token ids in"):
        S.acceptance_probability(p, q, 5)
    with pytest.raises(TypeError, match="x must be a token id"):
        S.acceptance_probability(p, q, 1.0)


def test_sample_rows_never_draws_zero_mass_tokens():
    g = torch.Generator().manual_seed(1)
    w = torch.tensor([[0.0, 0.3, 0.0, 0.7, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0]])
    draws = S.sample_rows(w.expand(20_000, 3, 5), g)  # (20000, 3)
    assert set(draws[:, 0].unique().tolist()) == {1, 3}
    assert (draws[:, 1] == 0).all() and (draws[:, 2] == 4).all()



# the four inverse-CDF draws the library had before sampling.inverse_cdf, verbatim (issue 38): each must agree with it
def _old_sample_rows(w, u):  # sampling.sample_rows: cumulative sums against u * total
    cdf = w.to(torch.float64).cumsum(-1)
    return torch.searchsorted(cdf, u[:, None] * cdf[..., -1:], right=True).squeeze(-1)


def _old_reference(w, u):  # markov/reference.inverse_cdf: Python floats, token by token
    out = []
    for weights, x in zip(w.tolist(), u.tolist()):
        total, edge, last = sum(weights), 0.0, max(i for i, v in enumerate(weights) if v > 0)
        for i, v in enumerate(weights):
            edge += v / total
            if x < edge or i == last:
                out.append(i)
                break
    return torch.tensor(out)


def _old_batched(w, u):  # markov/batched.cdf_table and draw: normalised sums, +inf from the last weight on
    w = w.double()
    V = w.shape[-1]
    last = V - 1 - (w > 0).flip(-1).double().argmax(-1, keepdim=True)
    cdf = torch.where(torch.arange(V) >= last, torch.inf, (w / w.sum(-1, keepdim=True)).cumsum(-1))
    return (cdf[:, :-1] <= u[:, None]).sum(-1)


def _old_kit(w, u):  # conformance/bugs._inverse_cdf: normalised sums in w's dtype, clamped to the last weight
    cdf = (w / w.sum(-1, keepdim=True)).cumsum(-1)
    last = (w > 0).long().cumsum(-1).argmax(-1)
    return torch.searchsorted(cdf, u.reshape(-1, 1), right=True).squeeze(-1).minimum(last)


def test_inverse_cdf_draws_what_each_old_copy_drew_at_the_edges():
    ends_low = torch.softmax(torch.randn(6, generator=torch.Generator().manual_seed(1)), 0)  # float32, sums < 1
    assert ends_low.cumsum(0)[-1] < 1 and ends_low.double().sum() < 1
    rows = [torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0.0, 0.3, 0.0, 0.7, 0.0]), torch.tensor([1.0, 0, 0, 0, 0]),
            torch.tensor([0.0, 0, 0, 0, 2.0]), torch.tensor([3.0, 0.0, 1.0]), torch.cat([ends_low, torch.zeros(2)])]
    us = torch.tensor([0.0, 2.0 ** -53, 1e-12, 0.2, 0.3, 0.5, 0.7, 1 - 1e-12, 1 - 2.0 ** -53], dtype=torch.float64)
    for w in rows:
        W = w.expand(len(us), -1)  # (9, V) one row per uniform
        want = S.inverse_cdf(W, us)  # (9,)
        assert (w[want] > 0).all(), w  # a zero-weight token never owns a uniform, at u = 0 or just below 1
        assert torch.equal(S.inverse_cdf(w, us), want) and torch.equal(S.inverse_cdf(w.double(), us), want)
        table = S.cdf_table(W)  # the batched engine's table: the same tokens, counted by comparisons
        assert torch.equal((table[:, :-1] <= us[:, None]).sum(-1), want)
        for old in (_old_sample_rows, _old_reference, _old_batched):
            assert torch.equal(old(W, us), want), (old.__name__, w)
        assert torch.equal(_old_kit(W.double(), us), want), w  # the kit only ever drew from float64 rows
    assert int(S.inverse_cdf(rows[5], 1 - 2.0 ** -53)) == 5  # a float u; the top of [0, 1) goes to the last weight
    # random rows with zeros: the old copies at random uniforms (they differ only within an ulp of a slice's end),
    # the table at every entry and an ulp below it, where a rounding slip would show
    g = torch.Generator().manual_seed(0)
    w = torch.rand(20_000, 7, generator=g, dtype=torch.float64) * (torch.rand(20_000, 7, generator=g) < 0.7)
    w[:, 3] += 1e-3  # every row has weight
    u = torch.rand(20_000, generator=g, dtype=torch.float64)
    for old in (_old_sample_rows, _old_batched, _old_kit):
        assert torch.equal(old(w, u), S.inverse_cdf(w, u)), old.__name__
    table = S.cdf_table(w)
    for u in [*table.T, *table.T.nextafter(torch.zeros(()))]:
        u = u.clamp(max=1 - 2.0 ** -53)
        assert torch.equal((table <= u[:, None]).sum(-1), S.inverse_cdf(w, u))
    with pytest.raises(TypeError, match="weights must be a floating-point tensor"):
        S.inverse_cdf(torch.ones(3, dtype=torch.long), 0.5)
    with pytest.raises(ValueError, match="weights must have a non-empty last axis"):
        S.cdf_table(torch.zeros(2, 0))

# --- the statistical core: the honest sampler matches p, the negative controls do not -------------
N = 400_000  # the post's sample size


def sampler_tv(p, q, mode, seed):
    g = torch.Generator().manual_seed(seed)
    out = S.speculative_sample(p, q, num_samples=N, generator=g, mode=mode)
    return S.total_variation(S.empirical(out, p.numel()), p.double())


def adversarial_pairs():
    """(name, p, q) pairs that break naive implementations."""
    p, q = post_pair()
    lp = torch.tensor([3.0, 2.5, 1.0, 0.2, -1.0, -2.0])
    lq = torch.tensor([1.0, 3.0, 2.9, 0.0, 0.5, -3.0])
    from specdec_lib.policy import apply_policy
    return [
        ("post pair", p, q),
        ("p == q", p, p.clone()),
        ("disjoint supports", torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.25, 0.75])),
        ("one-hot q", p, torch.nn.functional.one_hot(torch.tensor(2), 5).float()),
        ("q zero where p > 0", torch.tensor([0.4, 0.3, 0.2, 0.1]), torch.tensor([0.0, 0.5, 0.5, 0.0])),
        ("top-k q against full p", apply_policy(lp), apply_policy(lq, top_k=2)),
        ("T near 0", apply_policy(lp, temperature=0.05), apply_policy(lq, temperature=0.05)),
        ("T = 1e-6", apply_policy(lp, temperature=1e-6), apply_policy(lq, temperature=1e-6)),
    ]


@pytest.mark.stat
@pytest.mark.parametrize("name, p, q", adversarial_pairs(), ids=[c[0] for c in adversarial_pairs()])
def test_correct_sampler_is_exact(name, p, q):
    tv = sampler_tv(p, q, "correct", seed=11)
    assert tv < tv_bound(p, N), f"{name}: TV {tv:.5f} above the noise bound {tv_bound(p, N):.5f}"


@pytest.mark.stat
@pytest.mark.parametrize("mode", ["target_on_reject", "always_accept"])
def test_negative_controls_fail_the_same_test(mode):
    p, q = post_pair()
    tv = sampler_tv(p, q, mode, seed=11)
    assert tv > tv_bound(p, N), f"{mode} passed a test it must fail (TV {tv:.5f})"
    if mode == "always_accept":
        assert tv == pytest.approx(S.total_variation(p, q), abs=tv_bound(q, N))


@pytest.mark.stat
def test_target_on_reject_bias_matches_theory():
    # rejecting to p gives min(p, q) + (1 - beta) p; its TV from p is the post's 0.0959
    p, q = post_pair()
    beta = S.overlap(p, q)
    wrong = torch.minimum(p, q) + (1 - beta) * p
    assert round(S.total_variation(wrong, p), 3) == 0.096
    assert sampler_tv(p, q, "target_on_reject", seed=3) == pytest.approx(S.total_variation(wrong, p),
                                                                         abs=tv_bound(p, N))


@pytest.mark.stat
def test_observed_acceptance_is_overlap():
    p, q = post_pair()
    g = torch.Generator().manual_seed(5)
    x = S.sample_from(q, num_samples=N, generator=g)
    kept = (torch.rand(N, generator=g, dtype=torch.float64) < S.acceptance_probability(p, q, x).double())
    beta = S.overlap(p, q)
    assert abs(kept.double().mean().item() - beta) < rate_bound(beta, N)
    # negative control: acceptance computed as p(x) alone (match-style) misses beta by far more
    wrong = (torch.rand(N, generator=g, dtype=torch.float64) < p[x].double()).double().mean().item()
    assert abs(wrong - beta) > rate_bound(beta, N)


def test_total_variation_and_overlap_properties():
    p, q = post_pair()
    assert S.total_variation(p, p) == 0.0
    assert S.total_variation(p, q) == pytest.approx(S.total_variation(q, p))
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert S.total_variation(a, b) == 1.0 and S.overlap(a, b) == 0.0
    joint = torch.full((2, 2), 0.25)
    assert S.total_variation(joint, joint) == 0.0
    assert math.isclose(S.overlap(p, q) + S.total_variation(p, q), 1.0, abs_tol=1e-6)


def test_generator_makes_runs_reproducible():
    p, q = post_pair()
    a = S.speculative_sample(p, q, num_samples=1000, generator=torch.Generator().manual_seed(9))
    b = S.speculative_sample(p, q, num_samples=1000, generator=torch.Generator().manual_seed(9))
    assert torch.equal(a, b)


def test_counts_are_keyword_only_and_sample_from_validates():
    p, q = S.post_pair()
    with pytest.raises(TypeError):
        S.speculative_sample(p, q, 10)  # num_samples is keyword-only
    with pytest.raises(TypeError):
        S.sample_from(p, 10)
    with pytest.raises(ValueError, match="num_samples must be >= 0"):
        S.sample_from(p, num_samples=-1)
    with pytest.raises(ValueError, match="p must be one distribution"):
        S.sample_from(torch.stack([p, q]), num_samples=3)
    assert S.sample_from(p, num_samples=0).shape == (0,)


def test_sample_rows_checks_type_shape_and_generator():
    with pytest.raises(TypeError, match="weights must be a torch.Tensor"):
        S.sample_rows([0.5, 0.5])
    with pytest.raises(ValueError, match="weights must have a non-empty last axis"):
        S.sample_rows(torch.zeros(3, 0))
    with pytest.raises(TypeError, match="generator"):
        S.sample_rows(torch.ones(2, 3), generator=1)
