"""Act IV exercises: the speedup with c_v(k); the best k."""
from __future__ import annotations

import torch

from ..accounting import expected_accepted, expected_tokens
from ..cost import best_k, speedup
from ._report import Grade, Stop, as_number, call, run

__all__ = ["grade_speedup", "grade_best_k"]


class _CostV:
    """c_v(k) = base + slope * k that records the k it was called with."""

    def __init__(self, base: float, slope: float):
        self.base, self.slope, self.calls = base, slope, []

    def __call__(self, k: int) -> float:
        self.calls.append(k)
        return self.base + self.slope * k

    def __str__(self) -> str:
        return f"c_v(k) = {self.base:g} + {self.slope:g} k"


def grade_speedup(speedup_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 4.1: speedup(alpha, c_d, k, c_v) -> E[N(k)] / (k c_d + c_v(k)), c_v a function of k; S(0) = 1."""
    def body(fn, report):
        for alpha, c_d, k, base, slope in [(0.8, 0.15, 8, 1.0, 0.05), (0.8, 0.15, 8, 1.6, 0.0),
                                           (0.6, 0.1, 3, 1.0, 0.5), (0.95, 0.3, 16, 1.2, 0.02)]:
            c_v = _CostV(base, slope)
            on = f"alpha = {alpha}, c_d = {c_d}, k = {k}, {c_v}"
            got = as_number(call(fn, alpha, c_d, k, c_v, on=on), "speedup", on)
            want = speedup(alpha, c_d=c_d, k=k, c_v=c_v)
            if abs(got - want) <= 1e-9:
                continue
            cost = k * c_d + base + slope * k
            where = f"{on}: got {got:.4f}, expected {want:.4f}"
            if k not in c_v.calls[:-1] and slope:
                raise Stop(f"c_v is a function of the draft length: evaluate it at k, c_v(k) (you called it with "
                            f"{c_v.calls[:-1] or 'nothing'}) ({where})")
            for num, text in [(1 + k * alpha, "the numerator is 1 + k alpha; use E[N(k)] = 1 + sum_j alpha^j"),
                              (expected_accepted(alpha, k), "the numerator is E[A]; a round retires E[N] = 1 + E[A]")]:
                if abs(got - num / cost) <= 1e-9:
                    raise Stop(f"{text} ({where})")
            if abs(got - expected_tokens(alpha, k) / (c_d + base + slope * k)) <= 1e-9:
                raise Stop(f"the draft cost is k c_d: k sequential draft steps ({where})")
            raise Stop(where)
        c_v = _CostV(1.2, 0.05)
        got = as_number(call(fn, 0.8, 0.15, 0, c_v, on=f"k = 0, {c_v}"), "speedup", "k = 0")
        if got != 1.0:
            raise Stop(f"k = 0 is plain decoding, no draft and no verification pass, so S(0) = 1; got {got:.4f} "
                        f"with {c_v}")
        report.note("S(k) right on 4 settings with c_v(k) a function of k, and S(0) = 1")
    return run("speedup", body, speedup_fn, raise_on_failure=raise_on_failure, verbose=verbose)


def grade_best_k(best_k_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 4.2: best_k(alpha, c_d, c_v, *, k_max) -> the k in 0..k_max with the largest S(k), ties to the least."""
    def body(fn, report):
        cases = [(0.9, 0.15, (1.0, 0.05), 32), (0.7, 0.15, (1.0, 0.05), 32), (0.5, 0.15, (1.0, 0.5), 32),
                 (0.99, 0.01, (1.0, 0.01), 5), (0.0, 0.0, (1.0, 0.0), 4)]
        for alpha, c_d, (base, slope), k_max in cases:
            c_v = _CostV(base, slope)
            on = f"alpha = {alpha}, c_d = {c_d}, {c_v}, k_max = {k_max}"
            got = call(fn, alpha, c_d, c_v, k_max=k_max, on=on)
            learner_calls = list(c_v.calls)
            if isinstance(got, torch.Tensor) and got.numel() == 1:
                got = int(got)
            if isinstance(got, bool) or not isinstance(got, int):
                raise Stop(f"best_k must return the draft length as an int, got {type(got).__name__} ({on})")
            ref = best_k(alpha, c_d=c_d, c_v=c_v, k_max=k_max)
            if got == ref.k:
                continue
            where = f"{on}: got k = {got}, expected k = {ref.k}"
            if not 0 <= got <= k_max:
                raise Stop(f"k must lie in 0..k_max ({where})")
            if ref.k == 0:
                if alpha == 0.0:
                    raise Stop(f"every k gives S = 1 here; on ties return the smallest k, the cheapest ({where})")
                raise Stop(f"k = 0 (switch speculation off) wins here: every k >= 1 is slower than plain decoding, "
                            f"best S = {max(ref.speedups[1:]):.3f} < 1. Search k = 0..k_max ({where})")
            if ref.k == k_max:
                raise Stop(f"the best k is k_max itself; search range(k_max + 1) ({where})")
            if abs(ref.speedups[got] - ref.speedup) <= 1e-12:
                raise Stop(f"k = {got} ties with k = {ref.k}; return the smaller ({where})")
            if slope and len(set(learner_calls)) <= 1:
                raise Stop(f"c_v depends on k: evaluate c_v(k) for each candidate k ({where})")
            raise Stop(f"{where} (S = {ref.speedups[got]:.4f} at yours, {ref.speedup:.4f} at the best)")
        report.note("best k right on 5 settings, including k = 0, k = k_max and a tie")
    return run("best_k", body, best_k_fn, raise_on_failure=raise_on_failure, verbose=verbose)
