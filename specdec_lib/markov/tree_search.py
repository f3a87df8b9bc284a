"""Act V on the chain: draft trees of any shape, their exact E[N], and the best one under a node budget.

An OrderedTree lists a node's child subtrees in stage order: children[i] hangs under the draft the node's
multi-draft rule tests at stage i (for one-hot rules, q's i-th most likely token). A round walks it as tree.py
walks a uniform tree, going on into the kept child's own subtree. With a_i[s, x] = P(at a node in state s, the
stage-i draft is kept and is token x) (the same for every node of more than i children: stage i reads the first
i + 1 drafts only), the expected accepted depth below a node is a vector over states,

  D_T(s) = sum_i sum_x a_i[s, x] (1 + D_{T_i}(x)),   D_leaf = 0,   E[N_T] = 1 + D_T(start).

The best tree maximises S(T) = E[N_T] / (depth(T) c_d + c_v(|T|) + O). Sequoia (arXiv 2402.12374;
Infini-AI-Lab/Sequoia tree_search.py @0ff3ff71475ca148f2dfb7545e0de5caf5c67b39) builds best subtrees bottom up
by size, depth and the root's number of children, with one positional acceptance vector p for every state;
here the value is a vector and the best child differs from one parent state to another, so one subtree per
size is not enough.

D_T is increasing in every D_{T_i} (a >= 0), so a subtree dominated by another (same size, no greater depth, at
least its D in every state) can be swapped for it in any tree: |T| stays, depth does not grow (c_d >= 0) and
E[N] does not fall, so S does not fall. Keeping, per size, the Pareto set of (D, -depth) therefore loses no
optimum; the same holds for the sums over a node's first j children, and at the root (one state) the set is a
staircase. Rules that draft q's top n (one-hot) fix every node's state from the root's, so a subtree counts
at one state only: there it is kept if it is on the (D(x), -depth) staircase of some one state x.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .._checks import check_int, check_real, check_widths
from ..cost import CostV, c_v_at, cost_equation
from ..multidraft import MAX_TABLE
from ..multidraft_rules import Hub, KSeq, Stages, Walk, count_outcomes, node_outcomes
from .tree import check_tree
from .tree_cost import DEFAULT_SEARCH, TreeSearch, check_search

__all__ = ["OrderedTree", "check_ordered_tree", "stage_laws", "stage_table", "tree_values", "max_width",
           "ordered_tree_tokens", "ordered_tree_speedup", "BestOrderedTree", "pareto", "prune", "grow", "staircase",
           "best_ordered_trees", "best_ordered_tree"]


@dataclass(frozen=True)
class OrderedTree:
    """A static draft tree of any shape: children[i] is the subtree under the node's stage-i draft; () is a leaf."""

    children: tuple[OrderedTree, ...] = ()
    size: int = field(init=False, compare=False)   # |T|: draft nodes below this node (the node itself not counted)
    depth: int = field(init=False, compare=False)  # levels below this node: 0 for a leaf

    def __post_init__(self) -> None:
        if not isinstance(self.children, (tuple, list)):
            raise TypeError(f"children must be a tuple of OrderedTree, got {type(self.children).__name__}")
        for i, c in enumerate(self.children):
            if not isinstance(c, OrderedTree):
                raise TypeError(f"children[{i}] must be an OrderedTree, got {type(c).__name__}")
        object.__setattr__(self, "children", tuple(self.children))
        object.__setattr__(self, "size", sum(1 + c.size for c in self.children))
        object.__setattr__(self, "depth", 1 + max(c.depth for c in self.children) if self.children else 0)

    @classmethod
    def from_widths(cls, widths) -> OrderedTree:
        """The uniform tree of widths (w_1, .., w_L): every node at depth j - 1 has w_j children."""
        tree = cls()
        for w in reversed(check_widths(widths)):
            tree = cls((tree,) * w)
        return tree

    @classmethod
    def parse(cls, text: str) -> OrderedTree:
        """The tree written as str(tree) writes it: '[' children separated by ',' ']', a leaf '[]'."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        s = text.replace(" ", "")

        def node(i: int) -> tuple[OrderedTree, int]:
            if s[i:i + 1] != "[":
                raise ValueError(f"text must be a bracket tree such as '[[[]],[]]': expected '[' at {i} in {text!r}")
            i, kids = i + 1, []
            while s[i:i + 1] != "]":
                if kids:
                    if s[i:i + 1] != ",":
                        raise ValueError(f"text must separate siblings by ',': expected ',' or ']' at {i} in {text!r}")
                    i += 1
                child, i = node(i)
                kids.append(child)
            return cls(tuple(kids)), i + 1

        tree, end = node(0)
        if end != len(s):
            raise ValueError(f"text must hold one tree: {text!r} goes on after position {end}")
        return tree

    def __str__(self) -> str:
        return "[" + ",".join(map(str, self.children)) + "]"

    def __repr__(self) -> str:
        return f"OrderedTree.parse('{self}')"

    def widths(self) -> tuple[int, ...] | None:
        """(w_1, .., w_L) if every node at each depth has the same number of children, else None."""
        out, level = [], [self]
        while any(t.children for t in level):
            if len({len(t.children) for t in level}) > 1:
                return None
            out.append(len(level[0].children))
            level = [c for t in level for c in t.children]
        return tuple(out)

    def paths(self) -> list[tuple[int, ...]]:
        """Every draft node as its stage indices from the root, parents first (depth-first, in stage order)."""
        return [(i,) + rest for i, c in enumerate(self.children) for rest in [()] + c.paths()]


def check_ordered_tree(tree) -> OrderedTree:
    """An OrderedTree, or the bracket text of one."""
    if isinstance(tree, str):
        return OrderedTree.parse(tree)
    if not isinstance(tree, OrderedTree):
        raise TypeError(f"tree must be an OrderedTree (or its bracket text), got {type(tree).__name__}")
    return tree


def stage_laws(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, verifier: Stages | Walk) -> torch.Tensor:
    """(num_drafts, V): P(the stage-i draft is kept and is token x) at one node; sums over i to step_law's kept.

    Row i depends on the first i + 1 drafts only, so a node of k < num_drafts children has rows [:k]. Rows past the
    drafts that exist (draws without replacement, or top-n, from a support under num_drafts) stay 0.
    """
    o = node_outcomes(p, q, num_drafts=num_drafts, verifier=verifier)  # drafts (K, k), weight (K,), chance (K, k)
    law = torch.zeros(num_drafts, p.numel(), dtype=torch.float64)
    for i in range(o.drafts.shape[1]):
        law[i].index_add_(0, o.drafts[:, i], o.weight * o.chance[:, i])
    return law


def stage_table(P: torch.Tensor, Q: torch.Tensor, width: int, v: Stages | Walk) -> torch.Tensor:
    """a (width, V, V): a[i, s, x] = P(at state s, the stage-i draft is kept and is x); a k-child node uses a[:k]."""
    V = P.shape[0]
    if isinstance(v, (KSeq, Hub)):  # K-SEQ's rho and SpecHub's pair depend on the node's number of children
        raise ValueError(f"{type(v).__name__} verifiers test with coins fixed by the whole draft tuple, so a node's "
                         "stage laws depend on its number of children: use tree_law with uniform widths")
    count = max(count_outcomes(Q[s], width, v.draws) for s in range(V))
    if count * V > MAX_TABLE:
        raise ValueError(f"a node of {width} children has {count} draft outcomes, a table of {count * V} numbers; "
                         f"the exact law holds at most {MAX_TABLE}: use a smaller max_width (or tree)")
    return torch.stack([stage_laws(P[s], Q[s], num_drafts=width, verifier=v) for s in range(V)], dim=1)  # (width, V, V)


def tree_values(tree: OrderedTree, a: torch.Tensor) -> torch.Tensor:
    """D_T (V,): the expected accepted depth below the tree's root, at every state of the root; a from stage_table."""
    D = torch.zeros(a.shape[-1], dtype=torch.float64)
    for i, child in enumerate(tree.children):  # D_T = sum_i a_i (1 + D_{T_i})
        D = D + a[i] @ (1 + tree_values(child, a))
    return D


def max_width(tree: OrderedTree) -> int:
    """The most children of any node of the tree."""
    return max([len(tree.children)] + [max_width(c) for c in tree.children])


def ordered_tree_tokens(P: torch.Tensor, Q: torch.Tensor, *, start: int, tree, rule: str) -> float:
    """E[N_T] of one round from state start, exactly, for a tree of any shape: 1 + the expected accepted depth."""
    tree = check_ordered_tree(tree)
    P, Q, start, _, v = check_tree(P, Q, start, (1,), rule)  # the chain, start and rule, checked as tree.py checks
    return 1.0 + tree_values(tree, stage_table(P, Q, max(1, max_width(tree)), v))[start].item()


def ordered_tree_speedup(P: torch.Tensor, Q: torch.Tensor, *, start: int, tree, rule: str, c_d: float, c_v: CostV,
                         overhead: float = 0.0) -> float:
    """S(T) = E[N_T] / (depth(T) c_d + c_v(|T|) + overhead), exactly, for a tree of any shape."""
    tree = check_ordered_tree(tree)
    c_d, overhead = check_real("c_d", c_d, low=0.0), check_real("overhead", overhead, low=0.0)
    e_n = ordered_tree_tokens(P, Q, start=start, tree=tree, rule=rule)
    return cost_equation(e_n, draft_steps=tree.depth, c_d=c_d, c_v=c_v_at(c_v, tree.size), overhead=overhead)


@dataclass(frozen=True)
class BestOrderedTree:
    """The tree of largest S among all ordered trees in a budget: the tree, S, E[N], its draft nodes and depth."""

    tree: OrderedTree
    speedup: float
    expected_tokens: float
    nodes: int
    depth: int


Front = tuple  # (values (m, V' + 1), items): a Pareto set of subtree values, -depth last, each with its tree(s)


def pareto(values: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Sorted indices of the rows of values (M, W) that no row dominates (>= everywhere, and > somewhere or earlier).

    The answer does not depend on the order rows are visited in: rows with large sums (the likely dominators) go
    first, in chunks, each checked against the rows kept so far; a last pass drops kept rows a later one dominates.
    """
    def beaten(rows: torch.Tensor, by: torch.Tensor) -> torch.Tensor:  # (r,) does some row of `by` dominate it?
        a, b = values[rows][:, None, :], values[by][None, :, :]  # (r, 1, W), (1, s, W)
        return ((b >= a).all(-1) & ((b > a).any(-1) | (by[None, :] < rows[:, None]))).any(-1)

    kept = torch.zeros(0, dtype=torch.long)
    for rows in torch.sort(-values.sum(-1), stable=True).indices.split(chunk):
        rows = rows[~beaten(rows, kept)]
        kept = torch.cat([kept, rows[~beaten(rows, rows)]])
    return kept[~beaten(kept, kept)].sort().values


def prune(blocks: list[Front], views: list[list[int]]) -> Front | None:
    """The rows of the union of blocks that are Pareto-optimal in some view (a list of columns); None if no blocks."""
    if not blocks:
        return None
    values, items = torch.cat([b[0] for b in blocks]), [t for b in blocks for t in b[1]]
    keep = torch.cat([pareto(values[:, view]) for view in views]).unique()  # sorted
    return values[keep], [items[j] for j in keep.tolist()]


def grow(fronts: list[Front], a: torch.Tensor, size: int, parts: dict, views) -> Front | None:
    """The Pareto set of (sum_i a_i (1 + D_{T_i}), -depth) over nodes whose children hold `size` nodes in all.

    fronts[n] holds the subtrees of n nodes below their root; parts[(j, n)] the sums over a node's first j
    children, n nodes among them, pruned the same way (a node of j children is one of them); items are the tuples
    of children. a (W, V', V): the stage table, V' = V, or 1 at the root, which sits at one state.
    """
    parts.setdefault((0, 0), (torch.zeros(1, a.shape[1] + 1, dtype=torch.float64), [()]))
    done = []
    for j in range(1, min(a.shape[0], size) + 1):
        blocks = []
        for n_child in range(size - j + 1):  # the j-th child holds 1 + n_child nodes, the first j - 1 the rest
            if parts.get((j - 1, size - 1 - n_child)) is None:
                continue
            (base, kids), (child, trees) = parts[(j - 1, size - 1 - n_child)], fronts[n_child]
            add = (1 + child[:, :-1]) @ a[j - 1].T  # (c, V') a_j (1 + D_{T_j}) for every child
            value = base[:, None, :-1] + add[None, :, :]  # (b, c, V')
            depth = torch.minimum(base[:, None, -1:], child[None, :, -1:] - 1)  # (b, c, 1) -max depth
            blocks.append((torch.cat([value, depth], -1).flatten(0, 1), [u + (t,) for u in kids for t in trees]))
        parts[(j, size)] = prune(blocks, views)
        done += [parts[(j, size)]] if parts[(j, size)] is not None else []
    return prune(done, views)


def staircase(P: torch.Tensor, Q: torch.Tensor, *, start: int, v: Stages | Walk, budget: int, max_width: int,
              views: list[list[int]]) -> list[tuple[float, OrderedTree]]:
    """(E[N], tree) for every tree on the root's staircase of (E[N], -depth), size by size up to budget nodes.

    P and Q arrive checked; views are the column sets a subtree must be Pareto-optimal in to be kept (module doc).
    """
    a = stage_table(P, Q, min(check_int("max_width", max_width, minimum=1), budget), v)  # (W, V, V)
    leaf = (torch.zeros(1, P.shape[0] + 1, dtype=torch.float64), [OrderedTree()])  # D = 0, depth 0
    fronts, parts, root_parts, found = [leaf], {}, {}, []  # fronts[n]: the kept subtrees of n nodes
    for size in range(1, budget + 1):
        values, kids = grow(fronts, a[:, start:start + 1], size, root_parts, [[0, 1]])  # (m, 2) E[N] - 1, -depth
        found += [(1.0 + e, OrderedTree(c)) for (e, _), c in zip(values.tolist(), kids)]
        if size < budget:  # a child subtree holds at most budget - 1 nodes
            values, kids = grow(fronts, a, size, parts, views)
            fronts.append((values, [OrderedTree(c) for c in kids]))
    return found


def best_ordered_trees(P: torch.Tensor, Q: torch.Tensor, *, start: int, rule: str, c_d: float, c_v: CostV,
                       budgets, search: TreeSearch = DEFAULT_SEARCH) -> dict[int, BestOrderedTree]:
    """{budget: the ordered tree of largest S with at most `budget` draft nodes, within search's limits}.

    Exact: the Pareto dynamic programme of the module docstring, one pass for every budget. The root's staircase
    holds the best tree of every depth, so the depth limit is exact too. Ties go to the tree with fewer nodes, then
    to the shallower one.
    """
    budgets = [check_int(f"budgets[{i}]", b, minimum=1) for i, b in enumerate(budgets)]
    if not budgets:
        raise ValueError("budgets must hold at least one node budget")
    P, Q, start, _, v = check_tree(P, Q, start, (1,), rule)  # the chain, start and rule, checked as tree.py checks
    c_d, search = check_real("c_d", c_d, low=0.0), check_search(search)
    V = P.shape[0]
    views = [[x, V] for x in range(V)] if v.draws == "top" else [list(range(V + 1))]  # one state a subtree, or all
    found = staircase(P, Q, start=start, v=v, budget=max(budgets), max_width=search.max_width, views=views)
    out = {}
    for b in budgets:
        scored = [(cost_equation(e, draft_steps=t.depth, c_d=c_d, c_v=c_v_at(c_v, t.size), overhead=search.overhead),
                   -t.size, -t.depth, e, t)
                  for e, t in found if t.size <= b and t.depth <= search.max_depth]
        s, _, _, e, t = max(scored, key=lambda r: r[:3])
        out[b] = BestOrderedTree(tree=t, speedup=s, expected_tokens=e, nodes=t.size, depth=t.depth)
    return out


def best_ordered_tree(P: torch.Tensor, Q: torch.Tensor, *, start: int, rule: str, c_d: float, c_v: CostV,
                      budget: int, search: TreeSearch = DEFAULT_SEARCH) -> BestOrderedTree:
    """The ordered tree of largest S(T) with at most `budget` draft nodes (best_ordered_trees for one budget)."""
    budget = check_int("budget", budget, minimum=1)
    return best_ordered_trees(P, Q, start=start, rule=rule, c_d=c_d, c_v=c_v, budgets=(budget,), search=search)[budget]
