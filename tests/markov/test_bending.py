"""Act V, bending the rules: lossy acceptance, draft lengths that adapt, drafts without a model.

Every new decoder runs by name on the three engines; the exact ones are within 1e-12 of the target and
the others clearly are not; each sampler agrees with its own exact law within the derived noise bound.
"""
import functools
import math

import pytest
import torch
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.markov import adaptive, lookup, lossy, measures
from specdec_lib.markov import draft_rules as rules
from specdec_lib.markov.registry import MODES, failure_modes
from specdec_lib.markov.spec import DecoderSpec
from specdec_lib.telemetry import SpecDecodeLog

CH = sd.reference_chain()
BENDING = [m.name for m in failure_modes(chapter="bending the rules")]
N = 100_000


def law(mode, k=2, horizon=3, P=CH.P, Q=CH.Q, **kw):
    return sd.decoder_law(P, Q, start=0, horizon=horizon, k=k, mode=mode, **kw)


def tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


def target(horizon=3, P=CH.P):
    return sd.sequence_law(P, start=0, horizon=horizon)


@functools.cache
def samples(mode, k=2, horizon=3, n=N):
    g = torch.Generator().manual_seed(sum(map(ord, mode)) + k)
    return sd.decode_markov(CH.P, CH.Q, start=0, horizon=horizon, k=k, num_samples=n, mode=mode, generator=g)


# --- the registry ----------------------------------------------------------------------------------------
def test_bending_entries_are_registered_with_exactness_and_sources():
    assert BENDING == ["typical_acceptance", "hf_schedule", "confidence_stop", "coin_peeking", "ngram_lookup",
                       "sglang_threshold"]
    assert {m: MODES[m].exact for m in BENDING} == {"typical_acceptance": False, "hf_schedule": True,
                                                    "confidence_stop": True, "coin_peeking": False,
                                                    "ngram_lookup": True, "sglang_threshold": True}  # at 1.0, 1.0
    for m in ("typical_acceptance", "hf_schedule", "confidence_stop", "ngram_lookup", "sglang_threshold"):
        assert "@ " in MODES[m].reference and "#" in MODES[m].reference, m
    assert MODES["coin_peeking"].origin == "the course"


@pytest.mark.heavy
@pytest.mark.parametrize("mode", BENDING)
@pytest.mark.parametrize("k, horizon", [(2, 3), (4, 3), (1, 5)])
def test_exactness_is_what_the_registry_says(mode, k, horizon):
    want = target(horizon)
    distance = tv(law(mode, k=k, horizon=horizon), want)
    if MODES[mode].exact:
        assert (law(mode, k=k, horizon=horizon) - want).abs().max().item() < 1e-12
    else:  # clearly wrong: more than twice what 100,000 exact samples could show by chance
        assert distance > 2 * tv_bound(want, N)


@pytest.mark.stat
@pytest.mark.parametrize("mode", BENDING)
def test_sampler_agrees_with_its_own_exact_law(mode):
    exact = law(mode)
    assert sd.sequence_tv(samples(mode), exact) < tv_bound(exact, N)


@pytest.mark.stat
@pytest.mark.parametrize("mode, other", [("coin_peeking", "correct"), ("typical_acceptance", "correct"),
                                         ("confidence_stop", "typical_acceptance")])
def test_negative_control_samples_miss_another_law(mode, other):
    assert sd.sequence_tv(samples(mode), law(other)) > tv_bound(law(other), N)


@pytest.mark.stat
def test_schedule_trajectory_sampler_and_exact_engine_agree_where_k_changes():
    # start at k = 1 over 6 tokens: k moves 1 -> 3 -> 2 ... inside one sequence, so a frozen k would show
    n, h = 50_000, 6
    exact = law("hf_schedule", k=1, horizon=h)
    g = torch.Generator().manual_seed(3)
    s = sd.decode_markov(CH.P, CH.Q, start=0, horizon=h, k=1, num_samples=n, mode="hf_schedule", generator=g)
    assert sd.sequence_tv(s, exact) < tv_bound(exact, n)
    assert (exact - target(h)).abs().max().item() < 1e-12
    # the walk's expected rounds against the sampler's, and against a frozen k = 1 (a wrong engine)
    log = SpecDecodeLog(k=8)
    sd.decode_markov(CH.P, CH.Q, start=0, horizon=h, k=1, num_samples=n, mode="hf_schedule", generator=g, log=log)
    rounds = measures.decoder_stats(CH.P, CH.Q, start=0, horizon=h, k=1, mode="hf_schedule").rounds
    frozen = measures.decoder_stats(CH.P, CH.Q, start=0, horizon=h, k=1, mode="correct").rounds
    noise = 5 * (h - 1) / (2 * math.sqrt(n))  # rounds per sequence lie in [1, h]: sd <= (h - 1) / 2 per sequence
    assert abs(log.summary().rounds / n - rounds) < noise
    assert abs(frozen - rounds) > 2 * noise


@pytest.mark.heavy
def test_schedule_with_one_k_is_the_fixed_decoder():
    pinned = law("hf_schedule", k=3, horizon=5, options={"k_min": 3, "k_max": 3})
    assert torch.equal(pinned, law("correct", k=3, horizon=5)) or tv(pinned, law("correct", k=3, horizon=5)) < 1e-15


@pytest.mark.heavy
def test_coin_peeking_is_target_on_reject_in_disguise():
    # stopping before a proposal that would fail, then drawing from p, is rejecting it and drawing from p
    for k in (1, 2, 4):
        assert (law("coin_peeking", k=k) - law("target_on_reject", k=k)).abs().max().item() < 1e-12


# --- typical acceptance -----------------------------------------------------------------------------------
def test_typical_threshold_is_medusas():
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    entropy = -sum(x * math.log(x + 1e-5) for x in p[0].tolist())
    want = min(0.09, 0.3 * math.exp(-entropy))
    assert rules.typical_threshold(p, epsilon=0.09, delta=0.3).item() == pytest.approx(want, rel=1e-12)
    t = rules.typical_threshold(p, epsilon=0.2, delta=0.3).item()
    assert rules.typical_accept(p, epsilon=0.2, delta=0.3).tolist() == [[float(x > t) for x in p[0].tolist()]]
    assert rules.typical_table(p, epsilon=0.2, delta=0.3)[0, 3].item() == 0.0  # p = 0.05 < t: filtered out
    with pytest.raises(ValueError, match="lower delta"):
        rules.typical_table(torch.tensor([[0.5, 0.5]]), epsilon=1.0, delta=1.0)  # exp(-H) = 0.50001 with the 1e-5


def test_typical_default_is_lossy_and_the_recovering_settings_are_exact():
    settings = {s.label: s for s in lossy.typical_exact_settings(CH.P, CH.Q, start=0, horizon=3, k=2)}
    assert settings["Medusa's defaults"].tv > 0.1
    assert settings["greedy target and draft (temperature 0)"].tv < 1e-12
    assert settings["draft = target, epsilon 0, resample typical"].tv < 1e-12
    # negative controls: the argmax after a full block, or a draft that is not the target, break it
    assert settings["draft = target, epsilon 0, resample argmax"].tv > 0.1
    assert settings["epsilon 0, resample typical (the real draft)"].tv > 0.1


def test_typical_sweep_trades_tv_for_tokens():
    points = lossy.typical_sweep(CH.P, CH.Q, start=0, horizon=3, k=2, epsilons=[0.0, 0.03, 0.09])
    correct = measures.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=2)
    assert points[0].tokens_per_call > correct.tokens_per_call  # threshold 0 keeps every proposal
    assert points[0].tokens_per_call > points[2].tokens_per_call  # a higher threshold keeps fewer
    assert all(p.tv > 0.1 and p.kl > 0 and not p.exact for p in points)
    default = measures.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=2, mode="typical_acceptance")
    assert points[2].tv == pytest.approx(default.tv, abs=1e-15)  # 0.09 is the default


@pytest.mark.stat
def test_typical_sweep_sampled_tokens_per_call():
    # the exact E[N] against a log of sampled rounds: rounds per sequence lie in [1, 3], sd <= 1 each
    n = 50_000
    log = SpecDecodeLog(k=2)
    g = torch.Generator().manual_seed(6)
    sd.decode_markov(CH.P, CH.Q, start=0, horizon=3, k=2, num_samples=n, mode="typical_acceptance", generator=g,
                     log=log,
                     options={"epsilon": 0.03})
    exact = lossy.typical_sweep(CH.P, CH.Q, start=0, horizon=3, k=2, epsilons=[0.03])[0]
    assert abs(log.summary().rounds / n - 3 / exact.tokens_per_call) < 5 / math.sqrt(n)


# --- options and validation -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, options, exc, match", [
    ("typical_acceptance", {"eps": 0.1}, ValueError, "takes the options 'epsilon', 'delta', 'resample'; got 'eps'"),
    ("correct", {"epsilon": 0.1}, ValueError, "mode 'correct' takes the options none; got 'epsilon'"),
    ("typical_acceptance", {"resample": "greedy"}, ValueError, "resample must be one of 'argmax', 'typical'"),
    ("typical_acceptance", {"epsilon": 1.5}, ValueError, r"DecoderSpec.epsilon must lie in \[0, 1\]"),
    ("hf_schedule", {"k_min": 3, "k_max": 2}, ValueError, "DecoderSpec.k_max must be >= k_min = 3"),
    ("hf_schedule", {"k_max": 1}, ValueError, r"k \(the schedule's first k\) must lie in \[k_min, k_max\]"),
    ("confidence_stop", {"confidence": "high"}, TypeError, "DecoderSpec.confidence must be a real number"),
    ("ngram_lookup", {"ngram_match": "first"}, ValueError, "DecoderSpec.ngram_match must be one of"),
    ("ngram_lookup", [("ngram_match", "latest")], TypeError, "options must be a dict"),
])
def test_options_are_validated_by_name(mode, options, exc, match):
    with pytest.raises(exc, match=match):
        law(mode, options=options)


def test_adaptive_drafts_need_a_committed_context():
    with pytest.raises(ValueError, match="draft_context='committed'"):
        DecoderSpec(schedule="hf", draft_context="own_last_proposal")


def test_options_change_the_law():
    assert tv(law("confidence_stop", options={"confidence": 0.0}), law("correct")) < 1e-15  # never stops early
    a, b = law("typical_acceptance", options={"epsilon": 0.0}), law("typical_acceptance")
    assert tv(a, b) > 0.01
    assert tv(law("ngram_lookup", k=2, horizon=5, options={"ngram_match": "earliest"}), target(5)) < 1e-12


# --- n-gram lookup ----------------------------------------------------------------------------------------
def test_ngram_proposals_copy_the_continuation():
    assert rules.ngram_proposals([0, 1, 2, 0], 2) == [1, 2]
    assert rules.ngram_proposals([0, 1, 0, 2, 0], 3) == [2, 0]  # the latest earlier 0 is at index 2
    assert rules.ngram_proposals([0, 1, 0, 2, 0], 3, "earliest") == [1, 0, 2]  # transformers' first match
    assert rules.ngram_proposals([0, 1, 2], 4) == []  # no earlier occurrence: plain decoding


def test_ngram_batch_equals_the_list_version():
    g = torch.Generator().manual_seed(0)
    full = torch.randint(0, 3, (200, 9), generator=g)
    at = torch.randint(0, 9, (200,), generator=g)
    for match in ("latest", "earliest"):
        props, count = rules.ngram_proposals_batch(full, at, torch.full((200,), 3), 3, match)
        for i in range(200):
            want = rules.ngram_proposals(full[i, :at[i] + 1].tolist(), 3, match)
            assert props[:count[i], i].tolist() == want


@pytest.mark.heavy
def test_lookup_is_nearly_free_and_never_slower_at_c_v_one():
    rows = lookup.lookup_vs_model(CH.P, CH.Q, start=0, horizon=5, k=4, c_d_model=0.15, c_v=1.0)
    ngram, model = rows
    assert ngram.stats.tv < 1e-12 and model.stats.tv < 1e-12
    assert ngram.speedup >= 1.0  # a free draft never costs more than the plain step it replaces
    assert ngram.stats.plain_rounds > 0 and model.stats.plain_rounds == 0
    assert model.speedup > ngram.speedup  # on a chain that rarely repeats, the model draft wins
    assert ngram.speedup == pytest.approx(5 / ngram.stats.rounds)  # c_d = 0, c_v = 1: every round costs 1


def test_decoder_stats_validation_and_kl():
    s = measures.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=2)
    with pytest.raises(ValueError, match="c_v must lie in"):
        s.speedup(c_d=0.1, c_v=0.0)
    assert measures.kl_divergence(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0])) == math.inf
    assert measures.kl_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5])) == pytest.approx(math.log(2))


# --- adaptive k in the long run ----------------------------------------------------------------------------
K_MAX = 5  # 5^6 paths: fast; the notebook uses 8


@pytest.mark.stat
@pytest.mark.parametrize("mode, k, rule", [("correct", 3, None), ("hf_schedule", 1, "hf"),
                                           ("confidence_stop", 5, "confidence")])
def test_long_run_tokens_per_round_match_a_long_sampled_text(mode, k, rule):
    if rule == "hf":
        want = adaptive.policy_speedup(CH.P, CH.Q, c_d=0.1, c_v=1.0, policy="hf_schedule", k_max=K_MAX)
    elif rule == "confidence":
        want = adaptive.policy_speedup(CH.P, CH.Q, c_d=0.1, c_v=1.0, policy="confidence", k=k, k_max=K_MAX)
    else:
        want = adaptive.policy_speedup(CH.P, CH.Q, c_d=0.1, c_v=1.0, policy="fixed", k=k, k_max=K_MAX)
    n, h = 400, 1000
    options = {"k_max": K_MAX} if rule == "hf" else None
    log = SpecDecodeLog(k=K_MAX if rule == "hf" else k)
    sd.decode_markov(CH.P, CH.Q, start=0, horizon=h, k=k, num_samples=n, mode=mode,
                     generator=torch.Generator().manual_seed(1),
                     log=log, options=options)
    s = log.summary()
    # 1 + mean(A) over R rounds: A in [0, K] has sd <= K / 2; the first rounds start at state 0, not at the
    # stationary law, a bias below (K + 1) per sequence spread over R / n rounds; allow 5 sd plus that
    noise = 5 * K_MAX / (2 * math.sqrt(s.rounds)) + (K_MAX + 1) * n / s.rounds
    assert abs(1 + sum(s.reach) - want.tokens_per_round) < noise
    other = adaptive.policy_speedup(CH.P, CH.Q, c_d=0.1, c_v=1.0, policy="fixed", k=1)  # negative control
    assert abs(1 + sum(s.reach) - other.tokens_per_round) > noise


def test_plain_decoding_and_fixed_k_agree_with_cost_model():
    rows = [adaptive.policy_speedup(CH.P, CH.Q, c_d=0.15, c_v=1.0, policy="fixed", k=k) for k in range(K_MAX + 1)]
    V = CH.P.shape[0]
    for k, r in enumerate(rows):  # the local engine (long_run.round_law) against the path evaluator
        path = adaptive.policy_speedup(CH.P, CH.Q, c_d=0.15, c_v=1.0, policy=adaptive.fixed_rule(V, k, K_MAX))
        assert r.speedup == pytest.approx(path.speedup, abs=1e-12) and r.name == f"fixed k = {k}"
    assert rows[0].speedup == 1.0 and rows[0].drafted_per_round == 0.0
    for k, r in enumerate(rows[1:], start=1):
        assert r.drafted_per_round == pytest.approx(k) and r.cost_per_round == pytest.approx(k * 0.15 + 1.0)
        assert r.speedup == pytest.approx(r.tokens_per_round / r.cost_per_round)


@functools.cache
def optimum(c_d):
    return adaptive.optimal_stopping(CH.P, CH.Q, c_d=c_d, c_v=1.0, k_max=K_MAX)


@pytest.mark.parametrize("c_d", [0.05, 0.15, 0.3])
def test_optimal_stopping_beats_every_other_rule(c_d):
    def rule(policy, **kw):
        return adaptive.policy_speedup(CH.P, CH.Q, c_d=c_d, c_v=1.0, policy=policy, **kw)

    best = max((rule("fixed", k=k) for k in range(K_MAX + 1)), key=lambda r: r.speedup)
    hf = rule("hf_schedule", k_max=K_MAX)
    conf = rule("confidence", k=K_MAX, k_max=K_MAX)
    opt = optimum(c_d).result
    assert rule("oracle", k_max=K_MAX).speedup == pytest.approx(opt.speedup, abs=1e-12)  # optimal_stopping's rule
    assert opt.speedup >= best.speedup - 1e-12 and opt.speedup >= hf.speedup and opt.speedup >= conf.speedup
    assert opt.speedup > best.speedup + 1e-3  # it uses the path: strictly better than one k for all


def test_optimal_stopping_limits():
    free = adaptive.optimal_stopping(CH.P, CH.Q, c_d=0.0, c_v=1.0, k_max=K_MAX).result
    full = adaptive.policy_speedup(CH.P, CH.Q, c_d=0.0, c_v=1.0, policy="fixed", k=K_MAX)
    assert free.speedup == pytest.approx(full.speedup, rel=1e-12)  # free drafts: always draft to k_max
    dear = adaptive.optimal_stopping(CH.P, CH.Q, c_d=5.0, c_v=1.0, k_max=K_MAX).result
    assert dear.speedup == 1.0 and dear.drafted_per_round == 0.0  # dear drafts: plain decoding


def test_adaptive_validation():
    def rule(policy, **kw):
        return adaptive.policy_speedup(CH.P, CH.Q, c_d=0.1, c_v=1.0, policy=policy, **kw)

    with pytest.raises(ValueError, match="paths; at most"):
        rule("oracle", k_max=12)
    with pytest.raises(ValueError, match="paths; at most"):
        adaptive.optimal_stopping(CH.P, CH.Q, c_d=0.1, c_v=1.0, k_max=12)
    with pytest.raises(ValueError, match="c_v must lie in"):
        adaptive.policy_speedup(CH.P, CH.Q, c_d=0.1, c_v=-1.0, policy="fixed", k=2)
    with pytest.raises(ValueError, match="policy must be one of 'fixed', 'confidence', 'hf_schedule', 'oracle'; got"):
        rule("greedy", k=2)
    with pytest.raises(ValueError, match="policy 'fixed' needs k"):
        rule("fixed")
    with pytest.raises(ValueError, match=r"k must lie in \[0, k_max = 4\]"):
        rule("fixed", k=5, k_max=4)
    with pytest.raises(ValueError, match="policy 'hf_schedule' takes no k"):
        rule("hf_schedule", k=3)
    with pytest.raises(ValueError, match="k_max must be >= 1"):
        rule("hf_schedule", k_max=0)
    with pytest.raises(ValueError, match="policy 'oracle' takes no confidence"):
        rule("oracle", confidence=0.4)
    with pytest.raises(ValueError, match="policy 'fixed' takes no confidence"):
        rule("fixed", k=2, confidence=0.4)
    with pytest.raises(ValueError, match=r"policy\[1\] must be a 0/1 tensor of shape \(5, 5\)"):
        rule([torch.ones(5), torch.ones(5)])
    with pytest.raises(ValueError, match="policy 'a path rule' takes no k"):
        rule(adaptive.fixed_rule(5, 1, 2), k=1)
    with pytest.raises(TypeError, match="or a sequence of cont tensors, got int"):
        rule(3)
