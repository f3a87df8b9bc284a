"""Act II, the algorithm: the block decoder for one sequence, written to be read, for any registered spec.

This is the decoder the course teaches; batched.py is the same algorithm for n sequences at once, and the
tests hold it to this one draw for draw (decode_markov with n = 1 reads the same uniforms in the same
order). Each round draws 2k + 1 uniforms (one more for a phantom token): u[0..k-1] draft the proposals,
u[k..2k-1] test them, u[2k] draws the residual or bonus token. Every draw is an inverse-CDF lookup.
"""
from __future__ import annotations

import math

import torch

from .._checks import check_generator, check_int
from .registry import make_decoder
from .spec import Decoder


def inverse_cdf(weights: list[float], u: float) -> int:
    """The token whose slice of [0, 1) holds u, slices in token order with widths weights / sum(weights)."""
    total, edge = sum(weights), 0.0
    last = max(i for i, w in enumerate(weights) if w > 0)  # rounding never hands u to a zero-mass tail
    for i, w in enumerate(weights):
        edge += w / total
        if u < edge or i == last:
            return i
    raise AssertionError("unreachable: the last token with mass always returns")


def residual_weights(spec, p: list[float], q: list[float], y: int) -> list[float]:
    """What a rejection of y samples from, unnormalised: the right residual [p - q]_+, or one of its known bugs."""
    w = {"normalised": [max(pz - qz, 0.0) for pz, qz in zip(p, q)],
         "softmax": [math.exp(max(pz - qz, 0.0)) for pz, qz in zip(p, q)],  # softmax of [p - q]_+: wrong
         "target": list(p),  # p itself: wrong
         "single_token": [0.0 if z == y else pz for z, pz in enumerate(p)]}[spec.residual]  # p without y: wrong
    return w if sum(w) > 0 else list(p)  # p == q leaves nothing: any law will do, no rejection can happen


def decode_one(dec: Decoder, uniforms) -> list[int]:
    """One sequence of dec.horizon tokens from the decoder `dec`; uniforms(n) returns the next n U(0, 1) floats."""
    spec, k = dec.spec, dec.k
    P, propose, R, D = (t.double().tolist() for t in (dec.target, dec.propose, dec.ratio, dec.draft))
    seq: list[int] = []  # committed tokens
    last = dec.start  # the last committed token: the Markov state
    before = dec.start  # the committed token before it (a cache rewound one too far starts there)
    draft_last = dec.start  # where an untrimmed draft cache left the draft: its own last proposal
    while len(seq) < dec.horizon:
        u = uniforms(2 * k + 1 + spec.phantom)
        # 1. draft: k proposals, each drawn from the draft's state before it
        d = {"committed": last, "own_last_proposal": draft_last, "one_too_far": before}[spec.draft_context]
        states, props = [d], []
        for j in range(k):
            props.append(inverse_cdf(propose[states[-1]], u[j]))
            states.append(props[-1])
        # 2. verify left to right; the first rejection ends the block
        accepted, nxt = k, None
        for j, y in enumerate(props):
            committed = last if j == 0 else props[j - 1]  # the committed state right before y
            p = P[y] if spec.judge == "off_by_one" else P[committed]  # the target row that judges y
            q = R[states[j] if spec.ratio_context == "draft" else committed]  # the q the verifier believes
            if spec.acceptance == "match":  # a target sample that must equal y
                sample = inverse_cdf(p, u[k + j])
                ok = sample == y
            else:  # u < min(1, p(y) / q(y))
                ok = u[k + j] < (min(1.0, p[y] / q[y]) if q[y] > 0 else float(p[y] > 0))
            if ok or (j == 0 and not spec.verify_first):
                continue
            # 3a. a rejection: emit one token from the residual (the target's own sample, for match)
            accepted = j
            if spec.acceptance == "match":
                nxt = sample
            else:
                u_fix = u[k + j] if spec.residual_uniform == "reused" else u[2 * k]  # reused: U(a, 1), wrong
                nxt = inverse_cdf(residual_weights(spec, p, q, y), u_fix)
            break
        # 3b. all k accepted: the bonus token, from the row after the last proposal
        if nxt is None:
            y_k = props[-1] if k else last
            nxt = inverse_cdf((P if spec.bonus == "target" else D)[y_k], u[2 * k])
        # 4. commit the accepted prefix and the target's token (a kept rejected proposal sits between: wrong)
        kept = [props[accepted]] if spec.keep_rejected and accepted < k else []
        seq += props[:accepted] + kept + [nxt]
        if spec.phantom and len(seq) < dec.horizon:  # an unverified draft token enters the history: wrong
            seq.append(inverse_cdf(D[seq[-1]], u[2 * k + 1]))
        draft_last = props[-1] if k else last  # with k = 0 the draft never moved from the round's start
        before, last = ([dec.start] + seq)[-2], seq[-1]
    return seq[:dec.horizon]


def decode_reference(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, n: int,
                     mode: str = "correct", generator: torch.Generator | None = None,
                     Q_bad: torch.Tensor | None = None, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None, options: dict | None = None) -> torch.Tensor:
    """n sequences (n, horizon), decoded one at a time by decode_one: slow, and the definition of the algorithm.

    Same arguments as decode_markov. Each round draws its uniforms from `generator` in one call, so
    decode_markov(n=1) repeated n times from the same generator returns exactly these sequences. A spec that
    bends the rules (Act V: a schedule, a stop, a lookup, typical acceptance) runs reference_bent.decode_one_bent.
    """
    from .reference_bent import decode_one_bent  # here, not at the top: reference_bent reads this module's helpers

    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p, options=options)
    decode = decode_one_bent if dec.spec.bent else decode_one
    n = check_int("n", n, minimum=1)
    generator = check_generator(generator)

    def uniforms(count: int) -> list[float]:
        return torch.rand(count, dtype=torch.float64, generator=generator).tolist()

    return torch.tensor([decode(dec, uniforms) for _ in range(n)], dtype=torch.long)
