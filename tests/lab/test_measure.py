"""The lab's clock: what measure_speedup computes from its timings (never how fast anything is: no timed asserts)."""
import dataclasses

import pytest
import torch

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding, decode_step, draft_block, prefill, verify_round
from specdec_lib.lab.measure import MeasurePlan, SpeedupTable, time_catch_up, time_terms
from specdec_lib.lab.transformer import CachedLM, LMConfig


@pytest.fixture(scope="module")
def tiny():
    target = CachedLM(LMConfig(vocab=8, d_model=16, n_head=2, n_layer=2, max_len=64), seed=1, init_std=0.3)
    draft = CachedLM(LMConfig(vocab=8, d_model=8, n_head=1, n_layer=1, max_len=64), seed=2, init_std=0.3)
    return target, draft


PROMPTS = [torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6, 7])]


def _table(**changes) -> SpeedupTable:
    fields = dict(ks=[1, 2], T_1=2e-3, c_d=[0.3, 0.25], c_v=[1.2, 1.5], e_n=[1.6, 2.2], alpha=[0.6, 0.7],
                  predicted=[1.6 / 1.5, 2.2 / 2.0], measured=[1.0, 1.0], measured_range=[(0.9, 1.1), (0.8, 1.2)],
                  overhead=[0.1, 0.2], plain_step=1.0, T_1_range=(1e-3, 3e-3), repeats=1, pairs=2)
    fields.update(changes)
    return SpeedupTable(**fields)


def test_table_arithmetic_by_hand():
    t = _table()
    assert t.rel_error == pytest.approx([abs(1.6 / 1.5 - 1), abs(1.1 - 1)])
    assert t.max_rel_error == pytest.approx(0.1)  # k = 2: 2.2 / 2.0 against 1.0
    assert t.c_d_fit == pytest.approx((1 * 0.3 + 4 * 0.25) / 5)  # least squares of D/T_1 = c_d k through 0
    text = t.table()
    assert "(0.800-1.200)" in text and "over 1 repeats of 2" in text and "conditional acceptance" in text


@pytest.mark.heavy
@pytest.mark.parametrize("policy", [{"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 0.7, "top_k": 3}])
def test_measure_speedup_is_consistent_with_its_own_terms(tiny, policy):
    target, draft = tiny
    ks = [1, 3]
    t = sd.lab.measure_speedup(target, draft, PROMPTS, ks, plan=MeasurePlan(n_new=12, repeats=2, reps=2), **policy)
    assert t.ks == ks and t.pairs == 2 * len(PROMPTS) and t.repeats == 2
    for i, k in enumerate(ks):
        assert 1.0 <= t.e_n[i] <= k + 1  # a round retires between 1 and k + 1 tokens
        assert t.predicted[i] == pytest.approx(t.e_n[i] / (k * t.c_d[i] + t.c_v[i]))
        lo, hi = t.measured_range[i]
        assert 0 < lo <= t.measured[i] <= hi
        assert len(t.repeat_speeds[i]) == 2  # each repeat's S is kept: the median and range are read off them
        assert min(t.repeat_speeds[i]) == lo and max(t.repeat_speeds[i]) == hi
        assert t.c_d[i] > 0 and t.c_v[i] > 0
    assert t.T_1_range[0] <= t.T_1 <= t.T_1_range[1]
    assert len(t.alpha) == ks[-1] and all(a is None or 0 <= a <= 1 for a in t.alpha)


@pytest.mark.heavy
@pytest.mark.parametrize("policy", [{"temperature": 0.0}, {"temperature": 1.0}])
def test_block_verification_beside_the_token_rule(tiny, policy):
    """plan.beside decodes the same pairs with block verification: its own E[N] and speedup, the same k."""
    target, draft = tiny
    plan = MeasurePlan(n_new=12, repeats=2, reps=1, beside=("block",))
    t = sd.lab.measure_speedup(target, draft, PROMPTS, [1, 3], plan=plan, **policy)
    (run,) = t.beside
    assert run.verifier == "block" and len(run.e_n) == len(run.measured) == len(run.measured_range) == 2
    for i, k in enumerate(t.ks):
        assert 1.0 <= run.e_n[i] <= k + 1
        assert run.measured_range[i][0] <= run.measured[i] <= run.measured_range[i][1]
    alone = sd.lab.measure_speedup(target, draft, PROMPTS, [1, 3], plan=dataclasses.replace(plan, beside=()), **policy)
    assert alone.beside == ()
    if policy["temperature"] == 0.0:  # greedy: block verification is the token rule, round for round
        assert run.e_n == t.e_n == alone.e_n
    else:  # sampled: a different rule on the same prompts (negative control: the runs are not copies)
        assert run.e_n != t.e_n
    assert "block verification on the same pairs" in t.table() and "same pairs" not in alone.table()


@pytest.mark.heavy
def test_on_pair_is_called_once_per_pair(tiny):
    target, draft = tiny
    calls = []
    t = sd.lab.measure_speedup(target, draft, PROMPTS, [1, 2, 3], plan=MeasurePlan(n_new=6, repeats=2, reps=1),
                           on_pair=lambda: calls.append(1))
    assert len(calls) == t.pairs * len(t.ks) == 2 * len(PROMPTS) * 3


def test_greedy_pairs_retire_the_plain_tokens(tiny):
    """Greedy E[N] is a property of the models, not of the clock: two measurements agree exactly."""
    target, draft = tiny
    a = sd.lab.measure_speedup(target, draft, PROMPTS, [2], plan=MeasurePlan(n_new=10, repeats=1, reps=1))
    b = sd.lab.measure_speedup(target, draft, PROMPTS, [2], plan=MeasurePlan(n_new=10, repeats=2, reps=1))
    assert a.e_n == b.e_n


def test_time_terms_leaves_the_models_as_it_found_them(tiny):
    target, draft = tiny
    context = torch.tensor([1, 2, 3, 4, 5])
    T_1, D, V = time_terms(target, draft, context, [1, 4], reps=3, temperature=1.0)
    assert T_1 > 0 and len(D) == len(V) == 2 and min(D + V) > 0
    # the phases it times are the decoders' own, and they leave both caches where a round starts
    t_cache, d_cache = prefill(target, context), prefill(draft, context)
    g = torch.Generator().manual_seed(0)
    policy = {"temperature": 1.0, "top_k": None, "generator": g}
    proposals, q_rows = draft_block(draft, d_cache, context[-1:], 4, **policy)
    assert proposals.shape == (4,) and q_rows.shape == (4, 8) and d_cache.length == 8
    block = torch.cat([context[-1:], proposals])
    a, nxt = verify_round(target, t_cache, d_cache, block, q_rows, n=5, decoding=Decoding(**policy))
    assert 0 <= a <= 4 and t_cache.length == d_cache.length == 5 + a  # both rolled back to n + A
    assert decode_step(target, t_cache, nxt[None], **policy).shape == (1,)


@pytest.mark.parametrize("kwargs, err, match", [
    ({"ks": []}, ValueError, "ks"),
    ({"ks": [0]}, ValueError, "k"),
    ({"plan": {"repeats": 0}}, ValueError, "repeats"),
    ({"plan": {"n_new": 0}}, ValueError, "n_new"),
    ({"plan": {"reps": 0}}, ValueError, "reps"),
    ({"prompts": []}, ValueError, "prompts"),
    ({"temperature": -1.0}, ValueError, "temperature"),
    ({"on_pair": 3}, TypeError, "on_pair must be callable"),
    ({"plan": 3}, TypeError, "plan must be a MeasurePlan, got int"),
    ({"plan": {"beside": ("token",)}}, ValueError, "beside must name verifiers other than the token rule, each "
                                                  "once, from 'block'; got \\('token',\\)"),
    ({"plan": {"beside": ("block", "block")}}, ValueError, "each once"),
    ({"plan": {"beside": "block"}}, TypeError, "beside must be a tuple of verifier names, got str"),
])
def test_bad_arguments(tiny, kwargs, err, match):
    target, draft = tiny
    plan = kwargs.pop("plan", {})
    with pytest.raises(err, match=match):
        args = {"prompts": PROMPTS, "ks": [1]} | kwargs
        plan = MeasurePlan(**{"n_new": 4, "repeats": 1, "reps": 1} | plan) if isinstance(plan, dict) else plan
        sd.lab.measure_speedup(target, draft, plan=plan, **args)


def test_time_terms_rejects_bad_reps(tiny):
    target, draft = tiny
    with pytest.raises(ValueError, match="reps"):
        time_terms(target, draft, torch.tensor([1, 2, 3]), [1], reps=0)


def test_reference_table_is_a_real_run():
    """The recorded run must be what measure_speedup and batch_cost return: internally consistent, not typed in."""
    from specdec_lib.lab.batch_cost import best_k_by_batch, fit_c_v
    from specdec_lib.presentation.measure_it import RECORDED as R
    assert [t.draft for t in R.tables] == ["draft", "draft_deep", "table", "lookup"]
    for t in R.tables:
        assert dataclasses.is_dataclass(t) and t.ks == sorted(set(t.ks)) and t.pairs % t.repeats == 0
        assert len(t.alpha) == t.ks[-1]  # acceptance by position at the largest k
        assert all(len(x) == len(t.ks) for x in (t.c_d, t.c_v, t.e_n, t.predicted, t.measured, t.overhead))
        assert t.T_1_range[0] <= t.T_1 <= t.T_1_range[1]
        for i, k in enumerate(t.ks):
            assert t.predicted[i] == pytest.approx(t.e_n[i] / (k * t.c_d[i] + t.c_v[i]), rel=1e-12)
            assert t.measured_range[i][0] <= t.measured[i] <= t.measured_range[i][1]
            assert 1.0 <= t.e_n[i] <= k + 1
    b = R.batch
    assert len(b.T_1) == len(b.c_v) == len(b.fits) == len(b.best) == len(b.batches)
    for row, fit in zip(b.c_v, b.fits):
        assert fit == pytest.approx(fit_c_v(b.ks, row), rel=1e-12)
    assert [x.k for x in b.best] == [x.k for x in best_k_by_batch(b.fits, b.alpha, b.c_d, k_max=max(b.ks))]
    best, i = R.best()  # the batch regime's alpha and c_d are the best measured draft's, at its k
    assert b.c_d == best.c_d[i] and sd.expected_tokens(b.alpha, best.ks[i]) == pytest.approx(best.e_n[i], abs=1e-9)
    assert max(R.measured) > 1.0  # the run has a configuration faster than plain decoding


def test_time_catch_up(tiny):
    _, draft = tiny
    one, two = time_catch_up(draft, torch.tensor([1, 2, 3, 4, 5]), 3, reps=3, temperature=1.0)
    assert one > 0 and two > 0
    with pytest.raises(ValueError, match="context"):
        time_catch_up(draft, torch.tensor([1, 2]), 3)
    with pytest.raises(ValueError, match="k"):
        time_catch_up(draft, torch.tensor([1, 2, 3]), 0)


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["table", "lookup"])
def test_measure_speedup_takes_any_drafter(tiny, kind):
    target, _ = tiny
    text = torch.randint(0, 8, (100,), generator=torch.Generator().manual_seed(0))
    drafter = sd.lab.TableDraft(sd.lab.build_ngram(text, 8, 3)) if kind == "table" else sd.lab.PromptLookupDraft(8, m=2)
    t = sd.lab.measure_speedup(target, drafter, PROMPTS, [1, 3], plan=MeasurePlan(n_new=10, repeats=1, reps=1),
                           temperature=1.0)
    assert t.draft == kind and all(1.0 <= e <= k + 1 for e, k in zip(t.e_n, t.ks))
    T_1, D, V = time_terms(target, drafter, torch.tensor([1, 2, 3, 4, 5]), [2, 4], reps=2, temperature=1.0)
    assert T_1 > 0 and min(D + V) > 0
    one = MeasurePlan(n_new=4, repeats=1, reps=1)
    assert sd.lab.measure_speedup(target, tiny[1], PROMPTS, [1], plan=one).draft == "draft"


def test_every_phase_is_timed_by_the_one_clock(tiny, monkeypatch):
    """The log's times are differences of sd.lab.steps.clock's reads: a fake clock that ticks 1 s a read gives
    generate_plain 1 s a token, a speculative round 1 s of draft and 1 s of verification, and median_times 1 s."""
    import specdec_lib.lab.generation as generation
    import specdec_lib.lab.measure as measure

    ticks = iter(range(10_000))
    reads = []

    def fake(x=None):
        reads.append(x)
        return float(next(ticks))

    monkeypatch.setattr(generation, "clock", fake)
    monkeypatch.setattr(measure, "clock", fake)
    target, draft = tiny
    prompt = torch.tensor([1, 2, 3])
    plain = sd.telemetry.SpecDecodeLog(k=0)
    sd.lab.generate_plain(target, prompt, 5, log=plain)
    assert plain.summary().verify_time == 5.0 and plain.summary().tokens == 5
    spec = sd.telemetry.SpecDecodeLog(k=2)
    sd.lab.generate_speculative(target, draft, prompt, 6, 2, log=spec)
    s = spec.summary()
    assert s.draft_time == s.rounds and s.verify_time == s.rounds  # t0, t1 (after the draft), then the end
    # a round's start reads at once; the reads that end a phase wait for its device's work
    assert [x is None for x in reads[:10]] == [True, False] * 5
    assert [x is None for x in reads[10:]] == [True, False, False] * s.rounds
    assert measure.median_times([lambda: None], 3, prompt) == [1.0]
    reads.clear()
    sd.lab.generate_speculative(target, draft, prompt, 6, 2)  # no log: no read waits for the device
    assert reads and all(x is None for x in reads)
