"""Act II presentation: the decoder-TV bars, the sequence-distribution plot, the dropdown view, FIGURES."""
import matplotlib
import pytest
import torch
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.presentation import block_decoder as views

matplotlib.use("Agg")
N_SMALL = 2_000  # enough to exercise the code paths quickly


@pytest.fixture(scope="module")
def exact():
    ch = sd.reference_chain()
    return sd.exact_sequence_distribution(ch.P, ch.start, ch.horizon)


def test_plot_decoder_tv_bars_threshold_and_colours():
    fig = views.plot_decoder_tv(labels=["a", "b", "c"], tvs=[0.005, 0.3, 0.9], threshold=0.01)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 3
    assert [round(b.get_height(), 3) for b in bars] == [0.005, 0.3, 0.9]
    assert bars[0].get_facecolor() != bars[1].get_facecolor() == bars[2].get_facecolor()  # above threshold: red
    assert any(line.get_ydata()[0] == 0.01 for line in ax.get_lines())  # the threshold line
    assert ax.get_title() == "Sequence-level TV by decoder"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]


def test_plot_decoder_tv_length_mismatch():
    with pytest.raises(ValueError, match="same length"):
        views.plot_decoder_tv(labels=["a"], tvs=[0.1, 0.2], threshold=0.01)


def test_plot_sequence_distributions(exact):
    emp = sd.empirical_sequences(views.sample_sequences("correct", n=N_SMALL), 5)
    fig = views.plot_sequence_distributions(exact=exact, empirical_by_label={"correct": emp, "exact copy": exact})
    ax = fig.axes[0]
    assert len(ax.patches) == 125
    assert len(ax.get_lines()) == 2
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "exact copy (TV 0.0000)" in labels and "exact target" in labels
    heights = [b.get_height() for b in ax.patches]
    assert heights == sorted(heights, reverse=True)


def test_plot_sequence_distributions_shape_check(exact):
    with pytest.raises(ValueError, match="shape"):
        views.plot_sequence_distributions(exact=exact, empirical_by_label={"bad": torch.ones(5, 5) / 25})


def test_tv_threshold_shrinks_with_n(exact):
    assert views.tv_noise_bound(exact, 200_000) < views.tv_noise_bound(exact, 60_000) < 0.03


def test_decoder_explorer_updates_output(fast_png):
    box = views.decoder_explorer(n=N_SMALL)
    row, out = box.children
    dropdown = row.children[0]
    before = out.outputs
    assert before and "image/png" in before[0]["data"]
    dropdown.value = "correct"
    assert out.outputs != before


@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name, monkeypatch):
    monkeypatch.setattr(views, "N", N_SMALL)  # keep the default-path runs cheap
    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure) and fig.axes
    if name == "act2_decoder_tv":  # direct sampling and the five decoders; the three broken ones in red
        colors = [b.get_facecolor() for b in fig.axes[0].patches]
        assert len(colors) == 1 + len(sd.DECODER_MODES)
        assert colors[0] == colors[1] == colors[2] != colors[3] == colors[4] == colors[5]


def test_tv_convergence_lines_and_exact_markers():
    runs = {m: views.sample_sequences(m, n=2_000, seed=1) for m in ("correct", "off_by_one")}
    fig = views.plot_tv_convergence(runs=runs, exact_tv={"correct": 0.0, "off_by_one": 0.8966}, sizes=[500, 2_000])
    ax = fig.axes[0]
    solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(solid) == 3  # one per decoder plus the noise floor
    assert [line.get_ydata()[0] for line in dashed] == [0.8966]  # only the broken decoder has an exact TV above 0
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert views.tv_by_sample_size(runs["correct"], views._exact(), [2_000])[0] < 0.1
