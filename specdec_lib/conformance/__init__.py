"""A conformance kit for speculative samplers: check anyone's block verifier (or drafter) against exact laws.

    from specdec_lib.conformance import check_verifier
    report = check_verifier(my_verify)          # fn(p_rows, q_rows, proposals, generator) -> (accepted, tokens)
    print(report); assert report.passed

`assert_conformant(fn)` is the one line for a test suite; `python -m specdec_lib.conformance pkg.mod:fn` the
command line. It sits above core and markov/ and nothing in the library imports it.
"""
from .adapters import CONVENTIONS, adapt
from .battery import BETA, DELTA, EPSILON, Case, battery, power
from .bugs import KnownVerifier, known_verifiers, rule_verifier
from .check import check_drafter, check_verifier
from .laws import Rule, block_law, complete, target_law
from .report import CaseResult, DrafterReport, Report


def assert_conformant(fn, **kwargs) -> Report:
    """One line in a test suite: check_verifier(fn, **kwargs), raising AssertionError with the report on failure."""
    report = check_verifier(fn, **kwargs)
    if not report.passed:
        raise AssertionError(f"\n{report}")
    return report


__all__ = ["check_verifier", "check_drafter", "assert_conformant", "Report", "CaseResult", "DrafterReport",
           "CONVENTIONS", "adapt", "Case", "battery", "power", "EPSILON", "BETA", "DELTA", "KnownVerifier",
           "known_verifiers", "rule_verifier", "Rule", "block_law", "complete", "target_law"]
