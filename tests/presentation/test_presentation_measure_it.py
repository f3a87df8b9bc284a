"""Lab presentation: the recorded run of every draft, the (c_d, alpha) plane, the what-if panel, a stale cache."""
import pytest
import torch
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.presentation import cost_model
from specdec_lib.presentation import figure_files as figures
from specdec_lib.presentation import measure_it as views

R = views.RECORDED


def _fingerprint(out) -> str:
    import base64
    return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()


def test_recording_holds_every_draft_and_the_batch_regime():
    assert R.drafts == ["draft", "draft_deep", "table", "lookup"]
    assert R.table("table").draft == "table" and len(R.measured) == sum(len(t.ks) for t in R.tables)
    assert R.batch.batches[0] == 1 and len(R.batch.best) == len(R.batch.batches)
    t, i = R.best()
    assert t.measured[i] == max(R.measured)
    with pytest.raises(ValueError, match="draft must be one of draft, draft_deep, table, lookup; got 'nope'"):
        R.table("nope")


def test_plot_measured_speedup_from_the_recording():
    fig = views.plot_measured_speedup(R.table("draft"))
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    ax = fig.axes[0]
    gids = [a.get_gid() for a in ax.get_children()]
    assert views.MEASURED_GID in gids and views.PARITY_GID in gids
    assert ax.get_title().startswith("draft draft: ") and "max rel. error" in ax.get_title()


def test_alpha_from_tokens_inverts_expected_tokens():
    for alpha, k in [(0.0, 3), (0.3, 1), (0.677, 4), (0.95, 8), (1.0, 2)]:
        assert views.alpha_from_tokens(sd.expected_tokens(alpha, k), k) == pytest.approx(alpha, abs=1e-9)
    assert views.alpha_from_tokens(1.5, 4) != pytest.approx(0.5)  # k = 4 is not the k = 1 formula
    with pytest.raises(ValueError, match=r"e_n must lie in \[1, 5"):
        views.alpha_from_tokens(5.5, 4)
    with pytest.raises(ValueError, match="k must be >= 1"):
        views.alpha_from_tokens(1.5, 0)


def test_constant_guess_balances_the_two_extremes():
    measured = [0.7, 0.9, 1.4]
    c, err = views.constant_guess(measured)
    assert (c - 0.7) / 0.7 == pytest.approx(err) == pytest.approx((1.4 - c) / 1.4)
    mean = sum(measured) / 3  # a worse constant: the arithmetic mean misses an extreme by more
    assert max(abs(mean - m) / m for m in measured) > err


def test_draft_points_are_the_tables_at_k():
    points = views.draft_points(R, 4)
    assert [p["draft"] for p in points] == R.drafts
    for p, t in zip(points, R.tables):
        i = t.ks.index(4)
        assert p["c_d"] == t.c_d[i] and p["measured"] == t.measured[i]
        assert sd.expected_tokens(p["alpha"], 4) == pytest.approx(t.e_n[i], abs=1e-9)
    with pytest.raises(ValueError, match="k must be a recorded draft length"):
        views.draft_points(R, 5)
    lines = views.drafts_summary(R, 4).splitlines()
    assert len(lines) == 1 + len(R.drafts) and lines[3].startswith("table")


def test_drafts_plane_marks_every_draft_with_its_measured_speedup():
    fig = views.plot_drafts_plane(R, k=4)
    ax = fig.axes[0]
    (marks,) = [ln for ln in ax.get_lines() if ln.get_gid() == views.DRAFTS_GID]
    points = views.draft_points(R, 4)
    assert list(marks.get_xdata()) == [p["c_d"] for p in points]
    assert list(marks.get_ydata()) == [p["alpha"] for p in points]
    texts = [t.get_text() for t in ax.texts]
    assert texts == [f"{p['draft']}: measured {p['measured']:.2f}" for p in points]
    assert cost_model.PARITY_GID in [a.get_gid() for a in ax.get_children()]  # the S = 1 contour
    assert "every draft at k = 4" in ax.get_title() and str(R.c_v_line()) in ax.get_title()
    default = views.plot_drafts_plane(R).axes[0].get_title()  # the k of the best measured speedup
    t, i = R.best()
    assert f"k = {t.ks[i]}" in default


def test_c_v_line_is_the_least_squares_fit_of_every_draft():
    line = R.c_v_line()
    ks = [k for t in R.tables for k in t.ks]
    c_v = [c for t in R.tables for c in t.c_v]
    residual = lambda a, b: sum((c - a - b * k) ** 2 for k, c in zip(ks, c_v))  # noqa: E731
    best = residual(line.base, line.slope)
    assert all(best <= residual(line.base + da, line.slope + db) + 1e-6
               for da, db in [(0.01, 0), (-0.01, 0), (0, 0.005), (0, -0.005)])


def test_plot_what_if_predicts_with_the_recorded_line():
    fig, text = views.plot_what_if(R, c_d=0.3, alpha=0.7, k=4)
    s = sd.speedup(0.7, c_d=0.3, k=4, c_v=R.c_v_line())
    assert text.startswith(f"predicted S(4) = {s:.2f} at c_d = 0.30, alpha = 0.70")
    table = R.table("table")
    assert f"table {table.measured[table.ks.index(4)]:.2f}" in text  # the clock beside the prediction
    _, text5 = views.plot_what_if(R, c_d=0.3, alpha=0.7, k=5)  # not a recorded k: nothing to compare
    assert text5.endswith("recorded at k = 5: none")
    for kwargs, message in [({"c_d": -0.1, "alpha": 0.5, "k": 2}, "c_d must lie"),
                            ({"c_d": 0.1, "alpha": 1.5, "k": 2}, "alpha must lie"),
                            ({"c_d": 0.1, "alpha": 0.5, "k": 0}, "k must be >= 1")]:
        with pytest.raises(ValueError, match=message):
            views.plot_what_if(R, **kwargs)


@pytest.mark.heavy
def test_what_if_explorer_starts_at_the_best_draft_and_every_slider_moves_it(fast_png):
    box = views.what_if_explorer(R)
    c_d, alpha, k = box.children[0].children
    out = box.children[1]
    t, i = R.best()
    assert k.value == t.ks[i] and c_d.value == round(t.c_d[i], 2)
    assert alpha.value == round(views.alpha_from_tokens(t.e_n[i], t.ks[i]), 2)
    for control, value in [(c_d, 0.4), (alpha, 0.9), (k, 2)]:
        before = out.outputs
        control.value = value
        assert out.outputs != before
    s = sd.speedup(0.9, c_d=0.4, k=2, c_v=R.c_v_line())
    assert out.outputs[1]["text"].startswith(f"predicted S(2) = {s:.2f} at c_d = 0.40, alpha = 0.90")
    assert "S(k) at k = 2" in _fingerprint(out)


@pytest.mark.heavy
def test_a_target_cache_that_is_not_rolled_back_breaks_greedy_equality():
    target, draft = sd.lab.load_pair()
    prompts = sd.lab.corpus_prompts(3, 32, seed=0)
    plain = sd.lab.generate_plain(target, prompts[1], 24)
    assert torch.equal(sd.lab.generate_speculative(target, draft, prompts[1], 24, 4), plain)  # control: rolled back
    stale = views.generate_without_target_rollback(target, draft, prompts[1], 24, 4)
    assert not torch.equal(stale, plain[:len(stale)])
    with pytest.raises(ValueError, match="k must be >= 1"):
        views.generate_without_target_rollback(target, draft, prompts[1], 24, 0)


def test_registered_for_make_figures():
    assert "measure_it" in figures.ACTS
    assert {"lab_measured_speedup", "lab_drafts_plane"} <= set(figures.all_figures())
    for name in views.FIGURES:
        assert isinstance(views.FIGURES[name](), Figure)
