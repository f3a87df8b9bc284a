"""audit_generation: drive a speculative generation function on the battery and compare what it outputs with plain
generation's exact law, and every logprob it reports with plain generation's exact value.

Per case (generation_battery.generation_cases(): a history-dependent target and draft, a prompt, the Settings, k):
  * the exact law pi of plain generation with the same settings (surface.exact.plain_law) over its support, plus
    one bin for anything plain never outputs, M = |support| + 1 outcomes;
  * n = law_power(pi, ...).num_blocks samples of fn (battery.law_power: the audit's power calculation on this law
    vector; the report's delta is shared among the cases by a union bound, as audit_verifier shares it);
  * the TV between the empirical law of the token tuples and pi (the stop reason is a function of the tuple:
    "eos" exactly when the tuple ends in the EOS; a reported stop that disagrees breaks the contract);
  * every reported logprob against plain's exact log p of that token given the tokens before it (the
    conditional of pi), tolerance 1e-6: a sample with any value off counts as one mismatch, and any mismatch,
    any broken contract, or a TV above the threshold fails the case.
A failure is diagnosed by the nearest registered loop variant (surface.registry), summed over the cases: the TV
from the variant's exact law (surface.exact.speculative_law; a logprob variant's is plain's) plus the gap between
the measured share of outputs with a wrong logprob and the variant's exact chance of one (surface.exact.
logprob_error), as audit_verifier names the nearest known verifier.

fn's conventions (loop, batched, transformers) are generation_adapters.py's.
"""
from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .._checks import check_generator, check_int
from ..noise import tv_noise_bound
from ..surface.exact import LOGPROB_TOL, logprob_error, plain_law, plain_logprob, speculative_law
from ..surface.registry import loop_variants
from .battery import PROMISE, Promise, law_power
from .generation_adapters import Sample, adapt_generation
from .generation_battery import GenerationCase, generation_cases, transformers_cases
from .report import GenerationCaseResult, GenerationReport

__all__ = ["LOGPROB_TOLERANCE", "audit_generation", "assert_generates", "expected_stop", "CaseLaw", "case_law"]

LOGPROB_TOLERANCE = LOGPROB_TOL  # 1e-6: a reported logprob further than this from plain's value is a mismatch (the
# exact engine's logprob_error counts the same)

def expected_stop(tokens: tuple[int, ...], settings) -> str:
    """The stop reason a tuple implies: "eos" when it ends in settings.eos, else "length"."""
    return "eos" if settings.eos is not None and len(tokens) and tokens[-1] == settings.eos else "length"


@dataclass(frozen=True)
class CaseLaw:
    """What a case is checked against, computed once: plain's exact law, the power's law vector (support, then the
    other bin), and every registered bug's exact law and exact chance of reporting a wrong logprob (a logprob
    variant's law is plain's)."""

    case: GenerationCase
    law: dict[tuple[int, ...], float]
    pi: torch.Tensor  # (M,) the support's masses, then 0 for the other bin
    variant_laws: dict[str, dict[tuple[int, ...], float]]
    variant_errors: dict[str, float]  # the exact P(a reported logprob is wrong), surface.exact.logprob_error
    _logprobs: dict = field(default_factory=dict, repr=False, compare=False)

    def logprob(self, tokens: tuple[int, ...], i: int) -> float:
        """Plain generation's log p of tokens[i] after tokens[:i] (surface.exact.plain_logprob: -inf after an EOS and
        past the cap), cached per case."""
        key = (tokens[:i + 1], i)
        if key not in self._logprobs:
            c = self.case
            try:
                self._logprobs[key] = plain_logprob(c.target, c.prompt, tokens, i, c.settings)
            except ValueError:  # a text plain never writes, where the settings ban every token
                self._logprobs[key] = -math.inf
        return self._logprobs[key]


@functools.lru_cache(maxsize=32)
def case_law(case: GenerationCase) -> CaseLaw:
    """The case's exact laws (cached per case): plain's, and each registered bug's where its features are on."""
    law = {t: m for t, m in plain_law(case.target, case.prompt, case.settings).items() if m > 0}
    pi = torch.tensor([*law.values(), 0.0], dtype=torch.float64)
    laws, errors = {}, {}
    for v in loop_variants(exact=False):  # with none of its features on a variant is plain generation
        on = v.matters(case.settings)
        laws[v.name] = speculative_law(case.target, case.draft, case.prompt, case.settings, k=case.k,
                                       spec=v.spec) if on and v.what == "law" else law
        errors[v.name] = logprob_error(case.target, case.draft, case.prompt, case.settings, k=case.k,
                                       spec=v.spec) if on else 0.0
    return CaseLaw(case, law, pi, laws, errors)


def _close(a: float, b: float) -> bool:
    return (a == b == -math.inf) or abs(a - b) <= LOGPROB_TOLERANCE  # NaN is never close


def _tally(case: GenerationCase, exact: CaseLaw, samples: list[Sample]):
    """(counts of token tuples, malformed count, violations, logprob mismatches, samples checked, first mismatch)."""
    V, settings = case.V, case.settings
    counts, malformed, violations, mismatches, checked, example = Counter(), 0, 0, 0, 0, ""
    for (tokens, lp, stop), m in Counter((s.tokens, s.logprobs, s.stop) for s in samples).items():
        if any(t < 0 or t >= V for t in tokens):
            malformed += m
            violations += m
            continue
        counts[tokens] += m
        wrong_stop = stop is not None and stop != expected_stop(tokens, settings)
        violations += m * (wrong_stop or (lp is not None and len(lp) != len(tokens)))
        if lp is None or len(lp) != len(tokens):
            continue
        checked += m
        plain = tuple(exact.logprob(tokens, i) for i in range(len(tokens)))
        if not all(_close(a, b) for a, b in zip(lp, plain)):
            mismatches += m
            example = example or (f"{tokens}: reported ({', '.join(f'{a:.4g}' for a in lp)}), plain "
                                  f"({', '.join(f'{b:.4g}' for b in plain)})")
    return counts, malformed, violations, mismatches, checked, example


def _law_table(law: dict, counts: Counter) -> tuple:
    """(tokens, exact mass, count) for plain's support (most likely first), then every other tuple seen."""
    support = sorted(law, key=lambda t: (-law[t], t))
    return tuple((t, law[t], counts.get(t, 0)) for t in support) + tuple(
        (t, 0.0, counts[t]) for t in sorted(set(counts) - set(law)))


def _tv(counts: Counter, malformed: int, n: int, law: dict) -> float:
    """TV between the empirical law (counts / n, malformed outputs off every table) and an exact law."""
    keys = set(counts) | set(law)
    return 0.5 * (sum(abs(counts.get(t, 0) / n - law.get(t, 0.0)) for t in keys) + malformed / n)


def _nearest(dist: dict[str, float]) -> str:
    return min(dist, key=lambda name: round(dist[name], 9)) if dist else ""


def _check_cases(cases, convention: str) -> list[GenerationCase]:
    if cases is None:
        if convention == "transformers":
            return transformers_cases()
        return generation_cases()
    cases = list(cases)
    if not cases or not all(isinstance(c, GenerationCase) for c in cases):
        raise TypeError("cases must be a non-empty sequence of GenerationCase (generation_battery)")
    return cases


def audit_generation(fn: Callable, *, convention: str = "loop", seed: int = 0, num_samples: int | None = None,
                     promise: Promise = PROMISE, cases=None, subject: str | None = None,
                     generator: torch.Generator | None = None) -> GenerationReport:
    """Check a speculative generation function against plain generation's exact law and logprobs, case by case.

    num_samples (per case) defaults to the power calculation's n for promise.epsilon and promise.beta on each
    case's plain law; promise.delta bounds the chance that a correct function fails the report (shared among the
    cases). Randomness comes from `generator`, or a fresh one seeded with `seed`. cases: the battery
    (generation_cases(); transformers_cases() for convention="transformers") unless given.
    """
    sample = adapt_generation(fn, convention)
    seed = check_int("seed", seed, minimum=0)
    num_samples = None if num_samples is None else check_int("num_samples", num_samples, minimum=1)
    if not isinstance(promise, Promise):
        raise TypeError(f"promise must be a Promise (epsilon, beta, delta), got {type(promise).__name__}")
    generator = check_generator(generator) or torch.Generator().manual_seed(seed)
    cases = _check_cases(cases, convention)
    results, totals, seen = [], {}, []
    for case in cases:
        exact = case_law(case)
        pw = law_power(exact.pi, num_samples=num_samples, cases=len(cases), promise=promise)
        n = pw.num_blocks
        counts, malformed, violations, mismatches, checked, example = _tally(case, exact, sample(case, n, generator))
        dist = _distances(exact, counts, malformed, n, mismatches, checked)
        for name, d in dist.items():
            totals[name] = totals.get(name, 0.0) + d
        seen.append((exact, counts, malformed, n, mismatches, checked))
        nearest = _nearest(dist)
        results.append(GenerationCaseResult(
            case.name, case.features, case.k, case.V, n, exact.pi.numel(), _tv(counts, malformed, n, exact.law),
            pw.threshold, pw.floor, pw.detectable, violations, mismatches, checked, nearest,
            dist.get(nearest, 0.0), example, _law_table(exact.law, counts)))
    return GenerationReport(_subject(fn, subject), tuple(results), promise,
                            *_diagnosis(results, totals, seen, promise.delta), sized=num_samples is None)


def _distances(exact: CaseLaw, counts: Counter, malformed: int, n: int, mismatches: int, checked: int) -> dict:
    """Each registered bug's distance from what was seen on one case: the TV from its exact law, plus (where
    logprobs were reported) the gap between the share of outputs with a wrong logprob and its exact chance."""
    rate = mismatches / checked if checked else 0.0
    return {name: _tv(counts, malformed, n, law) + (abs(rate - exact.variant_errors[name]) if checked else 0.0)
            for name, law in exact.variant_laws.items()}


def _explains(name: str, seen: list, delta: float) -> bool:
    """Whether variant `name` explains every case as plain's law explains a correct loop's: its TV from the seen law
    within sd.tv_noise_bound of its own law at n, and its wrong-logprob chance within Hoeffding's
    sqrt(ln(2 m / delta) / (2 n)) of the seen share (delta shared among the m cases)."""
    m = len(seen)
    for exact, counts, malformed, n, mismatches, checked in seen:
        law = exact.variant_laws[name]
        bound = tv_noise_bound(torch.tensor([*law.values(), 0.0], dtype=torch.float64), n, delta / m)
        if _tv(counts, malformed, n, law) > bound:
            return False
        if checked and abs(mismatches / checked - exact.variant_errors[name]) > math.sqrt(
                math.log(2 * m / delta) / (2 * checked)):
            return False
    return True


def _diagnosis(results, totals: dict, seen: list, delta: float) -> tuple[str, str]:
    """(the nearest variant's name, "name: description (reference)") over all cases; ("", "") when all pass; when
    even the nearest one does not explain what was seen, ("", "no registered variant explains it ...")."""
    if all(r.passed for r in results):
        return "", ""
    best = _nearest(totals)
    if not best:
        return "", "no registered variant to compare with"
    if not _explains(best, seen, delta):
        return "", (f"no registered variant explains it (the nearest, {best}, is {totals[best]:.3f} off summed over "
                    "the cases, beyond its own noise bound on some case)")
    v = {v.name: v for v in loop_variants()}[best]
    return best, f"{best}: {v.description} ({v.reference})"


def _subject(fn: Callable, subject: str | None) -> str:
    return subject or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def assert_generates(fn: Callable, **kwargs) -> GenerationReport:
    """One line in a test suite: audit_generation(fn, **kwargs), raising AssertionError with the report on failure."""
    report = audit_generation(fn, **kwargs)
    if not report.passed:
        raise AssertionError(f"\n{report}")
    return report
