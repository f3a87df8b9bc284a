"""Act II, the algorithm: the block decoder for one sequence, written to be read.

`speculative_decode` is the algorithm the course teaches: correct only, no switches. `decode_one` is the same
four steps for any registered spec (Act II's bugs and Act V's bent rules), each step a named hook of `Hooks`,
whose meanings all come from semantics.py; `decode_reference` runs it. batched.py is the same algorithm for many
sequences at once, and the tests hold the three to each other draw for draw: each round draws 2k + 1 uniforms
(one more for a phantom token) in one call: u[0..k-1] draft the proposals, u[k..2k-1] test them, u[2k] draws
the residual or bonus token. Every draw is the core's inverse-CDF draw, sampling.inverse_cdf.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_distribution, check_generator, check_int
from ..sampling import inverse_cdf, residual_weights
from . import semantics as sem
from .draft_rules import ngram_proposals
from .registry import make_decoder
from .spec import Decoder

__all__ = ["speculative_decode", "Hooks", "decode_one", "decode_reference"]


def speculative_decode(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int,
                       generator: torch.Generator | None = None) -> list[int]:
    """`horizon` tokens of target chain P (V, V) after `start`, drafted k at a time by chain Q: correct only."""
    P, Q = (check_distribution(name, t, min_dim=2).double() for name, t in (("P", P), ("Q", Q)))
    horizon, k = check_int("horizon", horizon, minimum=1), check_int("k", k, minimum=0)
    generator = check_generator(generator)
    seq, last = [], check_int("start", start, minimum=0)  # committed tokens; the last one is the Markov state
    while len(seq) < horizon:
        u = torch.rand(2 * k + 1, dtype=torch.float64, generator=generator).tolist()  # this round's uniforms
        # 1. draft: k proposals, each drawn from the draft's row at the token before it
        props = []
        for j in range(k):
            props.append(int(inverse_cdf(Q[props[-1] if props else last], u[j])))
        # 2. verify left to right: keep y with probability min(1, p(y) / q(y)), both rows at the token before y
        before, token = last, None
        for j, y in enumerate(props):
            p, q = P[before], Q[before]
            if u[k + j] < min(1.0, float(p[y] / q[y])):
                before = y
                continue
            # 3a. the first rejection ends the block: its token is drawn from the residual [p - q]_+
            token = int(inverse_cdf(residual_weights(p, q), u[2 * k]))
            props = props[:j]
            break
        # 3b. all k accepted: the bonus token, from the target's row after the last proposal
        if token is None:
            token = int(inverse_cdf(P[before], u[2 * k]))
        # 4. commit the accepted proposals and the target's token
        seq += props + [token]
        last = seq[-1]
    return seq[:horizon]


@dataclass(frozen=True)
class Hooks:
    """A decoder's spec resolved into the steps of one round, each a method; meanings from semantics.py.

    Tables are built once: acc[r][c][y] the chance row r keeps y believed drawn by R[c], fix[r, c, y] the
    weights of what rejecting it samples, bonus[y_k] the weights of the bonus token; each draw is
    sampling.inverse_cdf of a row of P, propose, draft, fix or bonus.
    """

    dec: Decoder
    P: torch.Tensor  # (V, V)
    propose: torch.Tensor  # (V, V)
    draft: torch.Tensor  # (V, V)
    acc: list
    fix: torch.Tensor  # (V, V, V, V)
    bonus: torch.Tensor  # (V, V)

    @classmethod
    def of(cls, dec: Decoder) -> Hooks:
        V, spec = dec.target.shape[0], dec.spec
        p, q = dec.target.double(), dec.ratio.double()
        eye = torch.eye(V, dtype=torch.float64)[None, None]
        acc = sem.acceptance(spec, p[:, None, :], q[None, :, :])  # (V, V, V)
        fix = sem.rejection_weights(spec, p[:, None, None, :], q[None, :, None, :], eye)  # (V, V, V, V)
        bonus = sem.bonus_row(spec, p, dec.draft.double())  # (V, V)
        return cls(dec, p, dec.propose.double(), dec.draft.double(), acc.tolist(), fix, bonus)

    def proposals(self, history: list[int], state: int, k: int, u: list[float]) -> tuple[list[int], list[int]]:
        """Up to k proposals and the draft states they were drawn from (a lookup copies them; a stop cuts them)."""
        spec, states, props = self.dec.spec, [state], []
        if spec.proposer == "ngram":  # what followed an earlier occurrence of the current token; no draws
            props = ngram_proposals(history, k, spec.ngram_match)
            return props, states + props
        for j in range(k):
            props.append(int(inverse_cdf(self.propose[states[-1]], u[j])))
            states.append(props[-1])
            if sem.stops_after(spec, self.propose[states[-2], props[-1]].item()):
                break  # the draft is unsure of the token it just drafted: it stops, keeping that token
        return props, states

    def test(self, row: int, qctx: int, y: int, u: float, *, first: bool) -> tuple[bool, int | None]:
        """Does the verifier keep y? And, for match acceptance, the target's own sample (the token on a mismatch)."""
        return sem.keeps(self.dec.spec, y, u, chance=lambda: self.acc[row][qctx][y],
                         sample=lambda u: int(inverse_cdf(self.P[row], u)), first=first)

    def rejection(self, row: int, qctx: int, y: int, u_test: float, u_fix: float) -> int:
        """The token a rejection of y emits: the residual draw (reading the uniform semantics says)."""
        return int(inverse_cdf(self.fix[row, qctx, y], sem.fix_uniform(self.dec.spec, u_test, u_fix)))

    def block(self, last: int, k: int, u: list[float]) -> list[int]:
        """A block verifier's round: k proposals judged together by u[k..2k-1] (semantics.block_round), then the
        token after the kept ones, drawn with u[2k]: the tokens it commits."""
        props, states = self.proposals([], last, k, u)
        target, ratio = self.dec.target.double(), self.dec.ratio.double()
        tau, weights = sem.block_round(self.dec.spec, target[states], ratio[states[:-1]],
                                       torch.tensor(props, dtype=torch.long), torch.tensor(u[k:2 * k]))
        return props[:int(tau)] + [int(inverse_cdf(weights, u[2 * k]))]


def decode_one(dec: Decoder, uniforms, hooks: Hooks | None = None) -> list[int]:
    """One sequence of dec.horizon tokens from the decoder `dec`; uniforms(n) returns the next n U(0, 1) floats.
    `hooks`: Hooks.of(dec), built once when decoding many sequences."""
    spec, k, hooks = dec.spec, dec.k, hooks or Hooks.of(dec)
    seq: list[int] = []  # committed tokens
    last = before = draft_last = dec.start  # the Markov state, the token before it, where the draft's cache is
    while len(seq) < dec.horizon:
        u = uniforms(2 * k + 1 + spec.phantom)
        if spec.verifier != "token":  # block verification: steps 1-4 as one joint test of the block
            seq += hooks.block(last, k, u)
            last = seq[-1]
            continue
        # 1. draft: up to k proposals, from the draft's state (a lookup copies them from the text)
        props, states = hooks.proposals([dec.start] + seq, sem.draft_state(spec, last, before, draft_last), k, u)
        # 2. verify left to right; the first rejection ends the block
        accepted, nxt = len(props), None
        for j, y in enumerate(props):
            committed = last if j == 0 else props[j - 1]  # the committed state right before y
            row = sem.judge_row(spec, committed, y)  # the target row that judges y
            qctx = sem.ratio_state(spec, states[j], committed)  # where the verifier reads q
            ok, sample = hooks.test(row, qctx, y, u[k + j], first=j == 0)
            if ok:
                continue
            # 3a. a rejection: the target's token (a coin peeker never proposes y: its bonus one proposal early)
            accepted = j
            if sem.peeks(spec):
                nxt = int(inverse_cdf(hooks.P[committed], u[2 * k]))
            else:
                nxt = sample if sample is not None else hooks.rejection(row, qctx, y, u[k + j], u[2 * k])
            break
        # 3b. all proposals accepted: the bonus token, from the row after the last proposal
        if nxt is None:
            nxt = int(inverse_cdf(hooks.bonus[props[-1] if props else last], u[2 * k]))
        # 4. commit the accepted prefix and the target's token (a kept rejected proposal sits between: wrong)
        kept = [props[accepted]] if sem.kept_rejected(spec, accepted < len(props)) else []
        seq += props[:accepted] + kept + [nxt]
        if spec.phantom and len(seq) < dec.horizon:  # an unverified draft token enters the history: wrong
            seq.append(int(inverse_cdf(hooks.draft[seq[-1]], u[2 * k + 1])))
        draft_last = props[-1] if props else last  # with no proposal the draft never moved from the start
        before, last = ([dec.start] + seq)[-2], seq[-1]
        k = sem.next_k(spec, k, accepted=accepted, drafted=len(props))
    return seq[:dec.horizon]


def decode_reference(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, num_samples: int,  # noqa: PLR0913 (the Markov engines' one shared signature)
                     mode: str = "correct", generator: torch.Generator | None = None,
                     Q_bad: torch.Tensor | None = None, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None, options: dict | None = None) -> torch.Tensor:
    """num_samples sequences (num_samples, horizon), decoded one at a time by decode_one: slow, and the definition.

    Same arguments as decode_markov. Each round draws its uniforms from `generator` in one call, so
    decode_markov(num_samples=1) repeated from the same generator returns exactly these sequences.
    """
    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p, options=options)
    n = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator)

    def uniforms(count: int) -> list[float]:
        return torch.rand(count, dtype=torch.float64, generator=generator).tolist()

    hooks = Hooks.of(dec)
    return torch.tensor([decode_one(dec, uniforms, hooks) for _ in range(n)], dtype=torch.long)
