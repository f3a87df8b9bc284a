"""The block decoder end to end on the reference chain: exact modes within noise, broken modes caught."""
import pytest
import torch

import specdec_lib.decoders as D
from specdec_lib.chain import exact_sequence_distribution, reference_chain, sequence_tv
from specdec_lib.sampling import accept_ratio, sample_rows
from stats import tv_bound

CH = reference_chain()
EXACT = exact_sequence_distribution(CH.P, CH.start, CH.horizon)
N = 200_000
BOUND = tv_bound(EXACT, N)  # about 0.013 at N = 200,000 over 125 sequences


def decode(mode="correct", k=4, n=N, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    return D.decode_markov(CH.P, CH.Q, CH.start, CH.horizon, k, n, mode, g, Q_bad=CH.Q_bad, **kw)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_correct_decoder_is_exact(k):
    s = decode(k=k)
    assert s.shape == (N, 3) and s.dtype == torch.long
    assert sequence_tv(s, EXACT) < BOUND


def test_bad_draft_is_still_exact():
    assert sequence_tv(decode("bad_draft"), EXACT) < BOUND


def test_k_zero_is_plain_decoding():
    assert sequence_tv(decode(k=0), EXACT) < BOUND


@pytest.mark.parametrize("mode, post_tv", [("mismatched_q", 0.2782), ("phantom_history", 0.0455),
                                           ("off_by_one", 0.8975)])
def test_broken_decoders_are_caught(mode, post_tv):
    tv = sequence_tv(decode(mode), EXACT)
    assert tv > BOUND, f"{mode} passed the exactness test (TV {tv:.4f})"
    # and they land where the post measured them (its 60,000-sample noise floor is about 0.011)
    assert abs(tv - post_tv) < BOUND + 0.011


# --- negative controls at the verifier: swap in a wrong verifier and the same test must fail -------
def p_on_reject(p_rows, q_rows, props, g):
    n, k = props.shape
    p_x = p_rows[:, :k].gather(-1, props[..., None]).squeeze(-1)
    q_x = q_rows.gather(-1, props[..., None]).squeeze(-1)
    a = (torch.rand(n, k, generator=g, dtype=torch.float64) < accept_ratio(p_x, q_x).double()).long().cumprod(-1).sum(-1)
    return a, sample_rows(p_rows[torch.arange(n), a], g)


def always_accept(p_rows, q_rows, props, g):
    n, k = props.shape
    return torch.full((n,), k), sample_rows(p_rows[:, k], g)


@pytest.mark.parametrize("wrong", [p_on_reject, always_accept])
def test_wrong_verifier_fails_the_same_test(monkeypatch, wrong):
    monkeypatch.setattr(D, "verify_batch", wrong)
    assert sequence_tv(decode(), EXACT) > BOUND


def test_generator_reproducible_and_streams_differ():
    a, b, c = decode(n=500, seed=3), decode(n=500, seed=3), decode(n=500, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_long_horizon_and_bigger_vocab_shapes():
    ch = reference_chain(vocab=7)
    g = torch.Generator().manual_seed(0)
    s = D.decode_markov(ch.P, ch.Q, 3, 9, 3, 1000, generator=g)
    assert s.shape == (1000, 9) and s.min() >= 0 and s.max() < 7


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(mode="careless"), ValueError,
     "mode must be one of 'correct', 'bad_draft', 'mismatched_q', 'phantom_history', 'off_by_one'"),
    (dict(k=-1), ValueError, "k must be >= 0"),
    (dict(k=2.0), TypeError, "k must be an integer"),
    (dict(n=0), ValueError, "n must be >= 1"),
    (dict(horizon=0), ValueError, "horizon must be >= 1"),
    (dict(start=5), ValueError, "start must be a token id"),
    (dict(mode="bad_draft", Q_bad=None), ValueError, "mode 'bad_draft' needs Q_bad"),
    (dict(Q=CH.Q[:4, :4] / CH.Q[:4, :4].sum(-1, keepdim=True)), ValueError, "P and Q must have the same shape"),
    (dict(P=CH.P * 1.1), ValueError, "P must sum to 1"),
])
def test_decoder_validation(kwargs, exc, match):
    args = dict(P=CH.P, Q=CH.Q, start=0, horizon=3, k=4, n=10, Q_bad=CH.Q_bad)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        D.decode_markov(**args)
