"""Act V on the chain, one node of a draft tree: a multi-draft step that keeps apart a kept child and the fallback.

A node's children are the n drafts of a registered multi-draft rule, drawn and tested exactly as the rule does
(multidraft_rules' draft law, stage test, residual updates and walk). multidraft_law and sample_multidraft add a
kept child and the fallback draw together, since one step only emits a token; a tree must tell them apart, since
a kept child is descended into and a fallback ends the round. So these functions follow stages_law / walk_law and
stages_sample / walk_sample step for step and return the two apart; the tests hold them to the rule's own
functions (the parts sum to multidraft_law; the tokens equal sample_multidraft's, draw for draw).
"""
from __future__ import annotations

import torch

from ..multidraft_rules import Stages, Walk, distinct, draft_outcomes, draw_drafts, final_target, remove_tokens, stage
from ..sampling import sample_rows


def step_law(p: torch.Tensor, q: torch.Tensor, n: int, v: Stages | Walk) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept (V,), fallback (V,)): P(a child with token x is kept), P(every child rejected and x emitted).

    p and q are float64 and normalised; kept.sum() + fallback.sum() = 1, and kept + fallback is multidraft_law.
    """
    X, weight = draft_outcomes(q, n, v.draws)  # (K, k) every draft tuple, (K,) its probability
    kept = torch.zeros(X.shape[0], p.numel(), dtype=torch.float64)  # (K, V) law of the kept child, given the drafts
    if isinstance(v, Walk):
        hi = p[X].cumsum(-1).clamp(max=1.0)  # (K, k) where each child's slice of [0, 1) ends, as walk_law
        lo = torch.cat([torch.zeros_like(hi[:, :1]), hi[:, :-1]], dim=1)  # (K, k)
        kept.scatter_add_(1, X, hi - lo)
        rest = remove_tokens(p.repeat(X.shape[0], 1), X)  # (K, V) p without the children
        fallback = (1 - hi[:, -1:]) * rest / rest.sum(-1, keepdim=True)  # (K, V)
        return weight @ kept, weight @ fallback
    target, q_i = p.repeat(X.shape[0], 1), q.repeat(X.shape[0], 1)  # (K, V) each stage's target p_i and q_i
    reach = torch.ones_like(weight)  # (K,) P(every earlier draft rejected | the drafts)
    for x in X.T:  # (K,) draft i of every tuple, tested as stages_law tests it
        a, target, q_i = stage(v, q, target, q_i, x)
        kept.scatter_add_(1, x[:, None], (reach * a)[:, None])
        reach = reach * (1 - a)
    fallback = reach[:, None] * final_target(v, p, q, target)  # (K, V)
    return weight @ kept, weight @ fallback


def step_sample(p: torch.Tensor, q: torch.Tensor, n: int, v: Stages | Walk, size: int,
                generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(token (size,), kept (size,) bool) from size independent steps: sample_multidraft's tokens, draw for draw.

    kept is True where the token is a kept child, False where every child was rejected and it is the fallback draw.
    """
    X = draw_drafts(q, n, v.draws, size, generator)  # (size, k) the children, drawn as the rule draws them
    if isinstance(v, Walk):  # as walk_sample: one uniform walked along the children's target mass
        u = torch.rand(size, 1, dtype=torch.float64, generator=generator)
        slot = (p[X].cumsum(-1) <= u).sum(-1)  # (size,) first child whose slice holds u; k when past them all
        out = X.gather(1, slot.clamp(max=X.shape[1] - 1)[:, None]).squeeze(1)
        kept = slot < X.shape[1]
        out[~kept] = sample_rows(remove_tokens(p.repeat(int((~kept).sum()), 1), X[~kept]), generator)
        return out, kept
    V = p.numel()  # as stages_sample: one coin per stage until one is kept, the stage state kept per draft history
    h = torch.zeros(size, dtype=torch.long)
    target, q_i = p[None], q[None]  # (H, V) one row per distinct draft history
    out = torch.full((size,), -1, dtype=torch.long)
    for x in X.T:  # (size,) draft i of every step
        pairs, h = distinct(h * V + x)
        a, target, q_i = stage(v, q, target[pairs // V], q_i[pairs // V], pairs % V)
        keep = (out < 0) & (torch.rand(size, dtype=torch.float64, generator=generator) < a[h])
        out = torch.where(keep, x, out)
    kept = out >= 0
    out[~kept] = sample_rows(final_target(v, p, q, target)[h[~kept]], generator)
    return out, kept


def step_by_state(P: torch.Tensor, Q: torch.Tensor, states: torch.Tensor, n: int, v: Stages | Walk,
                  generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(token (m,), kept (m,)) for m nodes at Markov states (m,): one step_sample call per distinct state."""
    token, kept = torch.empty_like(states), torch.empty_like(states, dtype=torch.bool)
    present = torch.bincount(states, minlength=P.shape[0]).nonzero().squeeze(1)  # the states that occur
    for s in present.tolist():  # at most V groups; every node of a group shares the rows P[s], Q[s]
        at = (states == s).nonzero().squeeze(1)  # (m_s,)
        token[at], kept[at] = step_sample(P[s], Q[s], n, v, at.numel(), generator)
    return token, kept
