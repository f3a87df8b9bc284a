"""Lab: SpeedupTable, what measure_speedup returns (and the recorded run holds): the cost terms, predicted and
measured speedups for each k, other verifiers' runs on the same pairs beside them, and the text table it prints;
then the totals measure_speedup keeps while it runs (per pair, per repeat, per verifier) and summarize."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..cost import cost_equation, round_cost
from ..telemetry import SpecDecodeLog

__all__ = ["SpeedupTable", "VerifierRun", "RepeatTotals", "PairTerms", "VerifierTotals", "summarize"]


@dataclass(frozen=True)
class VerifierRun:
    """Another verifier (block verification) decoding the same pairs as the table's token rule: E[N] and the
    measured speedup (median and range over repeats) for each of the table's k."""

    verifier: str
    e_n: list[float]  # tokens per round of its speculative runs
    measured: list[float]  # median over repeats of (tokens/s speculative) / (tokens/s plain), the same plain runs
    measured_range: list[tuple[float, float]]


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
    beside: tuple[VerifierRun, ...] = ()  # other verifiers on the same pairs (the columns above: the token rule)
    repeat_speeds: list[list[float]] = field(default_factory=list)  # per k, each repeat's measured S ([]: not kept)

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
        for run in self.beside:
            lines += self._beside_lines(run)
        return "\n".join(lines)

    def _beside_lines(self, run: VerifierRun) -> list[str]:
        """The token rule's E[N] and measured S beside run's, on the same pairs, for each k."""
        lines = [f"{run.verifier} verification on the same pairs, beside the token rule (columns above):",
                 f"{'k':>3}{'E[N]':>7}{run.verifier:>8}{'gain':>8}{'meas S':>8}{run.verifier:>8}{'(range)':>14}"]
        for i, k in enumerate(self.ks):
            q1, q3 = run.measured_range[i]
            gain = run.e_n[i] / self.e_n[i] - 1
            lines.append(f"{k:>3}{self.e_n[i]:>7.3f}{run.e_n[i]:>8.3f}{gain:>+8.1%}{self.measured[i]:>8.3f}"
                         f"{run.measured[i]:>8.3f}{f'({q1:.3f}-{q3:.3f})':>14}")
        return lines

    def __str__(self) -> str:
        return self.table()


@dataclass
class RepeatTotals:
    """One repeat's speculative runs at one k: tokens, rounds, and their time in plain-token times of each pair."""

    tokens: int = 0
    rounds: int = 0
    time: float = 0.0  # sum over pairs of (draft + verify seconds) / (the same pair's plain seconds per token)

    def add(self, spec: SpecDecodeLog, plain_token: float) -> None:
        s = spec.summary()
        self.tokens += s.tokens
        self.rounds += s.rounds
        self.time += (s.draft_time + s.verify_time) / plain_token

    @property
    def speed(self) -> float:
        """Tokens per plain-token time: this repeat's measured speedup."""
        return self.tokens / self.time

    @property
    def round_cost(self) -> float:
        """A round, in plain-token times."""
        return self.time / self.rounds


@dataclass
class PairTerms:
    """Per pair, the timed terms: T_1, and c_d(k), c_v(k) by k, and the plain loop's step in T_1."""

    T_1: list[float] = field(default_factory=list)
    c_d: dict[int, list[float]] = field(default_factory=dict)
    c_v: dict[int, list[float]] = field(default_factory=dict)
    plain_step: list[float] = field(default_factory=list)

    def add(self, k: int, T_1: float, D: float, V: float, plain_token: float) -> None:
        self.T_1.append(T_1)
        self.c_d.setdefault(k, []).append(D / (k * T_1))
        self.c_v.setdefault(k, []).append(V / T_1)
        self.plain_step.append(plain_token / T_1)


class VerifierTotals:
    """One verifier's speculative runs: per repeat and k its RepeatTotals, and per k the merged log."""

    def __init__(self, ks: list[int], repeats: int, policy: str, temperature: float):
        self.ks = ks
        self.totals = [{k: RepeatTotals() for k in ks} for _ in range(repeats)]
        self.logs = {k: SpecDecodeLog(k=k, policy=policy, temperature=temperature) for k in ks}

    def add(self, r: int, k: int, spec: SpecDecodeLog, plain_token: float) -> None:
        self.logs[k].merge(spec)
        self.totals[r][k].add(spec, plain_token)

    def e_n(self) -> list[float]:
        """Tokens per round at each k, over every run."""
        summaries = [self.logs[k].summary() for k in self.ks]
        return [s.tokens / s.rounds for s in summaries]

    def speeds(self) -> list[list[float]]:
        """Per k and repeat: tokens per plain-token time."""
        return [[rep[k].speed for rep in self.totals] for k in self.ks]

    def run(self, verifier: str) -> VerifierRun:
        """These runs as the VerifierRun of verifier."""
        speed = self.speeds()
        return VerifierRun(verifier=verifier, e_n=self.e_n(), measured=[statistics.median(sp) for sp in speed],
                           measured_range=[(min(sp), max(sp)) for sp in speed])


def summarize(ks: list[int], terms: PairTerms, verifiers: dict[str, VerifierTotals], *, draft: str,
              pairs: int) -> SpeedupTable:
    """The SpeedupTable of the timed terms and the token rule's runs (verifiers["token"]), the others beside."""
    med = statistics.median
    runs = verifiers["token"]
    c_d, c_v = [med(terms.c_d[k]) for k in ks], [med(terms.c_v[k]) for k in ks]
    e_n = runs.e_n()
    predicted = [cost_equation(e, draft_steps=k, c_d=cd, c_v=cv) for e, k, cd, cv in zip(e_n, ks, c_d, c_v)]
    speed = runs.speeds()
    rounds = [[rep[k].round_cost for rep in runs.totals] for k in ks]  # per k and repeat: a round, in plain tokens
    overhead = [med(rd) - round_cost(draft_steps=k, c_d=cd, c_v=cv) for rd, k, cd, cv in zip(rounds, ks, c_d, c_v)]
    return SpeedupTable(ks=ks, T_1=med(terms.T_1), c_d=c_d, c_v=c_v, e_n=e_n,
                        alpha=runs.logs[ks[-1]].summary().conditional_acceptance, predicted=predicted,
                        measured=[med(sp) for sp in speed], measured_range=[(min(sp), max(sp)) for sp in speed],
                        overhead=overhead, plain_step=med(terms.plain_step),
                        T_1_range=(min(terms.T_1), max(terms.T_1)), repeats=len(runs.totals), pairs=pairs,
                        draft=draft, beside=tuple(v.run(name) for name, v in verifiers.items() if name != "token"),
                        repeat_speeds=speed)
