"""A conformance kit for speculative samplers: audit anyone's block verifier (or drafter) against exact laws.

    from specdec_lib.conformance import audit_verifier
    report = audit_verifier(my_verify)          # fn(p_rows, q_rows, proposals, generator) -> (accepted, tokens)
    print(report); assert report.passed

`assert_conformant(fn)` is the one line for a test suite; `python -m specdec_lib.conformance pkg.mod:fn` the
command line. A verifier's rule is a `DecoderSpec` (markov/spec.py) read for one block by `block_rule`, block
verification's (spec.verifier="block") included. Beside each verdict the report puts how many proposals the
verifier kept against the exact E[accepted] of the token rule and of an optimal one (block verification). The
kit sits above core and markov/ and nothing in the library imports it.
"""
from .adapters import CONVENTIONS, adapt
from .battery import BETA, DELTA, EPSILON, PROMISE, Case, Power, Promise, battery, power
from .bugs import BLOCK_VERIFIERS, FIELD_GUIDE, KnownVerifier, known_verifiers, rule_verifier
from .check import audit_drafter, audit_verifier
from .laws import Law, block_law, block_rule, complete, mean_accepted, target_law
from .report import CaseResult, DrafterReport, VerifierReport


def assert_conformant(fn, **kwargs) -> VerifierReport:
    """One line in a test suite: audit_verifier(fn, **kwargs), raising AssertionError with the report on failure."""
    report = audit_verifier(fn, **kwargs)
    if not report.passed:
        raise AssertionError(f"\n{report}")
    return report


__all__ = ["audit_verifier", "audit_drafter", "assert_conformant", "VerifierReport", "CaseResult", "DrafterReport",
           "CONVENTIONS", "adapt", "Case", "battery", "power", "Power", "Promise", "PROMISE", "EPSILON", "BETA",
           "DELTA", "KnownVerifier", "FIELD_GUIDE", "BLOCK_VERIFIERS", "known_verifiers", "rule_verifier", "Law",
           "block_rule", "block_law", "mean_accepted", "complete", "target_law"]
