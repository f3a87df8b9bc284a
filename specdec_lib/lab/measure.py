"""Lab: the cost equation against the clock, on a real target/draft pair.

The terms are the decoders' own phases, timed on caches filled to a real context:
  T_1   one plain decode step (a pass over one position, then the token choice),
  D(k)  the draft phase of a round: k sequential draft steps,
  V(k)  the verification phase: one target pass over k+1 positions, the acceptance test, the rollback;
so c_d = D(k) / (k T_1) and c_v(k) = V(k) / T_1. E[N(k)] is the tokens per round of real speculative
runs, and the measured speedup is their tokens per second over plain decoding's, on the same prompts.
What a real round costs beyond D(k) + V(k) (the draft's catch-up, committing tokens, timers) is O(k).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._checks import check_int
from ..telemetry import SpecDecodeLog
from .drafters import NeuralDraft, as_drafter
from .generation import decode_step, generate_plain, generate_speculative, verify_round
from .steps import check_policy, prefill, sync


def median_times(fns, reps: int, device_of: torch.Tensor, before=None) -> list[float]:
    """Median seconds of each fn() over reps calls, timed round-robin (fn 1, fn 2, ..., fn 1, ...).

    Taking turns spreads any drift of the machine over every term alike, and runs each call after the
    others, as inside a decoding loop, where the two models take turns in the CPU caches. before[i], when
    given and not None, runs untimed right before each call of fns[i] (to set up its state).
    """
    before = before or [None] * len(fns)
    for fn, prep in zip(fns, before):  # warm-up
        if prep is not None:
            prep()
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, prep, ts in zip(fns, before, times):
            if prep is not None:
                prep()
            sync(device_of)
            t0 = time.perf_counter()
            fn()
            sync(device_of)
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


@torch.inference_mode()
def time_terms(target, draft, context: torch.Tensor, ks, reps: int = 50, *, temperature: float = 0.0,
               top_k: int | None = None, seed: int = 0) -> tuple[float, list[float], list[float]]:
    """(T_1, [D(k)], [V(k)]) in seconds: medians of reps timings of the decoders' own phases at context (1-D ids).

    T_1 is generate_plain's step (decode_step), timed in a row as in the plain loop; D(k) is the draft phase
    of a speculative round (draft_block) and V(k) its verification (verify_round: one target pass over k+1
    positions, the acceptance test on real proposals, the rollback), timed taking turns as in a round. Each
    runs on caches holding context[:-1], as inside a round, and the caches are cropped back after every call.
    draft is a drafter (sd.NeuralDraft, sd.TableDraft, sd.PromptLookupDraft) or a draft model.
    """
    ks = [check_int("k", k, minimum=1) for k in ks]
    reps = check_int("reps", reps, minimum=1)
    temperature, top_k = check_policy(temperature, top_k)
    drafter = as_drafter(draft)
    L = context.numel()
    t_cache, d_state = prefill(target, context), drafter.start(context)  # the target's holds context[:-1]
    last = context[-1:]  # (1,)
    policy = {"temperature": temperature, "top_k": top_k,
              "generator": torch.Generator(device=context.device).manual_seed(seed)}

    def drafting(k):  # a round's draft phase: read the committed tokens it lacks, propose k, then forget them
        out = drafter.propose(d_state, context, L, k, **policy)
        drafter.rollback(d_state, L - 1)
        return out

    blocks = {k: drafting(k) for k in ks}  # k: (proposals (k,), q_rows (k, V) or None), real draws after context

    def step():
        decode_step(target, t_cache, last, **policy)
        t_cache.crop(L - 1)

    def verifying(k):
        verify_round(target, t_cache, d_state, last, *blocks[k], n=L, drafter=drafter, **policy)
        t_cache.crop(L - 1)
        drafter.rollback(d_state, L - 1)

    (T_1,) = median_times([step], reps, context)  # steps in a row, as in the plain loop
    fns = []  # D(k), V(k) for each k: the order of a round, each model running after the other
    for k in ks:
        fns += [lambda k=k: drafting(k), lambda k=k: verifying(k)]
    times = median_times(fns, reps, context)
    return T_1, times[0::2], times[1::2]


@torch.inference_mode()
def time_catch_up(draft, context: torch.Tensor, k: int, reps: int = 50, *, temperature: float = 0.0,
                  top_k: int | None = None, seed: int = 0) -> tuple[float, float]:
    """(D(k) as timed, D(k) when the draft must first read two committed tokens), seconds, medians of reps.

    After a round that accepted the whole block the draft has not read its own last proposal, so the next
    round feeds it two tokens: one of the costs a real round has beyond D(k) + V(k), in P(A = k) of rounds.
    """
    k = check_int("k", k, minimum=1)
    reps = check_int("reps", reps, minimum=1)
    temperature, top_k = check_policy(temperature, top_k)
    if isinstance(draft, NeuralDraft):
        draft = draft.model
    if context.numel() < 3:
        raise ValueError(f"context must hold at least 3 tokens, got {context.numel()}")
    L = context.numel()
    cache = prefill(draft, context[:-1])  # holds context[:-2]: two tokens behind
    policy = {"temperature": temperature, "top_k": top_k,
              "generator": torch.Generator(device=context.device).manual_seed(seed)}

    def one_behind():  # untimed: feed context[-2], so the cache lacks only the last token
        draft(context[None, -2:-1], cache)

    neural = NeuralDraft(draft)

    def one():
        neural.propose(cache, context, L, k, **policy)
        cache.crop(L - 2)

    def two():
        neural.propose(cache, context, L, k, **policy)
        cache.crop(L - 2)

    one_time, two_time = median_times([one, two], reps, context, before=[one_behind, None])
    return one_time, two_time


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


def _seconds_per_token(log: SpecDecodeLog) -> float:
    s = log.summary()
    return (s.draft_time + s.verify_time) / s.tokens


def measure_speedup(target, draft, prompts, ks=range(1, 9), *, n_new: int = 64, repeats: int = 5, reps: int = 5,
                    temperature: float = 0.0, top_k: int | None = None, seed: int = 0,
                    on_pair: Callable[[], object] | None = None) -> SpeedupTable:
    """Time T_1, D(k), V(k) on their own, decode the prompts plainly and speculatively, and set S(k) against the clock.

    The machine's speed drifts (on a shared VM by 2x within seconds), so nothing is compared across
    time. Each pair times the terms round-robin (time_terms, reps calls of each), then decodes one prompt
    plainly and speculatively, back to back. c_d and c_v(k) are medians over pairs of ratios timed
    together. A repeat runs one pair per prompt and k; its measured speedup is its speculative tokens
    over its speculative time counted in each pair's own plain time per token (a tokens/s ratio over
    every prompt, immune to drift between pairs); the table gives the median over repeats and their
    range. Greedy by default (temperature 0); otherwise both decoders sample under (temperature, top_k).
    draft is a drafter (sd.NeuralDraft, sd.TableDraft, sd.PromptLookupDraft) or a draft model.
    on_pair(), when given, is called after each of the repeats x len(prompts) x len(ks) pairs (a progress bar).
    """
    ks = [check_int("k", k, minimum=1) for k in ks]
    if not ks:
        raise ValueError("ks must hold at least one k")
    repeats = check_int("repeats", repeats, minimum=1)
    n_new = check_int("n_new", n_new, minimum=1)
    temperature, top_k = check_policy(temperature, top_k)
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    if on_pair is not None and not callable(on_pair):
        raise TypeError(f"on_pair must be callable or None, got {type(on_pair).__name__}")
    draft = as_drafter(draft)
    context = torch.cat([prompts[0], generate_plain(target, prompts[0], max(1, n_new // 2))])  # a real context
    policy = "greedy" if temperature == 0 else f"sample (top_k={top_k})"
    g = torch.Generator(device=prompts[0].device).manual_seed(seed)
    T_1s = []  # per pair
    c_d, c_v = {k: [] for k in ks}, {k: [] for k in ks}  # per pair: D(k) / (k T_1), V(k) / T_1
    # per repeat and k: [tokens, rounds, speculative time in units of the same pair's plain time per token]
    sums = [{k: [0, 0, 0.0] for k in ks} for _ in range(repeats)]
    plain_steps = []  # per pair: seconds per plain token / T_1 of the pair
    logs = {k: SpecDecodeLog(k=k, policy=policy, temperature=temperature) for k in ks}
    for r in range(repeats):
        for i, p in enumerate(prompts):
            for k in ks:
                T_1, (D,), (V,) = time_terms(target, draft, context, [k], reps, temperature=temperature, top_k=top_k,
                                             seed=seed + r * len(prompts) + i)
                plain = SpecDecodeLog(k=0, policy=policy, temperature=temperature)
                generate_plain(target, p, n_new, temperature=temperature, top_k=top_k, generator=g, log=plain)
                spec = SpecDecodeLog(k=k, policy=policy, temperature=temperature)
                generate_speculative(target, draft, p, n_new, k, temperature=temperature, top_k=top_k, generator=g,
                                     log=spec)
                logs[k].merge(spec)
                s, plain_token = spec.summary(), _seconds_per_token(plain)
                sums[r][k][0] += s.tokens
                sums[r][k][1] += s.rounds
                sums[r][k][2] += (s.draft_time + s.verify_time) / plain_token
                T_1s.append(T_1)
                c_d[k].append(D / (k * T_1))
                c_v[k].append(V / T_1)
                plain_steps.append(plain_token / T_1)
                if on_pair is not None:
                    on_pair()
    med = statistics.median
    c_d, c_v = [med(c_d[k]) for k in ks], [med(c_v[k]) for k in ks]
    summaries = {k: logs[k].summary() for k in ks}
    e_n = [summaries[k].tokens / summaries[k].rounds for k in ks]
    predicted = [e / (k * cd + cv) for e, k, cd, cv in zip(e_n, ks, c_d, c_v)]
    speed = [[rep[k][0] / rep[k][2] for rep in sums] for k in ks]  # per k and repeat: tokens per plain-token time
    rounds = [[rep[k][2] / rep[k][1] for rep in sums] for k in ks]  # per k and repeat: a round, in plain tokens
    overhead = [med(rd) - (k * cd + cv) for rd, k, cd, cv in zip(rounds, ks, c_d, c_v)]
    return SpeedupTable(ks=ks, T_1=med(T_1s), c_d=c_d, c_v=c_v, e_n=e_n,
                        alpha=summaries[ks[-1]].conditional_acceptance, predicted=predicted,
                        measured=[med(sp) for sp in speed], measured_range=[(min(sp), max(sp)) for sp in speed],
                        overhead=overhead, plain_step=med(plain_steps), T_1_range=(min(T_1s), max(T_1s)),
                        repeats=repeats, pairs=repeats * len(prompts), draft=draft.name)
