"""Act I figures and the temperature explorer: right artists, post's numbers in the titles, sliders redraw."""
from __future__ import annotations

import base64

import pytest
import torch
from matplotlib.figure import Figure

from specdec_lib.presentation import distribution as views
from specdec_lib.presentation import widgets

SAME = [1.000, 0.999, 0.953, 0.913, 0.890, 0.936, 0.982]
DIFFERENT = [0.036, 0.417, 0.725, 0.812, 0.918, 0.974, 0.995]


def _bars(ax):
    return [patch for container in ax.containers for patch in container]


def test_post_pair_reproduces_the_post():
    p, q = views.post_pair()
    assert [round(x, 4) for x in p.tolist()] == [0.7333, 0.0562, 0.0040, 0.1879, 0.0186]
    assert round(torch.minimum(p, q).sum().item(), 4) == 0.1623


def test_overlap_curve_matches_the_post_table():
    pairs = views.logit_pairs()
    for name, expected in (("same argmax", SAME), ("different argmax", DIFFERENT)):
        got = views.overlap_curve(*pairs[name], views.POST_TEMPERATURES)
        assert [round(x, 3) for x in got] == expected
        assert round(views.overlap_at(*pairs[name], 0.7), 3) == expected[2]


def test_shared_mass_figure():
    fig = views.plot_shared_mass()
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert len(ax.containers) == 3 and len(_bars(ax)) == 15  # p, q, min for 5 tokens
    assert "0.1623" in ax.get_title()
    heights = [b.get_height() for b in ax.containers[2]]
    assert heights == pytest.approx([0.0233, 0.0562, 0.0040, 0.0602, 0.0186], abs=1e-4)


def test_sampler_frequencies_figure_accepts_samples_or_distributions():
    p, q = views.post_pair()
    g = torch.Generator().manual_seed(0)
    freqs = {"speculative, residual on reject": views.sampling.speculative_sample(p, q, 2000, g),
             "exact": p.double()}
    fig = views.plot_sampler_frequencies(p, freqs)
    ax = fig.axes[0]
    assert len(ax.containers) == 2 and len(_bars(ax)) == 10
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "target p" in labels and "exact (TV 0.0000)" in labels


def test_overlap_vs_temperature_figure_and_marker():
    ax = views.plot_overlap_vs_temperature().axes[0]
    assert ax.get_xscale() == "log" and len(ax.lines) == 4  # a curve and the table's dots per pair
    ax = views.plot_overlap_vs_temperature(mark_T=0.3).axes[0]
    markers = [line for line in ax.lines if line.get_marker() == "D"]
    assert len(markers) == 2
    assert sorted(round(float(m.get_ydata()[0]), 3) for m in markers) == [0.417, 0.999]


def test_temperature_view_titles():
    fig = views.plot_temperature_view("different argmax", 0.1)
    assert len(fig.axes) == 2
    assert "overlap 0.036" in fig.axes[0].get_title()
    assert "overlap 0.890" in views.plot_pair_at_temperature("same argmax", 2.0).axes[0].get_title()


def test_explorer_sliders_redraw(monkeypatch):
    # the left panel's title stands in for the PNG (rendering is tested above and is the slow part)
    monkeypatch.setattr(widgets, "png_bytes", lambda fig: fig.axes[0].get_title().encode())
    box = views.temperature_explorer()
    (choose, slider), out = box.children[0].children, box.children[-1]

    def shown():
        assert len(out.outputs) == 1
        return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()

    assert shown() == "same argmax, T = 1: overlap 0.913"
    slider.value = 2.0
    assert shown() == "same argmax, T = 2: overlap 0.890"
    choose.value = "different argmax"
    assert shown() == "different argmax, T = 2: overlap 0.918"


@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name):
    assert isinstance(views.FIGURES[name](), Figure)
