"""lab/engine_speed.py through lab/recordings.py (kind "measure-engines"): the server's counts turn into the cost
equation's terms exactly (against the equation written out by hand), the committed CPU anchor reads back with its
promises, and the cross-field rules refuse a recording that contradicts itself."""
import dataclasses
import json

import pytest
from recording_files import committed, write

from specdec_lib.cost import cost_equation
from specdec_lib.lab import recordings as rec_
from specdec_lib.lab.engine_speed import (
    EngineSpeedRecording,
    ServerPass,
    SpeedTerms,
    c_v_between,
    c_v_implied,
    predicted,
    redraft,
    speed_run,
)
from specdec_lib.lab.recordings import load_recording, recorded

TERMS = SpeedTerms(weights="F32", task="code", T_1_ms=100.0, draft_ms=30.0, c_d=0.3, c_v=[1.2, 1.4, 1.5, 1.7],
                   c_v_d=[1.1, 1.2, 1.3, 1.5])


def test_a_pass_counts_its_steps():
    p = ServerPass(ms=1000.0, n=64, drafted=60, accepted=45, verified=15)
    assert p.steps == 63 and p.plain_steps == 63 - 45 - 15 == 3


def test_c_v_between_interpolates_the_measured_points_and_refuses_outside():
    assert c_v_between(TERMS.c_v, 1) == 1.2 and c_v_between(TERMS.c_v, 4) == 1.7
    assert c_v_between(TERMS.c_v, 2.5) == pytest.approx(1.45, abs=1e-12)
    assert c_v_between([2.0], 1) == 2.0
    for k in (0.5, 4.01):
        with pytest.raises(ValueError, match=r"k must be within the measured 1\.\.4"):
            c_v_between(TERMS.c_v, k)


def test_predicted_is_the_cost_equation_when_every_round_drafts_k():
    # 15 rounds of k = 4, 48 accepted: 63 tokens, E[N] = 63 / 15 = 4.2 per round
    p = ServerPass(ms=1.0, n=64, drafted=60, accepted=48, verified=15)
    assert p.plain_steps == 0
    by_hand = (63 / 15) / (4 * 0.3 + 1.7)
    assert abs(predicted(p, TERMS, c_d=0.3, overhead=0.0) - by_hand) < 1e-12
    by_the_rule = float(cost_equation(63 / 15, draft_steps=4, c_d=0.3, c_v=1.7))
    assert abs(predicted(p, TERMS, c_d=0.3, overhead=0.0) - by_the_rule) < 1e-12


def test_a_lookup_drafts_for_free_and_a_draft_model_does_not():
    p = ServerPass(ms=1.0, n=64, drafted=60, accepted=48, verified=15)
    assert predicted(p, TERMS, c_d=0.0, overhead=0.0) == pytest.approx((63 / 15) / 1.7, abs=1e-12)
    # the negative control: the same counts with a draft model's cost
    assert predicted(p, TERMS, c_d=0.0, overhead=0.0) > predicted(p, TERMS, c_d=0.3, overhead=0.0)


def test_a_draft_model_pays_its_re_evaluation_as_the_overhead():
    p = ServerPass(ms=1.0, n=64, drafted=60, accepted=48, verified=15)  # k-bar = 4
    assert redraft(p, TERMS, model=True) == pytest.approx(0.3 * 1.5, abs=1e-12) and redraft(p, TERMS, model=False) == 0
    by_hand = (63 / 15) / (4 * 0.3 + 1.7 + 0.3 * 1.5)  # E[N] / (k c_d + c_v(k) + c_d c_v_d(k))
    assert abs(predicted(p, TERMS, c_d=0.3, overhead=redraft(p, TERMS, model=True)) - by_hand) < 1e-12


def test_predicted_charges_a_plain_step_one_T_1_and_a_plain_run_is_one():
    plain = ServerPass(ms=6300.0, n=64, drafted=0, accepted=0, verified=0)
    assert predicted(plain, TERMS, c_d=0.3, overhead=0.5) == 1.0
    mixed = ServerPass(ms=1.0, n=64, drafted=20, accepted=10, verified=5)  # 48 plain steps, 5 rounds of k = 4
    by_hand = 63 / (48 + 20 * 0.3 + 5 * 1.7)
    assert abs(predicted(mixed, TERMS, c_d=0.3, overhead=0.0) - by_hand) < 1e-12
    wrong = 63 / (20 * 0.3 + 5 * 1.7)  # the negative control: plain steps left out of the time
    assert abs(predicted(mixed, TERMS, c_d=0.3, overhead=0.0) - wrong) > 1.0


def test_c_v_implied_recovers_a_verifier_cost_that_made_the_time():
    # the time a run of known terms takes, verifier cost 2.25 per pass: the implied cost must be 2.25
    p0 = ServerPass(ms=0.0, n=64, drafted=20, accepted=10, verified=5)
    ms = TERMS.T_1_ms * (p0.plain_steps + p0.drafted * TERMS.c_d + p0.verified * 2.25)
    assert abs(c_v_implied(dataclasses.replace(p0, ms=ms), TERMS, c_d=0.3) - 2.25) < 1e-12
    assert c_v_implied(ServerPass(ms=ms, n=64, drafted=0, accepted=0, verified=0), TERMS, c_d=0.3) is None


def test_speed_run_pairs_each_repeat_with_plains_own():
    plain = [ServerPass(ms=6300.0, n=64, drafted=0, accepted=0, verified=0),
             ServerPass(ms=12600.0, n=64, drafted=0, accepted=0, verified=0)]  # a slow spell in repeat 2
    spec = [ServerPass(ms=3150.0, n=64, drafted=60, accepted=48, verified=15),
            ServerPass(ms=6300.0, n=64, drafted=60, accepted=48, verified=15)]
    r = speed_run(weights="F32", task="code", mode="draft", k=4, passes=spec, plain=plain, first_divergence=None,
                  terms=TERMS)
    assert r.speedup == 2.0 and r.speedup_range == [2.0, 2.0]  # each against its own repeat's plain
    assert r.e_n == 1 + 96 / 30 and r.alpha == 96 / 120 and r.ms_per_token == pytest.approx(4725 / 63)
    with pytest.raises(ValueError, match="one ServerPass per repeat"):
        speed_run(weights="F32", task="code", mode="draft", k=4, passes=spec, plain=plain[:1], first_divergence=None,
                  terms=TERMS)
    with pytest.raises(ValueError, match="mode must be one of"):
        speed_run(weights="F32", task="code", mode="eagle", k=4, passes=spec, plain=plain, first_divergence=None,
                  terms=TERMS)


def test_the_committed_recording_keeps_its_promises():
    R = recorded("measure-engines")
    assert isinstance(R, EngineSpeedRecording) and committed("measure-engines")["schema"] == 1
    assert R.engine["name"] == "llama-server" and R.prompts == recorded("measure-real").prompts  # measure-real's
    assert {m.role for m in R.models} == {"target", "draft"} and all(len(f.sha256) == 64 for m in R.models
                                                                      for f in m.files)
    for r in R.runs:
        t = R.terms_of(r.weights, r.task)
        assert len(r.passes) >= 2 and all(p.n == R.n_new for p in r.passes)  # repeats, the tokens asked for
        if r.mode == "plain":
            assert r.speedup == 1.0 and r.predicted == 1.0 and r.equal_to_plain
        else:  # every number recomputed from the passes and the terms
            again = speed_run(weights=r.weights, task=r.task, mode=r.mode, k=r.k, passes=r.passes,
                              plain=R.run(r.weights, r.task, "plain").passes, first_divergence=r.first_divergence,
                              terms=t)
            assert again == r and r.c_d == (t.c_d if r.mode == "draft" else 0.0)  # a lookup drafts for free
            assert (r.overhead > 0) == (r.mode == "draft")  # only a draft model re-evaluates the verified batch
    with pytest.raises(ValueError, match=r"\(weights, task, mode\) must be one of"):
        R.run("F32", "code", "eagle")
    with pytest.raises(ValueError, match=r"\(weights, task\) must be one of"):
        R.terms_of("Q8_0", "code")
    q4, f32 = (R.terms_of(w, "code").T_1_ms for w in ("Q4_K_M", "F32"))
    assert q4 < f32  # fewer bytes per weight: a faster step on a memory-bound CPU


def test_a_recording_that_contradicts_itself_is_refused(tmp_path):
    data = committed("measure-engines")
    load_recording("measure-engines", write(tmp_path, data))  # the negative control: the copy loads
    spec = next(i for i, r in enumerate(data["runs"]) if r["mode"] == "draft")
    plain = next(i for i, r in enumerate(data["runs"]) if r["mode"] == "plain")

    def refused(edit, match):
        bad = json.loads(json.dumps(data))
        edit(bad)
        with pytest.raises(ValueError, match=match):
            load_recording("measure-engines", write(tmp_path, bad))

    refused(lambda d: d["runs"][spec]["passes"][0].update(accepted=10**6), "counts must add up")
    refused(lambda d: d["runs"][plain]["passes"][0].update(drafted=4), "counts must add up")
    refused(lambda d: d["runs"][spec].update(k=0), "k must be 0 for plain")
    refused(lambda d: d["runs"][spec].update(speedup=99.0), "must lie within its range")
    refused(lambda d: d["runs"].append(d["runs"][spec]), "recorded twice")
    refused(lambda d: d["runs"][spec].update(task="chat"), "task must be one of")
    refused(lambda d: d["terms"][0].update(c_v=[]), "c_v and c_v_d must be > 0")
    refused(lambda d: d["runs"][spec].update(equal_to_plain=not d["runs"][spec]["equal_to_plain"]),
            "equal_to_plain must say")
    refused(lambda d: d["runs"][plain].update(c_d=0.5), "c_d and overhead must be >= 0, and 0 without a draft model")
    refused(lambda d: d["terms"][0].update(c_v_d=[0.0]), "c_v and c_v_d must be > 0")
    refused(lambda d: d.update(terms=d["terms"][1:]), "no terms recorded")
    assert rec_.SCHEMAS["measure-engines"] == 1
