"""Act V's cost model for a draft tree: S(T) = E[N_T] / (depth(T) c_d + c_v(|T|) + O), and the best tree under a budget.

A round drafts the tree level by level (one batched draft step per depth, as tree drafters do), so drafting costs
depth(T) c_d; one target pass scores all |T| draft nodes, c_v(|T|) in units of T_1; E[N_T] is the tree's exact tokens
per round (tree.tree_expected_tokens). A path tree (1,) * k is the block decoder: S is Act IV's S(k).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_int, check_real, check_widths
from ..cost import CostV, c_v_at, cost_equation, tree_nodes
from .tree import tree_expected_tokens

__all__ = ["tree_nodes", "tree_speedup", "TreeSearch", "DEFAULT_SEARCH", "check_search", "BestTree", "all_trees",
           "best_tree"]


def tree_speedup(P: torch.Tensor, Q: torch.Tensor, *, start: int, widths, rule: str, c_d: float, c_v: CostV,
                 overhead: float = 0.0) -> float:
    """S(T) = E[N_T] / (depth(T) c_d + c_v(|T|) + overhead), exactly, for one round from state start."""
    widths = check_widths(widths)
    c_d = check_real("c_d", c_d, low=0.0)
    overhead = check_real("overhead", overhead, low=0.0)
    e_n = tree_expected_tokens(P, Q, start=start, widths=widths, rule=rule)
    return cost_equation(e_n, draft_steps=len(widths), c_d=c_d, c_v=c_v_at(c_v, tree_nodes(widths)),
                         overhead=overhead)


@dataclass(frozen=True)
class TreeSearch:
    """The limits of a search over trees and the fixed cost of a round: at most max_depth levels and max_width
    children a node; overhead O is added to every round's cost depth c_d + c_v(|T|)."""

    max_depth: int = 8
    max_width: int = 6  # i.i.d. drafts enumerate V**w outcomes at a node
    overhead: float = 0.0

    def __post_init__(self) -> None:
        check_int("max_depth", self.max_depth, minimum=1)
        check_int("max_width", self.max_width, minimum=1)
        check_real("overhead", self.overhead, low=0.0)


DEFAULT_SEARCH = TreeSearch()


def check_search(search) -> TreeSearch:
    """A TreeSearch, or a TypeError naming the argument."""
    if not isinstance(search, TreeSearch):
        raise TypeError(f"search must be a TreeSearch, got {type(search).__name__}")
    return search


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
              search: TreeSearch = DEFAULT_SEARCH) -> BestTree:
    """The static tree of largest S(T) with at most `budget` nodes, within search's max_depth and max_width.

    Ties go to the tree with fewer nodes, then to the first in lexicographic order. S below 1 means no tree in the
    budget beats plain decoding.
    """
    budget = check_int("budget", budget, minimum=1)
    search = check_search(search)
    best, trees = None, all_trees(budget, search.max_depth, search.max_width)
    for widths in trees:
        s = tree_speedup(P, Q, start=start, widths=widths, rule=rule, c_d=c_d, c_v=c_v, overhead=search.overhead)
        key = (s, -tree_nodes(widths))
        if best is None or key > best[0]:
            best = (key, widths)
    (s, _), widths = best
    return BestTree(widths=widths, speedup=s, nodes=tree_nodes(widths), searched=len(trees),
                    expected_tokens=tree_expected_tokens(P, Q, start=start, widths=widths, rule=rule))
