"""Thresholds for the statistical tests, derived from the sample size (not tuned)."""
from __future__ import annotations

import math

import torch

DELTA = 1e-6  # accepted chance that a correct sampler fails a test


def tv_bound(exact: torch.Tensor, n: int, delta: float = DELTA) -> float:
    """A TV that n exact samples exceed with probability below delta.

    E[TV] = 1/2 sum E|f_i - p_i| <= 1/2 sum sqrt(p_i (1 - p_i) / n) (Jensen), and one sample moves the
    empirical TV by at most 1/n, so McDiarmid gives P(TV - E[TV] >= t) <= exp(-2 n t^2): t = sqrt(ln(1/delta) / 2n).
    """
    p = exact.double().reshape(-1)
    mean_bound = 0.5 * torch.sqrt(p * (1 - p) / n).sum().item()
    return mean_bound + math.sqrt(math.log(1 / delta) / (2 * n))


def rate_bound(rate: float, n: int, z: float = 5.0) -> float:
    """z standard deviations of a mean of n Bernoulli(rate) flags: sqrt(rate (1 - rate) / n)."""
    return z * math.sqrt(max(rate * (1 - rate), 1e-12) / n)
