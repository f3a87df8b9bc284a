"""Lab figures: the cost equation's predicted speedup beside the clock's, and where a round's time goes.

The plots take a SpeedupTable (sd.measure_speedup). FIGURES draws a recorded table (REFERENCE, from
`make measure` on the reference CPU), so `make figures` stays deterministic and never times anything.
"""
from __future__ import annotations

from ..measure import SpeedupTable
from .style import COLORS, new_figure

PARITY_GID = "parity"  # the dashed line S = 1
MEASURED_GID = "measured"  # the measured speedups

# `make measure` on the reference machine: a 2-core AMD EPYC VM (load average 0.9 before and after), 1 thread,
# temperature 1, 6 held-out prompts x 64 tokens, 5 repeats (30 pairs per k); max relative error 0.077.
REFERENCE = SpeedupTable(
    ks=[1, 2, 3, 4, 5, 6, 7, 8], T_1=0.002315, T_1_range=(0.001362, 0.003681),
    c_d=[0.326, 0.304, 0.286, 0.285, 0.266, 0.269, 0.267, 0.263],
    c_v=[1.350, 1.426, 1.403, 1.547, 1.557, 1.589, 1.595, 1.630],
    e_n=[1.681, 2.117, 2.418, 2.637, 2.857, 2.755, 2.783, 3.097],
    alpha=[0.63, 0.73, 0.73, 0.72, 0.76, 0.80, 0.83, 0.80],
    predicted=[1.003, 1.041, 1.070, 0.981, 0.990, 0.859, 0.803, 0.829],
    measured=[1.009, 1.003, 1.040, 0.990, 0.919, 0.894, 0.774, 0.827],
    measured_iqr=[(0.913, 1.093), (0.937, 1.146), (0.942, 1.143), (0.855, 1.105), (0.797, 1.119), (0.714, 1.035), (0.641, 0.999), (0.702, 1.012)],
    overhead=[-0.022, 0.064, 0.175, 0.012, 0.137, 0.029, 0.105, 0.036], plain_step=0.989,
    repeats=5, pairs=30,
)


def plot_measured_speedup(table: SpeedupTable):
    """Left: predicted S(k) and measured S(k) against k. Right: a round's cost in T_1."""
    fig, (ax, bx) = new_figure(2, width=9.6, height=3.6)
    ks = table.ks
    ax.plot(ks, table.predicted, color=COLORS["target"], marker="o", label="equation: E[N] / (k c_d + c_v(k))")
    lower = [m - q1 for m, (q1, _) in zip(table.measured, table.measured_iqr)]
    upper = [q3 - m for m, (_, q3) in zip(table.measured, table.measured_iqr)]
    ax.errorbar(ks, table.measured, yerr=[lower, upper], color=COLORS["draft"], marker="s", linestyle="none",
                markersize=7, capsize=3, label="measured (median and quartiles of pairs)", gid=MEASURED_GID)
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
