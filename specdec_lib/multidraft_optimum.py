"""Act VI: the most any exact verifier can keep of num_drafts drafts, and every registered rule beside it.

An exact verifier couples the draft tuple X = (X_1..X_n), drawn by its scheme, with an output Y ~ p; it keeps a draft
at most when Y is one of them, so its acceptance is at most max P(Y in X) over all couplings (Hu et al. 2025, arXiv
2502.18779, study this linear programme). That maximum is a max-flow from the tuples (capacity P(X = x)) through
"token y is in x" (unbounded) to the tokens (capacity p(y)), and by max-flow / min-cut it equals

    min over token sets A of  p(A) + 1 - P(every draft lies in A),

the cut that severs the tokens in A and the tuples with a draft outside A. Every one of the 2^V sets is enumerated,
so the vocabulary is capped (MAX_VOCAB). P(every draft in A) is q(A)^n for i.i.d. drafts, a recursion over the sets
already drawn for drafts without replacement, 1[q's top n lie in A] for "top", and for SpecHub's hub pair
1[a in A] q(A - a) / (1 - q(a)).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_int, check_pair
from .multidraft import multidraft_accept_probability, multidraft_rules
from .multidraft_draws import check_draws, top_order

__all__ = ["MAX_VOCAB", "token_sets", "all_drafts_in", "multidraft_optimum", "OptimumRow", "optimum_table"]

MAX_VOCAB = 16  # 2^16 token sets


def token_sets(V: int) -> torch.Tensor:
    """Every subset of V tokens as a row of membership flags (2^V, V): set s holds token x when bit x of s is 1."""
    return (torch.arange(1 << V)[:, None] >> torch.arange(V)) & 1 == 1


def _subset_sums(h: torch.Tensor, V: int) -> torch.Tensor:
    """f(A) = sum of h(S) over the sets S inside A, for every A (the zeta transform: a cumulative sum per token)."""
    f = h.reshape((2,) * V) if V else h
    for axis in range(V):
        f = f.cumsum(axis)
    return f.reshape(-1)


def _without_replacement(q: torch.Tensor, num_drafts: int, sets: torch.Tensor) -> torch.Tensor:
    """P(the drafts are exactly the set S) for every S (2^V,): h_j(S + x) += h_{j-1}(S) q(x) / q(not S)."""
    V, k = q.numel(), min(num_drafts, int((q > 0).sum()))
    rest = (~sets).double() @ q  # (2^V,) the mass not yet drawn: a sum, never 1 - q(S)
    h = torch.zeros(1 << V, dtype=torch.float64)
    h[0] = 1.0
    for _ in range(k):
        step = torch.where(rest > 0, h / torch.where(rest > 0, rest, 1.0), 0.0)  # (2^V,) h(S) / q(not S)
        new = torch.zeros_like(h)
        for x in range(V):
            src = (~sets[:, x]).nonzero().squeeze(1)  # the sets without x
            new.index_add_(0, src | (1 << x), step[src] * q[x])
        h = new
    return _subset_sums(h, V)


def all_drafts_in(q: torch.Tensor, num_drafts: int, draws: str) -> torch.Tensor:
    """P(every draft lies in A) for every token set A (2^V,), in the order of token_sets; q validated, float64."""
    sets = token_sets(q.numel())
    q_A = sets.double() @ q  # (2^V,)
    if draws == "iid" or (draws == "hub" and num_drafts == 1):
        return q_A ** num_drafts
    if draws == "top":
        return sets[:, top_order(q)[:num_drafts]].all(1).double()
    if draws == "without_replacement":
        return _without_replacement(q, num_drafts, sets)
    a = top_order(q)[0]  # hub pair: P(both in A) = 1[a in A] (q(A - a) + q(a) q(A - a) / q(not a))
    off = sets.clone()
    off[:, a] = False
    others = q[torch.arange(q.numel()) != a].sum()  # 1 - q(a), as the sum of the others
    if others <= 0:  # q a point mass on a: one draft
        return sets[:, a].double()
    return sets[:, a].double() * (off.double() @ q) / others


def multidraft_optimum(p: torch.Tensor, q: torch.Tensor, num_drafts: int, *, draws: str = "iid") -> float:
    """The largest P(a draft is kept) of any exact verifier of num_drafts drafts drawn from q by `draws`, target p."""
    p, q = check_pair(p, q)
    num_drafts = check_int("num_drafts", num_drafts, minimum=1)
    check_draws(draws, num_drafts)
    V = p.numel()
    if V > MAX_VOCAB:
        raise ValueError(f"p and q have V = {V} tokens; multidraft_optimum enumerates the 2^V token sets and holds "
                         f"at most MAX_VOCAB = {MAX_VOCAB} tokens")
    p, q = p.double() / p.double().sum(), q.double() / q.double().sum()
    p_A = token_sets(V).double() @ p
    return float((p_A + 1 - all_drafts_in(q, num_drafts, draws)).min())


@dataclass(frozen=True)
class OptimumRow:
    """One rule at one num_drafts: its scheme, whether it is exact, P(a draft kept), and the optimum for its scheme."""

    rule: str
    draws: str
    num_drafts: int
    exact: bool
    accept: float
    optimum: float


def optimum_table(p: torch.Tensor, q: torch.Tensor, *, max_drafts: int = 4,
                  chapter: str | None = None) -> list[OptimumRow]:
    """The rules of a chapter (None: every registered rule) at num_drafts = 1..max_drafts (a rule's own max_drafts at
    most), each beside the optimum for its draft scheme."""
    max_drafts = check_int("max_drafts", max_drafts, minimum=1)
    best: dict[tuple[str, int], float] = {}
    rows = []
    for r in multidraft_rules(chapter):
        for n in range(1, min(max_drafts, r.max_drafts or max_drafts) + 1):
            key = (r.verifier.draws, n)
            if key not in best:
                best[key] = multidraft_optimum(p, q, n, draws=key[0])
            rows.append(OptimumRow(rule=r.name, draws=key[0], num_drafts=n, exact=r.exact,
                                   accept=multidraft_accept_probability(p, q, num_drafts=n, rule=r.name),
                                   optimum=best[key]))
    return rows
