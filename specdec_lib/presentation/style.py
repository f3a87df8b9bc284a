"""One look for every figure: size, dpi, colours, and a fresh Figure per call (no pyplot state)."""
from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure

__all__ = ["DPI", "WIDTH", "HEIGHT", "COLORS", "RC", "new_figure"]

DPI = 110  # also the dpi of `make figures`
WIDTH, HEIGHT = 6.4, 3.6  # inches
COLORS = {
    "target": "#1f77b4",  # p
    "draft": "#ff7f0e",  # q
    "overlap": "#2ca02c",  # min(p, q)
    "wrong": "#d62728",  # broken decoders, regions slower than plain decoding
    "neutral": "#7f7f7f",
}
RC = {"font.size": 10, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
      "grid.alpha": 0.3, "legend.frameon": False}


def new_figure(ncols: int = 1, *, width: float = WIDTH, height: float = HEIGHT):
    """A fresh (fig, axes) pair with the course style; never touches pyplot's global figure list."""
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        axes = fig.subplots(1, ncols)
    for ax in (axes if ncols > 1 else [axes]):
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(True, alpha=0.3)
    return fig, axes
