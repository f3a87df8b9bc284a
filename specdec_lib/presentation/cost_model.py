"""Act IV figures: where the cost equation S(k) = E[N(k)] / (k c_d + c_v(k)) says speculation pays.

Pure plotting functions (keyword arguments, the post's parameters as defaults, a fresh Figure each),
one slider view built from them, and FIGURES for `make figures`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from matplotlib.colors import TwoSlopeNorm

from .. import cost
from .._checks import check_int, check_real
from ..accounting import expected_tokens
from ..lab.batch_cost import LinearCost
from ..lab.recordings import recorded
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = [
    "SLOWER_GID", "PARITY_GID", "BEST_K_GID", "DRAFT_GID", "VERIFY_GID", "OVERHEAD_GID", "PLAIN_GID", "LANE_END_GID",
    "MEASURED_GID", "ILLUSTRATIVE_GID", "MEMORY_BOUND", "COMPUTE_BOUND", "plot_round_timeline", "ALPHAS_FINE",
    "C_DS_FINE", "plot_speedup_heatmap", "plot_k_sweep", "plot_batch_regime", "cost_explorer", "FIGURES"
]

SLOWER_GID = "slower_than_plain"  # the hatched region S < 1
PARITY_GID = "parity"  # the contour S = 1
BEST_K_GID = "best_k"  # markers / labels of the best draft length
DRAFT_GID, VERIFY_GID, OVERHEAD_GID = "draft_step", "verification", "overhead"  # the speculative lane's bars
PLAIN_GID = "plain_step"  # the plain-decoding lane's bars, one per target step
LANE_END_GID = "lane_end"  # the tick where each lane ends
MEASURED_GID, ILLUSTRATIVE_GID = "measured", "illustrative"  # c_v(k; B) as measured; the notebook's two slopes


MEMORY_BOUND = LinearCost(1.0, 0.05)  # the post's k sweep: k extra positions cost almost nothing
COMPUTE_BOUND = LinearCost(1.0, 0.5)  # illustrative only: each extra position costs half a decode step


def _label(c_v) -> str:
    """How a c_v (number, LinearCost or function) reads in a title."""
    if isinstance(c_v, (int, float)):
        return f"{c_v:g}"
    return str(c_v) if isinstance(c_v, LinearCost) else getattr(c_v, "__name__", "c_v(k)")


def plot_round_timeline(*, k: int = 4, c_d: float = 0.15, c_v: float | Callable[[int], float] = 1.6,
                        alpha: float = 0.8, overhead: float = 0.0):
    """One speculative round against plain decoding for the same expected tokens, on one clock in units of T_1."""
    k = check_int("k", k, minimum=1)
    c_d = check_real("c_d", c_d, low=0.0, high=math.inf, high_open=True)
    overhead = check_real("overhead", overhead, low=0.0, high=math.inf, high_open=True)
    c_v_k = check_real("c_v(k)" if callable(c_v) else "c_v", c_v(k) if callable(c_v) else c_v,
                       low=0.0, high=math.inf, low_open=True, high_open=True)
    e_n = expected_tokens(alpha, k)  # validates alpha
    speculative = k * c_d + c_v_k + overhead  # the top lane's length
    fig, ax = new_figure(width=6.4, height=2.8)
    ax.grid(False)
    ax.grid(True, axis="x", alpha=0.3)
    spec_y, plain_y, h = 1.0, 0.0, 0.5
    for j in range(k):
        ax.barh(spec_y, c_d, left=j * c_d, height=h, color=COLORS["draft"], edgecolor="white", gid=DRAFT_GID)
    ax.barh(spec_y, c_v_k, left=k * c_d, height=h, color=COLORS["target"], edgecolor="white", gid=VERIFY_GID)
    ax.text(k * c_d + c_v_k / 2, spec_y, f"verify\nc_v = {c_v_k:g}", ha="center", va="center", fontsize=8,
            color="white")
    if overhead > 0:
        ax.barh(spec_y, overhead, left=k * c_d + c_v_k, height=h, color=COLORS["neutral"], edgecolor="white",
                gid=OVERHEAD_GID)
        ax.text(k * c_d + c_v_k + overhead / 2, spec_y + h / 2 + 0.05, "O", ha="center", va="bottom", fontsize=8)
    ax.text(0.0, spec_y + h / 2 + 0.05, f"{k} draft steps × c_d = {c_d:g}", ha="left", va="bottom", fontsize=8)
    steps = [1.0] * int(e_n) + ([e_n - int(e_n)] if e_n > int(e_n) else [])  # E[N(k)] steps of T_1, last partial
    for j, width in enumerate(steps):
        ax.barh(plain_y, width, left=float(j), height=h, color=COLORS["target"], alpha=0.45, edgecolor="white",
                gid=PLAIN_GID)
    for y, end, what in ((spec_y, speculative, f"round ends at {speculative:.2f} T_1\nretires E[N({k})] = "),
                         (plain_y, e_n, f"plain ends at {e_n:.2f} T_1\nafter one token per step: ")):
        ax.plot([end, end], [y - 0.4, y + 0.4], color="black", linewidth=1.5, gid=LANE_END_GID)
        ax.annotate(f"{what}{e_n:.2f} tokens", (end, y), xytext=(6, 0),
                    textcoords="offset points", ha="left", va="center", fontsize=8)
    ax.set_xlim(0, max(speculative, e_n) * 1.45)
    ax.set_ylim(-0.5, 1.75)
    ax.set_yticks([plain_y, spec_y], ["plain decoding", "speculative\nround"])
    ax.set_xlabel("time (units of T_1, one ordinary target decode step)")
    extra = f", O = {overhead:g}" if overhead > 0 else ""
    ax.set_title(f"α = {alpha:g}, k = {k}{extra}: S = {e_n:.2f} / {speculative:.2f} = {e_n / speculative:.2f}",
                 fontsize=10)
    return fig


ALPHAS_FINE = [round(0.30 + 0.01 * i, 2) for i in range(66)]  # the heat map's rows: alpha 0.30 .. 0.95
C_DS_FINE = [round(0.01 * i, 2) for i in range(51)]  # its columns: c_d 0.00 .. 0.50


def plot_speedup_heatmap(*, k: int = 8, c_v: float | Callable[[int], float] = 1.6,
                         alphas: Sequence[float] | None = None, c_ds: Sequence[float] | None = None,
                         point: tuple[float, float] | None = None, k_max: int = 32, overhead: float = 0.0):
    """Speedup S(k) over alpha (rows) x c_d (columns); S < 1 hatched, S = 1 contoured.

    point = (alpha, c_d) marks one configuration and annotates its S(k) and its best draft length
    in 0..k_max at the same c_v and overhead (O, in units of T_1).
    """
    alphas = ALPHAS_FINE if alphas is None else list(alphas)
    c_ds = C_DS_FINE if c_ds is None else list(c_ds)
    grid = cost.speedup_grid(alphas, c_ds, k=k, c_v=c_v, overhead=overhead)  # (A, C) float64
    fig, ax = new_figure(width=6.4, height=4.2)
    ax.grid(False)
    lo, hi = float(grid.min()), float(grid.max())
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.99), vmax=max(hi, 1.01))  # white at parity
    mesh = ax.pcolormesh(c_ds, alphas, grid.numpy(), cmap="RdBu", norm=norm, shading="nearest")
    bar = fig.colorbar(mesh, ax=ax, label=f"speedup S({k})")
    ticks = []  # 1 always; others only where they do not crowd their neighbours on the bar
    for t in (1, 0.75, 0.5, 0.25, 1.5, 2, 3, 4, 6, 8, 12, 16):
        if norm.vmin <= t <= norm.vmax and all(abs(float(norm(t)) - float(norm(u))) >= 0.08 for u in ticks):
            ticks.append(t)
    bar.set_ticks(sorted(ticks))
    bar.ax.yaxis.set_major_formatter("{x:g}")
    if lo < 1.0 < hi:
        slower = ax.contourf(c_ds, alphas, grid.numpy(), levels=[lo - 1.0, 1.0], colors="none",
                             hatches=["//"])
        slower.set_gid(SLOWER_GID)
        slower.set_hatchcolor(COLORS["wrong"])
        slower.set_linewidth(0)
        parity = ax.contour(c_ds, alphas, grid.numpy(), levels=[1.0], colors="black", linewidths=1.2)
        parity.set_gid(PARITY_GID)
    if point is not None:
        alpha, c_d = point
        s = cost.speedup(alpha, c_d=c_d, k=k, c_v=c_v, overhead=overhead)
        best = cost.best_k(alpha, c_d=c_d, c_v=c_v, k_max=k_max, overhead=overhead)
        ax.plot([c_d], [alpha], marker="o", markersize=8, markerfacecolor="white",
                markeredgecolor="black", linestyle="none", gid=BEST_K_GID, clip_on=False)
        right = c_d > (c_ds[0] + c_ds[-1]) / 2  # keep the label inside the axes
        low = alpha < (alphas[0] + alphas[-1]) / 2
        ax.annotate(f"S({k}) = {s:.2f}\nbest k = {best.k} (S = {best.speedup:.2f})", (c_d, alpha),
                    xytext=(-8 if right else 8, 8 if low else -8), textcoords="offset points", fontsize=8,
                    ha="right" if right else "left", va="bottom" if low else "top",
                    bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85})
    ax.set_xlabel("draft cost c_d (target decode steps per draft step)")
    ax.set_ylabel("conditional acceptance α")
    setting = f"c_v(k) = {_label(c_v)}" if callable(c_v) else f"c_v = {_label(c_v)}"
    setting += f", O = {overhead:g}" if overhead > 0 else ""
    ax.set_title(f"S(k) at k = {k}, {setting}\nhatched below the S = 1 line: slower than plain decoding",
                 fontsize=10)
    return fig


def plot_k_sweep(*, alphas: Sequence[float] = (0.5, 0.7, 0.9), c_d: float = 0.15,
                 c_v: float | Callable[[int], float] = MEMORY_BOUND, k_max: int = 32):
    """S(k) against k = 1..k_max for each alpha (log2 axis), the best k of each curve marked."""
    ks = list(range(1, k_max + 1))
    fig, ax = new_figure()
    palette = [COLORS["target"], COLORS["draft"], COLORS["overlap"], COLORS["neutral"], COLORS["wrong"]]
    for i, alpha in enumerate(alphas):
        best = cost.best_k(alpha, c_d=c_d, c_v=c_v, k_max=k_max)  # speedups[k] for k = 0..k_max
        color = palette[i % len(palette)]
        note = f"best k = {best.k}" if best.k else "best k = 0: do not speculate"
        ax.plot(ks, best.speedups[1:], color=color, marker=".", label=f"α = {alpha:g}  ({note})")
        if best.k:  # k = 0 (plain decoding) lies off this axis; the legend says so
            ax.plot([best.k], [best.speedup], marker="*", markersize=12, color=color,
                    linestyle="none", gid=BEST_K_GID)
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", gid=PARITY_GID)
    ax.set_xscale("log", base=2)
    ax.set_xticks([2 ** j for j in range(k_max.bit_length())])  # 1, 2, 4, ... <= k_max
    ax.get_xaxis().set_major_formatter("{x:g}")
    ax.set_xlabel("draft length k")
    ax.set_ylabel("speedup S(k)")
    ax.set_title(f"S(k) at c_d = {c_d:g}, c_v(k) = {_label(c_v)}  (star: best k; dashed: plain)", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def plot_batch_regime(batch):
    """Left: c_v(k; B) measured per batch size B, its fitted line, the two illustrative slopes. Right: best k by B."""
    fig, (ax, bx) = new_figure(2, width=9.6, height=3.6)
    palette = [COLORS["target"], COLORS["draft"], COLORS["overlap"], COLORS["wrong"], COLORS["neutral"], "#9467bd"]
    ks = [0] + list(batch.ks)
    for b, B in enumerate(batch.batches):
        color = palette[b % len(palette)]
        c0, slope = batch.fits[b]
        ax.plot(batch.ks, batch.c_v[b], marker="o", linestyle="none", color=color, gid=MEASURED_GID)
        ax.plot(ks, [c0 + slope * k for k in ks], color=color, label=f"B = {B}: {c0:.2f} + {slope:.3f} k")
    for illustrative, style in ((MEMORY_BOUND, ":"), (COMPUTE_BOUND, "--")):
        ax.plot(ks, [illustrative(k) for k in ks], color="black", linestyle=style, gid=ILLUSTRATIVE_GID,
                label=f"illustrative: {illustrative}")
    ax.set_xlabel("draft length k")
    ax.set_ylabel("c_v(k; B), in T_1(B)")
    ax.set_title("one target pass over B x (k+1) positions, measured", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    best = [x.k for x in batch.best]
    bx.plot(batch.batches, best, color=COLORS["target"], marker="*", markersize=12, gid=BEST_K_GID)
    for B, x in zip(batch.batches, batch.best):
        bx.annotate(f"S = {x.speedup:.2f}", (B, x.k), xytext=(0, 8), textcoords="offset points", ha="center",
                    fontsize=8)
    bx.set_xscale("log", base=2)
    bx.set_xticks(batch.batches)
    bx.get_xaxis().set_major_formatter("{x:g}")
    bx.set_ylim(-0.5, max(best) + 1.5)
    bx.set_xlabel("batch size B")
    bx.set_ylabel("best k (0 = do not speculate)")
    bx.set_title(f"best k at α = {batch.alpha:.2f}, c_d = {batch.c_d:.3f}", fontsize=10)
    return fig


def cost_explorer(*, alpha: float = 0.8, k: int = 8, c_d: float = 0.15, c_v: float = 1.6, b: float = 0.0,
                  overhead: float = 0.0, k_max: int = 32):
    """Sliders for alpha, k, c_d, c_v(k) = c_v + b k and the overhead O over plot_speedup_heatmap, with the best k."""
    import ipywidgets as widgets

    sliders = {
        "alpha": widgets.FloatSlider(value=alpha, min=0.30, max=0.95, step=0.01, description="α"),
        "k": widgets.IntSlider(value=k, min=1, max=k_max, step=1, description="k"),
        "c_d": widgets.FloatSlider(value=c_d, min=0.0, max=0.5, step=0.01, description="c_d"),
        "c_v": widgets.FloatSlider(value=c_v, min=1.0, max=4.0, step=0.1, description="c_v"),
        "b": widgets.FloatSlider(value=b, min=0.0, max=0.5, step=0.01, description="b",
                                 tooltip="slope of the verification cost: c_v(k) = c_v + b k"),
        "overhead": widgets.FloatSlider(value=overhead, min=0.0, max=0.5, step=0.01, description="O",
                                        tooltip="per-round overhead, in units of T_1"),
    }

    def render(alpha: float, k: int, c_d: float, c_v: float, b: float, overhead: float):
        c_v_k = c_v if b == 0 else LinearCost(c_v, b)  # b = 0: the constant c_v, titled as before
        best = cost.best_k(alpha, c_d=c_d, c_v=c_v_k, k_max=k_max, overhead=overhead)
        s = cost.speedup(alpha, c_d=c_d, k=k, c_v=c_v_k, overhead=overhead)
        verdict = "faster" if s >= 1 else "SLOWER"
        setting = f"c_v = {c_v:.1f}" if b == 0 else f"c_v(k) = {c_v:.1f} + {b:.2f} k"
        setting += f", O = {overhead:.2f}" if overhead > 0 else ""
        text = (f"α = {alpha:.2f}, c_d = {c_d:.2f}, {setting}: S({k}) = {s:.2f}x ({verdict} than plain); "
                f"best k in 0..{k_max} = {best.k} with S = {best.speedup:.2f}x")
        return plot_speedup_heatmap(k=k, c_v=c_v_k, point=(alpha, c_d), k_max=k_max, overhead=overhead), text

    return explorer(render, sliders, rows=[["alpha", "k"], ["c_d", "c_v"], ["b", "overhead"]])


def _recorded_batch():
    """The batch regime of the lab's recorded `make measure` run (lab.recordings.recorded("measure"))."""
    return recorded("measure").batch


FIGURES = {
    "act4_round_timeline": lambda: plot_round_timeline(),
    "act4_speedup_heatmap": lambda: plot_speedup_heatmap(point=(0.8, 0.40)),  # the post's 0.90! cell
    "act4_k_sweep": lambda: plot_k_sweep(),
    "act4_k_sweep_compute_bound": lambda: plot_k_sweep(c_v=COMPUTE_BOUND),
    "act4_batch_regime": lambda: plot_batch_regime(_recorded_batch()),
}
