"""Act II, the fast path: the block decoder for all n sequences at once, correct or broken in any registered way.

reference.py decodes one sequence, step by step, as the algorithm reads. This module runs the same rounds
for every unfinished sequence together. On a Markov chain everything a round needs depends on one or two
states, so it is precomputed as tables, flattened so that one gather reads a whole batch:

  acc[(r V + c) V + y]         = min(1, P[r, y] / R[c, y])   target row r judges y, believed drawn by R[c]
  fix_cdf[(r V + c) V + y]     = CDF of what rejecting y samples, for target row r and believed state c
  fix_cdf[V^3 + y_k]           = CDF of the bonus token after a full block ending in y_k

Every draw is an inverse-CDF lookup: token = #{i : cdf[i] <= u} for a uniform u. A round draws its uniforms
as one (2k + 1 [+ 1], m) block: k for drafting, k for the acceptance tests, one for the residual or bonus
token (and one for a phantom token). The reference decoder reads the same uniforms in the same order.
"""
from __future__ import annotations

import torch

from .._checks import check_generator, check_int
from ..sampling import accept_ratio, residual_weights
from .registry import MODES, make_decoder
from .spec import Decoder, DecoderSpec

POST_MODES = ("correct", "bad_draft", "mismatched_q", "phantom_history", "off_by_one")  # the post's five decoders
DECODER_MODES = {name: MODES[name].description for name in POST_MODES}


def cdf_table(weights: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF table (..., V) in float64: token i owns [cdf[i-1], cdf[i]); +inf from the last positive weight on."""
    w = weights.double()
    cdf = (w / w.sum(-1, keepdim=True)).cumsum(-1)
    V = w.shape[-1]
    last = V - 1 - (w > 0).flip(-1).double().argmax(-1, keepdim=True)  # (..., 1) last token with mass
    return torch.where(torch.arange(V) >= last, torch.inf, cdf)  # rounding can never hand u < 1 to a zero-mass tail


def draw(cdf_rows: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens (m,) from CDF rows (m, V) and uniforms (m,): the number of CDF entries at or below u."""
    return (cdf_rows <= u[:, None]).sum(1)


def accept_table(P: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """acc[r, c, y] = min(1, P[r, y] / R[c, y]): target row r judges proposal y, believed drawn by R[c]."""
    acc = accept_ratio(P.double()[:, None, :], R.double()[None, :, :])  # (V, V, V)
    return torch.nan_to_num(acc, nan=0.0)  # 0/0 only at pairs no consistent draft proposes


def residual_weights_by_kind(p: torch.Tensor, q: torch.Tensor, y_hot: torch.Tensor, kind: str) -> torch.Tensor:
    """What a rejection samples from (unnormalised, last axis V): the right residual or one of its known bugs."""
    if kind == "normalised":
        return residual_weights(p, q)  # [p - q]_+, p itself where nothing is left
    if kind == "softmax":
        return torch.softmax(torch.clamp(p - q, min=0), dim=-1)  # every token gets e^0 = 1 at least
    if kind == "target":
        return p.clone()
    w = p * (1 - y_hot)  # single_token: p with only the rejected token removed
    return torch.where(w.sum(-1, keepdim=True) <= 0, p, w)


def residual_table(P: torch.Tensor, R: torch.Tensor, kind: str = "normalised") -> torch.Tensor:
    """CDF (V, V, V, V) of what a rejection samples, at [target row r, believed draft state c, rejected token y]."""
    V = P.shape[0]
    p = P.double()[:, None, None, :]  # (V, 1, 1, V)
    q = R.double()[None, :, None, :]  # (1, V, 1, V)
    y_hot = torch.eye(V, dtype=torch.float64)[None, None]  # (1, 1, V, V)
    return cdf_table(residual_weights_by_kind(p, q, y_hot, kind).expand(V, V, V, V))


def tables(dec: Decoder) -> dict:
    """Every table a round reads, flattened for gathers (see the module docstring for the indices)."""
    V, spec = dec.target.shape[0], dec.spec
    bonus = cdf_table(dec.target if spec.bonus == "target" else dec.draft)  # (V, V) indexed by y_k
    return {"draft_cdf": cdf_table(dec.propose), "target_cdf": cdf_table(dec.target),
            "acc": accept_table(dec.target, dec.ratio).reshape(-1),  # (V^3,)
            "fix_cdf": torch.cat([residual_table(dec.target, dec.ratio, spec.residual).reshape(V ** 3, V), bonus]),
            "phantom_cdf": cdf_table(dec.draft)}


def draft_proposals(t: dict, d0: torch.Tensor, k: int, u: torch.Tensor) -> torch.Tensor:
    """Step 1, draft: (m, k + 1) states, d0 then y_1 .. y_k, each proposal drawn from the state before it."""
    dctx = torch.empty(d0.shape[0], k + 1, dtype=torch.long)
    dctx[:, 0] = d0
    for j in range(k):
        dctx[:, j + 1] = draw(t["draft_cdf"].index_select(0, dctx[:, j]), u[j])
    return dctx


def accept_flags(spec: DecoderSpec, t: dict, judge, qctx, props, u_acc) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Step 2, verify: per-slot test outcomes (m, k), and the target's own samples when acceptance is by match."""
    V, k = t["draft_cdf"].shape[0], props.shape[1]
    sample = None
    if spec.acceptance == "match":  # a target sample per slot; a slot passes when it equals the proposal
        sample = torch.stack([draw(t["target_cdf"][judge[:, j]], u_acc[:, j]) for j in range(k)], 1)
        ok = sample == props
    else:  # u < min(1, p_j(y_j) / q_j(y_j)), read from the flat table at (judge, believed state, proposal)
        ok = u_acc < t["acc"].take((judge * V + qctx) * V + props)
    if not spec.verify_first:
        ok[:, 0] = True
    return ok, sample


def target_token(spec: DecoderSpec, t: dict, judge, qctx, props, u_acc, u_fix, accepted, sample):
    """Step 3, the target's token (m,): the residual draw at the first rejection, or the bonus after a full block.

    With residual_uniform == "reused" the residual draw reuses the rejected slot's acceptance uniform. Given
    a rejection at acceptance probability a, that uniform is U(a, 1), not U(0, 1): the draw lands in the top
    1 - a of the residual's CDF, so its law is (|[lo_z, hi_z] intersect [a, 1]|) / (1 - a) for token z.
    """
    V, k = t["draft_cdf"].shape[0], props.shape[1]
    full = accepted == k
    bonus_row = V ** 3 + props[:, -1]  # the bonus rows follow the V^3 residual rows
    slot = accepted.clamp(max=k - 1)[:, None]  # (m, 1) the rejected slot (clamped for full blocks)
    if spec.acceptance == "match":  # at a mismatch, the target's own sample is the token
        bonus = draw(t["fix_cdf"].index_select(0, bonus_row), u_fix)
        return torch.where(full, bonus, sample.gather(1, slot).squeeze(1))
    at = (judge.gather(1, slot) * V + qctx.gather(1, slot)) * V + props.gather(1, slot)  # residual row
    if spec.residual_uniform == "reused":
        u_fix = torch.where(full, u_fix, u_acc.gather(1, slot).squeeze(1))
    return draw(t["fix_cdf"].index_select(0, torch.where(full, bonus_row, at.squeeze(1))), u_fix)


def commit(spec: DecoderSpec, props, accepted, nxt) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 4, commit: (tokens (m, k + 2), emitted (m,)). A round writes at most k + 2 tokens: the k proposals,
    then the target's token; keep_rejected puts the rejected proposal before it, hence the second spare column.
    Columns past `emitted` are scratch, overwritten by the next round."""
    rejected = accepted < props.shape[1]
    where = accepted + (spec.keep_rejected & rejected).long()  # (m,) column of the target's token
    tokens = torch.cat([props, nxt[:, None], nxt[:, None]], 1).scatter(1, where[:, None], nxt[:, None])
    return tokens, where + 1


def run_round(spec: DecoderSpec, t: dict, s, d0, k: int, u):
    """One round for m sequences in committed state s (m,), draft state d0 (m,): (tokens, emitted, accepted, y_k)."""
    if k == 0:  # plain decoding: the "bonus" is a target draw from s
        nxt = draw(t["fix_cdf"].index_select(0, t["draft_cdf"].shape[0] ** 3 + s), u[0])
        tokens, emitted = commit(spec, s[:, None][:, :0], torch.zeros_like(s), nxt)
        return tokens, emitted, torch.zeros_like(s), s
    dctx = draft_proposals(t, d0, k, u)
    props = dctx[:, 1:]  # (m, k)
    tctx = torch.cat([s[:, None], props[:, :-1]], 1)  # (m, k) committed state before each proposal
    qctx = dctx[:, :k] if spec.ratio_context == "draft" else tctx  # where the verifier evaluates q
    judge = props if spec.judge == "off_by_one" else tctx  # the target row that judges each proposal
    u_acc = u[k:2 * k].T  # (m, k)
    ok, sample = accept_flags(spec, t, judge, qctx, props, u_acc)
    accepted = ok.long().cumprod(-1).sum(-1)  # (m,) the accepted prefix: slots before the first failure
    nxt = target_token(spec, t, judge, qctx, props, u_acc, u[2 * k], accepted, sample)
    tokens, emitted = commit(spec, props, accepted, nxt)
    return tokens, emitted, accepted, props[:, -1]


def decode_markov(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, n: int,
                  mode: str = "correct", generator: torch.Generator | None = None,
                  Q_bad: torch.Tensor | None = None, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None, log=None) -> torch.Tensor:
    """n sequences (n, horizon) from a speculative block decoder over Markov target P and draft Q.

    `mode` is a registered decoder (`failure_modes()`; the post's five are DECODER_MODES); bad_draft and
    mismatched_q also need `Q_bad`. The sampling policy (temperature 0 is greedy) is applied to every table
    before decoding, as a serving stack applies it to both models. A SpecDecodeLog passed as `log` records
    every round: its A, and the tokens of its verified output (A proposals, then the target's token) that land
    inside the horizon, so a log never credits tokens past the end.
    """
    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p)
    n = check_int("n", n, minimum=1)
    generator = check_generator(generator)
    if log is not None and getattr(log, "k", None) != dec.k:
        raise ValueError(f"log must be a SpecDecodeLog with the same k = {dec.k}")
    spec, k, horizon, t = dec.spec, dec.k, dec.horizon, tables(dec)

    width = horizon + k + 3  # committed tokens, plus room for one round's overshoot
    buf = torch.empty(n, width, dtype=torch.long)
    length = torch.zeros(n, dtype=torch.long)  # tokens committed per sequence
    last = torch.full((n,), dec.start, dtype=torch.long)  # last committed token: the Markov state
    before = torch.full((n,), dec.start, dtype=torch.long)  # the committed token before it (start when none)
    draft_last = torch.full((n,), dec.start, dtype=torch.long)  # where an untrimmed draft cache left the draft
    live = torch.arange(n)  # unfinished sequences
    while live.numel():
        m = live.numel()
        u = torch.rand(2 * k + 1 + spec.phantom, m, dtype=torch.float64, generator=generator)
        s = last[live]
        d0 = {"committed": s, "own_last_proposal": draft_last[live], "one_too_far": before[live]}[spec.draft_context]
        tokens, emitted, accepted, last_prop = run_round(spec, t, s, d0, k, u)
        at = length[live]
        cols = (live * width + at)[:, None] + torch.arange(k + 2)  # (m, k+2) flat positions of this round's tokens
        buf.view(-1).index_copy_(0, cols.reshape(-1), tokens.reshape(-1))
        if log is not None:  # a round that runs past the horizon retires only the tokens that land inside it
            log.record_rounds(accepted, emitted=torch.minimum(accepted + 1, horizon - at))
        at = at + emitted
        nxt = tokens.gather(1, (emitted - 1)[:, None]).squeeze(1)
        if spec.phantom:  # an unverified draft token slips into the history
            more = at < horizon
            phantom = draw(t["phantom_cdf"][nxt], u[2 * k + 1])
            buf[live[more], at[more]] = phantom[more]
            nxt = torch.where(more, phantom, nxt)
            at = at + more.long()
        if spec.draft_context == "one_too_far":  # the committed token before the last one
            full_seq = torch.cat([torch.full((m, 1), dec.start), buf[live]], 1)  # (m, 1 + W) start, committed
            before[live] = full_seq.gather(1, (at - 1)[:, None]).squeeze(1)
        length[live], last[live], draft_last[live] = at, nxt, last_prop
        live = live[at < horizon]
    return buf[:, :horizon]
