"""Lab: the cost equation against the clock, on a real target/draft pair.

The terms are the decoders' own phases, timed on caches filled to a real context:
  T_1   one plain decode step (a pass over one position, then the token choice),
  D(k)  the draft phase of a round: k sequential draft steps,
  V(k)  the verification phase: one target pass over k+1 positions, the acceptance test, the rollback;
so c_d = D(k) / (k T_1) and c_v(k) = V(k) / T_1. E[N(k)] is the tokens per round of real speculative
runs, and the measured speedup is their tokens per second over plain decoding's, on the same prompts.
What a real round costs beyond D(k) + V(k) (the draft's catch-up, committing tokens, timers) is O(k).
The terms are timed with the token rule; another verifier (block verification) can decode the same pairs
beside it (MeasurePlan.beside), for its own E[N] and measured speedup against the same plain runs.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._checks import check_int
from ..telemetry import SpecDecodeLog
from ..verification import METHODS
from .drafters import NeuralDraft, as_drafter, start_states
from .generation import Decoding, decode_step, generate_plain, generate_speculative, verify_round
from .speedup_table import PairTerms, SpeedupTable, VerifierRun, VerifierTotals, summarize
from .steps import check_policy, clock, prefill

__all__ = ["SpeedupTable", "VerifierRun", "MeasurePlan", "measure_speedup", "time_terms", "time_catch_up",
           "median_times"]


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
            t0 = clock(device_of)
            fn()
            ts.append(clock(device_of) - t0)
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
    t_cache, d_state = start_states(target, drafter, context)  # the target's holds context[:-1]
    last = context[-1:]  # (1,)
    decoding = Decoding(temperature, top_k, torch.Generator(device=context.device).manual_seed(seed))
    policy = decoding.kwargs()
    blocks = {}  # k: the last draft phase's (proposals (k,), q_rows (k, V) or None), real draws after context

    def drafting(k):  # a round's draft phase: read the committed tokens it lacks, propose k (verifying forgets them)
        blocks[k] = drafter.propose(d_state, context, L, k, **policy)

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
    reps calls of each timed term per pair, the seed of the decodes' draws, and the verifiers (other than the
    token rule, e.g. ("block",)) that decode each pair's prompt too, beside the token rule."""

    n_new: int = 64
    repeats: int = 5
    reps: int = 5
    seed: int = 0
    beside: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("n_new", "repeats", "reps"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("seed", self.seed, minimum=0)
        if isinstance(self.beside, str) or not isinstance(self.beside, (tuple, list)):
            raise TypeError(f"beside must be a tuple of verifier names, got {type(self.beside).__name__}")
        others = tuple(m for m in METHODS if m != "token")
        if any(v not in others or self.beside.count(v) > 1 for v in self.beside):
            raise ValueError(f"beside must name verifiers other than the token rule, each once, from "
                             f"{', '.join(map(repr, others))}; got {tuple(self.beside)!r}")
        object.__setattr__(self, "beside", tuple(self.beside))


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
    Each verifier in plan.beside decodes the pair's prompt too, right after the token rule (before it in odd
    repeats, so drift favours neither), and its E[N] and measured speedup are the table's `beside` runs.
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
    terms = PairTerms()
    verifiers = ("token", *plan.beside)
    runs = {v: VerifierTotals(ks, plan.repeats, policy, temperature) for v in verifiers}  # totals and logs
    for r in range(plan.repeats):
        for i, p in enumerate(prompts):
            for k in ks:
                T_1, (D,), (V,) = time_terms(target, draft, context, [k], plan.reps, temperature=temperature,
                                             top_k=top_k, seed=plan.seed + r * len(prompts) + i)
                plain = SpecDecodeLog(k=0, policy=policy, temperature=temperature)
                generate_plain(target, p, n_new, decoding=decoding, log=plain)
                plain_token = _seconds_per_token(plain)
                for v in verifiers if r % 2 == 0 else verifiers[::-1]:
                    spec = SpecDecodeLog(k=k, policy=policy, temperature=temperature)
                    generate_speculative(target, draft, p, n_new, k, log=spec,
                                         decoding=dataclasses.replace(decoding, verifier=v))
                    runs[v].add(r, k, spec, plain_token)
                terms.add(k, T_1, D, V, plain_token)
                if on_pair is not None:
                    on_pair()
    return summarize(ks, terms, runs, draft=draft.name, pairs=plan.repeats * len(prompts))
