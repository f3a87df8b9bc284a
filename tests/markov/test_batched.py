"""The block decoder end to end on the reference chain: exact modes within noise, broken modes caught."""
import pytest
import torch
from stats import tv_bound

import specdec_lib.markov.batched as D
from specdec_lib.markov.chain import reference_chain, sequence_law, sequence_tv
from specdec_lib.markov.spec import DecoderSpec
from specdec_lib.sampling import cdf_table

CH = reference_chain()
ORIGINAL_RESIDUAL_TABLE = D.residual_table
EXACT = sequence_law(CH.P, start=CH.start, horizon=CH.horizon)
N = 200_000
BOUND = tv_bound(EXACT, N)  # about 0.013 at N = 200,000 over 125 sequences


def decode(mode="correct", k=4, n=N, seed=0, horizon=CH.horizon, **kw):
    g = torch.Generator().manual_seed(seed)
    return D.decode_markov(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, num_samples=n, mode=mode, generator=g,
                           Q_bad=CH.Q_bad, **kw)


@pytest.mark.stat
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_correct_decoder_is_exact(k):
    s = decode(k=k)
    assert s.shape == (N, 3) and s.dtype == torch.long
    assert sequence_tv(s, EXACT) < BOUND


@pytest.mark.stat
def test_bad_draft_is_still_exact():
    assert sequence_tv(decode("bad_draft"), EXACT) < BOUND


@pytest.mark.stat
def test_k_zero_is_plain_decoding():
    assert sequence_tv(decode(k=0), EXACT) < BOUND


@pytest.mark.stat
@pytest.mark.parametrize("mode, post_tv", [("mismatched_q", 0.2782), ("phantom_history", 0.0455),
                                           ("off_by_one", 0.8975)])
def test_broken_decoders_are_caught(mode, post_tv):
    tv = sequence_tv(decode(mode), EXACT)
    assert tv > BOUND, f"{mode} passed the exactness test (TV {tv:.4f})"
    # and they land where the post measured them (its 60,000-sample noise floor is about 0.011)
    assert abs(tv - post_tv) < BOUND + 0.011


# --- negative controls at the verifier: swap in a wrong table and the same test must fail ------------
def p_on_reject(P, R, spec):
    """Residual table that resamples from the target row itself."""
    return ORIGINAL_RESIDUAL_TABLE(P, R, DecoderSpec(residual="target"))


def always_accept(P, R, spec):
    return torch.ones(P.shape[0], P.shape[0], P.shape[0], dtype=torch.float64)


@pytest.mark.stat
@pytest.mark.parametrize("name, wrong", [("residual_table", p_on_reject), ("accept_table", always_accept)])
def test_wrong_verifier_fails_the_same_test(monkeypatch, name, wrong):
    monkeypatch.setattr(D, name, wrong)
    assert sequence_tv(decode(), EXACT) > BOUND


def test_greedy_speculative_equals_plain_greedy():
    # temperature 0: every sequence is the target's greedy path, token for token, whatever the draft
    path, cur = [], CH.start
    for _ in range(6):
        cur = int(CH.P[cur].argmax())
        path.append(cur)
    for mode in ("correct", "bad_draft"):
        for k in (0, 1, 3, 8):
            s = decode(mode, k=k, n=64, horizon=6, temperature=0.0)
            assert (s == torch.tensor(path)).all()
    # negative control: the off-by-one decoder leaves the greedy path
    assert not (decode("off_by_one", n=64, horizon=6, temperature=0.0) == torch.tensor(path)).all()


@pytest.mark.stat
def test_policy_is_applied_to_target_and_draft():
    # under top-k = 2 the decoder samples the top-2-truncated target chain exactly
    from specdec_lib.policy import policy_table
    P2 = policy_table(CH.P, top_k=2)
    exact2 = sequence_law(P2, start=CH.start, horizon=CH.horizon)
    s = decode(top_k=2)
    assert sequence_tv(s, exact2) < tv_bound(exact2, N) < sequence_tv(s, EXACT)


def test_log_counts_only_tokens_inside_the_horizon():
    # k = 4 > horizon 3: a round can accept more proposals than the sequence has room for
    from specdec_lib.telemetry import SpecDecodeLog
    n = 20_000
    log = SpecDecodeLog(k=4)
    decode(n=n, log=log)
    s = log.summary()
    assert s.tokens == n * CH.horizon  # every committed token once, none past the end
    assert s.tokens_per_target_call <= CH.horizon  # a call cannot retire more tokens than exist
    credited = s.rounds + sum(s.accepted_at)  # negative control: A + 1 per round, the "counted past EOS" pitfall
    assert credited > n * CH.horizon and credited / s.rounds > CH.horizon
    with pytest.raises(ValueError, match="log must be a SpecDecodeLog with the same k"):
        decode(n=10, log=SpecDecodeLog(k=3))


@pytest.mark.parametrize("mode", list(D.MODES))
def test_no_registered_decoder_logs_tokens_past_the_horizon(mode):
    from specdec_lib.telemetry import SpecDecodeLog
    n = 2_000
    for k in (1, 4):
        log = SpecDecodeLog(k=max(k, 8) if D.MODES[mode].spec.schedule == "hf" else k)  # hf: k grows to k_max
        decode(mode, k=k, n=n, log=log)
        s = log.summary()
        assert s.tokens <= n * CH.horizon and s.tokens_per_target_call <= CH.horizon
        if mode in ("phantom_history", "rejected_kept"):  # unverified tokens take some of the positions
            assert s.tokens < n * CH.horizon
        else:
            assert s.tokens == n * CH.horizon  # nothing but the verifier's tokens enters the history


def test_cdf_table_never_draws_zero_mass():
    w = torch.tensor([[0.0, 0.3, 0.0, 0.7, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0]])
    cdf = cdf_table(w)  # the core's table, which every draw of the batched engine reads
    u = torch.tensor([0.0, 0.2999999, 0.3, 0.9999999999999999], dtype=torch.float64)  # the largest u < 1
    for r, allowed in enumerate([{1, 3}, {0}, {4}]):
        got = D.draw(cdf.T.contiguous(), torch.full((len(u),), r), u)
        assert set(got.tolist()) <= allowed


def test_generator_reproducible_and_streams_differ():
    a, b, c = decode(n=500, seed=3), decode(n=500, seed=3), decode(n=500, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_long_horizon_and_bigger_vocab_shapes():
    ch = reference_chain(vocab=7)
    g = torch.Generator().manual_seed(0)
    s = D.decode_markov(ch.P, ch.Q, start=3, horizon=9, k=3, num_samples=1000, generator=g)
    assert s.shape == (1000, 9) and s.min() >= 0 and s.max() < 7


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(mode="careless"), ValueError,
     "mode must be one of 'correct', 'bad_draft', 'mismatched_q', 'phantom_history', 'off_by_one'"),
    (dict(k=-1), ValueError, "k must be >= 0"),
    (dict(k=2.0), TypeError, "k must be an integer"),
    (dict(num_samples=0), ValueError, "num_samples must be >= 1"),
    (dict(horizon=0), ValueError, "horizon must be >= 1"),
    (dict(start=5), ValueError, "start must be a token id"),
    (dict(mode="bad_draft", Q_bad=None), ValueError, "mode 'bad_draft' needs Q_bad"),
    (dict(Q=CH.Q[:4, :4] / CH.Q[:4, :4].sum(-1, keepdim=True)), ValueError, "P and Q must have the same shape"),
    (dict(P=CH.P * 1.1), ValueError, "P must sum to 1"),
])
def test_decoder_validation(kwargs, exc, match):
    args = dict(P=CH.P, Q=CH.Q, start=0, horizon=3, k=4, num_samples=10, Q_bad=CH.Q_bad)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        D.decode_markov(**args)
