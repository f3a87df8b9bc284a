"""The q contract: a drafter must sample from the q it reports (three registered bugs break it)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_generator, check_int, check_tensor
from ..noise import tv_noise_bound
from ..sampling import empirical, total_variation

__all__ = ["QContract", "audit_q_contract"]


@dataclass(frozen=True)
class QContract:
    """Does a drafter's empirical output match the q it reports? Worst state's TV against the noise bound."""

    tv: float
    bound: float
    state: int  # the draft state with the largest TV

    @property
    def holds(self) -> bool:
        return self.tv <= self.bound


def audit_q_contract(sample_proposals, reported_q: torch.Tensor, *, num_samples: int,
                     generator: torch.Generator | None = None) -> QContract:
    """Draw num_samples proposals per draft state with sample_proposals(states (n,), generator) -> tokens (n,) and
    compare their frequencies with reported_q[state] (V, V); the bound keeps the false-alarm rate below 1e-6 overall.
    Returns the worst state's QContract (read .holds); it does not raise on a broken contract."""
    if not callable(sample_proposals):
        raise TypeError(f"sample_proposals must be callable, got {type(sample_proposals).__name__}")
    reported_q = check_tensor("reported_q", reported_q)
    if reported_q.dim() != 2 or reported_q.shape[0] != reported_q.shape[1]:
        raise ValueError(f"reported_q must be a square (V, V) table, got shape {tuple(reported_q.shape)}")
    n = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator)
    V = reported_q.shape[0]
    worst = QContract(tv=-1.0, bound=0.0, state=0)
    for state in range(V):
        tokens = sample_proposals(torch.full((n,), state, dtype=torch.long), generator)
        tv = total_variation(empirical(tokens, V), reported_q[state])
        bound = tv_noise_bound(reported_q[state].double() / reported_q[state].double().sum(), n, delta=1e-6 / V)
        if tv - bound > worst.tv - worst.bound:
            worst = QContract(tv=tv, bound=bound, state=state)
    return worst
