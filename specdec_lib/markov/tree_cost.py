"""Act V's cost model for a draft tree: S(T) = E[N_T] / (depth(T) c_d + c_v(|T|) + O), and the best tree under a budget.

A round drafts the tree level by level (one batched draft step per depth, as tree drafters do), so drafting costs
depth(T) c_d; one target pass scores all |T| draft nodes, c_v(|T|) in units of T_1; E[N_T] is the tree's exact tokens
per round (tree.tree_expected_tokens). A path tree (1,) * k is the block decoder: S is Act IV's S(k).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_int, check_real
from ..cost import CostV, c_v_at
from .tree import check_widths, tree_expected_tokens


def tree_nodes(widths) -> int:
    """|T|: the draft nodes of a static tree, w_1 + w_1 w_2 + ... (every node at depth j has w_{j+1} children)."""
    total, level = 0, 1
    for w in check_widths(widths):
        level *= w
        total += level
    return total


def tree_speedup(P: torch.Tensor, Q: torch.Tensor, *, start: int, widths, rule: str, c_d: float, c_v: CostV,
                 overhead: float = 0.0) -> float:
    """S(T) = E[N_T] / (depth(T) c_d + c_v(|T|) + overhead), exactly, for one round from state start."""
    widths = check_widths(widths)
    c_d = check_real("c_d", c_d, low=0.0)
    overhead = check_real("overhead", overhead, low=0.0)
    e_n = tree_expected_tokens(P, Q, start=start, widths=widths, rule=rule)
    return e_n / (len(widths) * c_d + c_v_at(c_v, tree_nodes(widths)) + overhead)


@dataclass(frozen=True)
class BestTree:
    """The winner of a search over static trees: its widths, S, E[N] and draft nodes, and how many trees were tried."""

    widths: tuple[int, ...]
    speedup: float
    expected_tokens: float
    nodes: int
    searched: int


def all_trees(budget: int, max_depth: int, max_width: int) -> list[tuple[int, ...]]:
    """Every widths tuple of at most max_depth levels, max_width children a node and budget nodes, lexicographically."""
    out = []

    def grow(prefix: tuple[int, ...], level: int, used: int) -> None:
        if prefix:
            out.append(prefix)
        if len(prefix) == max_depth:
            return
        w = 1
        while w <= max_width and used + level * w <= budget:  # a new level of width w adds level * w nodes
            grow(prefix + (w,), level * w, used + level * w)
            w += 1

    grow((), 1, 0)
    return out


def best_tree(P: torch.Tensor, Q: torch.Tensor, *, start: int, rule: str, c_d: float, c_v: CostV, budget: int,
              max_depth: int = 8, max_width: int = 6, overhead: float = 0.0) -> BestTree:
    """The static tree of largest S(T) with at most `budget` nodes, max_depth levels and max_width children a node.

    Ties go to the tree with fewer nodes, then to the first in lexicographic order. S below 1 means no tree in the
    budget beats plain decoding.
    """
    budget = check_int("budget", budget, minimum=1)
    max_depth = check_int("max_depth", max_depth, minimum=1)
    max_width = check_int("max_width", max_width, minimum=1)  # i.i.d. drafts enumerate V**w outcomes at a node
    best, trees = None, all_trees(budget, max_depth, max_width)
    for widths in trees:
        s = tree_speedup(P, Q, start=start, widths=widths, rule=rule, c_d=c_d, c_v=c_v, overhead=overhead)
        key = (s, -tree_nodes(widths))
        if best is None or key > best[0]:
            best = (key, widths)
    (s, _), widths = best
    return BestTree(widths=widths, speedup=s, nodes=tree_nodes(widths), searched=len(trees),
                    expected_tokens=tree_expected_tokens(P, Q, start=start, widths=widths, rule=rule))
