"""Act IV: the cost equation S(k) = E[N(k)] / (k c_d + c_v(k) + O), in units of one target decode step T_1."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ._checks import check_alpha, check_int, check_numbers, check_real, check_widths
from .accounting import expected_tokens

__all__ = ["CostV", "c_v_at", "tree_nodes", "round_cost", "cost_equation", "speedup", "speedup_grid", "BestK", "best_k"]

CostV = float | Callable[[int], float]  # c_v: a number, or a function of the draft length k


def _nonneg(name: str, x) -> float:
    """A finite number >= 0."""
    return check_real(name, x, low=0.0, high=math.inf, high_open=True)


def c_v_at(c_v: CostV, k: int) -> float:
    """Verification cost c_v(k): finite and > 0, whether given as a number or a callable."""
    name = "c_v(k)" if callable(c_v) else "c_v"
    value = check_real(name, c_v(k) if callable(c_v) else c_v)
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{name} must be > 0 and finite, got {value:g}" if callable(c_v)
                         else f"c_v must be > 0 and finite, got {value:g}")
    return value


def tree_nodes(widths) -> int:
    """|T|: the draft nodes of a static tree, w_1 + w_1 w_2 + ... (every node at depth j has w_{j+1} children), the
    positions a tree's verification pass scores beside the root: c_v(|T|)."""
    total, level = 0, 1
    for w in check_widths(widths):
        level *= w
        total += level
    return total


def round_cost(*, draft_steps: int, c_d, c_v, overhead=0.0):
    """C = draft_steps c_d + c_v + overhead: one round in target steps, the cost equation's denominator (the one
    place it is written). Numbers are checked (draft_steps an int >= 0, c_d and overhead >= 0, c_v > 0, finite); a
    tensor c_d (a grid of draft costs) is taken as its caller checked it and gives a tensor."""
    draft_steps = check_int("draft_steps", draft_steps, minimum=0)
    if not isinstance(c_d, torch.Tensor):
        c_d = _nonneg("c_d", c_d)
    return draft_steps * c_d + c_v_at(c_v, draft_steps) + _nonneg("overhead", overhead)


def cost_equation(e_n, *, draft_steps: int, c_d, c_v, overhead=0.0):
    """S = E[N] / (draft_steps c_d + c_v + overhead): the cost equation on exact or measured terms (E[N] > 0)."""
    if not isinstance(e_n, torch.Tensor):
        e_n = check_real("e_n", e_n, low=0.0, low_open=True)
    return e_n / round_cost(draft_steps=draft_steps, c_d=c_d, c_v=c_v, overhead=overhead)


def speedup(alpha, *, c_d: float, k: int, c_v: CostV, overhead: float = 0.0) -> float:
    """S(k) = E[N(k)] / (k c_d + c_v(k) + overhead); k = 0 is the baseline itself and returns 1.0."""
    k = check_int("k", k, minimum=0)
    e_n = expected_tokens(alpha, k)  # validates alpha against k
    c_d = _nonneg("c_d", c_d)
    overhead = _nonneg("overhead", overhead)
    if k == 0:  # plain decoding: one token per T_1, no draft, no verification pass (c_v is not called)
        if not callable(c_v):
            c_v_at(c_v, 0)
        return 1.0
    return cost_equation(e_n, draft_steps=k, c_d=c_d, c_v=c_v_at(c_v, k), overhead=overhead)


def speedup_grid(alphas, c_ds, *, k: int, c_v: CostV, overhead: float = 0.0) -> torch.Tensor:
    """S(k) over a grid: float64 tensor (len(alphas), len(c_ds)), rows alpha, columns c_d."""
    alphas = [check_real(f"alphas[{i}]", a, low=0.0, high=1.0) for i, a in enumerate(check_numbers("alphas", alphas))]
    c_ds = [_nonneg(f"c_ds[{i}]", c) for i, c in enumerate(check_numbers("c_ds", c_ds))]
    k = check_int("k", k, minimum=0)
    overhead = _nonneg("overhead", overhead)
    if k == 0:
        return torch.ones(len(alphas), len(c_ds), dtype=torch.float64)
    e_n = torch.tensor([expected_tokens(a, k) for a in alphas], dtype=torch.float64)  # (A,)
    cost = round_cost(draft_steps=k, c_d=torch.tensor(c_ds, dtype=torch.float64), c_v=c_v_at(c_v, k),
                      overhead=overhead)  # (C,)
    return e_n[:, None] / cost[None, :]  # (A, C)


@dataclass(frozen=True)
class BestK:
    """The best draft length in 0..k_max, its speedup, and the speedup of every k = 0..k_max."""

    k: int
    speedup: float
    speedups: list[float]


def best_k(alpha, *, c_d: float, c_v: CostV, k_max: int = 32, overhead: float = 0.0) -> BestK:
    """Largest S(k) over k = 0..k_max, ties to the smaller k; alpha: a number or >= k_max rates (k uses the first k)."""
    k_max = check_int("k_max", k_max, minimum=0)
    if isinstance(alpha, torch.Tensor) and alpha.dim() == 1:
        alpha = alpha.tolist()
    if isinstance(alpha, Sequence) and not isinstance(alpha, str):
        if len(alpha) < k_max:
            raise ValueError(f"alpha must have at least k_max = {k_max} rates, got {len(alpha)}")
        rates = check_alpha(list(alpha), len(alpha))
        per_k = [rates[:k] for k in range(k_max + 1)]
    else:
        per_k = [check_alpha(alpha, 1)[0]] * (k_max + 1)
    speedups = [speedup(per_k[k], c_d=c_d, k=k, c_v=c_v, overhead=overhead) for k in range(k_max + 1)]
    best = 0
    for k, s in enumerate(speedups):
        if s > speedups[best]:  # strict: ties keep the smaller k
            best = k
    return BestK(k=best, speedup=speedups[best], speedups=speedups)
