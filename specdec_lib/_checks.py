"""Argument validation shared by every module: clear errors, never a NaN or a silent clamp."""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

SUM_TOL = 1e-4  # a distribution must sum to 1 within this

__all__ = ["SUM_TOL", "check_tensor", "check_distribution", "check_same_shape", "check_int", "check_real",
           "check_alpha", "check_choice", "check_generator", "check_token_ids", "check_numbers",
           "check_widths", "check_pair"]


def check_tensor(name: str, x) -> torch.Tensor:
    """Return x as a floating tensor, or raise TypeError naming the argument."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_distribution(name: str, x, *, min_dim: int = 1) -> torch.Tensor:
    """Check that the last axis of x holds probability distributions: finite, >= 0, summing to 1."""
    x = check_tensor(name, x)
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(x.shape)}")
    if x.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last axis (the vocabulary)")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite (no NaN or inf entries)")
    if (x < 0).any():
        raise ValueError(f"{name} must be non-negative")
    sums = x.sum(-1, dtype=torch.float64)
    err = (sums - 1.0).abs().max().item() if sums.numel() else 0.0
    if err > SUM_TOL:
        raise ValueError(f"{name} must sum to 1 along its last axis (within {SUM_TOL}); off by {err:.3g}")
    return x


def check_same_shape(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    """Raise ValueError unless a and b have the same shape."""
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def check_int(name: str, x, *, minimum: int | None = None) -> int:
    """Return x as an int (bools and floats rejected), at least `minimum` when given."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        if isinstance(x, torch.Tensor) and x.dim() == 0 and not x.is_floating_point() and x.dtype != torch.bool:
            x = int(x)
        else:
            raise TypeError(f"{name} must be an integer, got {type(x).__name__}")
    x = int(x)
    if minimum is not None and x < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {x}")
    return x


def check_real(name: str, x, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """Return x as a float inside the given (closed unless *_open) interval; NaN is always rejected."""
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, torch.Tensor)):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}")
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise TypeError(f"{name} must be a single number, got a tensor of shape {tuple(x.shape)}")
        x = x.item()
    x = float(x)
    if math.isnan(x):
        raise ValueError(f"{name} must not be NaN")
    lo_bad = low is not None and (x <= low if low_open else x < low)
    hi_bad = high is not None and (x >= high if high_open else x > high)
    if lo_bad or hi_bad:
        lb = "(" if low_open else "["
        hb = ")" if high_open else "]"
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise ValueError(f"{name} must lie in {lb}{lo}, {hi}{hb}, got {x:g}")
    return x


def check_alpha(alpha, k: int, name: str = "alpha") -> list[float]:
    """Return k per-position acceptance rates from a number or a sequence of length k, each in [0, 1]."""
    if isinstance(alpha, torch.Tensor) and alpha.dim() == 1:
        alpha = alpha.tolist()
    if isinstance(alpha, Sequence) and not isinstance(alpha, str):
        if len(alpha) != k:
            raise ValueError(f"{name} must have one rate per position: length k = {k}, got {len(alpha)}")
        return [check_real(f"{name}[{i}]", a, low=0.0, high=1.0) for i, a in enumerate(alpha)]
    a = check_real(name, alpha, low=0.0, high=1.0)
    return [a] * k


def check_choice(name: str, x, choices) -> str:
    """Raise ValueError listing the valid choices unless x is one of them."""
    if x not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {x!r}")
    return x


def check_generator(generator) -> torch.Generator | None:
    """Accept None or a torch.Generator; anything else is a TypeError."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


def check_token_ids(name: str, x, vocab: int, *, dims: int | None = None, allow_empty: bool = True,
                    long_only: bool = False) -> torch.Tensor:
    """The one token-id validator: x as a LongTensor of ids in [0, vocab).

    An int becomes a 0-d tensor and any integer tensor is cast to int64, unless long_only (a model's input,
    which must already be a LongTensor). dims, when given, is the required number of dimensions.
    """
    if long_only and not (isinstance(x, torch.Tensor) and x.dtype == torch.long):
        got = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a LongTensor (dtype torch.int64), got {got}")
    if isinstance(x, bool) or (isinstance(x, torch.Tensor) and x.dtype == torch.bool):
        raise TypeError(f"{name} must be a token id (int) or an integer tensor, got bool")
    if isinstance(x, int):
        x = torch.tensor(x)
    if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.is_complex():
        got = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a token id (int) or an integer tensor, got {got}")
    if dims is not None and x.dim() != dims:
        want = "1-D" if dims == 1 else f"{dims}-D" + (" (B, T)" if dims == 2 else "")
        raise ValueError(f"{name} must be {want}, got shape {tuple(x.shape)}")
    if not allow_empty and x.numel() == 0:
        raise ValueError(f"{name} must be non-empty")
    x = x.long()
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= vocab):
        raise ValueError(f"{name} must hold token ids in [0, {vocab}), got values in [{int(x.min())}, {int(x.max())}]")
    return x


def check_numbers(name: str, x) -> list:
    """Return a non-empty sequence or 1-D tensor as a list, or raise naming the argument."""
    if isinstance(x, torch.Tensor) and x.dim() == 1:
        x = x.tolist()
    if not isinstance(x, Sequence) or isinstance(x, str):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(x).__name__}")
    if len(x) == 0:
        raise ValueError(f"{name} must be non-empty")
    return list(x)


def check_widths(widths) -> tuple[int, ...]:
    """Validate a static tree's widths: a non-empty tuple (or list) of ints >= 1, the children per node by depth."""
    if not isinstance(widths, (tuple, list)):
        raise TypeError(f"widths must be a tuple of ints (children per node, by depth), got {type(widths).__name__}")
    if not widths:
        raise ValueError("widths must be non-empty: one width per depth of the tree")
    return tuple(check_int(f"widths[{i}]", w, minimum=1) for i, w in enumerate(widths))


def check_pair(p, q) -> tuple[torch.Tensor, torch.Tensor]:
    """A target p and a draft q: two 1-D distributions over the same vocabulary."""
    p = check_distribution("p", p)
    q = check_distribution("q", q)
    check_same_shape("p", p, "q", q)
    if p.dim() != 1:
        raise ValueError(f"p and q must be 1-D distributions over the vocabulary, got shape {tuple(p.shape)}")
    return p, q
