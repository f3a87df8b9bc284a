"""Act V, lossy on purpose: Medusa's typical acceptance against the target, measured exactly, and its law.

typical_sweep walks the exact engine once per epsilon: the TV and KL(decoder || target) of the decoder's law
over sequences, and its tokens per target call (horizon / E[rounds]). typical_law writes the same law down
in one line per position, with no walk: in state s, with threshold t_s = min(epsilon, delta exp(-H(p_s))),
a proposal y ~ q_s is kept when p_s(y) > t_s, and the mass c_s = sum over cut z of q_s(z) goes to the
resample r_s (argmax p_s, or p_s restricted to p_s >= t_s), so a committed token has law
  T_s(y) = q_s(y) 1{p_s(y) > t_s} + c_s r_s(y),
except the token after k kept proposals, which is drawn from r_s. It equals p_s exactly when nothing the
target can emit is cut and q_s = p_s (then r_s = p_s for the typical resample): typical_exact_settings tries
settings on both sides of that condition, and typical_breakpoints lists the epsilons where a kept set changes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_choice, check_int, check_numbers, check_real
from .chain import check_start, check_table
from .draft_rules import argmax_table, typical_accept, typical_table, typical_threshold
from .measures import decoder_stats

__all__ = [
    "EXACT_TV", "TypicalPoint", "typical_sweep", "typical_breakpoints", "cuts_nothing", "typical_law", "ExactSetting",
    "SETTINGS", "typical_exact_settings"
]

EXACT_TV = 1e-12  # a TV below this is exact (rounding only)


@dataclass(frozen=True)
class TypicalPoint:
    """One epsilon of the sweep: how far the decoder lands from the target, and how many tokens a call yields."""

    epsilon: float
    delta: float
    tv: float
    kl: float  # KL(decoder || target), nats
    tokens_per_call: float  # horizon / E[target calls]

    @property
    def exact(self) -> bool:
        """True when the TV is rounding only (< 1e-12)."""
        return self.tv < EXACT_TV


def typical_sweep(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, epsilons,
                  delta: float = 0.3, resample: str = "argmax") -> list[TypicalPoint]:
    """typical_acceptance at every epsilon (Medusa's posterior_threshold) with one delta: exact TV, KL, tokens
    (at temperature 1, as Medusa's typical test reads the target's own row)."""
    epsilons = [check_real(f"epsilons[{i}]", e, low=0.0, high=1.0) for i, e in enumerate(check_numbers("epsilons",
                                                                                                        epsilons))]
    points = []
    for eps in epsilons:
        s = decoder_stats(P, Q, start=start, horizon=horizon, k=k, mode="typical_acceptance",
                          options={"epsilon": eps, "delta": delta, "resample": resample})
        points.append(TypicalPoint(epsilon=eps, delta=delta, tv=s.tv, kl=s.kl, tokens_per_call=s.tokens_per_call))
    return points


def _rows(table) -> torch.Tensor:
    table = check_table("P", table).double()
    return table / table.sum(-1, keepdim=True)


def typical_breakpoints(P: torch.Tensor, *, delta: float) -> list[float]:
    """The epsilons where some state's kept set changes: every p_s(y) below delta exp(-H(p_s)), sorted.

    p_s(y) > min(epsilon, cap_s) holds for every epsilon when p_s(y) > cap_s, and flips at epsilon = p_s(y)
    when p_s(y) < cap_s; so the law is the same for all epsilon between two consecutive breakpoints.
    """
    p = _rows(P)
    cap = typical_threshold(p, epsilon=1.0, delta=check_real("delta", delta, low=0.0, high=1.0))  # (V,)
    return sorted(p[p < cap[:, None]].tolist())


def cuts_nothing(P: torch.Tensor, *, epsilon: float, delta: float) -> bool:
    """True when the threshold min(epsilon, delta exp(-H(p_s))) is below every p_s(y) > 0, in every state s."""
    p = _rows(P)
    t = typical_threshold(p, epsilon=epsilon, delta=delta)  # (V,)
    return bool(((p > t[:, None]) | (p <= 0)).all())


def typical_law(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, epsilon: float = 0.09,
                delta: float = 0.3, resample: str = "argmax") -> torch.Tensor:
    """The law (V,) * horizon of typical acceptance from T_s and r_s alone, tracking the kept count j = 0 .. k."""
    P, Q = _rows(P), _rows(Q)
    start, V = check_start(start, P.shape[0]), P.shape[0]
    horizon, k = check_int("horizon", horizon, minimum=1), check_int("k", k, minimum=0)
    keep = typical_accept(P, epsilon=epsilon, delta=delta)  # (V, V) 1 where state s keeps y
    r = {"argmax": argmax_table, "typical": lambda p: typical_table(p, epsilon=epsilon, delta=delta)}[
        check_choice("resample", resample, ("argmax", "typical"))](P)  # (V, V) the resample's rows
    kept = Q * keep  # (V, V) q_s(y) 1{p_s(y) > t_s}
    cut = (Q * (1 - keep)).sum(-1, keepdim=True) * r  # (V, V) c_s r_s(y)
    law = torch.zeros(1, k + 1, dtype=torch.float64)  # (prefixes, j): P(prefix, j proposals kept this round)
    law[0, 0] = 1.0
    last = torch.tensor([start])  # (prefixes,) the last committed token of each prefix
    for _ in range(horizon):
        new = torch.zeros(law.shape[0], V, k + 1, dtype=torch.float64)  # (prefixes, y, j)
        new[:, :, 1:] = law[:, None, :k] * kept[last][:, :, None]  # y kept: one more this round
        new[:, :, 0] = law[:, :k].sum(1, keepdim=True) * cut[last] + law[:, k:] * r[last]  # cut, or the bonus
        law, last = new.reshape(-1, k + 1), torch.arange(V).repeat(law.shape[0])
    return law.sum(-1).reshape((V,) * horizon)


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
    ("draft = target, epsilon 0.001, resample typical", {"epsilon": 0.001, "resample": "typical"}, 1.0, True),
    ("draft = target, delta 0, resample typical", {"delta": 0.0, "resample": "typical"}, 1.0, True),
    ("draft = target, epsilon 0.002, resample typical", {"epsilon": 0.002, "resample": "typical"}, 1.0, True),
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
