"""Lab: the batch regime, measured: c_v(k; B) from one target pass over B x (k+1) positions, and the best k per B.

T_1(B) is one cached target pass over B x 1 positions (a plain decode step for B sequences at once) and
V(k; B) one over B x (k+1); c_v(k; B) = V(k; B) / T_1(B) is fitted by a line c0(B) + slope(B) k. On a GPU a
small batch leaves the chip idle, so extra positions are nearly free (a flat line); as B grows the pass
fills the chip and each position costs more (a steeper line), and sd.best_k picks a shorter block.
Only the pass is timed: the acceptance test and the draft are left out (c_d is given, measured at B = 1).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_int, check_numbers, check_real
from ..cost import BestK, best_k
from .measure import median_times
from .steps import sync

__all__ = ["LinearCost", "fit_c_v", "best_k_by_batch", "BatchCost", "time_batched_passes", "batch_cost"]


@dataclass(frozen=True)
class LinearCost:
    """c_v(k) = base + slope * k, in units of one target decode step; prints as the formula."""

    base: float
    slope: float

    def __call__(self, k: int) -> float:
        return self.base + self.slope * k

    def __str__(self) -> str:
        return f"{self.base:g} + {self.slope:g} k"


def fit_c_v(ks, c_v) -> tuple[float, float]:
    """(c0, slope): the least-squares line c_v(k) = c0 + slope k through measured (k, c_v(k)), at least 2 ks."""
    ks = [check_int(f"ks[{i}]", k, minimum=0) for i, k in enumerate(check_numbers("ks", ks))]
    c_v = [check_real(f"c_v[{i}]", c, low=0.0) for i, c in enumerate(check_numbers("c_v", c_v))]
    if len(ks) != len(c_v):
        raise ValueError(f"ks and c_v must have the same length, got {len(ks)} and {len(c_v)}")
    if len(set(ks)) < 2:
        raise ValueError(f"ks must hold at least 2 distinct values to fit a line, got {ks}")
    mk, mc = sum(ks) / len(ks), sum(c_v) / len(c_v)
    slope = sum((k - mk) * (c - mc) for k, c in zip(ks, c_v)) / sum((k - mk) ** 2 for k in ks)
    return mc - slope * mk, slope


def best_k_by_batch(fits, alpha, c_d: float, *, k_max: int = 16) -> list[BestK]:
    """sd.best_k for each (c0, slope) in fits, with c_v(k) = c0 + slope k (a line not > 0 up to k_max raises)."""
    return [best_k(alpha, c_d=c_d, c_v=lambda k, c0=c0, s=s: c0 + s * k, k_max=k_max) for c0, s in fits]


@dataclass(frozen=True)
class BatchCost:
    """c_v(k; B) measured for each batch size B and draft length k, its line per B, and the best k per B."""

    batches: list[int]
    ks: list[int]
    T_1: list[float]  # seconds, one pass over B x 1 positions, per B
    c_v: list[list[float]]  # c_v[b][i] = V(ks[i]; batches[b]) / T_1[b]
    fits: list[tuple[float, float]]  # (c0, slope) per B
    best: list[BestK]  # sd.best_k per B, for the alpha and c_d given
    alpha: float
    c_d: float

    def best_k_line(self) -> str:
        """'best k by batch size: B=1: k=4, B=2: k=4, ...'"""
        return "best k by batch size: " + ", ".join(f"B={B}: k={b.k}" for B, b in zip(self.batches, self.best))

    def table(self) -> str:
        head = f"{'B':>3}{'T_1 (ms)':>10}" + "".join(f"{f'k={k}':>7}" for k in self.ks) + f"{'c0':>8}{'slope':>7}"
        head += f"{'best k':>8}{'S':>7}"
        lines = [f"c_v(k; B) = one target pass over B x (k+1) positions / one over B x 1 "
                 f"(best k for alpha = {self.alpha:.3f}, c_d = {self.c_d:.3f})", head]
        for b, B in enumerate(self.batches):
            (c0, s), best = self.fits[b], self.best[b]
            lines.append(f"{B:>3}{self.T_1[b] * 1e3:>10.3f}" + "".join(f"{c:>7.3f}" for c in self.c_v[b])
                         + f"{c0:>8.3f}{s:>7.3f}{best.k:>8}{best.speedup:>7.3f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


@torch.inference_mode()
def time_batched_passes(target, contexts: torch.Tensor, ks, reps: int = 20) -> tuple[float, list[float]]:
    """(T_1, [V(k)]) in seconds for contexts (B, L): medians of reps cached passes over B x 1 and B x (k+1)."""
    ks = [check_int("k", k, minimum=1) for k in ks]
    reps = check_int("reps", reps, minimum=1)
    if not isinstance(contexts, torch.Tensor) or contexts.dim() != 2 or contexts.shape[1] < 2:
        raise ValueError("contexts must be a (B, L) LongTensor with L >= 2")
    B, L = contexts.shape
    cache = target.new_cache(batch=B)
    target(contexts[:, :-1], cache)  # (B, L-1) cached, as at the start of a round
    blocks = {k: contexts[:, -1:].expand(B, k + 1).contiguous() for k in [0] + ks}  # (B, k+1) positions to score

    def passing(k):
        target(blocks[k], cache)
        cache.crop(L - 1)

    times = median_times([lambda k=k: passing(k) for k in [0] + ks], reps, contexts)
    sync(contexts)
    return times[0], times[1:]


def batch_cost(target, contexts: torch.Tensor, *, alpha: float, c_d: float, batches=(1, 2, 4, 8, 16, 32),
               ks=range(1, 9), reps: int = 20, on_batch=None) -> BatchCost:
    """Time c_v(k; B) on the first B rows of contexts (B_max, L) for each B, fit its line, and pick the best k.

    The best k is searched over 0 .. max(ks), where c_v(k; B) was measured: the line is not extrapolated.
    """
    batches = [check_int("batches", B, minimum=1) for B in batches]
    ks = [check_int("k", k, minimum=1) for k in ks]
    alpha = check_real("alpha", alpha, low=0.0, high=1.0)
    c_d = check_real("c_d", c_d, low=0.0)
    if not batches or len(set(ks)) < 2:
        raise ValueError("batches must be non-empty and ks must hold at least 2 distinct values")
    if contexts.dim() != 2 or contexts.shape[0] < max(batches):
        raise ValueError(f"contexts must be (B, L) with B >= max(batches) = {max(batches)}, "
                         f"got shape {tuple(contexts.shape)}")
    T_1, c_v = [], []
    for B in batches:
        t1, vs = time_batched_passes(target, contexts[:B], ks, reps)
        T_1.append(t1)
        c_v.append([v / t1 for v in vs])
        if on_batch is not None:
            on_batch()
    fits = [fit_c_v(ks, row) for row in c_v]
    return BatchCost(batches=batches, ks=ks, T_1=T_1, c_v=c_v, fits=fits,
                     best=best_k_by_batch(fits, alpha, c_d, k_max=max(ks)), alpha=alpha, c_d=c_d)
