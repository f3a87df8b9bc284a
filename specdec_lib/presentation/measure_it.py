"""Lab figures: the cost equation's predicted speedup beside the clock's, and where a round's time goes.

The plots take a SpeedupTable (sd.measure_speedup). FIGURES draws a recorded table (REFERENCE, from
`make measure` on the reference CPU), so `make figures` stays deterministic and never times anything.
"""
from __future__ import annotations

from ..measure import SpeedupTable
from .style import COLORS, new_figure

PARITY_GID = "parity"  # the dashed line S = 1
MEASURED_GID = "measured"  # the measured speedups

# `make measure` on the reference machine: a 2-core AMD EPYC VM shared with other jobs (load average 3-6), 1 thread,
# temperature 1, 4 held-out prompts x 128 tokens, medians of 5 repeats. The load made the terms timed alone noisy.
REFERENCE = SpeedupTable(
    ks=[1, 2, 3, 4, 5, 6, 7, 8], T_1=3.067e-3,
    c_d=[0.214, 0.191, 0.583, 0.628, 0.531, 0.393, 0.349, 0.322],
    c_v=[2.161, 2.358, 2.292, 2.331, 2.299, 2.754, 2.352, 2.766],
    e_n=[1.798, 2.488, 3.008, 3.320, 3.721, 4.122, 4.281, 4.421],
    alpha=[0.84, 0.77, 0.91, 0.82, 0.80, 0.90, 0.86, 0.94],
    overhead=[1.293, 1.082, 0.791, 0.887, 0.122, 1.194, 0.683, 1.201], plain_step=1.460,
    predicted=[0.757, 0.908, 0.744, 0.686, 0.751, 0.807, 0.893, 0.828],
    predicted_with_overhead=[1.021, 1.078, 1.098, 1.289, 1.472, 1.169, 1.212, 1.179],
    measured=[1.021, 1.078, 1.098, 1.289, 1.472, 1.169, 1.212, 1.179], repeats=5,
)


def plot_measured_speedup(table: SpeedupTable):
    """Left: predicted S(k) and measured S(k) against k. Right: a round's cost in T_1."""
    fig, (ax, bx) = new_figure(2, width=9.6, height=3.6)
    ks = table.ks
    ax.plot(ks, table.predicted, color=COLORS["target"], marker="o", label="equation: E[N] / (k c_d + c_v(k))")
    ax.plot(ks, table.measured, color=COLORS["draft"], marker="s", linestyle="none", markersize=7,
            label="measured (tokens/s ratio)", gid=MEASURED_GID)
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", gid=PARITY_GID)
    ax.set_xticks(ks)
    ax.set_xlabel("draft length k")
    ax.set_ylabel("speedup S(k)")
    ax.set_title(f"predicted vs measured (max rel. error {table.max_rel_error:.2f})", fontsize=10)
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


FIGURES = {
    "lab_measured_speedup": lambda: plot_measured_speedup(REFERENCE),
}
