"""Lab figures: the cost equation beside the clock for every draft, the (c_d, alpha) plane, a what-if panel.

The plots read a MeasureRecording: every SpeedupTable and the batch fit of one `make measure` run, written by
`benchmarks/measure_speedup.py --json`, committed as specdec_lib/data/measure_reference.json and read by
lab/recordings.py (RECORDED), so figures and notebooks print the same numbers on every machine and never time
anything.
"""
from __future__ import annotations

import math

import torch

from .._checks import check_int, check_real
from ..accounting import alpha_from_tokens
from ..cost import speedup
from ..lab.drafters import as_drafter
from ..lab.generation import GREEDY, generate_plain, verify_round
from ..lab.measure import SpeedupTable
from ..lab.recordings import MeasureRecording, recorded
from ..lab.transformer import KVCache
from .cost_model import plot_speedup_heatmap
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = [
    "PARITY_GID", "MEASURED_GID", "DRAFTS_GID", "RECORDED", "constant_guess", "draft_points", "drafts_summary",
    "plot_measured_speedup", "plot_drafts_plane", "plot_what_if", "what_if_explorer", "StaleCache",
    "generate_without_target_rollback", "FIGURES"
]

PARITY_GID = "parity"  # the dashed line S = 1
MEASURED_GID = "measured"  # the measured speedups
DRAFTS_GID = "drafts"  # the recorded drafts on the (c_d, alpha) plane
RECORDED = recorded("measure")  # the committed run: lab.recordings.recorded("measure")


def constant_guess(measured) -> tuple[float, float]:
    """(c, its max relative error): the one number minimising max |c - m| / m, the harmonic mean of min and max."""
    lo, hi = min(measured), max(measured)
    return 2 * lo * hi / (lo + hi), (hi - lo) / (hi + lo)


def draft_points(recording: MeasureRecording, k: int) -> list[dict]:
    """Each draft measured at k: its name, c_d, alpha (from E[N(k)]), E[N], predicted and measured S."""
    k = check_int("k", k, minimum=1)
    points = [{"draft": t.draft, "c_d": t.c_d[i], "alpha": alpha_from_tokens(t.e_n[i], k), "e_n": t.e_n[i],
               "predicted": t.predicted[i], "measured": t.measured[i]}
              for t in recording.tables if k in t.ks for i in [t.ks.index(k)]]
    if not points:
        recorded = sorted({k for t in recording.tables for k in t.ks})
        raise ValueError(f"k must be a recorded draft length, one of {recorded}; got {k}")
    return points


def drafts_summary(recording: MeasureRecording, k: int) -> str:
    """A text table, one line per draft at k: c_d, alpha, E[N], predicted and measured S."""
    lines = [f"{'draft':<11}{'c_d':>7}{'alpha':>7}{'E[N]':>7}{'pred S':>8}{'meas S':>8}   (k = {k})"]
    for p in draft_points(recording, k):
        lines.append(f"{p['draft']:<11}{p['c_d']:>7.3f}{p['alpha']:>7.3f}{p['e_n']:>7.3f}{p['predicted']:>8.3f}"
                     f"{p['measured']:>8.3f}")
    return "\n".join(lines)


def plot_measured_speedup(table: SpeedupTable):
    """Left: predicted S(k) and measured S(k) against k. Right: a round's cost in T_1."""
    fig, (ax, bx) = new_figure(2, width=9.6, height=3.6)
    ks = table.ks
    ax.plot(ks, table.predicted, color=COLORS["target"], marker="o", label="equation: E[N] / (k c_d + c_v(k))")
    lower = [m - lo for m, (lo, _) in zip(table.measured, table.measured_range)]
    upper = [hi - m for m, (_, hi) in zip(table.measured, table.measured_range)]
    ax.errorbar(ks, table.measured, yerr=[lower, upper], color=COLORS["draft"], marker="s", linestyle="none",
                markersize=7, capsize=3, label="measured (median and range of repeats)", gid=MEASURED_GID)
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", gid=PARITY_GID)
    ax.set_xticks(ks)
    ax.set_xlabel("draft length k")
    ax.set_ylabel("speedup S(k)")
    ax.set_title(f"draft {table.draft}: predicted vs measured (max rel. error {table.max_rel_error:.2f})",
                 fontsize=10)
    ax.legend(fontsize=8)
    draft = [k * c for k, c in zip(ks, table.c_d)]
    bx.bar(ks, draft, color=COLORS["draft"], label="k c_d (draft)")
    bx.bar(ks, table.c_v, bottom=draft, color=COLORS["target"], label="c_v(k) (verify)")
    bottom = [d + v for d, v in zip(draft, table.c_v)]
    bx.bar(ks, [max(o, 0.0) for o in table.overhead], bottom=bottom, color=COLORS["neutral"], label="O(k)")
    bx.plot(ks, table.e_n, color=COLORS["overlap"], marker="o", label="E[N(k)] (tokens per round)")
    bx.set_xticks(ks)
    bx.set_xlabel("draft length k")
    bx.set_ylabel("cost of a round, in T_1")
    bx.set_title("a round's cost against what it retires", fontsize=10)
    bx.legend(fontsize=8)
    return fig


def _plane(recording: MeasureRecording, k: int, point=None):
    """The S(k) heat map at the recording's c_v(k) line over (c_d, alpha), every draft measured at k marked."""
    points = draft_points(recording, k) if k in {k for t in recording.tables for k in t.ks} else []
    top = max([0.8] + [1.1 * p["c_d"] for p in points])
    fig = plot_speedup_heatmap(k=k, c_v=recording.c_v_line(), alphas=[0.05 + 0.01 * i for i in range(91)],
                               c_ds=[0.01 * i for i in range(math.ceil(top * 100) + 1)], point=point, k_max=16)
    ax = fig.axes[0]
    if points:
        ax.plot([p["c_d"] for p in points], [p["alpha"] for p in points], marker="D", markersize=7,
                color=COLORS["draft"], markeredgecolor="black", linestyle="none", gid=DRAFTS_GID)
    for p in points:
        ax.annotate(f"{p['draft']}: measured {p['measured']:.2f}", (p["c_d"], p["alpha"]), xytext=(6, -3),
                    textcoords="offset points", fontsize=8, ha="left", va="top",
                    bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "linewidth": 0})
    return fig, points


def plot_drafts_plane(recording: MeasureRecording = RECORDED, *, k: int | None = None):
    """Each recorded draft at k as a point (c_d, alpha) over S(k), the S = 1 contour, its measured S marked."""
    t, i = recording.best()
    k = t.ks[i] if k is None else check_int("k", k, minimum=1)
    fig, _ = _plane(recording, k)
    fig.axes[0].set_title(f"every draft at k = {k}, its measured S beside it; c_v(k) = {recording.c_v_line()}\n"
                          "hatched below the S = 1 line: slower than plain decoding", fontsize=10)
    return fig


def plot_what_if(recording: MeasureRecording = RECORDED, *, c_d: float, alpha: float, k: int):
    """(figure, text): S(k) predicted at (c_d, alpha) with the recording's c_v(k) line, the drafts at k beside it."""
    k = check_int("k", k, minimum=1)
    c_d = check_real("c_d", c_d, low=0.0, high=math.inf, high_open=True)
    alpha = check_real("alpha", alpha, low=0.0, high=1.0)
    fig, points = _plane(recording, k, point=(alpha, c_d))
    line = recording.c_v_line()
    text = (f"predicted S({k}) = {speedup(alpha, c_d=c_d, k=k, c_v=line):.2f} at c_d = {c_d:.2f}, alpha = {alpha:.2f}, "
            f"c_v(k) = {line}; recorded at k = {k}: "
            + (", ".join(f"{p['draft']} {p['measured']:.2f}" for p in points) or "none"))
    return fig, text


def what_if_explorer(recording: MeasureRecording = RECORDED):
    """Sliders for c_d, alpha and k over plot_what_if, seeded with the best recorded draft's measured terms."""
    import ipywidgets as widgets

    t, i = recording.best()
    (seed,) = [p for p in draft_points(recording, t.ks[i]) if p["draft"] == t.draft]
    controls = {
        "c_d": widgets.FloatSlider(value=round(seed["c_d"], 2), min=0.0, max=0.8, step=0.01, description="c_d"),
        "alpha": widgets.FloatSlider(value=round(seed["alpha"], 2), min=0.05, max=0.95, step=0.01, description="α"),
        "k": widgets.IntSlider(value=t.ks[i], min=1, max=max(t.ks), step=1, description="k"),
    }
    return explorer(lambda c_d, alpha, k: plot_what_if(recording, c_d=c_d, alpha=alpha, k=k), controls,
                    rows=[["c_d", "alpha", "k"]])


class StaleCache(KVCache):
    """A KV cache whose rollback does nothing: rejected proposals stay in it (the bug, on purpose)."""

    def crop(self, n: int) -> None:
        pass


@torch.inference_mode()
def generate_without_target_rollback(target, draft, prompt: torch.Tensor, n_new: int, k: int) -> torch.Tensor:
    """Greedy speculative decoding built from the library's phases, with the target's cache never rolled back."""
    n_new, k = check_int("n_new", n_new, minimum=1), check_int("k", k, minimum=1)
    generate_plain(target, prompt, n_new)  # validates prompt and n_new against the target
    drafter = as_drafter(draft)
    L = prompt.numel()
    seq = prompt.new_empty(L + n_new + k + 1)  # committed tokens, room for one overshooting block
    seq[:L] = prompt
    w = target.head.weight
    t_cache = StaleCache(target.config, dtype=w.dtype, device=w.device)  # what target.new_cache() builds
    target(prompt[None, :-1], t_cache)  # (1, L-1) cached, as specdec_lib.lab.steps.prefill does
    d_state, n = drafter.start(prompt), L
    while n < L + n_new and t_cache.length + k + 1 <= t_cache.max_len:
        proposals, q_rows = drafter.propose(d_state, seq, n, k, temperature=0.0, top_k=None, generator=None)
        a, nxt = verify_round(target, t_cache, d_state, torch.cat([seq[n - 1:n], proposals]), q_rows, n=n,
                              decoding=GREEDY, drafter=drafter)
        seq[n:n + a], seq[n + a] = proposals[:a], nxt
        n += a + 1
    return seq[L:min(n, L + n_new)].clone()


FIGURES = {
    "lab_measured_speedup": lambda: plot_measured_speedup(RECORDED.table("draft")),
    "lab_drafts_plane": lambda: plot_drafts_plane(RECORDED),
}
