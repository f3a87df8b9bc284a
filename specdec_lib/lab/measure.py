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
from dataclasses import dataclass, field

import torch

from .._checks import check_int
from ..telemetry import SpecDecodeLog
from .drafters import NeuralDraft, as_drafter
from .generation import Decoding, decode_step, generate_plain, generate_speculative, verify_round
from .speedup_table import SpeedupTable
from .steps import check_policy, prefill, sync

__all__ = ["SpeedupTable", "MeasurePlan", "measure_speedup", "time_terms", "time_catch_up", "median_times"]


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
    draft is a drafter (sd.lab.NeuralDraft, sd.lab.TableDraft, sd.lab.PromptLookupDraft) or a draft model.
    """
    ks = [check_int("k", k, minimum=1) for k in ks]
    reps = check_int("reps", reps, minimum=1)
    temperature, top_k = check_policy(temperature, top_k)
    drafter = as_drafter(draft)
    L = context.numel()
    t_cache, d_state = prefill(target, context), drafter.start(context)  # the target's holds context[:-1]
    last = context[-1:]  # (1,)
    decoding = Decoding(temperature, top_k, torch.Generator(device=context.device).manual_seed(seed))
    policy = decoding.kwargs()

    def drafting(k):  # a round's draft phase: read the committed tokens it lacks, propose k, then forget them
        out = drafter.propose(d_state, context, L, k, **policy)
        drafter.rollback(d_state, L - 1)
        return out

    blocks = {k: drafting(k) for k in ks}  # k: (proposals (k,), q_rows (k, V) or None), real draws after context

    def step():
        decode_step(target, t_cache, last, **policy)
        t_cache.crop(L - 1)

    def verifying(k):
        proposals, q_rows = blocks[k]
        verify_round(target, t_cache, d_state, torch.cat([last, proposals]), q_rows, n=L, decoding=decoding,
                     drafter=drafter)
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
    policy = Decoding(temperature, top_k, torch.Generator(device=context.device).manual_seed(seed)).kwargs()

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
class MeasurePlan:
    """How much measure_speedup decodes and times: n_new tokens per decode, repeats of every (prompt, k) pair,
    reps calls of each timed term per pair, and the seed of the decodes' draws."""

    n_new: int = 64
    repeats: int = 5
    reps: int = 5
    seed: int = 0

    def __post_init__(self):
        for name in ("n_new", "repeats", "reps"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("seed", self.seed, minimum=0)


@dataclass
class _Totals:
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
class _PairTerms:
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


def _seconds_per_token(log: SpecDecodeLog) -> float:
    s = log.summary()
    return (s.draft_time + s.verify_time) / s.tokens


def measure_speedup(target, draft, prompts, ks=range(1, 9), *, plan: MeasurePlan = MeasurePlan(),  # noqa: B008
                    temperature: float = 0.0, top_k: int | None = None,
                    on_pair: Callable[[], object] | None = None) -> SpeedupTable:
    """Time T_1, D(k), V(k) on their own, decode the prompts plainly and speculatively, and set S(k) against the clock.

    The machine's speed drifts (on a shared VM by 2x within seconds), so nothing is compared across
    time. Each pair times the terms round-robin (time_terms, plan.reps calls of each), then decodes one prompt
    plainly and speculatively (plan.n_new tokens), back to back. c_d and c_v(k) are medians over pairs of ratios
    timed together. A repeat runs one pair per prompt and k; its measured speedup is its speculative tokens
    over its speculative time counted in each pair's own plain time per token (a tokens/s ratio over
    every prompt, immune to drift between pairs); the table gives the median over plan.repeats and their
    range. Greedy by default (temperature 0); otherwise both decoders sample under (temperature, top_k).
    draft is a drafter (sd.lab.NeuralDraft, sd.lab.TableDraft, sd.lab.PromptLookupDraft) or a draft model.
    on_pair(), when given, is called after each of the repeats x len(prompts) x len(ks) pairs (a progress bar).
    """
    ks = [check_int("k", k, minimum=1) for k in ks]
    if not ks:
        raise ValueError("ks must hold at least one k")
    if not isinstance(plan, MeasurePlan):
        raise TypeError(f"plan must be a MeasurePlan, got {type(plan).__name__}")
    temperature, top_k = check_policy(temperature, top_k)
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    if on_pair is not None and not callable(on_pair):
        raise TypeError(f"on_pair must be callable or None, got {type(on_pair).__name__}")
    draft = as_drafter(draft)
    n_new = plan.n_new
    context = torch.cat([prompts[0], generate_plain(target, prompts[0], max(1, n_new // 2))])  # a real context
    policy = "greedy" if temperature == 0 else f"sample (top_k={top_k})"
    decoding = Decoding(temperature, top_k, torch.Generator(device=prompts[0].device).manual_seed(plan.seed))
    terms = _PairTerms()
    totals = [{k: _Totals() for k in ks} for _ in range(plan.repeats)]  # per repeat and k
    logs = {k: SpecDecodeLog(k=k, policy=policy, temperature=temperature) for k in ks}
    for r in range(plan.repeats):
        for i, p in enumerate(prompts):
            for k in ks:
                T_1, (D,), (V,) = time_terms(target, draft, context, [k], plan.reps, temperature=temperature,
                                             top_k=top_k, seed=plan.seed + r * len(prompts) + i)
                plain = SpecDecodeLog(k=0, policy=policy, temperature=temperature)
                generate_plain(target, p, n_new, decoding=decoding, log=plain)
                spec = SpecDecodeLog(k=k, policy=policy, temperature=temperature)
                generate_speculative(target, draft, p, n_new, k, decoding=decoding, log=spec)
                logs[k].merge(spec)
                plain_token = _seconds_per_token(plain)
                totals[r][k].add(spec, plain_token)
                terms.add(k, T_1, D, V, plain_token)
                if on_pair is not None:
                    on_pair()
    return _table(ks, terms, totals, logs, draft=draft.name, pairs=plan.repeats * len(prompts))


def _table(ks: list[int], terms: _PairTerms, totals: list[dict[int, _Totals]], logs: dict[int, SpecDecodeLog], *,
           draft: str, pairs: int) -> SpeedupTable:
    """The SpeedupTable of the timed terms, the per-repeat totals and the merged logs."""
    med = statistics.median
    c_d, c_v = [med(terms.c_d[k]) for k in ks], [med(terms.c_v[k]) for k in ks]
    summaries = {k: logs[k].summary() for k in ks}
    e_n = [summaries[k].tokens / summaries[k].rounds for k in ks]
    predicted = [e / (k * cd + cv) for e, k, cd, cv in zip(e_n, ks, c_d, c_v)]
    speed = [[rep[k].speed for rep in totals] for k in ks]  # per k and repeat: tokens per plain-token time
    rounds = [[rep[k].round_cost for rep in totals] for k in ks]  # per k and repeat: a round, in plain tokens
    overhead = [med(rd) - (k * cd + cv) for rd, k, cd, cv in zip(rounds, ks, c_d, c_v)]
    return SpeedupTable(ks=ks, T_1=med(terms.T_1), c_d=c_d, c_v=c_v, e_n=e_n,
                        alpha=summaries[ks[-1]].conditional_acceptance, predicted=predicted,
                        measured=[med(sp) for sp in speed], measured_range=[(min(sp), max(sp)) for sp in speed],
                        overhead=overhead, plain_step=med(terms.plain_step),
                        T_1_range=(min(terms.T_1), max(terms.T_1)), repeats=len(totals), pairs=pairs, draft=draft)
