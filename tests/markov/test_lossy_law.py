"""Typical acceptance's law in one line (markov/lossy.py): T_s = q_s 1{p_s > t_s} + c_s r_s, held to the exact engine;
the epsilons where its kept sets change; and the condition under which it is exact."""
import pytest
import torch

import specdec_lib as sd
from specdec_lib.markov import lossy

CH = sd.reference_chain()
NEAR = torch.softmax(torch.log(CH.P) * 0.95 + torch.log(sd.random_table(5, seed=2, sharpness=1.2)) * 0.05, dim=-1)


@pytest.mark.parametrize("Q", [CH.Q, NEAR, CH.P], ids=["reference", "near", "target"])
@pytest.mark.parametrize("k, horizon, options", [
    (4, 3, {}), (1, 3, {}), (0, 3, {}), (2, 4, {"resample": "typical"}), (3, 4, {"epsilon": 0.03, "delta": 1.0}),
    (2, 3, {"epsilon": 0.0}), (2, 3, {"delta": 0.0, "resample": "typical"}),
])
def test_the_one_line_law_is_the_exact_engines(Q, k, horizon, options):
    want = sd.decoder_law(CH.P, Q, start=0, horizon=horizon, k=k, mode="typical_acceptance",
                                         options=options or None)
    got = sd.markov.typical_law(CH.P, Q, start=0, horizon=horizon, k=k, **options)
    assert (got - want).abs().max().item() < 1e-12


def test_the_one_line_law_sees_the_resample_and_the_bonus():
    # negative controls: the other resample, or a law without the bonus (k too large to matter) at k = 1
    law = sd.markov.typical_law(CH.P, CH.Q, start=0, horizon=3, k=1)
    assert sd.total_variation(law, sd.markov.typical_law(CH.P, CH.Q, start=0, horizon=3, k=1,
                                                         resample="typical")) > 0.01
    assert sd.total_variation(law, sd.markov.typical_law(CH.P, CH.Q, start=0, horizon=3, k=3)) > 0.01


@pytest.mark.heavy
def test_breakpoints_are_where_the_law_changes():
    grid = [round(0.0025 * i, 4) for i in range(121)]  # epsilon 0 .. 0.30
    for delta in (0.3, 1.0):
        points = sd.markov.typical_sweep(CH.P, CH.Q, start=0, horizon=3, k=4, epsilons=grid, delta=delta)
        cuts = sd.markov.typical_breakpoints(CH.P, delta=delta)
        for a, b in zip(points, points[1:]):
            crossed = any(a.epsilon <= x < b.epsilon for x in cuts)  # epsilon passed a target probability
            assert (abs(a.tv - b.tv) > 1e-12) == crossed, (delta, a.epsilon, b.epsilon)
    assert max(sd.markov.typical_breakpoints(CH.P, delta=0.3)) == pytest.approx(0.0635, abs=1e-4)  # flat from there on


@pytest.mark.heavy
@pytest.mark.parametrize("epsilon", [0.0, 0.001, 0.0013, 0.0014, 0.002, 0.01, 0.09])
@pytest.mark.parametrize("delta", [0.0, 0.0005, 0.3])
def test_cutting_nothing_is_the_exact_condition_for_a_perfect_draft(epsilon, delta):
    tv = sd.decoder_stats(CH.P, CH.P, start=0, horizon=3, k=2, mode="typical_acceptance",
                          options={"epsilon": epsilon, "delta": delta, "resample": "typical"}).tv
    assert (tv < 1e-12) == sd.markov.cuts_nothing(CH.P, epsilon=epsilon, delta=delta), (epsilon, delta, tv)
    if sd.markov.cuts_nothing(CH.P, epsilon=epsilon, delta=delta):  # negative controls: the argmax bonus, a real draft
        assert sd.decoder_stats(CH.P, CH.P, start=0, horizon=3, k=2, mode="typical_acceptance",
                                options={"epsilon": epsilon, "delta": delta}).tv > 0.1
        assert sd.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=2, mode="typical_acceptance",
                                options={"epsilon": epsilon, "delta": delta, "resample": "typical"}).tv > 0.1


def test_cuts_nothing_at_the_smallest_target_probability():
    smallest = CH.P.double().div(CH.P.double().sum(-1, keepdim=True)).min().item()  # 0.00135 (state 4)
    assert sd.markov.cuts_nothing(CH.P, epsilon=smallest * 0.999, delta=0.3)
    assert not sd.markov.cuts_nothing(CH.P, epsilon=smallest, delta=0.3)  # p > t is strict: a tie is cut


def test_the_exact_settings_table():
    settings = lossy.typical_exact_settings(CH.P, CH.Q, start=0, horizon=3, k=2)
    assert [s.exact for s in settings] == [False, True, True, True, True, False, False, False]
    assert settings[5].tv < 0.01  # just above the smallest probability: wrong, but only a little
