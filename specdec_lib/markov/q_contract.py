"""The q contract: a drafter must sample from the q it reports (three registered bugs break it)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..noise import tv_noise_bound
from ..sampling import empirical, total_variation


@dataclass(frozen=True)
class QContract:
    """Does a drafter's empirical output match the q it reports? Worst state's TV against the noise bound."""

    tv: float
    bound: float
    state: int  # the draft state with the largest TV

    @property
    def holds(self) -> bool:
        return self.tv <= self.bound


def check_q_contract(sample_proposals, reported_q: torch.Tensor, n: int,
                     generator: torch.Generator | None = None) -> QContract:
    """Draw n proposals per draft state with sample_proposals(states (n,), generator) -> tokens (n,) and compare
    their frequencies with reported_q[state] (V, V); the bound keeps the false-alarm rate below 1e-6 overall."""
    V = reported_q.shape[0]
    worst = QContract(tv=-1.0, bound=0.0, state=0)
    for state in range(V):
        tokens = sample_proposals(torch.full((n,), state, dtype=torch.long), generator)
        tv = total_variation(empirical(tokens, V), reported_q[state])
        bound = tv_noise_bound(reported_q[state].double() / reported_q[state].double().sum(), n, delta=1e-6 / V)
        if tv - bound > worst.tv - worst.bound:
            worst = QContract(tv=tv, bound=bound, state=state)
    return worst
