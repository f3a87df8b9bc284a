"""Act V on the chain: a static draft tree verified root to leaf, its exact output law, E[N], and a batched sampler.

widths (w_1, .., w_L) give the children per node at each depth. A round starts at the committed state s: the
root's w_1 children are a multi-draft rule's drafts from Q[s], tested against P[s]. A kept child x is the
next committed token and the walk goes on at x (its w_2 children drafted from Q[x], tested against P[x]); if
every child of a node is rejected, the rule's fallback token ends the round; a kept leaf (depth L) is followed
by a bonus token from P at the leaf. A round commits the accepted path, then that one token: N = depth + 1.

Children are drafted only at the node the walk reaches. The law is the same as drafting the whole tree first:
a node's children are drafted afresh from its own state, so the subtree below a kept child depends only on its
token, and which sibling with that token was kept does not matter. The exact law is a recursion over the next
h tokens from a node at depth j and state s:

  G_j(s; x, rest) = kept_j[s, x] G_{j+1}(x; rest) + fallback_j[s, x] G_0(x; rest),   kept_L = 0, fallback_L = P

tables_law runs it from node tables and a last-level table bonus[s, x, y] = P(the deepest level keeps x, then the
bonus is y): kept_{L-1}[s, x] P[x, y] when the bonus comes from the leaf, as it must; tree_bugs builds others.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_choice, check_generator, check_int, check_widths
from ..multidraft import MAX_TABLE, RULES
from ..multidraft_rules import Stages, Walk, count_outcomes, step_law
from ..sampling import sample_rows
from .chain import check_start, check_table
from .tree_step import step_by_state

__all__ = ["check_widths", "check_tree", "node_tables", "tables_law", "tree_law", "tree_expected_tokens",
           "Sampling", "decode_tree_markov"]


def check_tree(P, Q, start, widths, rule) -> tuple[torch.Tensor, torch.Tensor, int, tuple[int, ...], Stages | Walk]:
    """Validate a tree's arguments; return P and Q in float64 with rows renormalised, start, widths, the verifier.

    rule is a registered rule's name or a Stages / Walk verifier (a rule the registry does not hold).
    """
    P, Q = check_table("P", P), check_table("Q", Q)
    if Q.shape != P.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    start = check_start(start, P.shape[0])
    widths = check_widths(widths)
    if not isinstance(rule, (str, Stages, Walk)):
        raise TypeError(f"rule must be a registered rule's name or a Stages / Walk verifier, got {type(rule).__name__}")
    v = rule if isinstance(rule, (Stages, Walk)) else RULES[check_choice("rule", rule, tuple(RULES))].verifier
    P, Q = (t.double() / t.double().sum(-1, keepdim=True) for t in (P, Q))  # as the chain's sequence law
    return P, Q, start, widths, v


def node_tables(P: torch.Tensor, Q: torch.Tensor, widths: tuple[int, ...],
                v: Stages | Walk) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(kept (V, V), fallback (V, V)) at every state for each depth, then the leaf's (0, P): the bonus."""
    V, laws = P.shape[0], {}
    for w in sorted(set(widths)):
        count = max(count_outcomes(Q[s], w, v.draws) for s in range(V))
        if count * V > MAX_TABLE:
            raise ValueError(f"widths holds {w}, which gives {count} draft outcomes at one node, a table of "
                             f"{count * V} numbers; the exact law holds at most {MAX_TABLE}: use smaller widths")
        rows = [step_law(P[s], Q[s], num_drafts=w, verifier=v) for s in range(V)]
        laws[w] = (torch.stack([r.kept for r in rows]), torch.stack([r.fallback for r in rows]))  # (V, V) each
    return [laws[w] for w in widths] + [(torch.zeros_like(P), P)]


def tables_law(tables: list[tuple[torch.Tensor, torch.Tensor]], bonus: torch.Tensor, *, start: int,
             horizon: int) -> torch.Tensor:
    """The law (V,) * horizon of a round-by-round tree decoder from its node tables, float64, no sampling.

    tables: (kept (V, V), fallback (V, V)) for depths 1..L (the kept table of depth L is unused); bonus (V, V, V):
    bonus[s, x, y] = P(the deepest level, at state s, keeps x and the token after it is y).
    """
    V, L = bonus.shape[0], len(tables)
    one = torch.ones(V, 1, dtype=torch.float64)
    G, root = [one] * L, [one]  # G[j]: (V, V^h) law of the next h tokens at depth j; root[h]: G[0] at h tokens
    for h in range(1, horizon + 1):  # G_j(s; x, rest) = kept_j[s, x] G_{j+1}(x; rest) + fallback_j[s, x] G_0(x; rest)
        leaf = bonus.sum(-1)[:, :, None] if h == 1 else (bonus[..., None] * root[h - 2][None, None]).reshape(V, V, -1)
        G = [((kept[:, :, None] * G[j + 1][None] if j < L - 1 else leaf)
              + fallback[:, :, None] * root[h - 1][None]).reshape(V, -1)  # (V, V, V^(h-1)) -> (V, V^h)
             for j, (kept, fallback) in enumerate(tables)]
        root.append(G[0])
    return root[horizon][start].reshape((V,) * horizon)


def tree_law(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, widths,
             rule: str | Stages | Walk) -> torch.Tensor:
    """The tree decoder's exact output law over all V^horizon sequences, shape (V,) * horizon, float64, no sampling.

    rule is a registered rule's name or any Stages / Walk verifier; the bonus after a kept leaf comes from P there.
    """
    P, Q, start, widths, v = check_tree(P, Q, start, widths, rule)
    horizon = check_int("horizon", horizon, minimum=1)
    tables = node_tables(P, Q, widths, v)[:-1]
    bonus = tables[-1][0][:, :, None] * P[None]  # (V, V, V) kept leaf x at state s, then y ~ P[x]
    return tables_law(tables, bonus, start=start, horizon=horizon)


def tree_expected_tokens(P: torch.Tensor, Q: torch.Tensor, *, start: int, widths, rule: str | Stages | Walk) -> float:
    """E[N] of one round from state start, exactly: 1 + the expected accepted depth (N = depth + 1)."""
    P, Q, start, widths, v = check_tree(P, Q, start, widths, rule)
    tables = node_tables(P, Q, widths, v)
    depth = torch.zeros(P.shape[0], dtype=torch.float64)  # (V,) expected further accepted tokens below a leaf
    for kept, _ in reversed(tables[:-1]):  # D_j(s) = sum_x kept_j[s, x] (1 + D_{j+1}(x))
        depth = kept @ (1 + depth)  # (V,)
    return 1.0 + depth[start].item()


@dataclass(frozen=True)
class Sampling:
    """Where a sampler's randomness comes from and what records it: a torch.Generator (None: torch's global one) and
    a SpecDecodeLog (None: no record)."""

    generator: torch.Generator | None = None
    log: object | None = None

    def __post_init__(self) -> None:
        check_generator(self.generator)
        if self.log is not None and not callable(getattr(self.log, "record_rounds", None)):
            raise TypeError(f"log must be a SpecDecodeLog or None, got {type(self.log).__name__}")


def decode_tree_markov(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, widths, num_samples: int,
                       rule: str | Stages | Walk, sampling: Sampling = Sampling()) -> torch.Tensor:
    """num_samples sequences (num_samples, horizon) from the tree decoder, all at once: each node's children drawn
    and tested by the rule.

    A SpecDecodeLog with k = len(widths) passed as `sampling.log` records every round: its accepted depth A, and the
    tokens of its output (A, then the one target token) that land inside the horizon, as decode_markov records them.
    """
    P, Q, start, widths, v = check_tree(P, Q, start, widths, rule)
    horizon = check_int("horizon", horizon, minimum=1)
    n = check_int("num_samples", num_samples, minimum=1)
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a Sampling(generator=, log=), got {type(sampling).__name__}")
    generator, log, L = sampling.generator, sampling.log, len(widths)
    if log is not None and getattr(log, "k", None) != L:
        raise ValueError(f"log must be a SpecDecodeLog with k = len(widths) = {L}")
    width = horizon + L + 1  # committed tokens, plus room for one round's overshoot (a round writes L + 1 at most)
    buf = torch.empty(n, width, dtype=torch.long)
    flat = buf.view(-1)
    ids, at = torch.arange(n), torch.zeros(n, dtype=torch.long)  # unfinished sequences: rows, tokens so far
    state = torch.full((n,), start, dtype=torch.long)  # (m,) the last committed token: the Markov state
    while ids.numel():
        alive = torch.ones_like(ids, dtype=torch.bool)  # (m,) still walking down the tree
        depth = torch.zeros_like(ids)  # (m,) A: children kept so far this round
        for j, w in enumerate(widths):  # one level of the tree for every sequence still walking
            walking = alive.nonzero().squeeze(1)
            if not walking.numel():
                break
            draw = step_by_state(P, Q, state[walking], num_drafts=w, verifier=v, generator=generator)  # (m_j,) each
            token, kept = draw.token, draw.kept
            flat[ids[walking] * width + at[walking] + j] = token  # a kept child, or the fallback that ends the round
            state[walking] = token
            alive[walking[~kept]] = False
            depth[walking[kept]] += 1
        leaf = alive.nonzero().squeeze(1)  # kept all the way down: the bonus from the target row at the leaf
        if leaf.numel():
            state[leaf] = sample_rows(P[state[leaf]], generator)
            flat[ids[leaf] * width + at[leaf] + L] = state[leaf]
        if log is not None:  # a round that runs past the horizon retires only the tokens that land inside it
            log.record_rounds(depth, emitted=torch.minimum(depth + 1, horizon - at))
        at = at + depth + 1
        keep = at < horizon
        if not keep.all():
            keep = keep.nonzero().squeeze(1)
            ids, at, state = (x.index_select(0, keep) for x in (ids, at, state))
    return buf[:, :horizon]
