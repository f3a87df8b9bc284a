"""The shared slider machinery: PNG messages, explorers that redraw, and display(fig) as PNG in IPython."""
import base64

import ipywidgets
from matplotlib.figure import Figure

from specdec_lib.presentation import widgets
from specdec_lib.presentation.style import new_figure


def line_figure(slope: float = 1.0) -> Figure:
    fig, ax = new_figure()
    ax.plot([0, 1], [0, slope])
    ax.set_title(f"slope {slope:g}")
    return fig


def test_figure_outputs_are_png_messages():
    image, text = widgets.figure_outputs(line_figure(), "hello")
    assert image["output_type"] == "display_data" and image["data"]["text/plain"].startswith("<Figure")
    assert base64.b64decode(image["data"]["image/png"])[:4] == b"\x89PNG"
    assert text == {"output_type": "stream", "name": "stdout", "text": "hello\n"}
    assert len(widgets.figure_outputs(line_figure())) == 1


def test_explorer_redraws_on_every_control(monkeypatch):
    monkeypatch.setattr(widgets, "png_bytes", lambda fig: fig.axes[0].get_title().encode())
    slider = ipywidgets.FloatSlider(value=1.0, min=0, max=3)
    box = widgets.explorer(lambda slope: (line_figure(slope), f"s={slope:g}"), {"slope": slider})
    out = box.children[-1]

    def shown():
        return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode(), out.outputs[1]["text"]

    assert shown() == ("slope 1", "s=1\n")
    slider.value = 2.5
    assert shown() == ("slope 2.5", "s=2.5\n")


def test_display_formatter_renders_figures_as_png():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        widgets.register_png_formatter()
        data, _ = shell.display_formatter.format(line_figure())
        assert data["image/png"][:4] == b"\x89PNG" and data["text/plain"].startswith("<Figure")
    finally:
        InteractiveShell.clear_instance()
