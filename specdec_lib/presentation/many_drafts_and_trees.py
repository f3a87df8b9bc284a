"""Act V figures: many drafts at one position, static draft trees on the reference chain, and tree verification's bugs.

Everything is exact (no sampling): `multidraft_law`, `acceptance_table` (multidraft.py) and the tree engine give each
rule's output law and acceptance; the tree bugs' laws and TVs come from markov.tree_bugs. This module only draws and
formats them.
"""
from __future__ import annotations

import torch

from .._checks import check_choice, check_int, check_widths
from ..markov.chain import reference_chain, sequence_law
from ..markov.tree import tree_expected_tokens, tree_law
from ..markov.tree_bugs import TreeBug, tree_bugs
from ..markov.tree_cost import tree_nodes, tree_speedup
from ..multidraft import RULES, acceptance_table, multidraft_accept_probability, multidraft_law
from ..policy import apply_policy
from ..sampling import overlap, post_pair, total_variation
from .cost_model import LinearCost
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = ["EXACT_TV", "N_MAX", "PAIRS", "ADVERSARIAL", "WIDTHS", "C_D", "C_V", "BETA_GID", "MARK_GID", "TARGET_GID",
           "f64", "tv_text", "plot_acceptance_vs_n", "plot_rule_view", "multidraft_explorer", "plot_tree_bugs",
           "cost_text", "first_two", "plot_tree_view", "tree_explorer", "FIGURES"]

EXACT_TV = 1e-12  # a law this close to the target (in TV) is exact up to float64 rounding
N_MAX = 5  # drafts per position on the figures: the post's vocabulary has five tokens
_LOGITS = torch.tensor([3.0, 1.0, 0.0, 0.0, -1.0])
PAIRS = {  # (p, q) pairs of the explorer, float64 and normalised, as multidraft_law computes with them
    "the post's pair": post_pair(),
    "under-confident draft": (apply_policy(_LOGITS, temperature=1.0), apply_policy(_LOGITS, temperature=2.0)),
}
ADVERSARIAL = {  # the cases that break naive multi-draft verifiers; n up to 5 exceeds q's support in the last three
    "p == q": (post_pair()[0], post_pair()[0]),
    "disjoint supports": (torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.25, 0.75])),
    "one-hot q": (post_pair()[0], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])),
    "q zero where p > 0": (torch.tensor([0.4, 0.3, 0.2, 0.1]), torch.tensor([0.0, 0.5, 0.5, 0.0])),
}
WIDTHS = (3, 2, 1)  # the tree of the bug table; len + 1 = 4 tokens hold a full round: 3 kept children, the bonus
C_D, C_V = 0.15, LinearCost(1.0, 0.05)  # Act IV's draft step and memory-bound pass, c_v(|T|) = 1 + 0.05 |T|
BETA_GID, MARK_GID, TARGET_GID = "single_draft_beta", "selected", "target"


def f64(x: torch.Tensor) -> torch.Tensor:
    """x in float64, renormalised: what the library's exact laws are computed against."""
    x = x.double()
    return x / x.sum(-1, keepdim=True)


def tv_text(tv: float) -> str:
    """A TV as the course prints it: '< 1e-12' when it is float64 rounding, else four decimals."""
    return f"< {EXACT_TV:.0e}" if tv < EXACT_TV else f"{tv:.4f}"


def _draw_acceptance(ax, p, q, *, max_drafts: int, mark: tuple[str, int] | None) -> None:
    """Acceptance against n for every rule (exact solid, wrong dashed) and the single draft's beta."""
    ns = list(range(1, max_drafts + 1))
    palette = [COLORS["target"], COLORS["overlap"], COLORS["draft"], "#9467bd", COLORS["wrong"], "#8c564b",
               "#e377c2", COLORS["neutral"]]
    for color, (rule, acc) in zip(palette, acceptance_table(p, q, max_drafts=max_drafts).items()):
        exact = RULES[rule].exact
        ax.plot(ns, acc, color=color, marker="o" if exact else ".", linestyle="-" if exact else "--",
                linewidth=1.8 if exact else 1.0, label=rule, gid=rule)
        if mark is not None and mark[0] == rule:
            ax.plot([mark[1]], [acc[mark[1] - 1]], marker="*", markersize=14, color=color, linestyle="none",
                    gid=MARK_GID)
    ax.axhline(overlap(p, q), color="black", linestyle=":", linewidth=1.2, gid=BETA_GID)
    ax.set_xticks(ns)
    ax.set_ylim(0, 1.04)
    ax.set_xlabel("drafts per position n")
    ax.set_ylabel("P(a draft is kept)")


def plot_acceptance_vs_n(p: torch.Tensor | None = None, q: torch.Tensor | None = None, *, max_drafts: int = N_MAX,
                         title: str = "the post's pair"):
    """P(a draft is kept) against n for every rule, against the single-draft beta = 1 - TV(p, q) (dotted)."""
    p, q = post_pair() if p is None else (p, q)
    fig, ax = new_figure(height=4.0)
    _draw_acceptance(ax, p, q, max_drafts=check_int("max_drafts", max_drafts, minimum=1), mark=None)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    ax.set_title(f"Acceptance against n on {title}\ndotted: one draft, β = 1 - TV = {overlap(p, q):.3f}; "
                 "dashed: wrong rules; onehot_walk has onehot_sequential's law", fontsize=9)
    return fig


def plot_rule_view(*, pair: str = "the post's pair", num_drafts: int = 3, rule: str = "rrs"):
    """One rule at num_drafts drafts: its exact law against p (left), its acceptance among every rule's (right)."""
    p, q = PAIRS[check_choice("pair", pair, tuple(PAIRS))]
    n = check_int("num_drafts", num_drafts, minimum=1)
    n = min(n, RULES[check_choice("rule", rule, tuple(RULES))].max_drafts or n)  # SpecHub draws two at most
    law = multidraft_law(p, q, num_drafts=n, rule=rule)
    tv = total_variation(law, f64(p))
    fig, (left, right) = new_figure(2, width=11.0, height=3.8)
    tokens = list(range(p.numel()))
    left.bar(tokens, law.tolist(), color=COLORS["target"] if tv < EXACT_TV else COLORS["wrong"], label=f"{rule}'s law")
    left.plot(tokens, f64(p).tolist(), linestyle="none", marker="_", markersize=22, color="black", label="p",
              gid=TARGET_GID)
    left.set_xticks(tokens)
    left.set_xlabel("emitted token")
    left.legend(fontsize=8)
    left.set_title(f"{rule}, n = {n}: TV from p {tv_text(tv)}", fontsize=10)
    _draw_acceptance(right, p, q, max_drafts=max(N_MAX, n), mark=(rule, n))
    right.legend(fontsize=7, ncol=2, loc="lower right")
    right.set_title(f"acceptance on {pair} (star: {rule} at n = {n})", fontsize=10)
    accept = multidraft_accept_probability(p, q, num_drafts=n, rule=rule)
    text = (f"{rule}, n = {n} on {pair}: P(a draft kept) = {accept:.3f} (one draft: β = {overlap(p, q):.3f}); "
            f"TV(law, p) {tv_text(tv)} ({'exact' if tv < EXACT_TV else 'WRONG'})")
    return fig, text


def multidraft_explorer(*, pair: str = "the post's pair", num_drafts: int = 3, rule: str = "rrs"):
    """A dropdown for the pair and the rule and a slider for the drafts n over plot_rule_view."""
    import ipywidgets as widgets

    controls = {"pair": widgets.Dropdown(options=list(PAIRS), value=pair, description="pair"),
                "num_drafts": widgets.IntSlider(value=num_drafts, min=1, max=N_MAX, step=1, description="n"),
                "rule": widgets.Dropdown(options=list(RULES), value=rule, description="rule")}
    return explorer(lambda **kw: plot_rule_view(**kw), controls, rows=[["pair", "num_drafts", "rule"]])


def plot_tree_bugs(bugs: list[TreeBug] | None = None, *, widths=WIDTHS):
    """Horizontal bars of each tree bug's exact TV (markov.tree_bugs); exact ones (TV < 1e-12) in blue at zero."""
    widths = check_widths(widths)
    bugs = tree_bugs(widths=widths, horizon=len(widths) + 1) if bugs is None else bugs
    fig, ax = new_figure(height=4.2)
    y = list(range(len(bugs)))[::-1]
    ax.barh(y, [b.tv for b in bugs], color=[COLORS["target"] if b.tv < EXACT_TV else COLORS["wrong"] for b in bugs])
    ax.set_yticks(y, [b.name for b in bugs], fontsize=8)
    for yi, b in zip(y, bugs):
        ax.text(b.tv + 0.01, yi, "exact" if b.tv < EXACT_TV else f"{b.tv:.3f}", va="center", fontsize=7)
    ax.set_xlim(0, max(b.tv for b in bugs) * 1.15 + 0.02)
    ax.set_xlabel("exact TV from the target chain, no sampling")
    ax.set_title(f"Tree verification on the reference chain, widths {widths}, horizon {len(widths) + 1}", fontsize=10)
    return fig


def _draw_tree(ax, widths: tuple[int, ...]) -> None:
    """The static tree: the root, then prod(w_1..w_j) nodes at depth j, each joined to its parent."""
    xs = [[0.5]]
    for w in widths:
        count = len(xs[-1]) * w
        xs.append([(i + 0.5) / count for i in range(count)])
        for i, x in enumerate(xs[-1]):
            ax.plot([xs[-2][i // w], x], [-len(xs) + 2, -len(xs) + 1], color=COLORS["neutral"], linewidth=0.6)
    for depth, level in enumerate(xs):
        ax.plot(level, [-depth] * len(level), linestyle="none", marker="o", markersize=7 if depth else 10,
                color=COLORS["wrong"] if depth == 0 else COLORS["draft"], gid=f"depth_{depth}")
    ax.set_yticks([-d for d in range(len(xs))], ["root"] + [f"depth {d}" for d in range(1, len(xs))])
    ax.set_xticks([])
    ax.grid(False)


def cost_text(c_v) -> str:
    """How c_v reads in a tree's caption: a number, or base + slope |T| for a LinearCost."""
    if isinstance(c_v, LinearCost):
        return f"{c_v.base:g} + {c_v.slope:g} |T|"
    return f"{c_v:g}" if isinstance(c_v, (int, float)) else getattr(c_v, "__name__", "c_v")


def first_two(law: torch.Tensor) -> torch.Tensor:
    """The marginal law (V^2,) of the first two tokens of a law (V,) * horizon, horizon >= 2, flattened as V x1 + x2."""
    return law.reshape(law.shape[0], law.shape[1], -1).sum(-1).reshape(-1)


def plot_tree_view(*, widths=WIDTHS, rule: str = "rrs", c_d: float = C_D, c_v=C_V):
    """A static tree (left) and its exact law of the first two tokens against the target chain's (right).

    Exactness is the TV over len(widths) + 1 tokens, so every level and the bonus land inside the horizon.
    """
    ch = reference_chain()
    widths = check_widths(widths)
    horizon = len(widths) + 1
    law = tree_law(ch.P, ch.Q, start=ch.start, horizon=horizon, widths=widths, rule=rule)
    target = sequence_law(ch.P, start=ch.start, horizon=horizon)
    tv = total_variation(law, target)
    e_n = tree_expected_tokens(ch.P, ch.Q, start=ch.start, widths=widths, rule=rule)
    s = tree_speedup(ch.P, ch.Q, start=ch.start, widths=widths, rule=rule, c_d=c_d, c_v=c_v)
    fig, (left, right) = new_figure(2, width=11.0, height=3.8)
    _draw_tree(left, widths)
    left.set_title(f"widths {widths}: |T| = {tree_nodes(widths)} draft nodes, depth {len(widths)}", fontsize=10)
    xs = list(range(first_two(target).numel()))
    right.bar(xs, first_two(law).tolist(), color=COLORS["target"] if tv < EXACT_TV else COLORS["wrong"], label=rule)
    right.plot(xs, first_two(target).tolist(), linestyle="none", marker="_", markersize=8, color="black",
               label="target chain", gid=TARGET_GID)
    right.set_xlabel("first two tokens (x1, x2), as 5 x1 + x2")
    right.legend(fontsize=8)
    right.set_title(f"{rule}: E[N] = {e_n:.3f}, S = {s:.3f}; TV over {horizon} tokens {tv_text(tv)}", fontsize=10)
    text = (f"widths {widths}, {rule}: |T| = {tree_nodes(widths)}, E[N] = {e_n:.3f} tokens per round, "
            f"S = {s:.3f} (c_d = {c_d:.2f}, c_v(|T|) = {cost_text(c_v)}); TV from the target over {horizon} tokens "
            f"{tv_text(tv)} ({'exact' if tv < EXACT_TV else 'WRONG'})")
    return fig, text


def tree_explorer(*, w1: int = 3, w2: int = 2, w3: int = 1, rule: str = "rrs", c_d: float = C_D):
    """Sliders for the widths of three levels (0 ends the tree), c_d, and a rule dropdown over plot_tree_view."""
    import ipywidgets as widgets

    controls = {"w1": widgets.IntSlider(value=w1, min=1, max=4, description="w1"),
                "w2": widgets.IntSlider(value=w2, min=0, max=3, description="w2"),
                "w3": widgets.IntSlider(value=w3, min=0, max=3, description="w3"),
                "rule": widgets.Dropdown(options=[r for r in RULES if RULES[r].max_drafts is None], value=rule,
                                         description="rule"),  # SpecHub's pair fits no width of 3 or 4
                "c_d": widgets.FloatSlider(value=c_d, min=0.0, max=0.5, step=0.01, description="c_d")}

    def render(w1: int, w2: int, w3: int, rule: str, c_d: float):
        widths = (w1,) + ((w2,) + ((w3,) if w3 else ()) if w2 else ())  # a level of width 0 ends the tree
        return plot_tree_view(widths=widths, rule=rule, c_d=c_d)

    return explorer(render, controls, rows=[["w1", "w2", "w3"], ["rule", "c_d"]])


FIGURES = {
    "act5_acceptance_vs_n": lambda: plot_acceptance_vs_n(),
    "act5_acceptance_under_confident": lambda: plot_acceptance_vs_n(*PAIRS["under-confident draft"],
                                                                     title="an under-confident draft"),
    "act5_tree_view": lambda: plot_tree_view()[0],
    "act5_tree_bugs": lambda: plot_tree_bugs(),
}
