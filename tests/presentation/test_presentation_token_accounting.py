"""Act III figures and sliders: the right artists at default values, sliders redraw, FIGURES build."""
from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.presentation import token_accounting as views

SMALL = dict(betas=(0.95, 0.45), weights=(0.5, 0.5), k=4, n=2_000, seed=0)  # fast stand-in for the 200,000 run


def _line(ax, label_part: str):
    """The one line of ax whose label contains label_part."""
    (line,) = [ln for ln in ax.get_lines() if label_part in ln.get_label()]
    return line


def test_tokens_per_block_defaults():
    fig = views.plot_tokens_per_block()
    assert isinstance(fig, Figure)
    ax, ax_p = fig.axes
    assert "0.80" in ax.get_title()
    e_n = _line(ax, "E[N]").get_ydata()
    naive = _line(ax, "naive").get_ydata()
    assert len(e_n) == len(naive) == 17  # k = 0..16
    assert e_n[8] == pytest.approx(sd.expected_tokens(0.8, 8)) and naive[8] == pytest.approx(7.4)
    assert _line(ax, "ceiling").get_ydata()[0] == pytest.approx(5.0)  # 1 / (1 - 0.8)
    assert any("4.33" in t.get_text() for t in ax.texts)  # the marked k = 8
    assert any(t.get_text() == "0.168" for t in ax_p.texts)
    p_all = ax_p.get_lines()[0].get_ydata()
    assert p_all[0] == 1.0 and p_all[8] == pytest.approx(0.8 ** 8)


def test_tokens_per_block_alpha_one_has_no_ceiling():
    ax = views.plot_tokens_per_block(alpha=1.0, k_max=4, k_mark=2).axes[0]
    assert list(_line(ax, "E[N]").get_ydata()) == [1, 2, 3, 4, 5]
    assert not [ln for ln in ax.get_lines() if "ceiling" in ln.get_label()]


def test_survivor_curves():
    stats = sd.survivor_statistics(sd.simulate_mixture((0.95, 0.45), (0.5, 0.5), 4, num_samples=2_000,
                                                       generator=torch.Generator().manual_seed(0)))
    bayes = sd.bayes_conditional_acceptance((0.95, 0.45), (0.5, 0.5), 4)
    fig = views.plot_survivor_curves(stats=stats, bayes=bayes)
    ax, ax_r = fig.axes
    assert list(_line(ax, "conditional").get_ydata()) == stats.conditional_rate
    assert list(_line(ax, "Bayes").get_ydata()) == bayes.alpha
    assert list(_line(ax_r, "wrong").get_ydata()) == stats.product_of_population
    assert list(_line(ax_r, "right").get_ydata()) == stats.product_of_conditional
    assert len(ax_r.get_lines()) == 3
    # without bayes: no prediction markers; stats=None simulates from the keyword arguments
    ax = views.plot_survivor_curves(**SMALL).axes[0]
    assert len(ax.get_lines()) == 2 and len(_line(ax, "population").get_ydata()) == 4


def _explorer_parts(widget):
    sliders, out = widget.children
    return {s.description: s for s in sliders.children}, out


def test_accounting_explorer_redraws(fast_png):
    sliders, out = _explorer_parts(views.accounting_explorer())
    assert set(sliders) == {"alpha", "k"} and sliders["alpha"].value == 0.8 and sliders["k"].value == 8
    before = out.outputs[0]["data"]["image/png"]
    sliders["alpha"].value = 0.5
    after = out.outputs[0]["data"]["image/png"]
    assert len(out.outputs) == 1 and after != before
    sliders["k"].value = 24  # beyond the default k_max: the plot widens to include it
    assert out.outputs[0]["data"]["image/png"] != after


def test_survivor_explorer_redraws(fast_png):
    sliders, out = _explorer_parts(views.survivor_explorer(n=500))
    before = out.outputs[0]["data"]["image/png"]
    sliders["P(easy)"].value = 0.2
    assert out.outputs[0]["data"]["image/png"] != before


@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name):
    """Each registered figure draws the post's numbers, computed here by hand: E[N] = (1 - a^(k+1)) / (1 - a) and
    a^k at a = 0.8 beside the naive 1 + k a; Bayes' conditional rate among survivors sum w b^j / sum w b^(j-1) of the
    (0.95, 0.45) mixture; the two measured rates agree at position 1, which every request reaches."""
    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure)
    lines = {ln.get_label(): ln for ax in fig.axes for ln in ax.get_lines()}
    if name == "act3_tokens_per_block":
        a, ks = 0.8, range(17)
        e_n = [(1 - a ** (k + 1)) / (1 - a) for k in ks]
        assert max(abs(y - w) for y, w in zip(lines[r"$E[N]$ (prefix-structured)"].get_ydata(), e_n)) < 1e-12
        assert list(lines[r"naive $1 + k\alpha$"].get_ydata()) == pytest.approx([1 + k * a for k in ks], abs=1e-12)
        p_all = [ln for ln in fig.axes[1].get_lines() if len(ln.get_xdata()) == 17][0].get_ydata()
        assert max(abs(y - a ** k) for y, k in zip(p_all, ks)) < 1e-12
    else:
        betas, weights = (0.95, 0.45), (0.5, 0.5)
        bayes = [sum(w * b ** j for b, w in zip(betas, weights)) / sum(w * b ** (j - 1) for b, w in zip(betas, weights))
                 for j in range(1, 5)]
        assert max(abs(y - w) for y, w in zip(lines["Bayes prediction"].get_ydata(), bayes)) < 1e-12
        population = lines["population average"].get_ydata()
        assert population[0] == lines["conditional among survivors"].get_ydata()[0]  # position 1: all survive
