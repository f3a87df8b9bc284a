"""Lab: the cost equation against the clock, on a real target/draft pair.

Each term is timed on its own, forward passes on a cache filled to a fixed context:
  T_1   one plain decode step of the target (one position, then the token choice),
  D(k)  k sequential draft steps,
  V(k)  one target pass over k+1 positions;
so c_d = D(k) / (k T_1) and c_v(k) = V(k) / T_1. E[N(k)] is the tokens per round of real speculative
runs, and the measured speedup is their tokens per second over plain decoding's, same prompts, same
number of new tokens. What a round costs beyond D(k) + V(k) (acceptance, rollback, Python) is O(k).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ._checks import check_int
from .generation import _pick, _sync, generate_plain, generate_speculative
from .telemetry import SpecDecodeLog


def _median_time(fn, reps: int, sync: torch.Tensor) -> float:
    """Median seconds of fn() over reps calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(reps):
        _sync(sync)
        t0 = time.perf_counter()
        fn()
        _sync(sync)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.inference_mode()
def time_terms(target, draft, context: torch.Tensor, ks, reps: int = 50, *, temperature: float = 0.0,
               top_k: int | None = None) -> tuple[float, list[float], list[float]]:
    """(T_1, [D(k)], [V(k)]) in seconds, each the median of reps timings at the given context (1-D ids).

    A decode step (in T_1 and in D(k)) includes choosing the token under the policy (argmax, or sampling).
    """
    ks = [check_int("k", k, minimum=1) for k in ks]
    reps = check_int("reps", reps, minimum=1)
    L = context.numel()
    t_cache, d_cache = target.new_cache(), draft.new_cache()
    target(context[None], t_cache)
    draft(context[None], d_cache)
    last = context[-1:][None]  # (1, 1)
    g = torch.Generator(device=context.device).manual_seed(0)

    def step():  # one plain decode step of the target
        _pick(target(last, t_cache)[0, -1], temperature, top_k, g)
        t_cache.crop(L)

    def draft_steps(k):
        x = last
        for _ in range(k):
            x = _pick(draft(x, d_cache)[0, -1], temperature, top_k, g)[0][None]
        d_cache.crop(L)

    def verify(k):
        target(context[None, -k - 1:], t_cache)
        t_cache.crop(L)

    T_1 = _median_time(step, reps, context)
    D = [_median_time(lambda: draft_steps(k), reps, context) for k in ks]
    V = [_median_time(lambda: verify(k), reps, context) for k in ks]
    return T_1, D, V


@dataclass(frozen=True)
class SpeedupTable:
    """Measured cost terms, predicted and measured speedups for each k (medians over repeats)."""

    ks: list[int]
    T_1: float  # seconds
    c_d: list[float]  # D(k) / (k T_1)
    c_v: list[float]  # V(k) / T_1
    e_n: list[float]  # tokens per round, measured
    alpha: list[float | None]  # conditional acceptance by position, from the largest k
    overhead: list[float]  # O(k) / T_1: a real round's time minus D(k) + V(k)
    plain_step: float  # a plain decoding loop's time per token / T_1 (1 when the loop adds nothing)
    predicted: list[float]  # E[N] / (k c_d + c_v(k))
    predicted_with_overhead: list[float]  # E[N] plain_step / (k c_d + c_v(k) + O(k))
    measured: list[float]  # tokens/s speculative over tokens/s plain
    repeats: int
    load: str = ""

    @property
    def rel_error(self) -> list[float]:
        return [abs(p - m) / m for p, m in zip(self.predicted, self.measured)]

    @property
    def rel_error_with_overhead(self) -> list[float]:
        return [abs(p - m) / m for p, m in zip(self.predicted_with_overhead, self.measured)]

    @property
    def max_rel_error(self) -> float:
        return max(self.rel_error)

    @property
    def c_d_fit(self) -> float:
        """One c_d for every k: least squares of D(k) / T_1 against k, through the origin."""
        return sum(k * k * c for k, c in zip(self.ks, self.c_d)) / sum(k * k for k in self.ks)

    def table(self) -> str:
        head = (f"{'k':>3}{'c_d':>7}{'c_v(k)':>8}{'E[N]':>7}{'pred S':>8}{'meas S':>8}{'rel err':>9}"
                f"{'O(k)/T_1':>10}")
        lines = [f"T_1 = {self.T_1 * 1e3:.3f} ms per plain decode step; fitted c_d = {self.c_d_fit:.3f}; "
                 f"plain loop step = {self.plain_step:.3f} T_1; medians of {self.repeats} repeats", head]
        for i, k in enumerate(self.ks):
            lines.append(f"{k:>3}{self.c_d[i]:>7.3f}{self.c_v[i]:>8.3f}{self.e_n[i]:>7.3f}{self.predicted[i]:>8.3f}"
                         f"{self.measured[i]:>8.3f}{self.rel_error[i]:>9.3f}{self.overhead[i]:>10.3f}")
        lines.append("O(k): a real round's time minus D(k) + V(k) timed alone (acceptance, rollback, Python, "
                     "and forwards slowed by sharing the CPU caches)")
        alpha = " ".join("-" if a is None else f"{a:.2f}" for a in self.alpha)
        lines.append(f"conditional acceptance by position (k = {self.ks[-1]}): {alpha}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _tps(log: SpecDecodeLog) -> float:
    s = log.summary()
    return s.tokens / (s.draft_time + s.verify_time)


def measure_speedup(target, draft, prompts, ks=range(1, 9), *, n_new: int = 64, repeats: int = 3, reps: int = 30,
                    temperature: float = 0.0, top_k: int | None = None, seed: int = 0) -> SpeedupTable:
    """Time T_1, D(k), V(k), run plain and speculative decoding on the prompts, and compare S(k) with the clock.

    Every repeat times the terms (at the context halfway through a run) and decodes every prompt plainly
    and with each k, interleaved, so slow drifts of the machine hit both sides alike; medians are taken
    over repeats. Greedy by default (temperature 0); otherwise sampled under (temperature, top_k).
    """
    ks = [check_int("k", k, minimum=1) for k in ks]
    repeats = check_int("repeats", repeats, minimum=1)
    n_new = check_int("n_new", n_new, minimum=1)
    prompts = list(prompts)
    mid = prompts[0].numel() + n_new // 2
    context = generate_plain(target, prompts[0], mid - prompts[0].numel())
    context = torch.cat([prompts[0], context])  # (mid,) a real context
    policy = "greedy" if temperature == 0 else f"sample (top_k={top_k})"
    g = torch.Generator(device=prompts[0].device).manual_seed(seed)
    per = {name: [] for name in ("T_1", "D", "V", "S", "plain_step", "round")}
    totals = {k: [0, 0] for k in ks}  # tokens, rounds over every repeat
    last_k = None  # summary of the largest k, for acceptance by position
    for _ in range(repeats):
        T_1, D, V = time_terms(target, draft, context, ks, reps, temperature=temperature, top_k=top_k)
        plain = SpecDecodeLog(k=0, policy=policy, temperature=temperature)
        for p in prompts:
            generate_plain(target, p, n_new, temperature=temperature, top_k=top_k, generator=g, log=plain)
        speeds, rounds = [], []
        for k in ks:
            log = SpecDecodeLog(k=k, policy=policy, temperature=temperature)
            for p in prompts:
                generate_speculative(target, draft, p, n_new, k, temperature=temperature, top_k=top_k,
                                     generator=g, log=log)
            s = log.summary()
            totals[k][0] += s.tokens
            totals[k][1] += s.rounds
            last_k = s
            speeds.append(_tps(log) / _tps(plain))
            rounds.append((s.draft_time + s.verify_time) / s.rounds)
        ps = plain.summary()
        for name, value in (("T_1", T_1), ("D", D), ("V", V), ("S", speeds), ("round", rounds),
                            ("plain_step", (ps.verify_time / ps.tokens) / T_1)):
            per[name].append(value)
    med = statistics.median
    T_1 = med(per["T_1"])
    D = [med(r[i] for r in per["D"]) for i in range(len(ks))]
    V = [med(r[i] for r in per["V"]) for i in range(len(ks))]
    rnd = [med(r[i] for r in per["round"]) for i in range(len(ks))]
    measured = [med(r[i] for r in per["S"]) for i in range(len(ks))]
    plain_step = med(per["plain_step"])
    c_d = [d / (k * T_1) for d, k in zip(D, ks)]
    c_v = [v / T_1 for v in V]
    e_n = [totals[k][0] / totals[k][1] for k in ks]
    overhead = [(r - d - v) / T_1 for r, d, v in zip(rnd, D, V)]
    predicted = [e / (k * cd + cv) for e, k, cd, cv in zip(e_n, ks, c_d, c_v)]
    with_o = [e * plain_step / (k * cd + cv + o) for e, k, cd, cv, o in zip(e_n, ks, c_d, c_v, overhead)]
    return SpeedupTable(ks=ks, T_1=T_1, c_d=c_d, c_v=c_v, e_n=e_n, alpha=last_k.conditional_acceptance,
                        overhead=overhead, plain_step=plain_step, predicted=predicted,
                        predicted_with_overhead=with_o, measured=measured, repeats=repeats)
