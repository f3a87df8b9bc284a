"""Act II without sampling noise: a block decoder's exact output distribution, by walking every outcome.

Starting from the empty prefix, probability is pushed through every branch of a round: each proposal, its
acceptance or rejection, the residual (or bonus) draw, a phantom token; the round's end state is queued
until every sequence reaches the horizon. The same `DecoderSpec` drives this walk, the reference decoder
and the batched one. A branch's mass is the product of the probabilities on its path:

  propose y from the draft row d:     d[y]
  accept it:                          a = min(1, p(y) / q(y))    (p(y) for match acceptance)
  reject it, then emit z:             (1 - a) * fix(z)           fix = the residual law (_fix_law)
  after k acceptances, the bonus z:   p_{k+1}(z)
"""
from __future__ import annotations

import math

import torch

from .registry import make_decoder


def _rows(table: torch.Tensor) -> list[list[float]]:
    """Rows of a table in float64, renormalised so each sums to 1 to machine precision."""
    table = table.double()
    return (table / table.sum(-1, keepdim=True)).tolist()


def _normalise(w: list[float]) -> list[float]:
    total = sum(w)
    return [x / total for x in w]


def _fix_law(spec, p: list[float], q: list[float], y: int, a: float) -> list[float]:
    """Law of the token a rejection of y emits (given that it was rejected with acceptance probability a)."""
    if spec.acceptance == "match":  # the target's own sample, conditioned on differing from y
        return _normalise([0.0 if z == y else pz for z, pz in enumerate(p)])
    w = {
        "normalised": lambda: [max(pz - qz, 0.0) for pz, qz in zip(p, q)],
        "softmax": lambda: [math.exp(max(pz - qz, 0.0)) for pz, qz in zip(p, q)],
        "target": lambda: list(p),
        "single_token": lambda: [0.0 if z == y else pz for z, pz in enumerate(p)],
    }[spec.residual]()
    w = list(p) if sum(w) <= 0 else w
    if spec.residual_uniform == "fresh":
        return _normalise(w)
    # reused: the inverse-CDF draw sees u ~ U(a, 1), the acceptance uniform conditioned on a rejection
    cdf, lo, law = _normalise(w), 0.0, []
    last = max(z for z, x in enumerate(w) if x > 0)
    for z, x in enumerate(cdf):
        hi = 1.0 if z == last else min(lo + x, 1.0)
        law.append(max(0.0, hi - max(lo, a)) / (1.0 - a) if z <= last else 0.0)
        lo = hi if z < last else lo
    return law


def _accept_probability(spec, p: list[float], q: list[float], y: int, *, first: bool) -> float:
    """The chance the test keeps proposal y: min(1, p(y) / q(y)); p(y) when a target sample must match y."""
    if first and not spec.verify_first:
        return 1.0
    if spec.acceptance == "match":
        return p[y]
    return min(1.0, p[y] / q[y]) if q[y] > 0 else float(p[y] > 0)  # as accept_table: p/0 = inf, 0/0 -> 0


def _power_rows(table: list[list[float]], steps: int) -> list[list[float]]:
    """Rows of table^steps: where a Markov draft is after `steps` more proposals."""
    V = len(table)
    out = [[float(i == j) for j in range(V)] for i in range(V)]
    for _ in range(steps):
        out = [[sum(out[i][m] * table[m][j] for m in range(V)) for j in range(V)] for i in range(V)]
    return out


def _walk(spec, target, propose, ratio, draft, start: int, horizon: int, k: int) -> torch.Tensor:
    """Exact output distribution (V,) * horizon of the decoder described by spec on these tables."""
    V = len(target)
    out = torch.zeros((V,) * horizon, dtype=torch.float64)
    frontier: dict[tuple, float] = {((), start): 1.0}  # (committed prefix, draft's stale state) -> probability
    ahead = [_power_rows(propose, steps) for steps in range(k)]  # draft state after the unverified tail

    def finish(seq: tuple, mass: float) -> None:
        out[seq[:horizon]] += mass

    def settle(seq: tuple, dlast_law: dict, mass: float) -> None:
        """A round ended with `seq` committed; add a phantom token if any, then finish or queue each state."""
        seqs = {seq: 1.0}
        if spec.phantom and len(seq) < horizon:
            seqs = {seq + (t,): w for t, w in enumerate(draft[seq[-1]]) if w > 0}
        for s, w in seqs.items():
            if len(s) >= horizon:
                finish(s, mass * w)
                continue
            for d, dw in dlast_law.items():
                frontier[(s, d)] = frontier.get((s, d), 0.0) + mass * w * dw

    def walk(seq: tuple, tctx: int, dctx: int, qctx: int, j: int, mass: float, dlast: int) -> None:
        """Inside a round: `seq` committed so far; proposal j + 1 drafted from dctx, judged after tctx."""
        if len(seq) >= horizon:  # nothing later in the round can change the first `horizon` tokens
            finish(seq, mass)
            return
        if j == k:  # a full block: the bonus token
            row = target[tctx] if spec.bonus == "target" else draft[tctx]
            for z, w in enumerate(row):
                if w > 0:
                    settle(seq + (z,), {tctx if k else dlast: 1.0}, mass * w)
            return
        q = ratio[qctx]
        for y, d in enumerate(propose[dctx]):  # propose y: mass d[y]
            if d <= 0:
                continue
            p = target[y] if spec.judge == "off_by_one" else target[tctx]
            a = _accept_probability(spec, p, q, y, first=j == 0)
            if a > 0:  # accept it: mass d[y] a, and the walk goes on to the next slot
                walk(seq + (y,), y, y, y, j + 1, mass * d * a, dlast)
            if a < 1:  # reject it: mass d[y] (1 - a) fix(z), and the round ends with token z
                base = seq + (y,) if spec.keep_rejected else seq
                tail = {s: w for s, w in enumerate(ahead[k - 1 - j][y]) if w > 0}  # the draft ran on to y_k
                for z, w in enumerate(_fix_law(spec, p, q, y, a)):
                    if w > 0:
                        settle(base + (z,), tail, mass * d * (1 - a) * w)

    for length in range(horizon):  # rounds only lengthen the prefix, so one sweep by length suffices
        for key in [key for key in frontier if len(key[0]) == length]:
            (seq, dlast), mass = key, frontier.pop(key)
            full = (start, *seq)
            s = full[-1]
            d0 = {"committed": s, "own_last_proposal": dlast, "one_too_far": full[-2] if len(full) > 1 else start}
            d0 = d0[spec.draft_context]
            walk(seq, s, d0, d0 if spec.ratio_context == "draft" else s, 0, mass, dlast)
    return out


def exact_decoder_distribution(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int,
                               mode: str = "correct", Q_bad: torch.Tensor | None = None,
                               temperature: float = 1.0, top_k: int | None = None,
                               top_p: float | None = None) -> torch.Tensor:
    """The decoder's exact output distribution over all V^horizon sequences, shape (V,) * horizon, in float64.

    Tables are taken in float64 with rows renormalised, exactly as exact_sequence_distribution takes P; the
    sampling policy is applied to every table first, as decode_markov applies it (temperature 0 is greedy).
    """
    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p)
    return _walk(dec.spec, *(_rows(t) for t in (dec.target, dec.propose, dec.ratio, dec.draft)),
                 dec.start, dec.horizon, dec.k)
