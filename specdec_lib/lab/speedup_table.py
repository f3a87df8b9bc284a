"""Lab: SpeedupTable, what measure_speedup returns (and the recorded run holds): the cost terms, predicted and
measured speedups for each k, and the text table it prints."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SpeedupTable"]


@dataclass(frozen=True)
class SpeedupTable:
    """Measured cost terms, predicted and measured speedups for each k."""

    ks: list[int]
    T_1: float  # seconds, median over pairs
    c_d: list[float]  # D(k) / (k T_1), median over pairs
    c_v: list[float]  # V(k) / T_1, median over pairs
    e_n: list[float]  # tokens per round of the speculative runs
    alpha: list[float | None]  # conditional acceptance by position, from the largest k
    predicted: list[float]  # E[N] / (k c_d + c_v(k))
    measured: list[float]  # median over repeats of (tokens/s speculative) / (tokens/s plain)
    measured_range: list[tuple[float, float]]  # smallest and largest over repeats: how noisy the clock was
    overhead: list[float]  # O(k) / T_1: a real round, in plain-loop steps (median over repeats), minus k c_d + c_v(k)
    plain_step: float  # the plain loop's time per token / T_1 (1 when the loop adds nothing to a step)
    T_1_range: tuple[float, float]  # smallest and largest T_1 over pairs: how much the machine drifted
    repeats: int
    pairs: int  # plain/speculative pairs per k
    draft: str = "draft"  # the drafter's name

    @property
    def rel_error(self) -> list[float]:
        """|predicted - measured| / measured for each k."""
        return [abs(p - m) / m for p, m in zip(self.predicted, self.measured)]

    @property
    def max_rel_error(self) -> float:
        return max(self.rel_error)

    @property
    def c_d_fit(self) -> float:
        """One c_d for every k: least squares of D(k) / T_1 against k, through the origin."""
        return sum(k * k * c for k, c in zip(self.ks, self.c_d)) / sum(k * k for k in self.ks)

    def table(self) -> str:
        lo, hi = self.T_1_range
        head = (f"{'k':>3}{'c_d':>7}{'c_v(k)':>8}{'E[N]':>7}{'pred S':>8}{'meas S':>8}{'(range)':>14}"
                f"{'rel err':>9}{'O(k)/T_1':>10}")
        lines = [f"T_1 = {self.T_1 * 1e3:.3f} ms per plain decode step (from {lo * 1e3:.3f} to {hi * 1e3:.3f} over "
                 f"{self.pairs * len(self.ks)} pairs); fitted c_d = {self.c_d_fit:.3f}; "
                 f"plain loop step = {self.plain_step:.3f} T_1",
                 head]
        for i, k in enumerate(self.ks):
            q1, q3 = self.measured_range[i]
            lines.append(f"{k:>3}{self.c_d[i]:>7.3f}{self.c_v[i]:>8.3f}{self.e_n[i]:>7.3f}{self.predicted[i]:>8.3f}"
                         f"{self.measured[i]:>8.3f}{f'({q1:.3f}-{q3:.3f})':>14}{self.rel_error[i]:>9.3f}"
                         f"{self.overhead[i]:>10.3f}")
        lines.append(f"meas S: median (range) over {self.repeats} repeats of {self.pairs // self.repeats} "
                     "plain/speculative pairs per k, each pair run back to back")
        lines.append("O(k): a real round (in plain-loop steps) minus k c_d + c_v(k) timed alone: the draft's catch-up "
                     "after a full block, committing tokens, timers")
        alpha = " ".join("-" if a is None else f"{a:.2f}" for a in self.alpha)
        lines.append(f"conditional acceptance by position (k = {self.ks[-1]}): {alpha}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
