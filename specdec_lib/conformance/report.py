"""The kit's reports: per case the measured TV, its threshold, pass or fail, the nearest known verifier, and how
many proposals it keeps beside the token rule and an optimal exact verifier; audit_generation's report: per case
the features on, n, TV, threshold, logprob mismatches and the verdict, and the nearest registered loop variant."""
from __future__ import annotations

from dataclasses import dataclass

from .battery import Promise

__all__ = ["CaseResult", "VerifierReport", "DrafterReport", "GenerationCaseResult", "GenerationReport"]


@dataclass(frozen=True)
class CaseResult:
    """One case of the battery, checked: n = num_blocks blocks, their completed law's TV from the target's, and the
    verdict."""

    name: str
    k: int
    V: int
    num_blocks: int
    tv: float  # TV(empirical completed law, p_1 x ... x p_{k+1}), mass outside the vocabulary included
    threshold: float  # sd.tv_noise_bound of the target law at n, delta / cases
    floor: float  # the noise floor 1/2 sum sqrt(pi (1 - pi) / n)
    detectable: float  # the smallest TV this n catches with probability 1 - beta
    violations: int  # blocks whose output broke the contract (accepted != len(tokens) - 1, or a changed proposal)
    nearest: str  # the verification bug whose exact law is nearest to the empirical one
    nearest_tv: float
    kept: float  # the measured mean of accepted proposals per block
    kept_se: float  # its standard error, sample sd / sqrt(n)
    token_kept: float  # the token rule's exact E[accepted] on this case (the kit's block law)
    optimal_kept: float  # block verification's exact E[accepted]: the most an exact verifier of one block keeps

    @property
    def passed(self) -> bool:
        return self.tv <= self.threshold and self.violations == 0

    @property
    def efficiency(self) -> str:
        """One line: the case's verdict, then what it kept of what an optimal verifier keeps, and the token rule's."""
        return (f"{'pass' if self.passed else 'FAIL'}; keeps {self.kept:.2f} ± {self.kept_se:.2f} of the "
                f"{self.optimal_kept:.2f} an optimal verifier keeps (the token rule keeps {self.token_kept:.2f})")


@dataclass(frozen=True)
class VerifierReport:
    """What audit_verifier found: one CaseResult per case, the promise it was sized for, and a diagnosis."""

    subject: str
    cases: tuple[CaseResult, ...]
    promise: Promise  # epsilon (the TV caught), beta (the chance of missing it), delta (a correct verifier's)
    diagnosis: str  # the known verifier nearest over all cases, with its story ("" when every case passes)
    sized: bool = True  # n came from the power calculation (False: the caller fixed n, so no power is promised)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        pr = self.promise
        power = (f"power: a case >= {pr.epsilon:g} TV off is caught with probability >= {1 - pr.beta:g}; "
                 if self.sized else "power: none promised (n was fixed by the caller, not sized for epsilon); ")
        lines = [f"conformance of {self.subject}: the law of what it commits, against a correct verifier's",
                 power + f"a correct verifier fails this report with probability <= {pr.delta:g}",
                 f"{'case':18s} {'k':>2s} {'V':>2s} {'n':>6s} {'TV':>7s} {'threshold':>9s}  result  "
                 "nearest bug (failures)"]
        for c in self.cases:
            verdict = "pass" if c.passed else "FAIL"
            note = "" if c.passed else f"{c.nearest} (TV {c.nearest_tv:.3f})"
            if c.violations:
                note += f"; {c.violations} blocks broke the output contract"
            size = f"{c.name:18s} {c.k:2d} {c.V:2d} {c.num_blocks:6d}"
            row = f"{size} {c.tv:7.3f} {c.threshold:9.3f}  {verdict:6s}  {note}"
            lines.append(row.rstrip())
        lines.append("efficiency: proposals kept per block, ± one standard error; optimal: block verification's "
                     "exact E[accepted]")
        lines += [f"{c.name:18s} {c.efficiency}" for c in self.cases]
        failed = sum(not c.passed for c in self.cases)
        if failed:
            lines.append(f"FAILED: {failed} of {len(self.cases)} cases. Looks like {self.diagnosis}")
        else:
            lines.append(f"PASSED: all {len(self.cases)} cases")
        return "\n".join(lines)


@dataclass(frozen=True)
class DrafterReport:
    """The q contract over the kit's draft rows: the worst row's TV between what was sampled and the q reported."""

    subject: str
    num_samples: int  # draws per draft row
    tv: float
    threshold: float
    row: int  # the logits row with the largest TV - threshold

    @property
    def passed(self) -> bool:
        return self.tv <= self.threshold

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED: the q it reports is not the distribution it sampled"
        return (f"q contract of {self.subject}: {self.num_samples} draws per draft row; worst row {self.row}: "
                f"TV {self.tv:.3f} against threshold {self.threshold:.3f}\n{verdict}")


SHORT = {"repetition_penalty": "rep", "frequency_penalty": "freq", "presence_penalty": "pres",
         "no_repeat_ngram_size": "ngram", "bad_words": "bad", "logit_bias": "bias", "grammar": "gram",
         "temperature": "T"}  # the features column's names (Settings.features' others print as they are)


@dataclass(frozen=True)
class GenerationCaseResult:
    """One generation case, checked: n = num_samples outputs, their law's TV from plain generation's over
    `outcomes` = M bins (plain's support and one for the rest), and the reported logprobs against plain's."""

    name: str
    features: tuple[str, ...]  # Settings.features of the case
    k: int
    V: int
    num_samples: int
    outcomes: int  # M: the power calculation's number of outcomes
    tv: float  # TV(empirical law of the token tuples, plain generation's exact law)
    threshold: float  # sd.tv_noise_bound of plain's law at n, delta / cases
    floor: float  # the noise floor 1/2 sum sqrt(pi (1 - pi) / n)
    detectable: float  # the smallest TV this n catches with probability 1 - beta
    violations: int  # outputs that broke the contract (a token off the vocabulary, a stop that disagrees with the
    # tokens, a logprob count that is not the token count)
    mismatches: int  # outputs with a reported logprob more than 1e-6 from plain's exact value
    checked: int  # outputs whose logprobs were reported (and so checked)
    nearest: str  # the registered loop variant nearest to what was seen (generation.py's distance)
    nearest_distance: float  # its TV from the empirical law plus its gap in the share of wrong logprobs
    example: str = ""  # the first mismatching output: its tokens, the reported and plain's logprobs
    law: tuple[tuple[tuple[int, ...], float, int], ...] = ()  # (tokens, plain's exact mass, times seen) per outcome
    # seen or possible, plain's support first (most likely first), then what plain never writes

    @property
    def passed(self) -> bool:
        return self.tv <= self.threshold and self.violations == 0 and self.mismatches == 0


@dataclass(frozen=True)
class GenerationReport:
    """What audit_generation found: one GenerationCaseResult per case, the promise, and the nearest variant."""

    subject: str
    cases: tuple[GenerationCaseResult, ...]
    promise: Promise
    nearest: str  # the registered loop variant nearest over all cases ("" when every case passes)
    diagnosis: str  # "name: description (reference)"
    sized: bool = True  # n came from the power calculation (False: the caller fixed n, so no power is promised)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        pr = self.promise
        power = (f"power: a case >= {pr.epsilon:g} TV off is caught with probability >= {1 - pr.beta:g}, any wrong "
                 "logprob seen is a failure; " if self.sized else
                 "power: none promised (n was fixed by the caller, not sized for epsilon); ")
        lines = [f"generation conformance of {self.subject}: its outputs and logprobs against plain generation's",
                 power + f"a correct loop fails this report with probability <= {pr.delta:g}",
                 f"{'case':18s} {'features':40s} {'k':>2s} {'M':>3s} {'n':>6s} {'TV':>6s} "
                 f"{'thresh':>6s} "
                 f"{'logprob':>9s}  result  nearest variant (failures)"]
        for c in self.cases:
            verdict = "pass" if c.passed else "FAIL"
            note = "" if c.passed or not c.nearest else f"{c.nearest} ({c.nearest_distance:.3f} off)"
            if c.violations:
                note += f"; {c.violations} outputs broke the contract"
            lp = f"{c.mismatches}/{c.checked}" if c.checked else "-"
            feats = ",".join(SHORT.get(f, f) for f in c.features if f != "max_new_tokens") or "-"
            row = (f"{c.name:18s} {feats[:40]:40s} {c.k:2d} {c.outcomes:3d} {c.num_samples:6d} {c.tv:6.3f} "
                   f"{c.threshold:6.3f} {lp:>9s}  {verdict:6s}  {note}")
            lines.append(row.rstrip())
        for c in self.cases:
            if c.example:
                lines.append(f"{c.name}: first wrong logprobs {c.example}")
        failed = sum(not c.passed for c in self.cases)
        if failed:
            lines.append(f"FAILED: {failed} of {len(self.cases)} cases. Looks like {self.diagnosis}")
        else:
            lines.append(f"PASSED: all {len(self.cases)} cases")
        return "\n".join(lines)
