"""Act III: token accounting, block simulation and survivor statistics."""
import math

import pytest
import torch

import specdec_lib as sd
from specdec_lib.accounting import (
    BayesCurve,
    SurvivorStats,
    alpha_from_tokens,
    bayes_conditional_acceptance,
    expected_accepted,
    expected_tokens,
    full_block_probability,
    reach_probabilities,
    simulate_blocks,
    simulate_mixture,
    survivor_statistics,
    tokens_per_round,
)

MIX = dict(betas=(0.95, 0.45), weights=(0.5, 0.5))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---- exact accounting ------------------------------------------------------------------------

@pytest.mark.parametrize("alpha, k, e_a, e_n, full", [
    (0.8, 8, "3.329", "4.329", "0.168"),
    (0.5, 4, "0.938", "1.938", "0.062"),
    (0.95, 16, "10.638", "11.638", "0.440"),
])
def test_post_table(alpha, k, e_a, e_n, full):
    assert f"{expected_accepted(alpha=alpha, k=k):.3f}" == e_a
    assert f"{expected_tokens(alpha=alpha, k=k):.3f}" == e_n
    assert f"{full_block_probability(alpha=alpha, k=k):.3f}" == full


@pytest.mark.parametrize("alpha, k", [(0.8, 8), (0.5, 4), (0.95, 16), (0.3, 1)])
def test_closed_form_for_constant_alpha(alpha, k):
    assert expected_accepted(alpha, k) == pytest.approx(alpha * (1 - alpha ** k) / (1 - alpha), rel=1e-12)
    assert expected_tokens(alpha, k) == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), rel=1e-12)


def test_alpha_one_and_zero_limits():
    assert expected_accepted(1.0, 8) == 8.0 and expected_tokens(1.0, 8) == 9.0
    assert full_block_probability(1, 8) == 1.0 and reach_probabilities(1.0, 3) == [1.0, 1.0, 1.0]
    assert expected_accepted(0.0, 5) == 0.0 and expected_tokens(0.0, 5) == 1.0
    assert full_block_probability(0.0, 5) == 0.0


def test_k_zero_is_plain_decoding():
    assert expected_accepted(0.7, 0) == 0.0
    assert expected_tokens(0.7, 0) == 1.0
    assert full_block_probability(0.7, 0) == 1.0
    assert reach_probabilities(0.7, 0) == []
    assert expected_tokens([], 0) == 1.0


def test_per_position_rates_by_hand():
    alpha = [0.9, 0.5, 0.2]
    # reach: 0.9, 0.45, 0.09 -> E[A] = 1.44, E[N] = 2.44, P(full) = 0.09
    assert reach_probabilities(alpha, 3) == pytest.approx([0.9, 0.45, 0.09], abs=1e-15)
    assert expected_accepted(alpha, 3) == pytest.approx(1.44, abs=1e-15)
    assert expected_tokens(torch.tensor(alpha), 3) == pytest.approx(2.44, abs=1e-7)
    assert full_block_probability(tuple(alpha), 3) == pytest.approx(0.09, abs=1e-15)
    # a zero cuts everything after it, however good the later rates are
    assert expected_accepted([0.5, 0.0, 1.0, 1.0], 4) == 0.5


def test_return_types_are_python_floats():
    """Python floats, whether alpha is a tensor or a float, and the same values: the closed forms at alpha = 0.8,
    k = 3 (E[A] = .8 + .64 + .512, E[N] = 1 + E[A], P(A = 3) = .512) to 1e-12."""
    want = {expected_accepted: 1.952, expected_tokens: 2.952, full_block_probability: 0.512}
    for f, value in want.items():
        got = f(torch.tensor(0.8, dtype=torch.float64), 3)
        assert type(got) is float and abs(got - value) < 1e-12 and got == f(0.8, 3)
    reach = reach_probabilities(0.8, 3)
    assert all(type(x) is float for x in reach) and max(abs(x - 0.8 ** j) for j, x in enumerate(reach, 1)) < 1e-12


@pytest.mark.parametrize("alpha", [float("nan"), 1.2, -0.1])
def test_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens(alpha, 4)


def test_bad_alpha_sequences():
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens([0.8, 0.8], 3)  # wrong length
    with pytest.raises(ValueError, match=r"alpha\[1\]"):
        expected_tokens([0.8, 1.5], 2)
    with pytest.raises(ValueError, match=r"alpha\[0\]"):
        reach_probabilities([float("nan")], 1)
    with pytest.raises(TypeError, match="alpha"):
        expected_tokens("0.8", 1)


@pytest.mark.parametrize("k, err", [(-1, ValueError), (2.0, TypeError), (True, TypeError), ("3", TypeError)])
def test_bad_k(k, err):
    for f in (expected_accepted, expected_tokens, full_block_probability, reach_probabilities):
        with pytest.raises(err, match="k"):
            f(0.8, k)
    with pytest.raises(err, match="k"):
        simulate_blocks(0.8, k, num_samples=10)


# ---- simulate_blocks ---------------------------------------------------------------------------

def _mean_and_sd(alpha, k, n):
    """Exact E[A] and the sd of a mean of n draws: Var A = E[A^2] - E[A]^2, E[A^2] = sum_j (2j - 1) P(A >= j)."""
    reach = reach_probabilities(alpha, k)
    e_a = sum(reach)
    e_a2 = sum((2 * j - 1) * r for j, r in enumerate(reach, start=1))
    return e_a, math.sqrt((e_a2 - e_a ** 2) / n)


@pytest.mark.stat
@pytest.mark.parametrize("alpha, k", [(0.8, 8), (0.5, 4), ([0.9, 0.6, 0.3], 3)])
def test_simulate_blocks_mean_matches_expected_accepted(alpha, k):
    n = 40_000
    A = simulate_blocks(alpha=alpha, k=k, num_samples=n, generator=gen(1))
    assert A.dtype == torch.long and A.shape == (n,)
    assert int(A.min()) >= 0 and int(A.max()) <= k
    e_a, sd = _mean_and_sd(alpha, k, n)  # sd of the sample mean of n i.i.d. copies of A
    assert abs(A.double().mean().item() - e_a) < 5 * sd  # 5 sd: a false alarm about 1 in 1.7 million
    # and the mean tokens, E[N] = E[A] + 1, passes the same 5 sd check
    assert abs((A + 1).double().mean().item() - expected_tokens(alpha, k)) < 5 * sd


@pytest.mark.stat
def test_simulate_blocks_negative_control_wrong_alpha_fails():
    # blocks simulated at alpha 0.75 must fail the 5 sd E[N] check for alpha 0.8 (E[N] 3.70 vs 4.33)
    n = 40_000
    A = simulate_blocks(0.75, 8, num_samples=n, generator=gen(2))
    _, sd = _mean_and_sd(0.8, 8, n)
    assert abs((A + 1).double().mean().item() - expected_tokens(0.8, 8)) > 5 * sd


@pytest.mark.stat
def test_simulate_blocks_reach_and_full_block_fraction():
    n, k, alpha = 40_000, 6, 0.7
    A = simulate_blocks(alpha, k, num_samples=n, generator=gen(3))
    for j, r in enumerate(reach_probabilities(alpha, k), start=1):
        # fraction of n Bernoulli(r) indicators [A >= j]: sd sqrt(r(1 - r)/n); allow 5 sd
        assert abs((A >= j).double().mean().item() - r) < 5 * math.sqrt(r * (1 - r) / n)
    p = full_block_probability(alpha, k)
    assert abs((A == k).double().mean().item() - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_simulate_blocks_limits_and_reproducibility():
    assert torch.equal(simulate_blocks(1.0, 5, num_samples=100, generator=gen(4)), torch.full((100,), 5))
    assert torch.equal(simulate_blocks(0.0, 5, num_samples=100, generator=gen(4)), torch.zeros(100, dtype=torch.long))
    assert torch.equal(simulate_blocks(0.6, 0, num_samples=7, generator=gen(4)), torch.zeros(7, dtype=torch.long))
    # a zero at position 2 stops every block at A <= 1
    assert int(simulate_blocks([1.0, 0.0, 1.0], 3, num_samples=100, generator=gen(4)).max()) == 1
    assert torch.equal(simulate_blocks(0.5, 4, num_samples=50, generator=gen(5)),
                       simulate_blocks(0.5, 4, num_samples=50, generator=gen(5)))


def test_simulate_blocks_bad_arguments():
    with pytest.raises(ValueError, match="n"):
        simulate_blocks(0.5, 4, num_samples=0)
    with pytest.raises(TypeError, match="generator"):
        simulate_blocks(0.5, 4, num_samples=10, generator=0)
    with pytest.raises(ValueError, match="alpha"):
        simulate_blocks([0.5], 4, num_samples=10)


# ---- mixture and survivor statistics -----------------------------------------------------------

@pytest.fixture(scope="module")
def survivor():
    accepts = simulate_mixture(**MIX, k=4, num_samples=200_000, generator=gen(6))
    return accepts, survivor_statistics(accepts)


def test_simulate_mixture_shape(survivor):
    """Shape, and the values: one class per request drawn with the weights, then every flag u < beta of that class,
    even after a rejection, replayed here by hand from the same seed."""
    accepts, _ = survivor
    assert accepts.dtype == torch.bool and accepts.shape == (200_000, 4)
    g = gen(6)
    cls = torch.multinomial(torch.tensor(MIX["weights"], dtype=torch.float64), 200_000, replacement=True, generator=g)
    u = torch.rand(200_000, 4, generator=g, dtype=torch.float64)
    assert torch.equal(accepts, u < torch.tensor(MIX["betas"], dtype=torch.float64)[cls][:, None])
    assert (~accepts[:, 0] & accepts[:, 1]).any()  # a flag after a rejection is drawn, not forced to False


@pytest.mark.stat
def test_survivor_table_matches_post(survivor):
    accepts, s = survivor
    n = accepts.shape[0]
    assert isinstance(s, SurvivorStats)
    curve = bayes_conditional_acceptance(**MIX, k=4)
    true_reach = [0.5 * 0.95 ** j + 0.5 * 0.45 ** j for j in range(1, 5)]
    post_cond = [0.700, 0.790, 0.859, 0.901]
    post_reach = [0.700, 0.553, 0.475, 0.428]
    for j in range(4):
        # population rate: mean of n Bernoulli(0.7) flags, sd sqrt(0.21/n) ~ 0.001; allow 5 sd
        assert abs(s.population_rate[j] - 0.7) < 5 * math.sqrt(0.21 / n)
        # conditional: mean of m_j = blocks_reaching[j] survivors' flags, each Bernoulli(alpha_j)
        a, m = curve.alpha[j], s.blocks_reaching[j]
        sd_c = math.sqrt(a * (1 - a) / m)
        assert abs(s.conditional_rate[j] - a) < 5 * sd_c
        r = true_reach[j]
        sd_r = math.sqrt(r * (1 - r) / n)  # reach: mean of n Bernoulli(r) indicators
        assert abs(s.reach[j] - r) < 5 * sd_r
        # against the post's own simulation (same n): two independent estimates differ with sd
        # sqrt(2) * sd; plus 0.0005 for its 3-decimal rounding
        assert abs(s.conditional_rate[j] - post_cond[j]) < 5 * math.sqrt(2) * sd_c + 0.0005
        assert abs(s.reach[j] - post_reach[j]) < 5 * math.sqrt(2) * sd_r + 0.0005
    # the wrong product (post: 0.241 at position 4) is far from reach (0.428)
    assert s.product_of_population[3] == pytest.approx(0.7 ** 4, abs=0.005)


@pytest.mark.stat
def test_survivor_negative_controls(survivor):
    accepts, s = survivor
    n = accepts.shape[0]
    # the conditional rates at positions 2..4 fail the flat-population check by far more than 5 sd
    for j in (1, 2, 3):
        assert abs(s.conditional_rate[j] - 0.7) > 5 * math.sqrt(0.21 / s.blocks_reaching[j])
    # the product of population averages fails the reach check at positions 2..4
    for j in (1, 2, 3):
        r = s.reach[j]
        assert abs(s.product_of_population[j] - r) > 5 * math.sqrt(r * (1 - r) / n)


def test_product_of_conditional_equals_reach_exactly(survivor):
    _, s = survivor
    assert s.product_of_conditional == s.reach
    assert s.blocks_reaching[0] == 200_000
    assert s.product_of_conditional != s.product_of_population


def test_survivor_statistics_by_hand():
    accepts = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    s = survivor_statistics(accepts)
    assert s.population_rate == [0.75, 0.75, 0.75]
    assert s.blocks_reaching == [4, 3, 2]
    assert s.conditional_rate == [0.75, 2 / 3, 0.5]
    assert s.reach == [0.75, 0.5, 0.25]
    assert s.product_of_conditional == s.reach
    assert s.product_of_population == pytest.approx([0.75, 0.5625, 0.421875])


def test_survivor_statistics_k_zero_is_empty():
    s = survivor_statistics(torch.ones(5, 0, dtype=torch.bool))
    assert s.blocks_reaching == [] and s.reach == [] and s.conditional_rate == []


def test_survivor_statistics_unreached_position_is_zero_not_nan():
    s = survivor_statistics(torch.tensor([[0, 1], [0, 1]], dtype=torch.bool))
    assert s.blocks_reaching == [2, 0]
    assert s.conditional_rate == [0.0, 0.0] and s.reach == [0.0, 0.0]
    assert not any(math.isnan(x) for x in s.conditional_rate)


def test_survivor_table_text(survivor):
    _, s = survivor
    text = s.table()
    lines = text.splitlines()
    assert lines[0].split() == ["position", "1", "2", "3", "4"]
    assert "wrong" in text and "right" in text and "P(A >= j)" in text and "blocks reaching" in text
    cond_line = next(line for line in lines if line.startswith("conditional among survivors"))
    assert cond_line.split()[-4:] == [f"{x:.3f}" for x in s.conditional_rate]
    assert len({len(line.removesuffix("   wrong").removesuffix("   right")) for line in lines}) == 1  # fixed width


def test_survivor_statistics_bad_input():
    with pytest.raises(TypeError, match="accepts"):
        survivor_statistics(torch.ones(3, 2))
    with pytest.raises(ValueError, match="accepts"):
        survivor_statistics(torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="accepts"):
        survivor_statistics(torch.ones(0, 2, dtype=torch.bool))


@pytest.mark.stat
def test_mixture_class_is_constant_within_a_request():
    # betas (1, 0): a request is all-accept (prob 0.3) or all-reject; never mixed
    n = 20_000
    acc = simulate_mixture(betas=[1.0, 0.0], weights=[0.3, 0.7], k=5, num_samples=n, generator=gen(7))
    all_true, all_false = acc.all(1), (~acc).all(1)
    assert bool((all_true | all_false).all())
    # fraction of n Bernoulli(0.3): sd sqrt(0.21/n) ~ 0.0032; allow 5 sd
    assert abs(all_true.double().mean().item() - 0.3) < 5 * math.sqrt(0.21 / n)
    # negative control: flags drawn independently at the population rate 0.3 (a class per flag, not
    # per request) make all-accept blocks rare (0.3 ** 5 = 0.0024) and fail the same 5 sd check
    independent = simulate_blocks(0.3, 5, num_samples=n, generator=gen(7))
    assert abs((independent == 5).double().mean().item() - 0.3) > 5 * math.sqrt(0.21 / n)


@pytest.mark.stat
def test_mixture_weights_pick_classes():
    acc = simulate_mixture(betas=(0.2, 0.9), weights=torch.tensor([0.0, 1.0]), k=3, num_samples=1000, generator=gen(8))
    # only the 0.9 class: P(flag) = 0.9 with sd sqrt(0.09/3000); allow 5 sd
    assert abs(acc.double().mean().item() - 0.9) < 5 * math.sqrt(0.09 / 3000)


@pytest.mark.parametrize("betas, weights, match", [
    ((0.9, 1.2), (0.5, 0.5), "betas"),
    ((0.9, float("nan")), (0.5, 0.5), "betas"),
    ((0.9, 0.4), (0.6, 0.6), "weights"),
    ((0.9, 0.4), (1.5, -0.5), "weights"),
    ((0.9, 0.4), (1.0,), "same length"),
    ((), (), "betas"),
])
def test_bad_mixture(betas, weights, match):
    with pytest.raises(ValueError, match=match):
        simulate_mixture(betas, weights, 4, num_samples=10)
    with pytest.raises(ValueError, match=match):
        bayes_conditional_acceptance(betas, weights, 4)


def test_bad_mixture_types_and_k():
    with pytest.raises(TypeError, match="betas"):
        bayes_conditional_acceptance(0.9, (1.0,), 2)
    with pytest.raises(ValueError, match="k"):
        bayes_conditional_acceptance(**MIX, k=0)
    with pytest.raises(TypeError, match="k"):
        simulate_mixture(**MIX, k=2.0, num_samples=5)


# ---- Bayes -------------------------------------------------------------------------------------

def test_bayes_matches_post():
    curve = bayes_conditional_acceptance(**MIX, k=4)
    assert isinstance(curve, BayesCurve)
    assert [f"{a:.3f}" for a in curve.alpha] == ["0.700", "0.789", "0.858", "0.902"]
    assert [f"{p[0]:.3f}" for p in curve.posterior] == ["0.500", "0.679", "0.817", "0.904"]
    assert all(sum(p) == pytest.approx(1.0) for p in curve.posterior)
    lines = curve.table().splitlines()
    assert lines[1].split() == ["1", "0.500", "0.700"]
    assert lines[4].split() == ["4", "0.904", "0.902"]
    assert curve.table(class_index=1).splitlines()[4].split() == ["4", "0.096", "0.902"]
    with pytest.raises(ValueError, match="class_index"):
        curve.table(class_index=2)


def test_bayes_products_are_the_mixture_reach():
    # prod_{i<=j} alpha_i = sum_c w_c beta_c^j, so the Bayes curve plugs straight into the accounting
    betas, weights, k = (0.95, 0.45, 0.1), (0.2, 0.5, 0.3), 6
    curve = bayes_conditional_acceptance(betas, weights, k)
    truth = [sum(w * b ** j for b, w in zip(betas, weights)) for j in range(1, k + 1)]
    assert reach_probabilities(curve.alpha, k) == pytest.approx(truth, rel=1e-12)


def test_bayes_single_class_is_flat_and_long_blocks_do_not_underflow():
    assert bayes_conditional_acceptance((0.6,), (1.0,), 3).alpha == pytest.approx([0.6] * 3)
    curve = bayes_conditional_acceptance((0.9, 1e-3), (0.5, 0.5), 2000)
    assert curve.alpha[-1] == pytest.approx(0.9) and not any(math.isnan(a) for a in curve.alpha)


def test_bayes_nobody_survives_gives_zero_not_nan():
    # every class with positive weight has beta 0: position 2 onward is never reached
    curve = bayes_conditional_acceptance(betas=(0.0, 0.0, 1.0), weights=(0.4, 0.6, 0.0), k=3)
    assert curve.alpha == [0.0, 0.0, 0.0]
    assert curve.posterior == [[0.4, 0.6, 0.0]] * 3  # the last defined posterior is carried
    assert expected_accepted(curve.alpha, 3) == 0.0


def test_tokens_per_round_from_a_log():
    log = sd.SpecDecodeLog(k=3)
    A = torch.tensor([0, 1, 3, 3, 2, 0, 3, 1])
    log.record_rounds(A)
    est = tokens_per_round(log)
    n = (A + 1).double()
    assert est.mean == pytest.approx(n.mean().item()) and est.rounds == 8
    assert est.stderr == pytest.approx(n.std(unbiased=False).item() / 8 ** 0.5)
    with pytest.raises(TypeError, match="log must be a SpecDecodeLog"):
        tokens_per_round([0, 1])
    with pytest.raises(ValueError, match="log must hold at least one round"):
        tokens_per_round(sd.SpecDecodeLog(k=3))


def test_alpha_from_tokens_inverts_expected_tokens():
    for k in (1, 4, 8):
        for alpha in (0.0, 0.3, 0.677, 0.9, 1.0):
            assert alpha_from_tokens(expected_tokens(alpha, k), k) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError, match="e_n must lie in"):
        alpha_from_tokens(5.5, 4)
    with pytest.raises(ValueError, match="k must be >= 1"):
        alpha_from_tokens(1.5, 0)
