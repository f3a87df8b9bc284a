"""Act II without sampling noise: a block decoder's exact output distribution, by walking every outcome.

Starting from the empty prefix, probability is pushed through every branch of a round (`RoundWalk`): each
proposal, its acceptance or rejection, the residual (or bonus) draw, a phantom token; the round's end states are
queued in a frontier (`walk_law`) until every sequence reaches the horizon. The frontier's key holds the next
round's k too, so a k that a schedule changes from round to round is walked exactly, as are early stops and
n-gram lookups. What each spec value means comes from semantics.py, as for the reference decoder and the batched
one; its tables are built once per decoder (`Laws`). A branch's mass is the product of the probabilities on it:

  propose y from the draft row d:     d[y]
  accept it:                          a = acc[r][c][y]           semantics.acceptance (min(1, p(y) / q(y)))
  reject it, then emit z:             (1 - a) * fix[r][c][y][z]  semantics.rejection_law
  after k acceptances, the bonus z:   bonus[y_k][z]             semantics.bonus_row (p_{k+1})

A block verifier's round is not a walk slot by slot: block_round.py tabulates its outcomes from each state.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from . import semantics as sem
from .block_round import block_outcomes, walk_block
from .draft_rules import ngram_proposals
from .registry import make_decoder
from .spec import Decoder

__all__ = ["Laws", "FrontierKey", "WalkStats", "RoundWalk", "ExactWalk", "walk_law", "decoder_walk", "decoder_law"]


def _rows(table: torch.Tensor) -> torch.Tensor:
    """A table in float64, rows renormalised so each sums to 1 to machine precision."""
    table = table.double()
    return table / table.sum(-1, keepdim=True)


def _drafted(propose: list[list[float]], k: int, confidence: float) -> list[list[float]]:
    """g[r][d]: expected tokens a confidence-stopping draft drafts from state d with r slots left."""
    V = len(propose)
    g = [[0.0] * V]
    for _ in range(k):
        g.append([sum(w * (1 + (g[-1][y] if w >= confidence else 0.0)) for y, w in enumerate(propose[d]))
                  for d in range(V)])
    return g


def _ahead(propose: torch.Tensor, k: int) -> list[list[list[float]]]:
    """ahead[steps][i][j]: where a Markov draft is after `steps` more proposals (rows of propose^steps)."""
    out, power = [], torch.eye(propose.shape[0], dtype=torch.float64)
    for _ in range(k):
        out.append(power.tolist())
        power = power @ propose
    return out


@dataclass(frozen=True)
class Laws:
    """A decoder's tables as rows (lists), built once by semantics.py: everything the walk reads."""

    dec: Decoder
    target: list  # target[r][z]: the target's rows
    propose: list  # propose[d][y]: the draft's chance of proposing y from state d
    draft: list  # the draft's own rows (a phantom token)
    acc: list  # acc[r][c][y]: the chance target row r keeps y, believed drawn by R[c]
    fix: list  # fix[r][c][y][z]: the law of the token a rejection of y emits (a fresh uniform; see rejection)
    bonus: list  # bonus[y_k][z]: the bonus token's law after a full block
    ahead: list  # ahead[steps][i][j]: the draft's state after `steps` more proposals (a stale cache)
    drafted: list | None  # _drafted: expected drafts under a confidence stop
    block: list | None = None  # block_round.BlockOutcomes from each state, for a block verifier

    @classmethod
    def of(cls, dec: Decoder) -> Laws:
        spec, V = dec.spec, dec.target.shape[0]
        p, q, propose = _rows(dec.target), _rows(dec.ratio), _rows(dec.propose)
        eye = torch.eye(V, dtype=torch.float64)[None, None]
        acc = sem.acceptance(spec, p[:, None, :], q[None, :, :])  # (V, V, V)
        fix = sem.rejection_law(spec, p[:, None, None, :], q[None, :, None, :], eye, acc)  # (V, V, V, V)
        bonus = _rows(sem.bonus_row(spec, p, _rows(dec.draft)))
        rows = propose.tolist()
        return cls(dec, p.tolist(), rows, _rows(dec.draft).tolist(), acc.tolist(), fix.tolist(), bonus.tolist(),
                   [] if spec.adaptive else _ahead(propose, dec.k),
                   _drafted(rows, dec.k, spec.confidence) if spec.stop == "confidence" else None,
                   block_outcomes(spec, p, q, propose, dec.k) if spec.verifier != "token" else None)


class FrontierKey(NamedTuple):
    """A round's start: the committed prefix, where a stale draft cache was left, and the round's k."""

    seq: tuple
    dlast: int
    k: int


@dataclass
class WalkStats:
    """Expected round counts: rounds (target calls), plain (rounds that drafted nothing), drafted (proposals,
    past the horizon too) and accepted (accepted proposals inside the horizon)."""

    rounds: float = 0.0
    plain: float = 0.0
    drafted: float = 0.0
    accepted: float = 0.0


@dataclass
class RoundWalk:
    """One round from a frontier key: its branches push their mass into `out` or the `frontier` (settle)."""

    laws: Laws
    key: FrontierKey
    out: torch.Tensor
    frontier: dict
    stats: WalkStats
    props: list | None = None  # a lookup's proposals (one-hot); None: drawn from the draft
    m: int = 0  # proposals this round drafts
    spec: object = field(init=False)
    horizon: int = field(init=False)

    def __post_init__(self) -> None:
        self.spec, self.horizon = self.laws.dec.spec, self.laws.dec.horizon

    def run(self, mass: float) -> None:
        """Walk every branch of the round; the draft's state and the rows that judge proposal 1 from the spec."""
        spec, (seq, dlast, kr), start = self.spec, self.key, self.laws.dec.start
        full = (start, *seq)
        s = full[-1]
        d0 = sem.draft_state(spec, s, full[-2] if len(full) > 1 else start, dlast)
        self.props = ngram_proposals(list(full), kr, spec.ngram_match) if spec.proposer == "ngram" else None
        self.m = len(self.props) if self.props is not None else kr
        st = self.stats
        st.rounds += mass
        st.plain += mass * (self.m == 0)
        st.drafted += mass * (self.laws.drafted[kr][d0] if self.laws.drafted is not None else self.m)
        if self.laws.block is not None:  # a block verifier: the round's outcomes from s, tabulated once
            walk_block(self, seq, s, mass)
            return
        self.slot(seq, 0, (s, d0, sem.ratio_state(spec, d0, s)), mass)

    def settle(self, seq: tuple, tail: dict, mass: float, k_next: int) -> None:
        """A round ended with `seq` committed; add a phantom token if any, then finish or queue each state."""
        seqs = {seq: 1.0}
        if self.spec.phantom and len(seq) < self.horizon:
            seqs = {seq + (t,): w for t, w in enumerate(self.laws.draft[seq[-1]]) if w > 0}
        frontier = self.frontier
        for s, w in seqs.items():
            if len(s) >= self.horizon:
                self.out[s[:self.horizon]] += mass * w
                continue
            for d, dw in tail.items():
                key = FrontierKey(s, d, k_next)
                frontier[key] = frontier.get(key, 0.0) + mass * w * dw

    def slot(self, seq: tuple, j: int, at: tuple, mass: float) -> None:
        """Proposal j + 1 of m: at = (committed state before it, draft state, where q is read)."""
        if len(seq) >= self.horizon:  # nothing later in the round can change the first `horizon` tokens
            self.out[seq[:self.horizon]] += mass
            return
        tctx, dctx, qctx = at
        if j == self.m:  # a full block: the bonus token
            k_next = sem.next_k(self.spec, self.key.k, accepted=j, drafted=j)
            tail = {tctx if self.key.k else self.key.dlast: 1.0}
            for z, w in enumerate(self.laws.bonus[tctx]):
                if w > 0:
                    self.settle(seq + (z,), tail, mass * w, k_next)
            return
        spec, first = self.spec, j == 0 and not self.spec.verify_first
        drafts = [(self.props[j], 1.0)] if self.props is not None else enumerate(self.laws.propose[dctx])
        for y, d in drafts:  # propose y: mass d[y]
            if d <= 0:
                continue
            row = sem.judge_row(spec, tctx, y)
            a = 1.0 if first else self.laws.acc[row][qctx][y]
            if a > 0:  # accept it: mass d[y] a, and the walk goes on to the next slot
                self.stats.accepted += mass * d * a
                if spec.stop == "confidence" and d < spec.confidence:  # unsure of y: the draft stops after it
                    self.m_stop(seq + (y,), j + 1, y, mass * d * a)
                else:
                    self.slot(seq + (y,), j + 1, (y, y, y), mass * d * a)
            if a < 1:
                self.reject(seq, j, (tctx, row, qctx, y), mass * d * (1 - a))

    def m_stop(self, seq: tuple, j: int, y: int, mass: float) -> None:
        """A confidence stop after proposal j: the rest of this branch is a block of j proposals."""
        m, self.m = self.m, j
        self.slot(seq, j, (y, y, y), mass)
        self.m = m

    def reject(self, seq: tuple, j: int, at: tuple, mass: float) -> None:
        """Proposal j + 1 rejected, at = (committed state, judging row, q's state, y): the round ends with token z."""
        tctx, row, qctx, y = at
        spec, kr = self.spec, self.key.k
        if spec.stop == "coin":  # the peeker drops y and stops: the target's token at tctx
            for z, w in enumerate(self.laws.target[tctx]):
                if w > 0:
                    self.settle(seq + (z,), {0: 1.0}, mass * w, kr)
            return
        base = seq + (y,) if spec.keep_rejected else seq
        tail = {0: 1.0} if spec.adaptive else {s: w for s, w in enumerate(self.laws.ahead[kr - 1 - j][y]) if w > 0}
        k_next = sem.next_k(spec, kr, accepted=j, drafted=self.m)
        for z, w in enumerate(self.laws.fix[row][qctx][y]):
            if w > 0:
                self.settle(base + (z,), tail, mass * w, k_next)


@dataclass(frozen=True)
class ExactWalk:
    """What walking every outcome gives: the exact law (V,) * horizon and the expected round counts."""

    law: torch.Tensor
    stats: WalkStats


def walk_law(laws: Laws) -> ExactWalk:
    """Exact output distribution (V,) * horizon of the decoder whose tables are `laws`, and its round counts."""
    dec = laws.dec
    out = torch.zeros((dec.target.shape[0],) * dec.horizon, dtype=torch.float64)
    stats, frontier = WalkStats(), {FrontierKey((), dec.start, dec.k): 1.0}
    for length in range(dec.horizon):  # rounds only lengthen the prefix, so one sweep by length suffices
        for key in [key for key in frontier if len(key.seq) == length]:
            RoundWalk(laws, key, out, frontier, stats).run(frontier.pop(key))
    return ExactWalk(law=out, stats=stats)


def decoder_walk(dec: Decoder) -> ExactWalk:
    """walk_law for a validated Decoder: tables in float64, rows renormalised."""
    return walk_law(Laws.of(dec))


def decoder_law(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int,  # noqa: PLR0913 (the Markov engines' one shared signature)
                mode: str = "correct", Q_bad: torch.Tensor | None = None, temperature: float = 1.0,
                top_k: int | None = None, top_p: float | None = None, options: dict | None = None) -> torch.Tensor:
    """The decoder's exact output distribution over all V^horizon sequences, shape (V,) * horizon, in float64.

    Tables are taken in float64 with rows renormalised, exactly as sequence_law takes P; the
    sampling policy is applied to every table first, as decode_markov applies it (temperature 0 is greedy).
    """
    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p, options=options)
    return decoder_walk(dec).law
