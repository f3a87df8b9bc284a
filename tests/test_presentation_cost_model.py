"""Act IV presentation: the heat map, the k sweep, the cost explorer and FIGURES."""
import pytest
from matplotlib.figure import Figure

from specdec_lib.presentation import cost_model as views

SMALL = {"alphas": [0.4, 0.6, 0.8, 0.9], "c_ds": [0.05, 0.10, 0.20, 0.30, 0.40]}  # the post's grid


def _gids(ax):
    return [a.get_gid() for a in ax.get_children()]


def test_heatmap_marks_slower_region_and_point():
    fig = views.plot_speedup_heatmap(point=(0.8, 0.15), **SMALL)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]  # fig.axes[1] is the colour bar
    assert len(fig.axes) == 2
    assert "k = 8" in ax.get_title() and "c_v = 1.6" in ax.get_title()
    gids = _gids(ax)
    assert views.SLOWER_GID in gids and views.PARITY_GID in gids and views.BEST_K_GID in gids
    (slower,) = [a for a in ax.get_children() if a.get_gid() == views.SLOWER_GID]
    assert slower.hatches == ["//"]
    texts = [t.get_text() for t in ax.texts]
    assert any("best k = 6" in t and "S(8) = 1.55" in t for t in texts)


def test_heatmap_without_slower_region_has_no_hatch():
    fig = views.plot_speedup_heatmap(alphas=[0.9, 0.95], c_ds=[0.0, 0.05])  # all faster than plain
    gids = _gids(fig.axes[0])
    assert views.SLOWER_GID not in gids and views.BEST_K_GID not in gids


def test_k_sweep_lines_and_best_k():
    fig = views.plot_k_sweep()
    ax = fig.axes[0]
    assert len([ln for ln in ax.get_lines() if ln.get_gid() is None]) == 3  # one curve per alpha
    stars = [ln for ln in ax.get_lines() if ln.get_gid() == views.BEST_K_GID]
    assert [int(s.get_xdata()[0]) for s in stars] == [1, 3, 7]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[2] == "α = 0.9  (best k = 7)"
    assert "1 + 0.05 k" in ax.get_title()


def test_k_sweep_compute_bound_says_do_not_speculate():
    fig = views.plot_k_sweep(c_v=views.COMPUTE_BOUND)
    ax = fig.axes[0]
    assert len([ln for ln in ax.get_lines() if ln.get_gid() == views.BEST_K_GID]) == 2  # alpha 0.5: k = 0
    assert "do not speculate" in ax.get_legend().get_texts()[0].get_text()


def test_explorer_sliders_update_output(fast_png):
    box = views.cost_explorer()
    out = box.children[2]
    alpha, k = box.children[0].children
    assert "S(8) = 1.55x" in out.outputs[1]["text"] and "best k in 0..32 = 6" in out.outputs[1]["text"]
    before = out.outputs
    k.value = 4
    assert out.outputs != before and "S(4) = 1.53x" in out.outputs[1]["text"]
    alpha.value = 0.4
    assert "SLOWER" in out.outputs[1]["text"]
    assert "image/png" in out.outputs[0]["data"]


@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name):
    assert isinstance(views.FIGURES[name](), Figure)
