"""Block verification on the Markov engines: exact on the reference chain, the token rule at k = 1 and under greedy
or one-hot drafts, the engines draw for draw, the naive port's exact TV, and tokens per call."""
import dataclasses
import itertools

import pytest
import torch
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.block_verification import block_residual, block_weights, tau_law
from specdec_lib.markov import batched
from specdec_lib.markov.exact import decoder_walk
from specdec_lib.markov.registry import MODES, failure_modes, make_decoder
from specdec_lib.markov.spec import BLOCK_NEEDS, Decoder, DecoderSpec, spec_tables

CH = sd.reference_chain()
H = 3  # the notebooks' horizon for decoder_stats (02b, 07)
BLOCK, NAIVE = "block_verification", "block_verification_naive"


def law(mode, k, horizon=H, **kw):
    return sd.decoder_law(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=mode, Q_bad=CH.Q_bad, **kw)


def stats(mode, k, horizon=H, **kw):
    return sd.decoder_stats(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=mode, Q_bad=CH.Q_bad, **kw)


def target(horizon=H, **policy):
    return sd.sequence_law(sd.policy_table(CH.P, **policy) if policy else CH.P, start=CH.start, horizon=horizon)


def tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


def same_stats(a, b):
    return max(abs(a.rounds - b.rounds), abs(a.drafted - b.drafted), abs(a.accepted - b.accepted),
               abs(a.plain_rounds - b.plain_rounds))


def test_registry_chapter():
    modes = failure_modes(chapter="optimal verification")
    assert [m.name for m in modes] == [BLOCK, NAIVE, "block_verification_naive_argmax"]
    assert MODES[BLOCK].exact and MODES[BLOCK].origin == "paper" and not MODES[NAIVE].exact
    assert MODES[NAIVE].origin == "public code" and "#5542" in MODES[NAIVE].reference
    assert "@ " in MODES[NAIVE].reference and "2403.10444" in MODES[BLOCK].reference
    assert not {BLOCK, NAIVE} & {m.name for m in failure_modes()}  # the field guide is unchanged


# --- exact on the reference chain ------------------------------------------------------------------
@pytest.mark.heavy
@pytest.mark.parametrize("k", range(1, 7))
def test_block_verification_is_exact(k):
    assert (law(BLOCK, k) - target()).abs().max().item() < 1e-12
    assert stats(BLOCK, k).tv < 1e-12


@pytest.mark.parametrize("k", [1, 2, 3])
def test_exact_with_the_bonus_inside_the_horizon(k):
    # horizon k + 1 and beyond: full blocks' bonus tokens and second rounds both land inside
    assert (law(BLOCK, k, horizon=k + 2) - target(horizon=k + 2)).abs().max().item() < 1e-12


@pytest.mark.parametrize("policy", [{"temperature": 0.6}, {"temperature": 1.4}, {"top_k": 3}, {"top_p": 0.8},
                                    {"temperature": 0.8, "top_k": 3, "top_p": 0.9}])
@pytest.mark.parametrize("k", [2, 4])
def test_exact_under_a_sampling_policy(policy, k):
    assert (law(BLOCK, k, **policy) - target(**policy)).abs().max().item() < 1e-12
    assert tv(law(NAIVE, k, **policy), target(**policy)) > 1e-3  # the same check fails the naive port


def test_exact_with_another_draft_and_not_with_a_mismatched_q():
    # propose and ratio may vary: a bad draft the verifier knows is exact; one it does not know is not
    def walk(**fields):
        spec = DecoderSpec(verifier="block", **fields)
        dec = Decoder(spec, *spec_tables(spec, CH.P, CH.Q, CH.Q_bad), start=CH.start, horizon=H, k=3)
        return decoder_walk(dec).law
    assert (walk(propose="Q_bad", ratio="Q_bad") - target()).abs().max().item() < 1e-12
    assert tv(walk(ratio="Q_bad"), target()) > 1e-2


# --- where it is the token rule --------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{}, {"temperature": 0.7}, {"top_p": 0.8}])
def test_k1_is_the_token_rule(kw):
    assert (law(BLOCK, 1, horizon=4, **kw) - law("correct", 1, horizon=4, **kw)).abs().max().item() < 1e-12
    assert same_stats(stats(BLOCK, 1, horizon=4, **kw), stats("correct", 1, horizon=4, **kw)) < 1e-12


@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_target_and_draft_is_the_token_rule(k):
    a, b = stats(BLOCK, k, horizon=4, temperature=0.0), stats("correct", k, horizon=4, temperature=0.0)
    greedy = {"horizon": 4, "temperature": 0.0}
    assert (law(BLOCK, k, **greedy) - law("correct", k, **greedy)).abs().max().item() < 1e-12
    assert same_stats(a, b) < 1e-12 and a.tv < 1e-12
    # negative control: a sampled draft at the same k is not the token rule's stats
    assert k == 1 or abs(stats(BLOCK, k, horizon=4).rounds - stats("correct", k, horizon=4).rounds) > 1e-3


@pytest.mark.parametrize("k", [2, 3])
def test_one_hot_draft_is_the_token_rule(k):
    Q1 = torch.nn.functional.one_hot(CH.Q.argmax(-1), 5).double()  # a deterministic draft, sampled target
    one = {m: sd.decoder_stats(CH.P, Q1, start=CH.start, horizon=4, k=k, mode=m) for m in ("correct", BLOCK)}
    assert same_stats(one["correct"], one[BLOCK]) < 1e-12 and one[BLOCK].tv < 1e-12


# --- the engines agree -----------------------------------------------------------------------------
def decode(engine, mode, k, n, seed, horizon=H, **kw):
    run = sd.markov.decode_reference if engine == "reference" else sd.decode_markov
    return run(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, num_samples=n, mode=mode,
               generator=torch.Generator().manual_seed(seed), **kw)


def one_at_a_time(mode, k, n, seed, horizon=H, **kw):
    """decode_markov with num_samples = 1, n times from one generator (tables built once): the reference's draws."""
    g = torch.Generator().manual_seed(seed)
    dec = make_decoder(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=mode, **kw)
    t = batched.tables(dec)
    return torch.cat([batched.decode_tables(dec, t, num_samples=1, generator=g) for _ in range(n)])


@pytest.mark.heavy
@pytest.mark.parametrize("mode", [BLOCK, NAIVE])
@pytest.mark.parametrize("k, horizon, kw", [(2, 6, {}), (3, 5, {"top_k": 3}), (4, 5, {"temperature": 0.7})])
def test_reference_is_batched_draw_for_draw(mode, k, horizon, kw):
    # k = 0, 1, 4 at horizon 3 and k = 3 at 6 are in test_reference.py (every registered mode); here policies too
    ref = decode("reference", mode, k, 100, seed=k, horizon=horizon, **kw)
    assert torch.equal(ref, one_at_a_time(mode, k, 100, seed=k, horizon=horizon, **kw))


def test_draw_for_draw_tells_block_from_token():
    # negative control: the block reference against the token rule's batched decoder differs somewhere
    ref = decode("reference", BLOCK, 3, 100, seed=1, horizon=6)
    assert torch.equal(ref, one_at_a_time(BLOCK, 3, 100, seed=1, horizon=6))
    assert not torch.equal(ref, one_at_a_time("correct", 3, 100, seed=1, horizon=6))
    assert not torch.equal(ref, one_at_a_time(NAIVE, 3, 100, seed=1, horizon=6))


@pytest.mark.parametrize("mode, other", [(BLOCK, NAIVE), (NAIVE, BLOCK)])
def test_block_table_is_the_rows_draw_for_draw(mode, other):
    # batched reads a round off its block table (V^(k+1) <= BLOCK_TABLE_LIMIT) or computes it from the block's rows
    dec, wrong = (make_decoder(CH.P, CH.Q, start=CH.start, horizon=6, k=3, mode=m) for m in (mode, other))
    t = batched.tables(dec)
    assert t.block_weights is not None and batched.tables(make_decoder(CH.P, CH.Q, start=CH.start, horizon=6, k=6,
                                                                       mode=mode)).block_weights is None  # 5^7 blocks

    def run(tables):
        return batched.decode_tables(dec, tables, num_samples=2000, generator=torch.Generator().manual_seed(3))

    assert torch.equal(run(t), run(dataclasses.replace(t, block_weights=None, block_fix=None)))
    other_table = batched.tables(wrong)  # negative control: the other verifier's table draws differently
    assert not torch.equal(run(t), run(dataclasses.replace(t, block_weights=other_table.block_weights,
                                                           block_fix=other_table.block_fix)))


N = 100_000


@pytest.mark.stat
@pytest.mark.parametrize("mode, other", [(BLOCK, NAIVE), (NAIVE, BLOCK)])
def test_batched_decoder_against_the_exact_law(mode, other):
    # tv_bound: P(TV of N exact samples > bound) < 1e-6 (Jensen + McDiarmid, specdec_lib.noise); 125 cells
    samples = decode("batched", mode, 3, N, seed=7)
    exact, wrong = law(mode, 3), law(other, 3)
    assert sd.sequence_tv(samples, exact) < tv_bound(exact, N)
    assert tv(exact, wrong) > 2 * tv_bound(wrong, N)  # negative control: the other rule's law is far away ...
    assert sd.sequence_tv(samples, wrong) > tv_bound(wrong, N)  # ... and these samples fail it


# --- the naive port --------------------------------------------------------------------------------
def first_token_law(naive):
    """Horizon 1 by hand: the first committed token, enumerating the k = 3 drafts from the start state."""
    P, Q, k, V = CH.P.double(), CH.Q.double(), 3, 5
    P, Q = P / P.sum(-1, keepdim=True), Q / Q.sum(-1, keepdim=True)
    out = torch.zeros(V, dtype=torch.float64)
    for x in itertools.product(range(V), repeat=k):
        states = [CH.start, *x]
        mass = torch.stack([Q[states[i], x[i]] for i in range(k)]).prod()
        w = block_weights(P[states], Q[states[:k]], torch.tensor(x), naive=naive)
        law_tau = tau_law(w.h)
        res = block_residual(P[states], Q[states[:k]], w, torch.tensor(0), naive=naive)
        out += mass * law_tau[0] * res / res.sum()  # tau = 0: the token after no kept draft
        out[x[0]] += mass * law_tau[1:].sum()  # tau >= 1: the first draft
    return out


@pytest.mark.parametrize("naive", [False, True])
def test_first_token_law_by_hand(naive):
    mode = NAIVE if naive else BLOCK
    assert (law(mode, 3, horizon=1) - first_token_law(naive)).abs().max().item() < 1e-12
    assert (first_token_law(False) - CH.P[CH.start].double()).abs().max().item() < 1e-6  # exact: P's first row


@pytest.mark.parametrize("k", [2, 4])
def test_naive_port_is_biased_and_buys_tokens(k):
    s = stats(NAIVE, k)
    assert s.tv == pytest.approx(tv(law(NAIVE, k), target()), abs=1e-12) and s.tv > 0.1
    assert s.tokens_per_call > stats(BLOCK, k).tokens_per_call + 0.1


@pytest.mark.heavy
@pytest.mark.parametrize("k", range(1, 7))
def test_block_never_fewer_tokens_per_call(k):
    block, token = stats(BLOCK, k), stats("correct", k)
    assert block.tokens_per_call >= token.tokens_per_call - 1e-12
    assert k == 1 or block.tokens_per_call > token.tokens_per_call + 1e-3  # a strict gain once k >= 2


# --- the spec ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", list(BLOCK_NEEDS))
def test_block_spec_refuses_what_it_replaces(field):
    wrong = {"acceptance": "match", "judge": "off_by_one", "residual": "target", "residual_uniform": "reused",
             "bonus": "draft", "keep_rejected": True, "verify_first": False, "phantom": True, "schedule": "hf",
             "stop": "coin", "proposer": "ngram", "draft_context": "own_last_proposal"}[field]
    with pytest.raises(ValueError, match=f"DecoderSpec.{field} must be {BLOCK_NEEDS[field]!r} with "
                                         "verifier='block_naive'"):
        DecoderSpec(verifier="block_naive", **{field: wrong})
    assert getattr(DecoderSpec(**{field: wrong}), field) == wrong  # the token rule takes it


def test_block_spec_takes_draft_ratio_and_policy():
    spec = DecoderSpec(verifier="block", propose="Q_bad", ratio="Q_bad", policy=(("top_p", 0.8),),
                       policy_on_target=False)
    assert spec.verifier == "block"
    with pytest.raises(ValueError, match="verifier must be one of 'token', 'block', 'block_naive'"):
        DecoderSpec(verifier="blockwise")
