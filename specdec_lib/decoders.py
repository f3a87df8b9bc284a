"""Act II: a block decoder on the Markov chain, with the post's four ways to be wrong, all n sequences at once."""
from __future__ import annotations

import torch

from ._checks import check_choice, check_generator, check_int
from .chain import check_start, check_table
from .sampling import sample_rows
from .verification import commit_tokens, verify_batch

DECODER_MODES = {
    "correct": "everything consistent: propose from Q, ratio with Q, target at the committed prefix",
    "bad_draft": "a badly wrong draft Q_bad, and the verifier uses that same Q_bad (still exact)",
    "mismatched_q": "proposals come from Q but the ratio is computed with Q_bad",
    "phantom_history": "after each round an unverified draft token is appended to the committed history",
    "off_by_one": "each proposal is judged by the target row one position too late",
}


def _draft(table: torch.Tensor, last: torch.Tensor, k: int, generator) -> torch.Tensor:
    """k proposals (m, k) drawn autoregressively from a Markov draft table, starting after tokens `last` (m,)."""
    props = torch.empty(last.shape[0], k, dtype=torch.long)
    cur = last
    for j in range(k):
        cur = sample_rows(table[cur], generator)  # (m,)
        props[:, j] = cur
    return props


def decode_markov(P: torch.Tensor, Q: torch.Tensor, start: int, horizon: int, k: int, n: int,
                  mode: str = "correct", generator: torch.Generator | None = None, *,
                  Q_bad: torch.Tensor | None = None) -> torch.Tensor:
    """n sequences (n, horizon) from a speculative block decoder over Markov target P and draft Q.

    Rounds run for every unfinished sequence at once; `mode` picks one of DECODER_MODES (bad_draft and
    mismatched_q also need `Q_bad`).
    """
    P = check_table("P", P)
    Q = check_table("Q", Q)
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
    n = check_int("n", n, minimum=1)
    generator = check_generator(generator)

    propose_from = Q_bad if mode == "bad_draft" else Q  # the distribution that really samples
    ratio_with = Q_bad if mode in ("bad_draft", "mismatched_q") else Q  # the one the verifier believes in
    buf = torch.empty(n, horizon + k + 2, dtype=torch.long)  # committed tokens, plus room for one round's overshoot
    length = torch.zeros(n, dtype=torch.long)  # committed tokens per sequence
    last = torch.full((n,), start, dtype=torch.long)  # last committed token (the Markov state)
    while True:
        live = (length < horizon).nonzero().squeeze(1)  # (m,) unfinished sequences
        if live.numel() == 0:
            break
        s, at = last[live], length[live]  # (m,), (m,)
        props = _draft(propose_from, s, k, generator)  # (m, k)
        ctx = torch.cat([s[:, None], props], dim=1)  # (m, k+1) the token each slot conditions on
        judge = props if mode == "off_by_one" else ctx[:, :k]  # (m, k) state whose target row judges proposal j
        p_rows = torch.cat([P[judge], P[ctx[:, k:]]], dim=1)  # (m, k+1, V); last row: the bonus after y_k
        q_rows = ratio_with[ctx[:, :k]]  # (m, k, V)
        accepted, nxt = verify_batch(p_rows, q_rows, props, generator)
        cols = at[:, None] + torch.arange(k + 1)  # (m, k+1) where this round's tokens land
        buf[live[:, None], cols] = commit_tokens(props, accepted, nxt)  # tail past the commit is overwritten later
        at = at + accepted + 1
        if mode == "phantom_history":
            more = at < horizon  # an unverified draft token slips into the history
            phantom = sample_rows(Q[nxt], generator)  # (m,)
            buf[live[more], at[more]] = phantom[more]
            nxt = torch.where(more, phantom, nxt)
            at = at + more.long()
        length[live] = at
        last[live] = nxt
    return buf[:, :horizon]
