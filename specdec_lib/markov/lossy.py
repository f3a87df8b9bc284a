"""Act V, lossy on purpose: Medusa's typical acceptance against the target, measured exactly.

typical_sweep walks the exact engine once per epsilon: the TV and KL of the decoder's law over sequences to
the target chain, and its tokens per target call (horizon / E[rounds]). typical_exact_settings tries the
settings that could make it exact, and says which do: only those where every kept proposal and every
target token is a draw from p itself (a greedy target, or a draft equal to the target with threshold 0 and
the typical resample, whose filter then keeps every token).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_numbers, check_real
from .measures import decoder_stats

EXACT_TV = 1e-12  # a TV below this is exact (rounding only)


@dataclass(frozen=True)
class TypicalPoint:
    """One epsilon of the sweep: how far the decoder lands from the target, and how many tokens a call yields."""

    epsilon: float
    delta: float
    tv: float
    kl: float
    tokens_per_call: float

    @property
    def exact(self) -> bool:
        """True when the TV is rounding only (< 1e-12)."""
        return self.tv < EXACT_TV


def typical_sweep(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, epsilons,
                  delta: float = 0.3, resample: str = "argmax", temperature: float = 1.0) -> list[TypicalPoint]:
    """typical_acceptance at every epsilon (Medusa's posterior_threshold) with one delta: exact TV, KL, E[N]."""
    epsilons = [check_real(f"epsilons[{i}]", e, low=0.0, high=1.0) for i, e in enumerate(check_numbers("epsilons",
                                                                                                        epsilons))]
    points = []
    for eps in epsilons:
        s = decoder_stats(P, Q, start=start, horizon=horizon, k=k, mode="typical_acceptance", temperature=temperature,
                          options={"epsilon": eps, "delta": delta, "resample": resample})
        points.append(TypicalPoint(epsilon=eps, delta=delta, tv=s.tv, kl=s.kl, tokens_per_call=s.tokens_per_call))
    return points


@dataclass(frozen=True)
class ExactSetting:
    """A setting of typical acceptance, and its exact TV to the target."""

    label: str
    options: dict
    temperature: float
    draft_is_target: bool
    tv: float

    @property
    def exact(self) -> bool:
        """True when the TV is rounding only (< 1e-12)."""
        return self.tv < EXACT_TV


SETTINGS = (  # (label, options, temperature, draft = target?)
    ("Medusa's defaults", {}, 1.0, False),
    ("greedy target and draft (temperature 0)", {}, 0.0, False),
    ("draft = target, epsilon 0, resample typical", {"epsilon": 0.0, "resample": "typical"}, 1.0, True),
    ("draft = target, epsilon 0, resample argmax", {"epsilon": 0.0}, 1.0, True),
    ("epsilon 0, resample typical (the real draft)", {"epsilon": 0.0, "resample": "typical"}, 1.0, False),
)


def typical_exact_settings(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int,
                           k: int) -> list[ExactSetting]:
    """Every setting of SETTINGS with its exact TV to the target (the target under the same temperature).

    Take k + 1 <= horizon: with longer blocks every full block is cut before its bonus token, and the argmax
    bonus (one of the ways typical acceptance is wrong) cannot show inside the horizon.
    """
    out = []
    for label, options, temperature, same in SETTINGS:
        s = decoder_stats(P, P if same else Q, start=start, horizon=horizon, k=k, mode="typical_acceptance",
                          options=options, temperature=temperature)
        out.append(ExactSetting(label=label, options=options, temperature=temperature, draft_is_target=same, tv=s.tv))
    return out
