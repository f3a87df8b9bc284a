"""presentation/engines.py on the committed engines recording: every table is read from it (a verdict's TV appears
where its case and mode meet), the figure draws the recorded counts, and bad names raise."""
import pytest
from matplotlib.figure import Figure

from specdec_lib.lab.recordings import recorded
from specdec_lib.presentation import engines as views


def test_the_tables_print_what_the_recording_holds():
    rec = recorded("audit-engines")
    assert all(e.engine in views.engines_table(rec) and e.version in views.engines_table(rec) for e in rec.engines)
    for engine in (e.engine for e in rec.engines):
        table = views.verdict_table(engine, rec).splitlines()
        for v in rec.verdicts:
            if v.engine != engine:
                continue
            row = next(line for line in table if line.split()[0] == v.case.split()[0] and line.startswith(v.case))
            if v.tv is not None:
                assert f"{v.tv:.3f}/{v.threshold:.3f}" in row  # each judged cell, where its case meets its mode
        left = views.left_out_table(engine, rec)
        assert all(v.note in left for v in rec.verdicts if v.engine == engine and v.verdict == "left out")
    repro = views.reproduction_table("llama-cpp-python", rec)
    r = rec.reproductions[0]
    assert r.title in repro and all(what in repro for what in r.counts)
    assert {(v.engine, v.mode, v.case) for v in views.failures(rec)} == {
        (v.engine, v.mode, v.case) for v in rec.verdicts if v.verdict == "FAIL"}


def test_the_figure_draws_the_recorded_law():
    rec = recorded("audit-engines")
    fig = views.plot_engine_law("vllm-cpu", "ngram", "plain", rec=rec)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    v = rec.verdict("vllm-cpu", "ngram", "plain")
    heights = [p.get_height() for p in ax.patches]
    assert abs(max(heights[:len(heights) // 3]) - max(m for _, m, _ in v.law)) < 1e-12  # the exact law's bars first
    assert f"TV {v.tv:.3f}" in ax.get_title()


def test_bad_names_raise():
    rec = recorded("audit-engines")
    left = next(v for v in rec.verdicts if v.verdict == "left out")
    with pytest.raises(ValueError, match="was left out"):
        views.plot_engine_law(left.engine, left.mode, left.case, rec=rec)
    with pytest.raises(ValueError, match="engine must be one of"):
        views.reproduction_table("sglang", rec)
    with pytest.raises(ValueError, match="engine must be one of"):
        views.verdict_table("sglang", rec)


def test_the_speed_tables_print_what_the_speed_recording_holds():
    speed, real = recorded("measure-engines"), recorded("measure-real")
    for weights in ("Q4_K_M", "F32"):
        table = views.speed_table(weights, speed).splitlines()
        for r in (r for r in speed.runs if r.weights == weights):
            row = next(line for line in table if line.split()[:2] == [r.task, r.mode])
            assert f"{r.speedup:.2f}" in row and f"{r.predicted:.2f}" in row and f"{r.ms_per_token:.0f}" in row
    terms = views.speed_terms_table(speed)
    assert all(f"{t.c_d:.2f}" in terms and f"{t.c_v[3]:.2f}" in terms and f"{t.c_v_d[3]:.2f}" in terms
               for t in speed.terms)
    both = views.lab_and_engine_table(speed, real).splitlines()
    for task in speed.prompts:
        lab = real.run(task, "model")
        row = next(i for i, line in enumerate(both) if line.startswith(task))
        assert f"{lab.T_1 * 1000:.0f}" in both[row] and f"{lab.measured:.2f}" in both[row]
        assert f"{speed.run('F32', task, 'draft').speedup:.2f}" in "".join(both[row:row + 3])
    with pytest.raises(ValueError, match="weights must be one of"):
        views.speed_table("Q8_0", speed)


def test_the_speed_figure_draws_one_panel_per_draft():
    fig = views.plot_engine_speed()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    bars = [p.get_height() for p in fig.axes[0].patches]
    speed = recorded("measure-engines")
    assert any(abs(h - speed.run("Q4_K_M", "code", "draft").speedup) < 1e-12 for h in bars)
