"""The field guide: every registered bug runs on both engines, the engines agree, and each bug is caught."""
import dataclasses
import functools
import math

import pytest
import torch
from stats import rate_bound, tv_bound

import specdec_lib as sd
from specdec_lib.markov.q_contract import audit_q_contract
from specdec_lib.markov.registry import MODES, FailureMode, failure_modes
from specdec_lib.markov.spec import DecoderSpec, spec_tables
from specdec_lib.telemetry import SpecDecodeLog, accepted_counts, emitted_until_eos

CH = sd.reference_chain()
K, H = 2, 3  # k < horizon, so a full block's bonus token lands inside the horizon and its bugs can show
N = 100_000
BROKEN = [m.name for m in failure_modes() if not m.exact]
EXACT = [m.name for m in failure_modes() if m.exact]


def law(mode, k=K, horizon=H, **kw):
    return sd.decoder_law(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=mode, Q_bad=CH.Q_bad,
                                         **kw)


def samples(mode, n=N, seed=0, k=K, log=None, **kw):
    g = torch.Generator().manual_seed(seed)
    return sd.decode_markov(CH.P, CH.Q, start=CH.start, horizon=H, k=k, num_samples=n, mode=mode, generator=g,
                            Q_bad=CH.Q_bad,
                            log=log, **kw)


@functools.cache
def shared_samples(mode):
    """One run of N sequences per mode, shared by the tests that only read it."""
    return samples(mode, seed=sum(map(ord, mode)))


@functools.cache
def tokens_per_call(mode):
    """Tokens per target call over 50,000 sequences at k = 4, and the number of rounds behind it."""
    log = SpecDecodeLog(k=4)
    samples(mode, n=50_000, k=4, log=log)
    return log.summary().tokens_per_target_call, log.summary().rounds


def target(mode):
    return sd.sequence_law(MODES[mode].target(CH.P), start=CH.start, horizon=H)


def test_registry():
    modes = failure_modes(chapter=None)  # every chapter: the field guide's and Act V's
    assert modes[0].name == "correct" and len({m.name for m in modes}) == len(modes)
    assert len(BROKEN) >= 10
    for m in modes:
        assert m.description and m.reference and isinstance(m.spec, DecoderSpec)
    assert set(sd.markov.DECODER_MODES) <= set(MODES)
    fields = {f.name for f in dataclasses.fields(DecoderSpec)}
    assert all(set(dataclasses.asdict(m.spec)) == fields for m in modes)
    assert [m.name for m in modes if m.origin == "paper"] == ["correct", "block_verification"]
    for m in modes:  # a bug credited to public code cites an issue or pull request (a paper's may cite its code)
        assert (m.origin == "public code") == ("#" in m.reference) or m.origin == "paper", m.name


def test_the_field_guide_keeps_its_chapter():
    # 02b counts these: 18 variants besides the correct decoder, 14 of them wrong; Act V's decoders stay out
    guide = failure_modes()
    assert guide == failure_modes(chapter="field guide") and len(guide) == 19
    assert sum(not m.exact for m in guide) == 14 and all(m.chapter == "field guide" for m in guide)
    bending = failure_modes(chapter="bending the rules")
    assert [m.name for m in bending] == ["typical_acceptance", "hf_schedule", "confidence_stop", "coin_peeking",
                                         "ngram_lookup", "sglang_threshold"]
    surface = failure_modes(chapter="sampling surface")
    assert [m.name for m in surface] == ["bonus_only_processors"]
    optimal = failure_modes(chapter="optimal verification")
    assert [m.name for m in optimal] == ["block_verification", "block_verification_naive",
                                         "block_verification_naive_argmax"]
    assert set(MODES) == {m.name for m in guide + bending + surface + optimal}
    with pytest.raises(ValueError, match="chapter must be one of 'field guide', 'bending the rules', 'sampling surf"):
        failure_modes(chapter="act v")


def test_origin_is_validated():
    with pytest.raises(ValueError, match="origin must be one of 'paper', 'public code', 'the post', 'the course'"):
        FailureMode("x", "d", "r", origin="public")


@pytest.mark.stat
@pytest.mark.parametrize("mode", list(MODES))
def test_sampler_agrees_with_exact_engine(mode):
    exact = law(mode)
    assert exact.sum().item() == pytest.approx(1.0, abs=1e-12)
    assert sd.sequence_tv(shared_samples(mode), exact) < tv_bound(exact, N)


@pytest.mark.stat
@pytest.mark.parametrize("mode", BROKEN)
def test_every_bug_is_caught(mode):
    want = target(mode)
    true_tv = 0.5 * (law(mode) - want).abs().sum().item()
    assert true_tv > 2 * tv_bound(want, N)  # far enough that N samples reveal it whatever the noise
    assert sd.sequence_tv(shared_samples(mode), want) > tv_bound(want, N)


@pytest.mark.stat
@pytest.mark.parametrize("mode", EXACT)
def test_speed_only_bugs_keep_the_distribution(mode):
    want = target(mode)
    assert (law(mode) - want).abs().max().item() < 1e-12
    assert sd.sequence_tv(shared_samples(mode), want) < tv_bound(want, N)


@pytest.mark.stat
@pytest.mark.parametrize("mode", [m for m in EXACT if m != "correct"])
def test_speed_only_bugs_cost_acceptance(mode):
    # tokens per round lie in [1, k + 1], so the mean of R rounds has sd <= k / (2 sqrt(R)); allow 5 sd on each
    (good, r_good), (bad, r_bad) = tokens_per_call("correct"), tokens_per_call(mode)
    noise = 5 * 4 / (2 * math.sqrt(min(r_good, r_bad)))
    assert good - bad > 2 * noise


def test_bonus_bug_hides_when_blocks_outrun_the_horizon():
    # with k + 1 > horizon every full block is cut before its bonus token, so no test at this horizon can see it
    want = target("bonus_from_draft")
    assert (law("bonus_from_draft", k=4) - want).abs().max().item() < 1e-12
    assert 0.5 * (law("bonus_from_draft", k=2) - want).abs().sum().item() > 0.1


# --- the q contract: the drafter's real output must match the q it reports --------------------------
def drafter(mode):
    _, propose, ratio, _ = spec_tables(MODES[mode].spec, CH.P, CH.Q, CH.Q_bad)
    return (lambda states, g: sd.sample_rows(propose[states], g)), ratio  # a drafter that samples `propose`


@pytest.mark.parametrize("mode, holds", [("correct", True), ("bad_draft", True), ("greedy_draft_softmax_q", False),
                                         ("draft_policy_not_in_q", False), ("mismatched_q", False)])
def test_q_contract(mode, holds):
    sample, reported = drafter(mode)
    result = audit_q_contract(sample, reported, num_samples=20_000, generator=torch.Generator().manual_seed(5))
    assert result.holds is holds, result


# --- one-hot drafts: the speculative rule and match-based acceptance coincide --------------------------
def test_one_hot_draft_rule_equals_match_acceptance():
    Q1 = torch.nn.functional.one_hot(CH.Q.argmax(-1), 5).float()  # a greedy (or n-gram) draft
    for k in (1, 2, 4):
        ratio_rule = sd.decoder_law(CH.P, Q1, start=0, horizon=3, k=k)
        match_rule = sd.decoder_law(CH.P, Q1, start=0, horizon=3, k=k, mode="match_acceptance")
        assert (ratio_rule - match_rule).abs().max().item() < 1e-12
        assert (ratio_rule - sd.sequence_law(CH.P, start=0, horizon=3)).abs().max().item() < 1e-12


RULES = {"correct": lambda p, q: torch.minimum(p, q).sum().item(),  # the speculative rule: sum min(p, q)
         "match_acceptance": lambda p, q: (p * q).sum().item()}  # match-based acceptance: sum p q


@pytest.mark.stat
@pytest.mark.parametrize("mode, other", [("correct", "match_acceptance"), ("match_acceptance", "correct")])
def test_acceptance_of_a_sampled_draft(mode, other):
    # one proposal, horizon 1: every round is the first, and P(A >= 1) is the acceptance rate
    g = torch.Generator().manual_seed(8)
    log = SpecDecodeLog(k=1)
    sd.decode_markov(CH.P, CH.Q, start=0, horizon=1, k=1, num_samples=N, mode=mode, generator=g, log=log)
    p, q = CH.P[0].double(), CH.Q[0].double()
    measured = log.summary().reach[0]
    assert abs(measured - RULES[mode](p, q)) < rate_bound(RULES[mode](p, q), N)
    assert abs(measured - RULES[other](p, q)) > rate_bound(RULES[mode](p, q), N)  # negative control


# --- telemetry pitfalls ---------------------------------------------------------------------------------
def test_non_causal_counting_breaks_the_identity():
    flags = sd.simulate_mixture((0.95, 0.45), (0.5, 0.5), 4, num_samples=50_000,
                                generator=torch.Generator().manual_seed(2))
    true_tokens = accepted_counts(flags) + 1  # what each round really retires
    for causal in (True, False):
        log = SpecDecodeLog(k=4)
        log.record_rounds(accepted_counts(flags, causal=causal), emitted=true_tokens)
        s = log.summary()
        identity = 1 + sum(s.reach)
        if causal:
            assert s.tokens_per_target_call == pytest.approx(identity, rel=1e-12)
        else:  # counting every passed slot claims tokens the rounds never retired
            assert identity - true_tokens.double().mean().item() > 0.3


def test_eos_inside_the_accepted_prefix():
    g = torch.Generator().manual_seed(4)
    n, k, V = 20_000, 4, 5
    p_rows = torch.softmax(torch.randn(n, k + 1, V, generator=g), -1)
    q_rows = torch.softmax(torch.randn(n, k, V, generator=g), -1)
    props = torch.stack([sd.sample_rows(q_rows[:, j], g) for j in range(k)], 1)
    verdicts = sd.verify_blocks(p_rows, q_rows, props, g)
    accepted, tokens = verdicts.accepted, verdicts.tokens
    emitted = emitted_until_eos(tokens, accepted, eos=0)
    assert (emitted <= accepted + 1).all() and (emitted < accepted + 1).any()
    naive, truncated = SpecDecodeLog(k=k), SpecDecodeLog(k=k)
    naive.record_rounds(accepted, emitted=emitted)  # tokens are right, acceptance still counts past the EOS
    truncated.record_rounds(emitted - 1)  # acceptance cut at the EOS as well
    for log, holds in ((naive, False), (truncated, True)):
        s = log.summary()
        gap = abs(s.tokens_per_target_call - 1 - sum(s.reach))
        assert (gap < 1e-12) is holds
    assert truncated.summary().tokens_per_target_call == pytest.approx(emitted.double().mean().item())
