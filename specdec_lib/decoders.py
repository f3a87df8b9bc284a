"""Act II: a block decoder on the Markov chain, with the post's four ways to be wrong, all n sequences at once.

On a Markov chain every quantity a round needs depends on one or two states, so the decoder precomputes
them as tables (acceptance probabilities, residual CDFs) with the same functions `verify_block` uses, and a
round becomes a few gathers and comparisons over all unfinished sequences.
"""
from __future__ import annotations

import torch

from ._checks import check_choice, check_generator, check_int
from .chain import check_start, check_table
from .policy import policy_table
from .sampling import accept_ratio, residual_weights

DECODER_MODES = {
    "correct": "everything consistent: propose from Q, ratio with Q, target at the committed prefix",
    "bad_draft": "a badly wrong draft Q_bad, and the verifier uses that same Q_bad (still exact)",
    "mismatched_q": "proposals come from Q but the ratio is computed with Q_bad",
    "phantom_history": "after each round an unverified draft token is appended to the committed history",
    "off_by_one": "each proposal is judged by the target row one position too late",
}


def cdf_table(weights: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF table (..., V) in float64: token i owns [cdf[i-1], cdf[i]); from the last positive weight on, +inf."""
    w = weights.double()
    cdf = (w / w.sum(-1, keepdim=True)).cumsum(-1)
    V = w.shape[-1]
    last = V - 1 - (w > 0).flip(-1).double().argmax(-1, keepdim=True)  # (..., 1) last token with mass
    return torch.where(torch.arange(V) >= last, torch.inf, cdf)  # rounding can never hand u < 1 to a zero-mass tail


def draw(cdf_rows: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens (m,) from CDF rows (m, V) and uniforms (m,)."""
    return torch.searchsorted(cdf_rows, u[:, None], right=True).squeeze(1)


def accept_table(P: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """acc[r, c, y] = min(1, P[r, y] / R[c, y]): target row r judges proposal y, which the verifier believes R[c] made."""
    acc = accept_ratio(P.double()[:, None, :], R.double()[None, :, :])  # (V, V, V)
    return torch.nan_to_num(acc, nan=0.0)  # 0/0 only at pairs no consistent draft proposes


def residual_table(P: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """CDF of [P[r] - R[c]]_+ at [r, c]; the extra c = V row is the bonus slot (no draft there): P[r] itself."""
    R_ext = torch.cat([R.double(), torch.zeros(1, R.shape[1], dtype=torch.float64)])  # (V+1, V)
    return cdf_table(residual_weights(P.double()[:, None, :], R_ext[None, :, :]))  # (V, V+1, V)


def decoder_tables(P, Q, start, horizon, k, mode, *, Q_bad=None, temperature=1.0, top_k=None, top_p=None):
    """Validate a decoder's arguments; return (P, propose, ratio, Q, start, horizon, k) after the policy.

    `propose` is the table that really samples proposals, `ratio` the one the verifier believes produced them.
    """
    P, Q = check_table("P", P), check_table("Q", Q)
    if Q.shape != P.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    check_choice("mode", mode, tuple(DECODER_MODES))
    if mode in ("bad_draft", "mismatched_q"):
        if Q_bad is None:
            raise ValueError(f"mode {mode!r} needs Q_bad, the second draft table")
        Q_bad = check_table("Q_bad", Q_bad)
        if Q_bad.shape != P.shape:
            raise ValueError(f"Q_bad must have the shape of P {tuple(P.shape)}, got {tuple(Q_bad.shape)}")
    start = check_start(start, P.shape[0])
    horizon = check_int("horizon", horizon, minimum=1)
    k = check_int("k", k, minimum=0)
    P, Q, Q_bad = (None if t is None else policy_table(t, temperature, top_k, top_p) for t in (P, Q, Q_bad))
    propose = Q_bad if mode == "bad_draft" else Q
    ratio = Q_bad if mode in ("bad_draft", "mismatched_q") else Q
    return P, propose, ratio, Q, start, horizon, k


def decode_markov(P: torch.Tensor, Q: torch.Tensor, start: int, horizon: int, k: int, n: int,
                  mode: str = "correct", generator: torch.Generator | None = None, *,
                  Q_bad: torch.Tensor | None = None, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None, log=None) -> torch.Tensor:
    """n sequences (n, horizon) from a speculative block decoder over Markov target P and draft Q.

    `mode` picks one of DECODER_MODES (bad_draft and mismatched_q also need `Q_bad`). The sampling policy
    (temperature 0 is greedy) is applied to every table before decoding, as a serving stack applies it to
    both models. A SpecDecodeLog passed as `log` records every round.
    """
    P, propose, ratio, Q, start, horizon, k = decoder_tables(P, Q, start, horizon, k, mode, Q_bad=Q_bad,
                                                            temperature=temperature, top_k=top_k, top_p=top_p)
    n = check_int("n", n, minimum=1)
    generator = check_generator(generator)
    if log is not None and getattr(log, "k", None) != k:
        raise ValueError(f"log must be a SpecDecodeLog with the same k = {k}")

    V = P.shape[0]
    draft_cdf, acc, res_cdf = cdf_table(propose), accept_table(P, ratio).reshape(-1), residual_table(P, ratio)
    phantom_cdf = cdf_table(Q)

    buf = torch.empty(n, horizon + k + 2, dtype=torch.long)  # committed tokens, plus room for one round's overshoot
    length = torch.zeros(n, dtype=torch.long)  # tokens committed per sequence
    last = torch.full((n,), start, dtype=torch.long)  # last committed token: the Markov state
    live = torch.arange(n)  # unfinished sequences
    while live.numel():
        m = live.numel()
        u = torch.rand(2 * k + 2, m, dtype=torch.float64, generator=generator)  # rows: draft | accept | residual | phantom
        ctx = torch.empty(m, k + 1, dtype=torch.long)  # ctx[:, j]: the token proposal j + 1 conditions on
        ctx[:, 0] = last[live]
        for j in range(k):
            ctx[:, j + 1] = draw(draft_cdf[ctx[:, j]], u[j])
        props, before = ctx[:, 1:], ctx[:, :k]  # (m, k) proposals and their contexts
        judge = props if mode == "off_by_one" else before  # (m, k) state whose target row judges proposal j
        ok = u[k:2 * k].T < acc[(judge * V + before) * V + props]  # (m, k)
        accepted = ok.long().cumprod(-1).sum(-1)  # (m,) accepted prefix
        at_slot = accepted[:, None]
        row = torch.cat([judge, ctx[:, k:]], 1).gather(1, at_slot).squeeze(1)  # target row at the slot; bonus: P[y_k]
        believed = torch.cat([before, torch.full((m, 1), V)], 1).gather(1, at_slot).squeeze(1)  # V: no draft (bonus)
        nxt = draw(res_cdf[row, believed], u[2 * k])  # (m,) correction or bonus token
        tokens = torch.cat([props, nxt[:, None]], 1).scatter(1, at_slot, nxt[:, None])  # (m, k+1); tail is scratch
        at = length[live]
        buf[live[:, None], at[:, None] + torch.arange(k + 1)] = tokens  # scratch past the commit is overwritten later
        at = at + accepted + 1
        if log is not None:
            log.record_rounds(accepted)
        if mode == "phantom_history":
            more = at < horizon  # an unverified draft token slips into the history
            phantom = draw(phantom_cdf[nxt], u[2 * k + 1])
            buf[live[more], at[more]] = phantom[more]
            nxt = torch.where(more, phantom, nxt)
            at = at + more.long()
        length[live], last[live] = at, nxt
        live = live[at < horizon]
    return buf[:, :horizon]
