"""Lab: the engines recording's record (kind "audit-engines", specdec_lib/data/engines_reference.json): the kit run
on real engines, one verdict per engine, mode and case, and how each engine was installed.

A verdict is audit_generation's on one case of the engine battery (conformance.engines.engine_cases), in one mode of
one engine: "pass" or "FAIL" with the TV to the exact law, the threshold, n and the logprob mismatches, or "left out"
with why (the engine's semantics for that setting differ from the kit's). "plain" is every engine's control: the kit's
law is the engine's. A same-seed row counts the seeds whose tokens in a speculative mode equal plain's (sample-and-
match engines: all). tools/audit_engines.py (`make audit-engines`) writes one in the engines' own environment;
recordings.py registers the kind and reads the file.
"""
from __future__ import annotations

from dataclasses import dataclass

from .schema import find_row

__all__ = ["ENGINE_CHOICES", "EngineInstall", "EngineVerdict", "SameSeedRow", "Reproduction", "EnginesRecording",
           "check_engines_recording"]

ENGINE_CHOICES = {"verdict": ("pass", "FAIL", "left out")}


@dataclass(frozen=True)
class EngineInstall:
    """One engine as it ran: name, version, how it was installed and its seconds (first run and cached)."""

    engine: str
    version: str
    install: str  # the command or build, as run
    first_seconds: float | None  # a first install or build, nothing cached (None: not timed)
    cached_seconds: float | None  # the same from the caches
    modes: list[str]


@dataclass(frozen=True)
class EngineVerdict:
    """audit_generation's verdict on one case, in one mode of one engine."""

    engine: str
    mode: str
    case: str
    features: list[str]
    verdict: str  # ENGINE_CHOICES
    tv: float | None  # None: left out
    threshold: float | None
    n: int  # samples (0: left out)
    violations: int  # outputs that broke the contract (a token off the vocabulary, a stop against its tokens)
    logprob_mismatches: int
    note: str  # the nearest registered variant of a failure, or why the case was left out
    law: list[tuple[list[int], float, int]]  # (tokens, plain's exact mass, times seen) per outcome, kept where the
    # case failed and in plain beside it; empty elsewhere


@dataclass(frozen=True)
class SameSeedRow:
    """Seeds whose tokens in mode equal plain's, out of n (conformance.engines.same_seed)."""

    engine: str
    mode: str
    case: str
    equal: int
    n: int


@dataclass(frozen=True)
class Reproduction:
    """A bug's reproduction as run: counts per mode (plain beside the speculative one) of what each call saw."""

    engine: str
    title: str
    report: str  # the upstream-ready report in docs/
    script: str  # the reproduction that wrote these counts
    modes: list[str]
    counts: dict[str, list[int]]  # what was counted -> one count per mode
    shows: list[str]  # the counts that differ between the modes: the bug, where it shows


@dataclass(frozen=True)
class EnginesRecording:
    """The kit on real engines: provenance, machine, the engines, every verdict, the same-seed counts."""

    source: str
    machine: dict  # processor, cpus, python, date, seconds
    engines: list[EngineInstall]
    verdicts: list[EngineVerdict]
    same_seed: list[SameSeedRow]
    reproductions: list[Reproduction]
    notes: dict[str, str]

    def verdict(self, engine: str, mode: str, case: str) -> EngineVerdict:
        """The verdict on case in engine's mode (ValueError listing the recorded triples otherwise)."""
        return find_row(self.verdicts, ("engine", "mode", "case"), (engine, mode, case))

    def table(self, engine: str) -> dict[str, dict[str, EngineVerdict]]:
        """mode -> case -> verdict for one engine, in the recorded order."""
        out: dict[str, dict[str, EngineVerdict]] = {}
        for v in self.verdicts:
            if v.engine == engine:
                out.setdefault(v.mode, {})[v.case] = v
        if not out:
            raise ValueError(f"engine must be one of {sorted({v.engine for v in self.verdicts})}; got {engine!r}")
        return out


def check_engines_recording(rec: EnginesRecording) -> None:
    """Every verdict's engine and mode installed; a pass or FAIL carries tv, threshold and n > 0, a left-out case
    none and its reason; no (engine, mode, case) twice; same-seed counts within n."""
    modes = {(e.engine, m) for e in rec.engines for m in e.modes}
    seen = set()
    for i, v in enumerate(rec.verdicts):
        where = f"verdicts[{i}] ({v.engine}, {v.mode}, {v.case})"
        if (v.engine, v.mode) not in modes:
            raise ValueError(f"{where}: engine and mode must be installed ({sorted(modes)})")
        if (v.engine, v.mode, v.case) in seen:
            raise ValueError(f"{where}: recorded twice")
        seen.add((v.engine, v.mode, v.case))
        judged = v.verdict != "left out"
        if judged != (v.tv is not None and v.threshold is not None and v.n > 0) or (not judged and not v.note):
            raise ValueError(f"{where}: a pass or FAIL needs tv, threshold and n > 0; a left-out case none of them "
                             f"and a note")
        if judged and (v.verdict == "pass") != (v.tv <= v.threshold and v.violations == v.logprob_mismatches == 0):
            raise ValueError(f"{where}: verdict {v.verdict!r} disagrees with TV {v.tv} against {v.threshold}, "
                             f"{v.violations} violations and {v.logprob_mismatches} logprob mismatches")
    for i, r in enumerate(rec.reproductions):
        if any(len(c) != len(r.modes) for c in r.counts.values()) or not set(r.shows) <= set(r.counts):
            raise ValueError(f"reproductions[{i}] must give one count per mode and show only what it counted")
    for i, s in enumerate(rec.same_seed):
        if (s.engine, s.mode) not in modes or not 0 <= s.equal <= s.n or s.n < 1:
            raise ValueError(f"same_seed[{i}] must name an installed engine and mode and have 0 <= equal <= n, n >= 1")
