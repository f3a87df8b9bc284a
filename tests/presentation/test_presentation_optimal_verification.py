"""Act VI, the best exact verifier, presentation: the toy, against k, the gain view, the optimum view, explorers."""
import base64

import pytest

import specdec_lib as sd
from specdec_lib.markov import verifier_map as vm
from specdec_lib.multidraft import multidraft_optimum
from specdec_lib.presentation import figure_files
from specdec_lib.presentation import optimal_verification as views

CH = sd.reference_chain()


def _lines(ax, gid):
    return [ln for ln in ax.get_lines() if ln.get_gid() == gid]


def _fingerprint(out) -> str:
    return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()


def test_toy_draws_each_paths_mass_and_the_two_rules():
    fig = views.plot_toy()
    (ax,) = fig.axes
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers}
    assert bars["token rule keeps"] == pytest.approx([1 / 9] * 4)
    assert bars["block verification keeps"] == pytest.approx([1 / 9, 2 / 9, 1 / 9, 1 / 9])  # ab: the mass regained
    assert bars["draft Q(x1 x2)"] == pytest.approx([4 / 9, 2 / 9, 2 / 9, 1 / 9])
    assert "0.4444 (token rule) against 0.5556" in ax.get_title()


@pytest.mark.heavy
def test_against_k_plots_the_three_rules_and_the_port():
    fig = views.plot_against_k()
    left, right = fig.axes
    rows = vm.against_k(CH.P, CH.Q, ks=list(views.KS), c_d=0.15, c_v=1.0)
    for key in ("token", "block", "oracle"):
        (n_line,), (s_line,) = _lines(left, key), _lines(right, key)
        assert list(n_line.get_ydata()) == pytest.approx([getattr(r, key).tokens_per_round for r in rows])
        assert list(s_line.get_ydata()) == pytest.approx([getattr(r, key).speedup for r in rows])
    (naive,) = _lines(left, "naive")
    assert naive.get_ydata()[1] > rows[1].block.tokens_per_round  # the port claims more than the optimum keeps
    assert "best S = 2.728 at k = 6" in fig._suptitle.get_text()


@pytest.mark.heavy
def test_gain_view_stars_the_setting_and_reads_the_grid():
    fig, text = views.plot_gain_view(k=4, temperature=1.0)
    left, right = fig.axes[0], next(ax for ax in fig.axes if _lines(ax, "block"))  # the colour bar has axes too
    (star,) = _lines(left, views.STAR_GID)
    assert star.get_xdata()[0] == 4 and star.get_ydata()[0] == views.TEMPERATURES.index(1.0)
    token = vm.verifier_speedup(CH.P, CH.Q, k=4, verifier="token", c_d=0.0, c_v=1.0).tokens_per_round
    block = vm.verifier_speedup(CH.P, CH.Q, k=4, verifier="block", c_d=0.0, c_v=1.0).tokens_per_round
    assert _lines(right, "block")[0].get_ydata()[3] == pytest.approx(block)
    assert f"N̄ {token:.3f} with the token rule, {block:.3f} with block verification" in text
    assert left.images[0].get_array()[:, 0].max() < 1e-10  # k = 1: no gain at any temperature
    with pytest.raises(ValueError, match="temperature must be one of"):
        views.plot_gain_view(temperature=0.9)
    with pytest.raises(ValueError, match="k must be one of"):
        views.plot_gain_view(k=7)


def test_optimum_view_puts_the_optimum_over_each_exact_rule():
    fig, text = views.plot_optimum_view(pair="the post's pair", num_drafts=3)
    (ax,) = fig.axes
    (opt,) = _lines(ax, "optimum")
    p, q = sd.post_pair()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    i = labels.index("rrs\n(without_replacement)")
    assert opt.get_ydata()[i] == pytest.approx(multidraft_optimum(p, q, 3, draws="without_replacement"))
    assert not any(label.startswith("rrs_original_q") for label in labels)  # wrong rules are left out
    assert "rrs 0.403 of 0.422" in text
    with pytest.raises(ValueError, match="num_drafts must lie in \\[1, 4\\]"):
        views.plot_optimum_view(num_drafts=5)
    with pytest.raises(ValueError, match="pair must be one of"):
        views.plot_optimum_view(pair="mine")


@pytest.mark.heavy
def test_explorers_redraw_on_every_control(fast_png):
    box = views.gain_explorer()
    k, temperature = box.children[0].children
    out = box.children[-1]
    for control, value, expect in [(k, 2, "k = 2, temperature 1"), (temperature, 0.5, "k = 2, temperature 0.5")]:
        before = _fingerprint(out)
        control.value = value
        assert _fingerprint(out) != before and out.outputs[1]["text"].startswith(expect)
    box = views.optimum_explorer()
    pair, n = box.children[0].children
    out = box.children[-1]
    for control, value, expect in [(n, 2, "the post's pair, n = 2"), (pair, "under-confident draft", "under-conf")]:
        before = _fingerprint(out)
        control.value = value
        assert _fingerprint(out) != before and out.outputs[1]["text"].startswith(expect)


def test_figures_are_registered_in_course_order():
    assert set(views.FIGURES) == {"act6_toy", "act6_against_k", "act6_gain", "act6_optimum"}
    modules = figure_files.figure_modules()
    assert modules.index("optimal_verification") > modules.index("bending_the_rules")
