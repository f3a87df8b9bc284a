"""Act II without sampling noise: a block decoder's exact output distribution, by walking every outcome.

Starting from the empty prefix, probability is pushed through every branch of a round: each proposal, its
acceptance or rejection, the residual (or bonus) draw, a phantom token; the round's end state is queued
until every sequence reaches the horizon. The queue's key holds the next round's k too, so a k that a
schedule changes from round to round is walked exactly, as are early stops and n-gram lookups. The same
`DecoderSpec` drives this walk, the reference decoder and the batched one. A branch's mass is the product
of the probabilities on its path:

  propose y from the draft row d:     d[y]
  accept it:                          a = min(1, p(y) / q(y))    (p(y) for match; a table of p for typical, SGLang)
  reject it, then emit z:             (1 - a) * fix(z)           fix = the residual law (_fix_law)
  after k acceptances, the bonus z:   p_{k+1}(z)
"""
from __future__ import annotations

import torch

from .draft_rules import fix_tables, next_k, ngram_proposals
from .reference import residual_weights
from .registry import make_decoder
from .spec import TARGET_ONLY, target_only_accept


def _rows(table: torch.Tensor) -> list[list[float]]:
    """Rows of a table in float64, renormalised so each sums to 1 to machine precision."""
    table = table.double()
    return (table / table.sum(-1, keepdim=True)).tolist()


def _normalise(w: list[float]) -> list[float]:
    total = sum(w)
    return [x / total for x in w]


def _fix_law(spec, p: list[float], q: list[float], y: int, a: float, fixed: dict) -> list[float]:
    """Law of the token a rejection of y emits (given that it was rejected with acceptance probability a)."""
    if spec.acceptance == "match":  # the target's own sample, conditioned on differing from y
        return _normalise([0.0 if z == y else pz for z, pz in enumerate(p)])
    if spec.residual in fixed:  # argmax p, or p above the typical threshold: the target row alone
        return fixed[spec.residual]
    w = residual_weights(spec, p, q, y)
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


def _accept_probability(spec, p: list[float], q: list[float], y: int, *, first: bool, keep: list[float]) -> float:
    """The chance the test keeps proposal y: min(1, p(y) / q(y)); p(y) when a target sample must match y;
    keep[y] for a test that reads p alone (the typical test: 0 or 1; SGLang's thresholds)."""
    if first and not spec.verify_first:
        return 1.0
    if spec.acceptance == "match":
        return p[y]
    if spec.acceptance in TARGET_ONLY:  # the typical test (0 or 1) or SGLang's thresholds: p(y) alone
        return keep[y]
    return min(1.0, p[y] / q[y]) if q[y] > 0 else float(p[y] > 0)  # as accept_table: p/0 = inf, 0/0 -> 0


def _drafted(propose: list[list[float]], k: int, confidence: float) -> list[list[float]]:
    """g[r][d]: expected tokens a confidence-stopping draft drafts from state d with r slots left."""
    V = len(propose)
    g = [[0.0] * V]
    for _ in range(k):
        g.append([sum(w * (1 + (g[-1][y] if w >= confidence else 0.0)) for y, w in enumerate(propose[d]))
                  for d in range(V)])
    return g


def _power_rows(table: list[list[float]], steps: int) -> list[list[float]]:
    """Rows of table^steps: where a Markov draft is after `steps` more proposals."""
    V = len(table)
    out = [[float(i == j) for j in range(V)] for i in range(V)]
    for _ in range(steps):
        out = [[sum(out[i][m] * table[m][j] for m in range(V)) for j in range(V)] for i in range(V)]
    return out


def walk_law(spec, target, propose, ratio, draft, start: int, horizon: int, k: int,
             extra: dict) -> tuple[torch.Tensor, dict]:
    """Exact output distribution (V,) * horizon of the decoder described by spec on these tables (rows as lists),
    and its expected round counts: rounds (target calls), plain (rounds that drafted nothing), drafted
    (proposals drafted, past the horizon too) and accepted (accepted proposals inside the horizon).

    extra: {"fixed": {kind: rows} of target-only laws (argmax, typical), "keep": rows of a target-only test}.
    """
    V = len(target)
    out = torch.zeros((V,) * horizon, dtype=torch.float64)
    stats = dict.fromkeys(("rounds", "plain", "drafted", "accepted"), 0.0)
    fixed, keep = extra["fixed"], extra["keep"]
    # (committed prefix, draft's stale state, the round's k) -> probability
    frontier: dict[tuple, float] = {((), start, k): 1.0}
    ahead = [] if spec.adaptive else [_power_rows(propose, steps) for steps in range(k)]  # draft after the tail
    g = _drafted(propose, k, spec.confidence) if spec.stop == "confidence" else None

    def finish(seq: tuple, mass: float) -> None:
        out[seq[:horizon]] += mass

    def settle(seq: tuple, dlast_law: dict, mass: float, k_next: int) -> None:
        """A round ended with `seq` committed; add a phantom token if any, then finish or queue each state."""
        seqs = {seq: 1.0}
        if spec.phantom and len(seq) < horizon:
            seqs = {seq + (t,): w for t, w in enumerate(draft[seq[-1]]) if w > 0}
        for s, w in seqs.items():
            if len(s) >= horizon:
                finish(s, mass * w)
                continue
            for d, dw in dlast_law.items():
                frontier[(s, d, k_next)] = frontier.get((s, d, k_next), 0.0) + mass * w * dw

    def walk(seq: tuple, tctx: int, dctx: int, qctx: int, j: int, mass: float, dlast: int, kr: int, m: int,
             props) -> None:
        """Inside a round: `seq` committed so far; proposal j + 1 of m drafted from dctx, judged after tctx."""
        if len(seq) >= horizon:  # nothing later in the round can change the first `horizon` tokens
            finish(seq, mass)
            return
        if j == m:  # a full block: the bonus token
            row = {"target": target, "draft": draft, **fixed}[spec.bonus][tctx]
            for z, w in enumerate(row):
                if w > 0:
                    settle(seq + (z,), {tctx if kr else dlast: 1.0}, mass * w,
                           next_k(spec, kr, accepted=m, drafted=m))
            return
        q = ratio[qctx]
        drafts = [(props[j], 1.0)] if props is not None else enumerate(propose[dctx])  # one-hot for a lookup
        for y, d in drafts:  # propose y: mass d[y]
            if d <= 0:
                continue
            judge = y if spec.judge == "off_by_one" else tctx
            p = target[judge]
            a = _accept_probability(spec, p, q, y, first=j == 0, keep=keep[judge])
            if a > 0:  # accept it: mass d[y] a, and the walk goes on to the next slot
                stats["accepted"] += mass * d * a
                stops = spec.stop == "confidence" and d < spec.confidence  # unsure of y: the draft stops after it
                walk(seq + (y,), y, y, y, j + 1, mass * d * a, dlast, kr, j + 1 if stops else m, props)
            if a < 1 and spec.stop == "coin":  # the peeker drops y and stops: the target's token at tctx
                for z, w in enumerate(target[tctx]):
                    if w > 0:
                        settle(seq + (z,), {0: 1.0}, mass * d * (1 - a) * w, kr)
            elif a < 1:  # reject it: mass d[y] (1 - a) fix(z), and the round ends with token z
                base = seq + (y,) if spec.keep_rejected else seq
                tail = {0: 1.0} if spec.adaptive else {s: w for s, w in enumerate(ahead[kr - 1 - j][y]) if w > 0}
                k_next = next_k(spec, kr, accepted=j, drafted=m)
                for z, w in enumerate(_fix_law(spec, p, q, y, a, {n: rows[judge] for n, rows in fixed.items()})):
                    if w > 0:
                        settle(base + (z,), tail, mass * d * (1 - a) * w, k_next)

    for length in range(horizon):  # rounds only lengthen the prefix, so one sweep by length suffices
        for key in [key for key in frontier if len(key[0]) == length]:
            (seq, dlast, kr), mass = key, frontier.pop(key)
            full = (start, *seq)
            s = full[-1]
            d0 = {"committed": s, "own_last_proposal": dlast, "one_too_far": full[-2] if len(full) > 1 else start}
            d0 = d0[spec.draft_context]
            props = ngram_proposals(list(full), kr, spec.ngram_match) if spec.proposer == "ngram" else None
            m = len(props) if props is not None else kr
            stats["rounds"] += mass
            stats["plain"] += mass * (m == 0)
            stats["drafted"] += mass * (g[kr][d0] if g is not None else m)  # a coin peeker counts its k drafts
            walk(seq, s, d0, d0 if spec.ratio_context == "draft" else s, 0, mass, dlast, kr, m, props)
    return out, stats


def decoder_walk(dec) -> tuple[torch.Tensor, dict]:
    """walk_law for a validated Decoder: tables in float64, rows renormalised."""
    target, propose, ratio, draft = (_rows(t) for t in (dec.target, dec.propose, dec.ratio, dec.draft))
    P = torch.tensor(target, dtype=torch.float64)
    fixed = {name: t.tolist() for name, t in fix_tables(dec.spec, P).items()}
    keep = target_only_accept(dec.spec, P).tolist()
    return walk_law(dec.spec, target, propose, ratio, draft, dec.start, dec.horizon, dec.k,
                    {"fixed": fixed, "keep": keep})


def exact_decoder_distribution(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int,
                               mode: str = "correct", Q_bad: torch.Tensor | None = None,
                               temperature: float = 1.0, top_k: int | None = None,
                               top_p: float | None = None, options: dict | None = None) -> torch.Tensor:
    """The decoder's exact output distribution over all V^horizon sequences, shape (V,) * horizon, in float64.

    Tables are taken in float64 with rows renormalised, exactly as exact_sequence_distribution takes P; the
    sampling policy is applied to every table first, as decode_markov applies it (temperature 0 is greedy).
    """
    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p, options=options)
    return decoder_walk(dec)[0]
