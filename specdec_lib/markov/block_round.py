"""Block verification on the Markov chain, tabulated: every outcome of a block round from each committed state.

A block verifier (spec.verifier "block" or "block_naive") judges the k proposals together, so a round's outcome
is not a walk slot by slot: the exact engine enumerates the V^k draft blocks from each state s once, weighs each
by its draft mass prod_i propose[X_{i-1}, X_i], and reads semantics.block_law for the law of tau (the drafts kept)
and of the token after them. What it keeps is kept[i][x_1, .., x_i, z] = P(tau = i, X_1..X_i, Y = z | s): the later
drafts summed out, since only the committed tokens (and tau) shape what follows. The batched engine reads a
round off block_table instead: every block (s, X_1 .. X_k)'s weights and the token's weights after each tau.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..block_verification import BlockWeights
from . import semantics as sem

__all__ = ["BlockOutcomes", "block_states", "block_table", "block_outcomes", "walk_block"]


def _sum_out(t: torch.Tensor, dims: tuple) -> torch.Tensor:
    """t summed over dims (no dims: t itself; torch would sum everything)."""
    return t.sum(dim=dims) if dims else t


@dataclass(frozen=True)
class BlockOutcomes:
    """A block round from one state: kept[i] (V,) * (i + 1) the mass of tau = i with its committed tokens, and
    tau[i] = P(tau = i) (its sum over the tokens)."""

    kept: list
    tau: list


def block_states(V: int, k: int) -> torch.Tensor:
    """Every block (s, X_1 .. X_k) over V tokens, (V^(k+1), k+1), row b = s V^k + X_1 V^(k-1) + .. + X_k."""
    return torch.arange(V ** (k + 1))[:, None] // V ** torch.arange(k, -1, -1) % V  # the base-V digits of b


def block_table(spec, target: torch.Tensor, ratio: torch.Tensor, k: int) -> tuple[BlockWeights, torch.Tensor]:
    """Every block's weights (B = V^(k+1) rows, block_states' order) and the unnormalised weights (B, k+1, V) of the
    token after tau = 0 .. k kept drafts, for tables (V, V) in float64: target P and the verifier's q."""
    states = block_states(target.shape[0], k)  # (B, k+1)
    p_rows, q_rows = target[states], ratio[states[:, :k]]  # (B, k+1, V), (B, k, V)
    weights = sem.VERIFIERS[spec.verifier](p_rows, q_rows, states[:, 1:])
    return weights, sem.block_tokens(spec, p_rows, q_rows, weights)


def block_outcomes(spec, target: torch.Tensor, ratio: torch.Tensor, propose: torch.Tensor, k: int) -> list:
    """BlockOutcomes from every state s, for tables (V, V) in float64: target P, the verifier's q, the proposer."""
    V = target.shape[0]
    states = block_states(V, k).reshape(V, V ** k, k + 1)  # (V, V^k, k+1) the start state s, then the drafts
    # 1. each draft block's mass under the proposer from each state s, and the rows that judge it: (V, V^k, k+1)
    mass = propose[states[..., :-1], states[..., 1:]].prod(-1)  # (V, V^k)
    law, token = sem.block_law(spec, target[states], ratio[states[..., :k]], states[..., 1:])  # (.., k+1), (.., k+1, V)
    # 2. the joint mass of (X, tau = i, Y = z) from s, then the drafts after the kept ones summed out
    joint = mass[..., None, None] * law[..., None] * token  # (V, V^k, k+1, V)
    kept = [_sum_out(joint[:, :, i].reshape((V,) * (k + 2)), tuple(range(i + 1, k + 1))) for i in range(k + 1)]
    tau = (mass[..., None] * law).sum(1)  # (V, k+1)
    return [BlockOutcomes(kept=[t[s] for t in kept], tau=tau[s].tolist()) for s in range(V)]


def walk_block(walk, seq: tuple, s: int, mass: float) -> None:
    """One block round of exact.RoundWalk `walk` from the committed prefix seq (last token s), carrying `mass`."""
    table, left = walk.laws.block[s], walk.horizon - len(seq)
    # accepted proposals that land inside the horizon: min(tau, tokens left)
    walk.stats.accepted += mass * sum(p * min(i, left) for i, p in enumerate(table.tau))
    for i, kept in enumerate(table.kept):
        if i + 1 >= left:  # the round reaches the horizon: only its first `left` tokens are ever seen
            walk.out[seq] += mass * _sum_out(kept, tuple(range(left, i + 1)))
            continue
        where = kept > 0
        for tokens, w in zip(where.nonzero().tolist(), kept[where].tolist()):
            walk.settle(seq + tuple(tokens), {0: 1.0}, mass * w, walk.key.k)
