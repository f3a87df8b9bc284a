"""Slider views: controls above an Output that shows a plotting function's Figure, with or without a kernel."""
from __future__ import annotations

import base64
import io

from matplotlib.figure import Figure

__all__ = ["png_bytes", "figure_outputs", "explorer", "register_png_formatter"]


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes at its own dpi."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def figure_outputs(fig: Figure, text: str | None = None) -> tuple[dict, ...]:
    """Output messages for a figure (and an optional line of text): what an Output widget stores."""
    image = {"output_type": "display_data", "metadata": {},
             "data": {"image/png": base64.b64encode(png_bytes(fig)).decode("ascii"), "text/plain": repr(fig)}}
    if text is None:
        return (image,)
    return (image, {"output_type": "stream", "name": "stdout", "text": text.rstrip("\n") + "\n"})


def explorer(render, controls: dict, *, rows: list[list[str]] | None = None):
    """A VBox of controls over an Output showing render(**values), redrawn on every change.

    render returns a Figure or (Figure, text); controls maps render's keyword names to ipywidgets controls;
    rows groups control names into HBoxes (default: one row). Outputs are set directly, so the view updates
    even when no kernel is attached (tests, static exports).
    """
    import ipywidgets as widgets

    out = widgets.Output()

    def redraw(_change=None):
        shown = render(**{name: c.value for name, c in controls.items()})
        fig, text = shown if isinstance(shown, tuple) else (shown, None)
        out.outputs = figure_outputs(fig, text)

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    rows = rows or [list(controls)]
    return widgets.VBox([widgets.HBox([controls[name] for name in row]) for row in rows] + [out])


def register_png_formatter() -> None:
    """Let display(fig) show a pyplot-free Figure as PNG in a running IPython; a no-op elsewhere.

    The inline backend registers its own formatter only once pyplot is imported, and the course never imports it.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, png_bytes)
