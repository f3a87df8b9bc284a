"""What a registered decoder costs and how wrong it is, exactly: TV and KL to its target, and tokens per call.

The exact engine walks every outcome of every round (exact.walk_law, a round at a time by exact.RoundWalk), so
besides the output law it knows the expected number of rounds (target calls) needed to commit `horizon` tokens,
and how many proposals they drafted.
Tokens per target call is horizon / E[rounds], what a SpecDecodeLog reports over many sequences; the speedup
divides the horizon by the expected cost, a round costing 1 when it drafted nothing (a plain decode step) and
drafted * c_d + c_v otherwise (the cost model of cost.py, in units of one target decode step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_real
from ..policy import policy_table
from .chain import sequence_law
from .exact import decoder_walk
from .registry import MODES, make_decoder

__all__ = ["DecoderStats", "kl_divergence", "decoder_stats"]


@dataclass(frozen=True)
class DecoderStats:
    """One decoder's exact distance from its target and its expected work over `horizon` tokens."""

    mode: str
    k: int
    horizon: int
    tv: float  # TV between the decoder's law over sequences and the target's
    kl: float  # KL(decoder || target) in nats (inf if the decoder puts mass where the target has none)
    rounds: float  # E[target calls] to commit horizon tokens
    plain_rounds: float  # E[rounds that drafted nothing]
    drafted: float  # E[proposals drafted], all rounds together
    accepted: float  # E[accepted proposals that land inside the horizon]

    @property
    def tokens_per_call(self) -> float:
        """E[N]: horizon / E[rounds], tokens committed per target call."""
        return self.horizon / self.rounds

    @property
    def acceptance(self) -> float:
        """Accepted proposals inside the horizon per drafted proposal (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted > 0 else 0.0

    def speedup(self, *, c_d: float, c_v: float) -> float:
        """horizon / E[cost]: a round costs 1 without proposals, drafted * c_d + c_v with them."""
        c_d = check_real("c_d", c_d, low=0.0, high=math.inf, high_open=True)
        c_v = check_real("c_v", c_v, low=0.0, high=math.inf, low_open=True, high_open=True)
        cost = self.plain_rounds + (self.rounds - self.plain_rounds) * c_v + self.drafted * c_d
        return self.horizon / cost


def kl_divergence(law: torch.Tensor, target: torch.Tensor) -> float:
    """KL(law || target) = sum law log(law / target) over law > 0, in nats; inf where target is 0 and law is not."""
    law, target = law.double().reshape(-1), target.double().reshape(-1)
    where = law > 0
    if (target[where] <= 0).any():
        return math.inf
    return float((law[where] * (law[where] / target[where]).log()).sum().clamp(min=0.0))


def decoder_stats(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, mode: str = "correct",  # noqa: PLR0913 (the Markov engines' one shared signature)
                  options: dict | None = None, Q_bad: torch.Tensor | None = None, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None) -> DecoderStats:
    """The exact DecoderStats of a registered decoder (same arguments as decoder_law)."""
    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p, options=options)
    walk = decoder_walk(dec)
    law, stats = walk.law, walk.stats
    target = policy_table(P, temperature=temperature, top_k=top_k, top_p=top_p)
    want = sequence_law(MODES[mode].target(target), start=dec.start, horizon=dec.horizon)
    return DecoderStats(mode=mode, k=dec.k, horizon=dec.horizon, tv=0.5 * (law - want).abs().sum().item(),
                        kl=kl_divergence(law, want), rounds=stats.rounds, plain_rounds=stats.plain,
                        drafted=stats.drafted, accepted=stats.accepted)
