"""Lab: one decode configuration on one prompt, measured as the toy lab does: terms, E[N], S predicted and measured.

For a target, a drafter, a prompt, k and a Decoding: the plain run (generate_plain with a log), the cost terms on the
prompt's own caches (time_terms: T_1, D(k), V(k)), then the speculative run (generate_speculative with a log). The
measured speedup is plain seconds per token over speculative seconds per token, both from the loops' own round
timers (prefill excluded, as in `make measure`); the predicted one is E[N] / (k c_d + c_v(k)) from the measured terms.
Greedy runs are also checked token for token against the plain run (benchmarks/hf_generate.py times transformers'
own `generate` beside them).
combine_repeats folds repeats of one configuration into one result: the medians, the prediction from the median
terms, and each repeat's own terms (recorded_terms.summarise_repeats), as `make measure-real --repeats R` records
them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .._checks import check_int
from ..cost import cost_equation
from ..telemetry import SpecDecodeLog
from .generation import Decoding, generate_plain, generate_speculative
from .measure import time_terms
from .recorded_terms import RunRepeat, summarise_repeats
from .steps import clock

__all__ = ["DRAFT_KINDS", "Decoded", "RunResult", "decode_plain", "measure_run", "combine_repeats",
           "first_divergence"]

DRAFT_KINDS = ("model", "lookup", "table")  # a draft network, prompt lookup, a token n-gram table


@dataclass(frozen=True)
class Decoded:
    """One decode: its tokens (n_new,), seconds per token by the round timers, whole-call seconds (prefill included)."""

    tokens: torch.Tensor
    per_token: float
    wall: float
    log: SpecDecodeLog


@dataclass(frozen=True)
class RunResult:
    """A speculative configuration against its plain run: the recording's RealRun fields, and the decode itself."""

    T_1: float
    c_d: float
    c_v: float
    e_n: float
    alpha: list
    predicted: float
    measured: float
    equal_to_plain: bool | None
    first_divergence: int | None
    spec: Decoded
    repeats: tuple[RunRepeat, ...] = ()  # combine_repeats: each repeat's own terms (empty: one run)
    ranges: dict | None = None  # combine_repeats: field -> [min, max] over the repeats

    def terms(self, k: int) -> tuple[float, float, float]:
        """(T_1, D(k), V(k)) in seconds, as measure_run's terms= takes them."""
        return self.T_1, self.c_d * k * self.T_1, self.c_v * self.T_1

    def fields(self) -> dict:
        """The recording's fields of this run (no tensors, no repeats: repeat_fields has those)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("spec", "repeats", "ranges")}

    def repeat_fields(self) -> dict:
        """The repeats (as dicts) and their ranges, as `make measure-real` records them beside fields()."""
        return {"repeats": [dataclasses.asdict(r) for r in self.repeats], "ranges": self.ranges or {}}

    def repeat(self) -> RunRepeat:
        """This run's terms, E[N], prediction, clock and exactness as one repeat."""
        return RunRepeat(T_1=self.T_1, c_d=self.c_d, c_v=self.c_v, e_n=self.e_n, predicted=self.predicted,
                         measured=self.measured, equal_to_plain=self.equal_to_plain)


def _per_token(log: SpecDecodeLog) -> float:
    s = log.summary()
    return (s.draft_time + s.verify_time) / s.tokens


def decode_plain(target, prompt: torch.Tensor, n_new: int, *, decoding: Decoding) -> Decoded:
    """generate_plain with a log: the reference tokens and seconds per token of a configuration."""
    log = SpecDecodeLog(k=0, policy="greedy" if decoding.temperature == 0 else "sample",
                        temperature=decoding.temperature)
    t0 = clock()
    tokens = generate_plain(target, prompt, n_new, decoding=decoding, log=log)
    return Decoded(tokens, _per_token(log), clock(tokens) - t0, log)


def first_divergence(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first index where two token sequences (n,) differ, None if they are equal."""
    if a.shape != b.shape:
        raise ValueError(f"a and b must have one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    diff = (a != b).nonzero()
    return None if diff.numel() == 0 else int(diff[0, 0])


def measure_run(target, drafter, prompt: torch.Tensor, k: int, *, plain: Decoded, decoding: Decoding,
                reps: int = 3, terms: tuple[float, float, float] | None = None) -> RunResult:
    """Terms at the prompt (time_terms, reps calls each), then one speculative decode of plain's length against plain.

    plain is decode_plain's run of the same target, prompt and decoding (its generator state moves on: the
    speculative run draws afresh, so under sampling only the law is shared, and equal_to_plain is None).
    terms, when given, are (T_1, D(k), V(k)) in seconds timed before (another policy's run at the same prompt and k:
    the policy changes a row's softmax, microseconds against a real pass), and nothing is timed again.
    """
    k = check_int("k", k, minimum=1)
    if terms is None:
        T_1, (D,), (V,) = time_terms(target, drafter, prompt, [k], reps, temperature=decoding.temperature,
                                     top_k=decoding.top_k)
    else:
        T_1, D, V = terms
    n_new = plain.tokens.numel()
    log = SpecDecodeLog(k=k, policy="greedy" if decoding.temperature == 0 else "sample",
                        temperature=decoding.temperature)
    t0 = clock()
    tokens = generate_speculative(target, drafter, prompt, n_new, k, decoding=decoding, log=log)
    spec = Decoded(tokens, _per_token(log), clock(tokens) - t0, log)
    s = log.summary()
    c_d, c_v, e_n = D / (k * T_1), V / T_1, s.tokens / s.rounds
    greedy = decoding.temperature == 0
    div = first_divergence(tokens, plain.tokens) if greedy else None
    return RunResult(T_1=T_1, c_d=c_d, c_v=c_v, e_n=e_n, alpha=list(s.conditional_acceptance),
                     predicted=cost_equation(e_n, draft_steps=k, c_d=c_d, c_v=c_v),
                     measured=plain.per_token / spec.per_token,
                     equal_to_plain=(div is None) if greedy else None, first_divergence=div, spec=spec)


def combine_repeats(results: list[RunResult], k: int) -> RunResult:
    """Repeats of one configuration (measure_run results at one k) as one: the medians of T_1, c_d, c_v, E[N] and the
    measured speedup, predicted from the median terms, [min, max] ranges, every repeat kept; alpha and the decode are
    the first repeat's (greedy repeats decode the same tokens), equal_to_plain holds only if it held in every one."""
    if not results:
        raise ValueError("results must hold at least one RunResult, got none")
    k = check_int("k", k, minimum=1)
    repeats = tuple(r.repeat() for r in results)
    summary = summarise_repeats(list(repeats), k)
    flags = [r.equal_to_plain for r in results]
    divs = [r.first_divergence for r in results if r.first_divergence is not None]
    return dataclasses.replace(results[0], **summary, repeats=repeats, first_divergence=min(divs, default=None),
                               equal_to_plain=None if None in flags else all(flags))
