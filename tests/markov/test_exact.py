"""The exact decoder distribution: exact modes equal the target to 1e-12, broken modes match the sampler."""
import pytest
import torch
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.markov.exact import decoder_law

CH = sd.reference_chain()


def tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


@pytest.mark.heavy
@pytest.mark.parametrize("horizon", [1, 2, 3, 4])
@pytest.mark.parametrize("k", [0, 1, 2, 3, 4, 5, 6, 7, 8])
def test_exact_modes_equal_target(horizon, k):
    target = sd.sequence_law(CH.P, start=0, horizon=horizon)
    for mode in ("correct", "bad_draft"):
        got = decoder_law(CH.P, CH.Q, start=0, horizon=horizon, k=k, mode=mode, Q_bad=CH.Q_bad)
        assert got.shape == target.shape and got.dtype == torch.float64
        assert (got - target).abs().max().item() < 1e-12


def test_exact_engine_on_adversarial_tables():
    # one-hot rows, zeros where the target has mass, and disjoint supports
    P = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.2, 0.8], [1.0, 0.0, 0.0]], dtype=torch.float64)
    Q = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.3, 0.3, 0.4]], dtype=torch.float64)
    target = sd.sequence_law(P, start=1, horizon=4)
    for k in range(5):
        assert tv(decoder_law(P, Q, start=1, horizon=4, k=k), target) < 1e-12


def brute_force_one_round(P, Q, start, mode):
    """k = 1, horizon 2, written out by hand: sum over proposal y, accept or reject, then bonus / next round."""
    V = P.shape[0]
    out = torch.zeros(V, V, dtype=torch.float64)

    def first_token_law(s):  # distribution of (committed tokens) after one round from state s, k = 1
        law = {}
        for y in range(V):
            p = P[y] if mode == "off_by_one" else P[s]
            a = min(1.0, (p[y] / Q[s, y]).item())
            law[(y,)] = law.get((y,), 0.0) + Q[s, y].item() * a  # accepted; bonus follows
            r = torch.clamp(p - Q[s], min=0)
            r = p if r.sum() <= 0 else r / r.sum()
            for z in range(V):
                law[("rej", z)] = law.get(("rej", z), 0.0) + Q[s, y].item() * (1 - a) * r[z].item()
        return law

    for key, m in first_token_law(start).items():
        if key[0] == "rej":
            z = key[1]
            for key2, m2 in first_token_law(z).items():  # the second token comes from another round
                out[z, key2[-1]] += m * m2
        else:
            y = key[0]
            out[y] += m * P[y]  # bonus after an accepted proposal
    return out


@pytest.mark.parametrize("mode", ["correct", "off_by_one"])
def test_exact_engine_against_hand_enumeration(mode):
    P = CH.P.double() / CH.P.double().sum(-1, keepdim=True)
    Q = CH.Q.double() / CH.Q.double().sum(-1, keepdim=True)
    want = brute_force_one_round(P, Q, 0, mode)
    got = decoder_law(P, Q, start=0, horizon=2, k=1, mode=mode)
    assert (got - want).abs().max().item() < 1e-12


N = 200_000


@pytest.mark.stat
@pytest.mark.parametrize("mode", list(sd.markov.DECODER_MODES))
def test_sampler_agrees_with_exact_engine(mode):
    exact = decoder_law(CH.P, CH.Q, start=0, horizon=3, k=4, mode=mode, Q_bad=CH.Q_bad)
    g = torch.Generator().manual_seed(21)
    samples = sd.decode_markov(CH.P, CH.Q, start=0, horizon=3, k=4, num_samples=N, mode=mode, generator=g,
                               Q_bad=CH.Q_bad)
    assert sd.sequence_tv(samples, exact) < tv_bound(exact, N)


def test_broken_modes_have_true_tv():
    target = sd.sequence_law(CH.P, start=0, horizon=3)
    tvs = {m: tv(decoder_law(CH.P, CH.Q, start=0, horizon=3, k=4, mode=m, Q_bad=CH.Q_bad), target)
           for m in sd.markov.DECODER_MODES}
    assert tvs["correct"] < 1e-12 and tvs["bad_draft"] < 1e-12
    assert round(tvs["mismatched_q"], 3) == 0.279
    assert round(tvs["phantom_history"], 3) == 0.039
    assert round(tvs["off_by_one"], 3) == 0.897


@pytest.mark.stat
def test_negative_control_a_sampler_with_another_mode_fails():
    exact = decoder_law(CH.P, CH.Q, start=0, horizon=3, k=4, mode="phantom_history")
    g = torch.Generator().manual_seed(22)
    samples = sd.decode_markov(CH.P, CH.Q, start=0, horizon=3, k=4, num_samples=N, mode="correct", generator=g)
    assert sd.sequence_tv(samples, exact) > tv_bound(exact, N)


def test_exact_engine_validation():
    with pytest.raises(ValueError, match="mode must be one of"):
        decoder_law(CH.P, CH.Q, start=0, horizon=3, k=4, mode="nope")
    with pytest.raises(ValueError, match="needs Q_bad"):
        decoder_law(CH.P, CH.Q, start=0, horizon=3, k=4, mode="mismatched_q")
    with pytest.raises(ValueError, match="k must be >= 0"):
        decoder_law(CH.P, CH.Q, start=0, horizon=3, k=-1)


def test_greedy_exact_distribution_is_a_point_mass_on_the_greedy_path():
    path, cur = [], 0
    for _ in range(4):
        cur = int(CH.P[cur].argmax())
        path.append(cur)
    for mode in ("correct", "bad_draft"):
        for k in (0, 1, 4, 8):
            d = decoder_law(CH.P, CH.Q, start=0, horizon=4, k=k, mode=mode, Q_bad=CH.Q_bad,
                                           temperature=0.0)
            assert d[tuple(path)].item() == 1.0 and d.sum().item() == 1.0
    # negative control: the off-by-one decoder under greedy puts its mass elsewhere
    d = decoder_law(CH.P, CH.Q, start=0, horizon=4, k=4, mode="off_by_one", temperature=0.0)
    assert d[tuple(path)].item() < 1.0


def test_policies_keep_the_decoder_exact_for_the_transformed_target():
    from specdec_lib.policy import policy_table
    for kw in (dict(temperature=0.5), dict(top_k=2), dict(top_p=0.8), dict(temperature=2.0, top_k=3)):
        target = sd.sequence_law(policy_table(CH.P, **kw), start=0, horizon=3)
        got = decoder_law(CH.P, CH.Q, start=0, horizon=3, k=4, **kw)
        assert (got - target).abs().max().item() < 1e-12, kw
