"""Act II without sampling noise: the block decoder's exact output distribution, by walking every outcome."""
from __future__ import annotations

import torch

from .decoders import decoder_tables


def _walk_rounds(P, propose, ratio, Q, start: int, horizon: int, k: int, mode: str) -> torch.Tensor:
    """Propagate probability through every round's accept, reject, residual and bonus outcome."""
    V = len(P)
    out = torch.zeros((V,) * horizon, dtype=torch.float64)
    frontier = {(): 1.0}  # committed prefix at a round boundary -> probability of being there

    def settle(seq: tuple, mass: float) -> None:
        """A round ended with `seq` committed: add the phantom token if any, then finish or queue the prefix."""
        if mode == "phantom_history" and len(seq) < horizon:
            row = Q[seq[-1]]
            for t in range(V):
                if row[t] > 0:
                    settle_plain(seq + (t,), mass * row[t])
            return
        settle_plain(seq, mass)

    def settle_plain(seq: tuple, mass: float) -> None:
        if len(seq) >= horizon:
            out[seq[:horizon]] += mass
        else:
            frontier[seq] = frontier.get(seq, 0.0) + mass

    def walk(seq: tuple, ctx: int, j: int, mass: float) -> None:
        """Inside a round: `seq` committed so far, proposal j + 1 about to be drafted after token ctx."""
        if len(seq) >= horizon:  # the rest of the round cannot change the first `horizon` tokens
            out[seq[:horizon]] += mass
            return
        if j == k:  # every proposal accepted: the bonus token comes from the target
            for z in range(V):
                if P[ctx][z] > 0:
                    settle(seq + (z,), mass * P[ctx][z])
            return
        q = ratio[ctx]  # the q the verifier uses
        for y in range(V):
            d = propose[ctx][y]  # the probability the draft really proposes y
            if d <= 0:
                continue
            p = P[y] if mode == "off_by_one" else P[ctx]  # the target row that judges y
            a = min(1.0, p[y] / q[y]) if q[y] > 0 else float(p[y] > 0)  # as accept_table: p/0 = inf, 0/0 -> 0
            if a > 0:
                walk(seq + (y,), y, j + 1, mass * d * a)
            if a < 1:
                r = [max(pz - qz, 0.0) for pz, qz in zip(p, q)]  # the residual [p - q]_+
                total = sum(r)
                r, total = (p, 1.0) if total <= 0 else (r, total)
                for z in range(V):
                    if r[z] > 0:
                        settle(seq + (z,), mass * d * (1 - a) * r[z] / total)

    for length in range(horizon):  # rounds only lengthen the prefix, so one sweep by length suffices
        for seq in [s for s in frontier if len(s) == length]:
            mass = frontier.pop(seq)
            walk(seq, seq[-1] if seq else start, 0, mass)
    return out


def exact_decoder_distribution(P: torch.Tensor, Q: torch.Tensor, start: int, horizon: int, k: int,
                               mode: str = "correct", *, Q_bad: torch.Tensor | None = None,
                               temperature: float = 1.0, top_k: int | None = None,
                               top_p: float | None = None) -> torch.Tensor:
    """The decoder's exact output distribution over all V^horizon sequences, shape (V,) * horizon, in float64.

    Tables are taken in float64 with rows renormalised, exactly as exact_sequence_distribution takes P; the
    sampling policy is applied to every table first, as decode_markov applies it (temperature 0 is greedy).
    """
    P, propose, ratio, Q, start, horizon, k = decoder_tables(P, Q, start, horizon, k, mode, Q_bad=Q_bad,
                                                            temperature=temperature, top_k=top_k, top_p=top_p)
    rows = [_stochastic_rows(t) for t in (P, propose, ratio, Q)]  # plain floats: the walk is scalar code
    return _walk_rounds(*rows, start, horizon, k, mode)


def _stochastic_rows(table: torch.Tensor) -> list[list[float]]:
    """Rows of a table in float64, renormalised so each sums to 1 to machine precision."""
    table = table.double()
    return (table / table.sum(-1, keepdim=True)).tolist()
