"""Notebook 09's figures, read off the committed self-drafts recording (and an edited copy of it): each draws what it
says where it says, and bad arguments raise naming the argument."""
import dataclasses

import pytest
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.lab.recordings import ChainRun, SelfRecording
from specdec_lib.presentation import drafts_from_the_target as views
from specdec_lib.presentation import figure_files as figures

R = sd.lab.recorded("measure-self")


def gids(fig: Figure) -> list[str]:
    return [a.get_gid() for ax in fig.axes for a in ax.get_children() if a.get_gid()]


def line(fig: Figure, gid: str):
    return next(a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid)


def test_plane_points_sit_at_each_drafts_best_k():
    points = views.plane_points(R, temperature=0.0)
    assert len(points) == len([r for r in R.chains if r.temperature == 0.0])
    for p in points:
        t = R.chain(p["draft"], target=p["target"], temperature=0.0).table
        assert p["measured"] == max(t.measured) and p["k"] == t.ks[t.measured.index(p["measured"])]
        assert p["alpha"] == pytest.approx(sd.accounting.alpha_from_tokens(p["e_n"], p["k"]))


def test_the_plane_marks_the_targets_own_drafts_apart_from_the_separate_ones():
    fig = views.plot_self_plane(R, temperature=1.0)
    names = gids(fig)
    assert f"{views.SELF_GID}:exit1:target_ee" in names and f"{views.SEPARATE_GID}:draft:target" in names
    assert not any(g.startswith(f"{views.SELF_GID}:draft:") for g in names)
    # an edited recording moves its point: the figure reads the recording it is given
    run = R.chain("medusa", temperature=1.0)
    table = dataclasses.replace(run.table, c_d=[0.9] * len(run.table.ks))
    edited = SelfRecording(chains=[ChainRun(run.target, 1.0, table) if r is run else r for r in R.chains],
                           trees=R.trees, machine=R.machine)
    assert line(views.plot_self_plane(edited, temperature=1.0), f"{views.SELF_GID}:medusa:target").get_xdata()[0] == 0.9


def test_the_exit_layer_view_plots_that_exit_and_names_it():
    fig, text = views.plot_exit_layer(2, target="target", temperature=1.0, recording=R)
    t = R.chain("exit2", target="target", temperature=1.0).table
    assert list(line(fig, views.MEASURED_GID).get_ydata()) == t.measured
    assert list(line(fig, views.PREDICTED_GID).get_ydata()) == t.predicted
    assert text.startswith("exit after layer 2 on the trained target")
    with pytest.raises(ValueError, match="target must be one of 'target', 'target_ee'"):
        views.plot_exit_layer(2, target="draft")
    with pytest.raises(ValueError, match=r"\(draft, target, temperature\) must be one of"):
        views.plot_exit_layer(4)


def test_the_heads_view_keeps_trees_no_deeper_than_the_heads():
    fig, text = views.plot_heads(2, temperature=0.0, recording=R)
    tree = line(fig, "tree:onehot_sequential")
    t = R.tree("medusa", temperature=0.0).table
    assert list(tree.get_xdata()) == [n for n, w in zip(t.nodes, t.trees) if len(w) <= 2]
    assert text.startswith("2 head(s)")
    with pytest.raises(ValueError, match="num_heads must be at most the 4 recorded heads"):
        views.plot_heads(5)


def test_the_explorers_and_the_registry():
    for build in (views.exit_explorer, views.heads_explorer):
        box = build(R)
        assert box.children[-1].outputs  # the figure is drawn before any control moves
    assert set(views.FIGURES) == {"self_plane", "self_exit_layer", "self_heads", "self_lookahead"}
    assert "drafts_from_the_target" in figures.figure_modules()
    assert isinstance(views.plot_lookahead(R), Figure)
