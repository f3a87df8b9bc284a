"""Act V, adaptive k in the long run (markov/long_run.py): local rules at any k, and S = N̄ / C̄ (renewal reward).

The local round law is held to the dense path evaluator of adaptive.py, the text speedup to the exact engine at
short horizons and to N̄ / C̄ as the text grows; the mean of per-round ratios is the negative control.
"""
import math

import pytest
import torch

import specdec_lib as sd
from specdec_lib.markov import adaptive, hf_assisted, long_run

CH = sd.reference_chain()
C_D, C_V = 0.15, 1.0


def dense_confidence_rule(confidence, k, k_max):
    """adaptive.py's path tensors for 'draft while q(y_j) >= confidence, at most k' (the rule written densely)."""
    Q = CH.Q.double() / CH.Q.double().sum(-1, keepdim=True)
    V, cont = Q.shape[0], [torch.full((Q.shape[0],), float(k > 0), dtype=torch.float64)]
    for j in range(1, k_max):
        sure = (Q.reshape((1,) * (j - 1) + (V, V)) >= confidence).double().expand((V,) * (j + 1))
        cont.append(sure * float(j < k))
    return cont


@pytest.mark.parametrize("k, confidence", [(0, 0.0), (1, 0.0), (4, 0.0), (5, 0.0), (3, 0.4), (5, 0.4), (5, 0.7)])
def test_round_law_is_the_dense_evaluator_on_local_rules(k, confidence):
    want = adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy=dense_confidence_rule(confidence, k, 5))
    got = adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", confidence=confidence, k=k)
    for field in ("tokens_per_round", "drafted_per_round", "cost_per_round", "speedup"):
        assert getattr(got, field) == pytest.approx(getattr(want, field), abs=1e-12), field
    other = adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy=dense_confidence_rule(0.2, k, 5))
    if k >= 2 and confidence > 0:  # negative control: another threshold is another rule
        assert abs(other.speedup - got.speedup) > 1e-3


def test_round_law_is_one_law():
    c = long_run.costed_chain(CH.P, CH.Q, c_d=C_D, c_v=C_V)
    for k, confidence in ((0, 0.0), (3, 0.0), (20, 0.4)):
        law = long_run.round_law(c, k=k, confidence=confidence)
        sizes = torch.arange(law.jumps.shape[0], dtype=torch.float64)
        assert torch.allclose(law.jumps.sum((0, 2)), torch.ones(5, dtype=torch.float64), atol=1e-12)
        assert torch.allclose((law.jumps * sizes[:, None, None]).sum((0, 2)), law.n, atol=1e-12)  # E[N] from its law
        assert torch.allclose(law.next_start, law.jumps.sum(0), atol=1e-15)
        # every drafted token up to the first rejection is recorded once: accepted ones + first rejections
        assert torch.allclose(law.accepted.sum((1, 2)), law.n - 1, atol=1e-12)
        assert torch.allclose(law.first_rejected.sum((1, 2)), law.rejected_next.sum(1), atol=1e-12)
    fixed = long_run.round_law(c, k=3)
    assert torch.allclose(fixed.ratio, fixed.n / (3 * C_D + C_V), atol=1e-12)  # a constant C: E[N / C] = E[N] / C


@pytest.mark.heavy
@pytest.mark.parametrize("k, horizon, confidence", [(4, 3, 0.4), (2, 5, 0.4), (3, 4, 0.0), (1, 3, 0.6), (0, 3, 0.0)])
def test_text_speedup_is_the_exact_engines_at_short_horizons(k, horizon, confidence):
    mode, options = ("confidence_stop", {"confidence": confidence}) if confidence > 0 else ("correct", None)
    stats = sd.decoder_stats(CH.P, CH.Q, start=0, horizon=horizon, k=k, mode=mode, options=options)
    got = long_run.text_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, k=k, confidence=confidence, horizon=horizon)
    assert got == pytest.approx(stats.speedup(c_d=C_D, c_v=C_V), abs=1e-12)


@pytest.mark.heavy
def test_text_speedup_tends_to_the_ratio_of_expectations_not_the_mean_of_ratios():
    s = adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", confidence=0.4, k=20).speedup
    wrong = long_run.mean_of_ratios(CH.P, CH.Q, c_d=C_D, c_v=C_V, k=20, confidence=0.4)
    gaps = {h: s - long_run.text_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, k=20, confidence=0.4, horizon=h)
            for h in (500, 1000, 2000)}
    # renewal reward: E[C_H] = H C̄ / N̄ + O(1), so S_H = S + O(1 / H): H * gap settles to a constant
    assert gaps[2000] * 2000 == pytest.approx(gaps[1000] * 1000, rel=0.02)
    assert gaps[1000] * 1000 == pytest.approx(gaps[500] * 500, rel=0.05)
    assert abs(gaps[2000]) < 0.01 and abs(s - wrong) > 0.05  # the mean of ratios is nowhere near


def test_mean_of_ratios_equals_s_only_when_the_cost_is_constant():
    fixed = adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", confidence=0.0, k=4)
    assert long_run.mean_of_ratios(CH.P, CH.Q, c_d=C_D, c_v=C_V, k=4) == pytest.approx(fixed.speedup, abs=1e-12)


def sampled_texts(n=20, rounds=1000, seed=0, **kw):
    """n independent texts of `rounds` rounds, decoded as transformers does (markov/hf_assisted.py)."""
    settings = hf_assisted.AssistedSettings(**kw)
    return [sd.markov.assisted_text(CH.P, CH.Q, c_d=C_D, c_v=C_V, rounds=rounds,
                                    generator=torch.Generator().manual_seed(
        seed + i), settings=settings) for i in range(n)]


def mean_and_noise(values):
    """The mean of n independent per-text values and 5 standard errors estimated from their spread (with n = 20
    the estimated sd is within about 16% of the true one, so 5 estimated errors are at least 4 true ones), plus
    0.01 for what a finite text leaves: it starts at state 0 and its last round overshoots, S_H - S = O(1 / H)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, 5 * sd / math.sqrt(n) + 0.01


@pytest.mark.stat
def test_sampled_texts_give_the_ratio_of_expectations():
    texts = sampled_texts(seed=40, retune=False)
    s = adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", confidence=0.4, k=20).speedup
    wrong = long_run.mean_of_ratios(CH.P, CH.Q, c_d=C_D, c_v=C_V, k=20, confidence=0.4)
    speedup, noise = mean_and_noise([t.speedup for t in texts])
    assert abs(speedup - s) < noise and abs(speedup - wrong) > noise  # the negative control misses
    ratio, noise = mean_and_noise([t.mean_of_ratios for t in texts])
    assert abs(ratio - wrong) < noise and abs(ratio - s) > noise  # what averaging per-round ratios estimates


@pytest.mark.stat
def test_hf_schedule_local_matches_sampled_texts_and_its_cap_saturates():
    def schedule(**kw):
        return adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="hf_schedule", **kw)

    free = schedule(k_max=64)
    assert free.speedup == pytest.approx(schedule(k_max=32).speedup,
                                         abs=1e-6)  # transformers sets no cap: 32 is already as good as none
    capped = schedule(k_max=8)
    for confidence in (0.0, 0.4):
        want = schedule(k_max=64, confidence=confidence)
        texts = sampled_texts(seed=60, k=1, confidence=confidence, retune=False, schedule="heuristic")
        speedup, noise = mean_and_noise([t.speedup for t in texts])
        assert abs(speedup - want.speedup) < noise, confidence
    assert abs(capped.speedup - free.speedup) > 0.05  # negative control: the course's cap changes the answer


def test_long_run_validation():
    with pytest.raises(ValueError, match=r"k must lie in \[0, k_max = 4\]"):
        adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", k=5, k_max=4)
    with pytest.raises(ValueError, match="confidence must lie in"):
        adaptive.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", confidence=1.5, k=4)
    with pytest.raises(ValueError, match="horizon must be >= 1"):
        long_run.text_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, k=2, horizon=0)
    with pytest.raises(ValueError, match="P and Q must have the same shape"):
        long_run.costed_chain(CH.P, CH.Q[:4, :4] / CH.Q[:4, :4].sum(-1, keepdim=True), c_d=C_D, c_v=C_V)
