"""Act V, the algorithm bent: reference.decode_one with the rules serving stacks add, written to be read.

The same four steps, with four changes a round can make: its k comes from a schedule (transformers'
heuristic), its draft may stop early (a confidence threshold, or a peek at the coin), its proposals may be
copied from the text (n-gram lookup), and the test may read p(y) alone: Medusa's typical one (p(y) above a
threshold, no coin), followed by argmax p or a typical-filtered sample, or SGLang's two thresholds.
decode_reference runs this decoder for every spec that uses one of them (DecoderSpec.bent); batched.py is
held to it draw for draw.
"""
from __future__ import annotations

from .draft_rules import fix_tables, next_k, ngram_proposals
from .reference import inverse_cdf, residual_weights
from .spec import TARGET_ONLY, Decoder, target_only_accept


def decode_one_bent(dec: Decoder, uniforms) -> list[int]:
    """reference.decode_one, with a round's own k, early stops, n-gram lookups and typical acceptance."""
    spec, k = dec.spec, dec.k
    P, propose, R, D = (t.double().tolist() for t in (dec.target, dec.propose, dec.ratio, dec.draft))
    fixed = {name: t.tolist() for name, t in fix_tables(spec, dec.target).items()}  # argmax / typical rows
    keep = target_only_accept(spec, dec.target).tolist()  # keep[r][y]: the chance a target-only test keeps y
    seq: list[int] = []  # committed tokens
    last = dec.start  # the last committed token: the Markov state
    before = dec.start  # the committed token before it (a cache rewound one too far starts there)
    draft_last = dec.start  # where an untrimmed draft cache left the draft: its own last proposal
    while len(seq) < dec.horizon:
        u = uniforms(2 * k + 1 + spec.phantom)
        # 1. draft: up to k proposals, each drawn from the draft's state before it (or copied by a lookup)
        d = {"committed": last, "own_last_proposal": draft_last, "one_too_far": before}[spec.draft_context]
        states, props = [d], []
        if spec.proposer == "ngram":  # what followed an earlier occurrence of the current token; no draws
            props = ngram_proposals([dec.start] + seq, k, spec.ngram_match)
            states += props
        for j in range(k if spec.proposer == "model" else 0):
            props.append(inverse_cdf(propose[states[-1]], u[j]))
            states.append(props[-1])
            if spec.stop == "confidence" and propose[states[-2]][props[-1]] < spec.confidence:
                break  # the draft is unsure of the token it just drafted: it stops, keeping that token
        # 2. verify left to right; the first rejection ends the block
        accepted, nxt = len(props), None
        for j, y in enumerate(props):
            committed = last if j == 0 else props[j - 1]  # the committed state right before y
            row = y if spec.judge == "off_by_one" else committed  # the target row that judges y
            p = P[row]
            q = R[states[j] if spec.ratio_context == "draft" else committed]  # the q the verifier believes
            if spec.acceptance == "match":  # a target sample that must equal y
                sample = inverse_cdf(p, u[k + j])
                ok = sample == y
            elif spec.acceptance in TARGET_ONLY:  # typical: 0 or 1, the coin decides nothing; SGLang: the coin
            #                                       (its kernel's u <= chance: the same law for a continuous u)
                ok = u[k + j] < keep[row][y]
            else:  # u < min(1, p(y) / q(y))
                ok = u[k + j] < (min(1.0, p[y] / q[y]) if q[y] > 0 else float(p[y] > 0))
            if ok or (j == 0 and not spec.verify_first):
                continue
            # 3a. a rejection: emit one token from the residual (the target's own sample, for match)
            accepted = j
            if spec.stop == "coin":  # the peeker never proposes y: the round ends as if full, one proposal early
                nxt = inverse_cdf(P[committed], u[2 * k])
            elif spec.acceptance == "match":
                nxt = sample
            else:
                u_fix = u[k + j] if spec.residual_uniform == "reused" else u[2 * k]  # reused: U(a, 1), wrong
                fixed_row = {name: rows[row] for name, rows in fixed.items()}
                nxt = inverse_cdf(fixed_row[spec.residual] if spec.residual in fixed_row
                                  else residual_weights(spec, p, q, y), u_fix)
            break
        # 3b. all proposals accepted: the bonus token, from the row after the last proposal
        if nxt is None:
            y_k = props[-1] if props else last
            bonus = {"target": P, "draft": D, **fixed}[spec.bonus]
            nxt = inverse_cdf(bonus[y_k], u[2 * k])
        # 4. commit the accepted prefix and the target's token (a kept rejected proposal sits between: wrong)
        kept = [props[accepted]] if spec.keep_rejected and accepted < len(props) else []
        seq += props[:accepted] + kept + [nxt]
        if spec.phantom and len(seq) < dec.horizon:  # an unverified draft token enters the history: wrong
            seq.append(inverse_cdf(D[seq[-1]], u[2 * k + 1]))
        draft_last = props[-1] if props else last  # with no proposal the draft never moved from the start
        before, last = ([dec.start] + seq)[-2], seq[-1]
        k = next_k(spec, k, accepted=accepted, drafted=len(props))
    return seq[:dec.horizon]
