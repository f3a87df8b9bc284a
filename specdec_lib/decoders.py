"""Act II: a block decoder on the Markov chain, correct or broken in any registered way, all n sequences at once.

On a Markov chain every quantity a round needs depends on one or two states, so the decoder precomputes
them as tables (acceptance probabilities, residual CDFs) with the same functions `verify_block` uses, and a
round becomes a few gathers and comparisons over all unfinished sequences. Which tables, and which states
index them, is read from the mode's `DecoderSpec` (see failures.py).
"""
from __future__ import annotations

import torch

from ._checks import check_choice, check_generator, check_int
from .chain import check_start, check_table
from .failures import MODES, DecoderSpec, spec_tables
from .policy import policy_table
from .sampling import accept_ratio, residual_weights

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
    """Tokens (m,) from CDF rows (m, V) and uniforms (m,)."""
    return torch.searchsorted(cdf_rows, u[:, None], right=True).squeeze(1)


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


def decoder_args(P, Q, start, horizon, k, mode, *, Q_bad=None, temperature=1.0, top_k=None, top_p=None):
    """Validate a decoder's arguments; return (spec, target, propose, ratio, draft, start, horizon, k).

    `propose` is the table that really samples proposals, `ratio` the one the verifier believes produced them,
    `draft` the draft model's own (post-policy) table.
    """
    P, Q = check_table("P", P), check_table("Q", Q)
    if Q.shape != P.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    spec = MODES[check_choice("mode", mode, tuple(MODES))].spec
    if "Q_bad" in (spec.propose, spec.ratio):
        if Q_bad is None:
            raise ValueError(f"mode {mode!r} needs Q_bad, the second draft table")
        Q_bad = check_table("Q_bad", Q_bad)
        if Q_bad.shape != P.shape:
            raise ValueError(f"Q_bad must have the shape of P {tuple(P.shape)}, got {tuple(Q_bad.shape)}")
    start = check_start(start, P.shape[0])
    horizon = check_int("horizon", horizon, minimum=1)
    k = check_int("k", k, minimum=0)
    P, Q, Q_bad = (None if t is None else policy_table(t, temperature, top_k, top_p) for t in (P, Q, Q_bad))
    return (spec, *spec_tables(spec, P, Q, Q_bad), start, horizon, k)


def _round(spec: DecoderSpec, tables: dict, s, d0, k: int, u):
    """One round for m sequences in state s (m,), draft state d0 (m,): (tokens (m, k+2), emitted, accepted, y_k)."""
    V = tables["draft_cdf"].shape[0]
    m = s.shape[0]
    dctx = torch.empty(m, k + 1, dtype=torch.long)  # dctx[:, j]: the state proposal j + 1 is drafted from
    dctx[:, 0] = d0
    for j in range(k):
        dctx[:, j + 1] = draw(tables["draft_cdf"].index_select(0, dctx[:, j]), u[j])
    props = dctx[:, 1:]  # (m, k)
    tctx = torch.cat([s[:, None], props[:, :-1]], 1)[:, :k]  # (m, k) committed state before each proposal
    qctx = dctx[:, :k] if spec.ratio_context == "draft" else tctx  # where the verifier evaluates q
    judge = props if spec.judge == "off_by_one" else tctx  # target row that judges each proposal
    u_acc = u[k:2 * k].T  # (m, k)
    if spec.acceptance == "match":
        sample = torch.stack([draw(tables["target_cdf"][judge[:, j]], u_acc[:, j]) for j in range(k)], 1) \
            if k else props  # (m, k) a target sample per slot
        ok = sample == props
    else:
        ok = u_acc < tables["acc"].take((judge * V + qctx) * V + props)  # (m, k)
    if not spec.verify_first and k:
        ok[:, 0] = True
    accepted = ok.long().cumprod(-1).sum(-1)  # (m,)
    full = accepted == k
    last_prop = props[:, -1] if k else s
    bonus_row = V ** 3 + last_prop  # the bonus rows follow the V^3 residual rows in tables["fix_cdf"]
    if not k:
        return _commit(spec, props, accepted, full, draw(tables["fix_cdf"].index_select(0, bonus_row), u[0])) + (s,)
    slot = accepted.clamp(max=k - 1)[:, None]  # (m, 1) the rejected slot (clamped for full blocks)
    if spec.acceptance == "match":
        bonus = draw(tables["fix_cdf"].index_select(0, bonus_row), u[2 * k])
        nxt = torch.where(full, bonus, sample.gather(1, slot).squeeze(1))  # the target's own sample at a mismatch
    else:
        at = (judge.gather(1, slot).squeeze(1) * V + qctx.gather(1, slot).squeeze(1)) * V \
            + props.gather(1, slot).squeeze(1)  # residual row [judge, believed state, rejected token]
        u_fix = u[2 * k]
        if spec.residual_uniform == "reused":  # the rejected slot's acceptance uniform, U(a, 1) given a rejection
            u_fix = torch.where(full, u_fix, u_acc.gather(1, slot).squeeze(1))
        nxt = draw(tables["fix_cdf"].index_select(0, torch.where(full, bonus_row, at)), u_fix)
    return _commit(spec, props, accepted, full, nxt) + (last_prop,)


def _commit(spec: DecoderSpec, props, accepted, full, nxt):
    """(tokens (m, k+2), emitted (m,), accepted): accepted proposals, then the target's token (scratch after it)."""
    where = accepted + (spec.keep_rejected & ~full).long()  # (m,) slot of the target's token
    tokens = torch.cat([props, nxt[:, None], nxt[:, None]], 1).scatter(1, where[:, None], nxt[:, None])
    return tokens, where + 1, accepted


def decode_markov(P: torch.Tensor, Q: torch.Tensor, start: int, horizon: int, k: int, n: int,
                  mode: str = "correct", generator: torch.Generator | None = None, *,
                  Q_bad: torch.Tensor | None = None, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None, log=None) -> torch.Tensor:
    """n sequences (n, horizon) from a speculative block decoder over Markov target P and draft Q.

    `mode` is a registered decoder (`failure_modes()`; the post's five are DECODER_MODES); bad_draft and
    mismatched_q also need `Q_bad`. The sampling policy (temperature 0 is greedy) is applied to every table
    before decoding, as a serving stack applies it to both models. A SpecDecodeLog passed as `log` records
    every round: its A, and the tokens of its verified output (A proposals, then the target's token) that land
    inside the horizon, so a log never credits tokens past the end.
    """
    spec, target, propose, ratio, draft, start, horizon, k = decoder_args(
        P, Q, start, horizon, k, mode, Q_bad=Q_bad, temperature=temperature, top_k=top_k, top_p=top_p)
    n = check_int("n", n, minimum=1)
    generator = check_generator(generator)
    if log is not None and getattr(log, "k", None) != k:
        raise ValueError(f"log must be a SpecDecodeLog with the same k = {k}")
    V = target.shape[0]
    bonus_cdf = cdf_table(target if spec.bonus == "target" else draft)  # (V, V) indexed by y_k
    tables = {"draft_cdf": cdf_table(propose), "acc": accept_table(target, ratio).reshape(-1),
              "target_cdf": cdf_table(target),
              "fix_cdf": torch.cat([residual_table(target, ratio, spec.residual).reshape(V ** 3, V), bonus_cdf])}
    phantom_cdf = cdf_table(draft)

    width = horizon + k + 3  # committed tokens, plus room for one round's overshoot
    buf = torch.empty(n, width, dtype=torch.long)
    length = torch.zeros(n, dtype=torch.long)  # tokens committed per sequence
    last = torch.full((n,), start, dtype=torch.long)  # last committed token: the Markov state
    before = torch.full((n,), start, dtype=torch.long)  # the committed token before it (start when there is none)
    draft_last = torch.full((n,), start, dtype=torch.long)  # where an untrimmed draft cache left the draft
    live = torch.arange(n)  # unfinished sequences
    while live.numel():
        m = live.numel()
        rows = 2 * k + 1 + spec.phantom  # uniforms per sequence: draft | accept | fix (| phantom)
        u = torch.rand(rows, m, dtype=torch.float64, generator=generator)
        s = last[live]
        d0 = {"committed": s, "own_last_proposal": draft_last[live], "one_too_far": before[live]}[spec.draft_context]
        tokens, emitted, accepted, last_prop = _round(spec, tables, s, d0, k, u)  # last_prop: y_k
        at = length[live]
        cols = (live * width + at)[:, None] + torch.arange(k + 2)  # (m, k+2) flat positions of this round's tokens
        buf.view(-1).index_copy_(0, cols.reshape(-1), tokens.reshape(-1))  # scratch past the commit: overwritten later
        if log is not None:  # a round that runs past the horizon retires only the tokens that land inside it
            log.record_rounds(accepted, emitted=torch.minimum(accepted + 1, horizon - at))
        at = at + emitted
        nxt = tokens.gather(1, (emitted - 1)[:, None]).squeeze(1)
        if spec.phantom:
            more = at < horizon  # an unverified draft token slips into the history
            phantom = draw(phantom_cdf[nxt], u[2 * k + 1])
            buf[live[more], at[more]] = phantom[more]
            nxt = torch.where(more, phantom, nxt)
            at = at + more.long()
        if spec.draft_context == "one_too_far":  # the committed token before the last one
            full_seq = torch.cat([torch.full((m, 1), start), buf[live]], 1)  # (m, 1 + W) start, then committed
            before[live] = full_seq.gather(1, (at - 1)[:, None]).squeeze(1)
        length[live], last[live], draft_last[live] = at, nxt, last_prop
        live = live[at < horizon]
    return buf[:, :horizon]
