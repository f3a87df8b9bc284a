"""Act V presentation: acceptance against n, the rule and tree views and their explorers, the tree bugs, FIGURES."""
import base64

import pytest
import torch
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.presentation import many_drafts_and_trees as views
from specdec_lib.presentation.style import COLORS

CH = sd.reference_chain()
RULES = [r.name for r in sd.multidraft.multidraft_rules()]


def _lines(ax, gid):
    return [ln for ln in ax.get_lines() if ln.get_gid() == gid]


def _fingerprint(out) -> str:
    """The explorer's figure as the fast_png fixture stores it: a repr of titles, texts and data."""
    return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()


@pytest.mark.heavy
def test_acceptance_figure_plots_every_rule_against_beta():
    p, q = sd.post_pair()
    ax = views.plot_acceptance_vs_n(p, q).axes[0]
    for r in sd.multidraft.multidraft_rules():
        (line,) = _lines(ax, r.name)
        want = [sd.multidraft.multidraft_accept_probability(p, q, num_drafts=n, rule=r.name) for n in range(1, 6)]
        assert list(line.get_xdata()) == [1, 2, 3, 4, 5] and list(line.get_ydata()) == pytest.approx(want, abs=1e-12)
        assert line.get_linestyle() == ("-" if r.exact else "--")  # wrong rules dashed
    (beta,) = _lines(ax, views.BETA_GID)
    assert beta.get_ydata()[0] == pytest.approx(sd.overlap(p, q)) and "β = 1 - TV = 0.162" in ax.get_title()
    rrs, mss = _lines(ax, "rrs")[0].get_ydata(), _lines(ax, "mss")[0].get_ydata()
    assert rrs[4] == pytest.approx(1.0) and mss[4] < 0.4  # the figure shows what the notebook claims
    other = views.plot_acceptance_vs_n(*views.PAIRS["under-confident draft"]).axes[0]  # another pair, another plot
    assert _lines(other, "rrs")[0].get_ydata()[0] != pytest.approx(rrs[0])


def test_rule_view_shows_the_exact_law_and_the_star():
    fig, text = views.plot_rule_view(pair="the post's pair", num_drafts=3, rule="rrs")
    left, right = fig.axes
    p, q = sd.post_pair()
    law = sd.multidraft_law(p, q, num_drafts=3, rule="rrs")
    assert [b.get_height() for b in left.patches] == pytest.approx(law.tolist())
    (ticks,) = _lines(left, views.TARGET_GID)
    assert list(ticks.get_ydata()) == pytest.approx(views.f64(p).tolist())
    assert left.get_title() == "rrs, n = 3: TV from p < 1e-12"
    (star,) = _lines(right, views.MARK_GID)
    assert star.get_xdata()[0] == 3 and star.get_ydata()[0] == pytest.approx(
        sd.multidraft.multidraft_accept_probability(p, q, num_drafts=3, rule="rrs"))
    assert "P(a draft kept) = 0.403" in text and "(exact)" in text
    fig, text = views.plot_rule_view(pair="the post's pair", num_drafts=3, rule="rrs_original_q")
    assert fig.axes[0].get_title() == "rrs_original_q, n = 3: TV from p 0.1850" and "WRONG" in text
    assert fig.axes[0].patches[0].get_facecolor() != left.patches[0].get_facecolor()  # red bars for a wrong rule


@pytest.mark.heavy
def test_multidraft_explorer_every_control_redraws(fast_png):
    box = views.multidraft_explorer()
    pair, n, rule = box.children[0].children
    out = box.children[-1]
    assert "rrs, n = 3 on the post's pair: P(a draft kept) = 0.403" in out.outputs[1]["text"]
    before = _fingerprint(out)
    n.value = 2
    assert _fingerprint(out) != before and "P(a draft kept) = 0.291" in out.outputs[1]["text"]
    before = _fingerprint(out)
    rule.value = "mss"
    assert _fingerprint(out) != before and "mss, n = 2" in out.outputs[1]["text"] and "0.232" in out.outputs[1]["text"]
    before = _fingerprint(out)
    pair.value = "under-confident draft"
    assert _fingerprint(out) != before and "on under-confident draft: P(a draft kept) = 0.861" in out.outputs[1]["text"]
    rule.value = "walk_duplicate_siblings"
    assert "WRONG" in out.outputs[1]["text"]


@pytest.mark.heavy
def test_tree_bugs_figure_draws_the_registry():
    bugs = sd.markov.tree_bugs.tree_bugs()
    ax = views.plot_tree_bugs(bugs).axes[0]
    assert [b.get_width() for b in ax.patches] == pytest.approx([b.tv for b in bugs])
    assert [t.get_text() for t in ax.texts] == ["exact" if b.tv < 1e-12 else f"{b.tv:.3f}" for b in bugs]
    at = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}
    assert sorted(at, key=at.get, reverse=True) == [b.name for b in bugs]  # listed top to bottom in order
    colors = {b.name: p.get_facecolor() for b, p in zip(bugs, ax.patches)}
    assert colors["PR #47's bonus bug alone"] == colors["top-n drafts with qx = 1 (one-hot)"]  # exact on (3, 2, 1)
    assert colors["PR #47's bonus bug alone"] != colors["greedy at any temperature"]
    wide = views.plot_tree_bugs(widths=(3, 2, 2)).axes[0]  # the registry at another tree: the bonus bug shows
    assert "widths (3, 2, 2), horizon 4" in wide.get_title()
    bugs = sd.markov.tree_bugs.tree_bugs(widths=(3, 2, 2))
    assert [b.get_width() for b in wide.patches] == pytest.approx([b.tv for b in bugs])


def test_tree_view_draws_the_tree_and_states_e_n_and_s():
    fig, text = views.plot_tree_view(widths=(3, 2, 1), rule="rrs")
    left, right = fig.axes
    assert [len(_lines(left, f"depth_{d}")[0].get_xdata()) for d in range(4)] == [1, 3, 6, 6]  # nodes per level
    e_n = sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=(3, 2, 1), rule="rrs")
    s = sd.markov.tree_speedup(CH.P, CH.Q, start=CH.start, widths=(3, 2, 1), rule="rrs", c_d=0.15,
                               c_v=lambda n: 1 + 0.05 * n)
    assert f"E[N] = {e_n:.3f}, S = {s:.3f}" in right.get_title() and "|T| = 15" in left.get_title()
    target = sd.sequence_law(CH.P, start=CH.start, horizon=2).reshape(-1)
    assert [b.get_height() for b in right.patches] == pytest.approx(target.tolist(), abs=1e-9)  # exact: equal bars
    assert "TV from the target over 4 tokens < 1e-12 (exact)" in text
    _, wrong = views.plot_tree_view(widths=(2, 2), rule="rrs_residual_next_q")
    assert "WRONG" in wrong and "over 3 tokens" in wrong


@pytest.mark.heavy
def test_tree_explorer_every_control_redraws(fast_png):
    box = views.tree_explorer()
    (w1, w2, w3), (rule, c_d) = box.children[0].children, box.children[1].children
    out = box.children[-1]
    text = lambda: out.outputs[1]["text"]  # noqa: E731
    assert text().startswith("widths (3, 2, 1), rrs: |T| = 15")
    for control, value, expect in [(w1, 2, "widths (2, 2, 1)"), (w3, 2, "widths (2, 2, 2)"),
                                   (rule, "onehot_walk", "onehot_walk"), (c_d, 0.3, "c_d = 0.30"),
                                   (w2, 0, "widths (2,), onehot_walk: |T| = 2")]:  # a level of width 0 ends the tree
        before = _fingerprint(out)
        control.value = value
        assert _fingerprint(out) != before and expect in text(), (expect, text())
    w2.value, w3.value = 1, 0
    assert "widths (2, 1)," in text()


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="pair must be one of"):
        views.plot_rule_view(pair="mine")
    with pytest.raises(ValueError, match="rule must be one of 'mss', 'rrs'"):
        views.plot_rule_view(rule="greedy")
    with pytest.raises(ValueError, match="num_drafts must be >= 1"):
        views.plot_rule_view(num_drafts=0)
    with pytest.raises(TypeError, match="widths must be a tuple of ints"):
        views.plot_tree_bugs(widths=2)
    with pytest.raises(TypeError, match="widths must be a tuple of ints"):
        views.plot_tree_view(widths=3)


def _check_acceptance(ax, p, q):
    """Every rule's line: multidraft_accept_probability at n = 1..5 called here, to 1e-12; at n = 1 the hand values
    (beta = sum min(p, q) for a draft sampled from q, p(argmax q) for the one-hot drafts); beta's dotted line."""
    pd, qd = (x.double() / x.double().sum() for x in (p, q))
    beta = float(torch.minimum(pd, qd).sum())
    for rule in RULES:
        (line,) = _lines(ax, rule)
        want = [sd.multidraft.multidraft_accept_probability(p, q, num_drafts=n, rule=rule) for n in range(1, 6)]
        assert list(line.get_xdata()) == [1, 2, 3, 4, 5]
        assert max(abs(y - w) for y, w in zip(line.get_ydata(), want)) < 1e-12
        if rule.startswith("onehot"):
            assert abs(want[0] - float(pd[qd.argmax()])) < 1e-12
        elif rule != "walk_duplicate_siblings":  # the walk fed i.i.d. drafts is the one rule off beta at n = 1
            assert abs(want[0] - beta) < 1e-12
        assert line.get_linestyle() == ("-" if sd.multidraft.RULES[rule].exact else "--")
    (dotted,) = _lines(ax, views.BETA_GID)
    assert abs(dotted.get_ydata()[0] - beta) < 1e-7  # sd.overlap on the float32 pair
    assert f"β = 1 - TV = {beta:.3f}" in ax.get_title()


def _check_tree_view(fig):
    """The (3, 2, 1) tree's nodes level by level; rrs's first-two-token law from tree_law called here, to 1e-12, and
    the target's P(x1 | start) P(x2 | x1) by hand; E[N] and S = E[N] / (3 c_d + 1 + 0.05 |T|) in the title."""
    left, right = fig.axes
    for depth, count in enumerate((1, 3, 6, 6)):
        (level,) = _lines(left, f"depth_{depth}")
        assert list(level.get_xdata()) == [(i + 0.5) / count for i in range(count)]
    law = sd.markov.tree_law(CH.P, CH.Q, start=CH.start, horizon=4, widths=(3, 2, 1), rule="rrs")
    first_two = law.reshape(5, 5, -1).sum(-1).reshape(-1)
    assert max(abs(b.get_height() - w) for b, w in zip(right.patches, first_two.tolist())) < 1e-12
    P = CH.P.double() / CH.P.double().sum(-1, keepdim=True)  # the float32 rows renormalised in float64
    target = [float(P[CH.start, x1] * P[x1, x2]) for x1 in range(5) for x2 in range(5)]
    (ticks,) = _lines(right, views.TARGET_GID)
    assert max(abs(y - w) for y, w in zip(ticks.get_ydata(), target)) < 1e-12 and len(right.patches) == 25
    assert max(abs(b.get_height() - w) for b, w in zip(right.patches, target)) < 1e-12  # rrs is exact
    e_n = sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=(3, 2, 1), rule="rrs")
    s = e_n / (3 * 0.15 + 1 + 0.05 * 15)
    assert right.get_title() == f"rrs: E[N] = {e_n:.3f}, S = {s:.3f}; TV over 4 tokens < 1e-12"
    assert left.get_title() == "widths (3, 2, 1): |T| = 15 draft nodes, depth 3"


def _check_tree_bugs(ax):
    """Each bug's bar its exact TV from tree_bugs called here, top to bottom, to 1e-12; three recomputed from the
    engine: greedy's 1 - P(the argmax path) by hand, the one-hot top-n drafts (exact) and the walk fed i.i.d. drafts."""
    bugs = sd.markov.tree_bugs.tree_bugs()
    bars = sorted(ax.patches, key=lambda b: -b.get_y())
    assert len(bars) == len(bugs) and max(abs(b.get_width() - bug.tv) for b, bug in zip(bars, bugs)) < 1e-12
    at = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}
    assert sorted(at, key=at.get, reverse=True) == [b.name for b in bugs]  # listed top to bottom in order
    tv = {bug.name: bar.get_width() for bug, bar in zip(bugs, bars)}
    P, path, x = CH.P.double() / CH.P.double().sum(-1, keepdim=True), 1.0, CH.start
    for _ in range(4):
        x, path = int(P[x].argmax()), path * float(P[x].max())
    assert abs(tv["greedy at any temperature"] - (1 - path)) < 1e-12
    target = sd.sequence_law(CH.P, start=CH.start, horizon=4)
    for name, rule in (("top-n drafts with qx = 1 (one-hot)", "onehot_sequential"),
                       ("SGLang's walk fed i.i.d. drafts", "walk_duplicate_siblings")):
        law = sd.markov.tree_law(CH.P, CH.Q, start=CH.start, horizon=4, widths=(3, 2, 1), rule=rule)
        assert abs(tv[name] - float(sd.total_variation(law, target))) < 1e-12
    assert tv["top-n drafts with qx = 1 (one-hot)"] < 1e-12 < tv["SGLang's walk fed i.i.d. drafts"]
    assert [b.get_facecolor() for b in bars] == [to_rgba(COLORS["target" if bug.tv < 1e-12 else "wrong"])
                                                 for bug in bugs]


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["act5_acceptance_vs_n", "act5_acceptance_under_confident", "act5_tree_view",
                                  "act5_tree_bugs"])
def test_figures_are_registered_and_build(name):
    """The four registered figures, each drawing the exact engine's numbers computed here directly (see each check):
    acceptance against n on the post's pair and on the under-confident pair softmax(l) against softmax(l / 2), the
    (3, 2, 1) tree's view with rrs, and the tree bugs' exact TVs."""
    assert set(views.FIGURES) == {"act5_acceptance_vs_n", "act5_acceptance_under_confident", "act5_tree_view",
                                  "act5_tree_bugs"}
    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure)
    if name == "act5_acceptance_vs_n":
        _check_acceptance(fig.axes[0], *sd.post_pair())
    elif name == "act5_acceptance_under_confident":
        logits = torch.tensor([3.0, 1.0, 0.0, 0.0, -1.0], dtype=torch.float64)
        p, q = views.PAIRS["under-confident draft"]
        assert max((p.double() - torch.softmax(logits, -1)).abs().max(),
                   (q.double() - torch.softmax(logits / 2, -1)).abs().max()) < 1e-7  # float32 pair
        _check_acceptance(fig.axes[0], p, q)
        assert "an under-confident draft" in fig.axes[0].get_title()
    elif name == "act5_tree_view":
        _check_tree_view(fig)
    else:
        _check_tree_bugs(fig.axes[0])
