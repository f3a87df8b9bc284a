"""Lab figures: the cost equation's predicted speedup beside the clock's, and where a round's time goes.

The plots take a SpeedupTable (sd.measure_speedup). FIGURES draws a recorded table (REFERENCE, from
`make measure` on the reference CPU), so `make figures` stays deterministic and never times anything.
"""
from __future__ import annotations

from ..lab.measure import SpeedupTable
from .style import COLORS, new_figure

PARITY_GID = "parity"  # the dashed line S = 1
MEASURED_GID = "measured"  # the measured speedups

# `make measure` on the reference machine: a 2-core AMD EPYC VM (load average 0.8 before, 1.0 after), 1 thread,
# temperature 1, 6 held-out prompts x 64 tokens, 7 repeats (42 pairs per k), 119 s; max relative error 0.100.
REFERENCE = SpeedupTable(
    ks=[1, 2, 3, 4, 5, 6, 7, 8], T_1=0.002123, T_1_range=(0.00124, 0.003256),
    c_d=[0.338, 0.304, 0.288, 0.283, 0.274, 0.279, 0.269, 0.271],
    c_v=[1.346, 1.445, 1.525, 1.564, 1.598, 1.619, 1.584, 1.688],
    e_n=[1.677, 2.107, 2.422, 2.622, 2.838, 2.824, 2.821, 3.013],
    alpha=[0.61, 0.71, 0.73, 0.72, 0.77, 0.78, 0.84, 0.83],
    predicted=[0.995, 1.026, 1.014, 0.973, 0.957, 0.858, 0.814, 0.782],
    measured=[0.921, 0.933, 0.999, 0.939, 0.913, 0.868, 0.760, 0.765],
    measured_range=[(0.857, 1.026), (0.882, 1.195), (0.921, 1.157), (0.827, 0.976), (0.842, 0.996), (0.731, 0.938),
                    (0.646, 0.920), (0.671, 0.874)],
    overhead=[0.129, 0.166, 0.016, 0.154, 0.157, 0.117, 0.156, 0.126], plain_step=0.987,
    repeats=7, pairs=42,
)


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
