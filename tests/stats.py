"""Thresholds for the statistical tests, derived from the sample size (the library's own, tested in test_noise)."""
from __future__ import annotations

from specdec_lib.noise import rate_noise, tv_noise_bound

tv_bound = tv_noise_bound  # P(TV of n exact samples > bound) < 1e-6: Jensen + McDiarmid, see its docstring


def rate_bound(rate: float, n: int, z: float = 5.0) -> float:
    """z standard deviations of a mean of n Bernoulli(rate) flags: sqrt(rate (1 - rate) / n)."""
    return z * max(rate_noise(rate, n), 1e-6)
