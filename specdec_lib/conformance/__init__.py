"""A conformance kit for speculative samplers: audit anyone's block verifier (or drafter) against exact laws.

    from specdec_lib.conformance import audit_verifier
    report = audit_verifier(my_verify)          # fn(p_rows, q_rows, proposals, generator) -> (accepted, tokens)
    print(report); assert report.passed

`assert_conformant(fn)` is the one line for a test suite; `python -m specdec_lib.conformance pkg.mod:fn` the
command line. A verifier's rule is a `DecoderSpec` (markov/spec.py) read for one block by `block_rule`, block
verification's (spec.verifier="block") included. Beside each verdict the report puts how many proposals the
verifier kept against the exact E[accepted] of the token rule and of an optimal one (block verification). The
kit sits above core and markov/ and nothing in the library imports it.

The second tier: `audit_generation(fn)` drives a whole speculative generation loop on a battery of
history-dependent chains with the sampling surface on (penalties, processors, a grammar, EOS, max_new_tokens,
logprobs) against plain generation's exact law and logprobs, and names the nearest registered loop variant
(surface.registry); `audit_randomness(fn)` feeds a verifier controlled coins (0, 1 - 2^-53, a grid, two rounds,
batch companions, poisoned scratch memory) and compares what it commits with the exact law under them.

Real engines: an adapter puts one behind `Engine` (engines.py: engine_llama_cpp, engine_llama_server, engine_vllm
import their engine only when built), and `audit_engine(engine, mode, cases=engine_cases(...))` runs the second
tier on it, the exact law read from the engine's own plain rows; `make audit-engines` records every verdict.
"""
from .adapters import CONVENTIONS, adapt
from .battery import BETA, DELTA, EPSILON, PROMISE, Case, Power, Promise, battery, law_power, power
from .bugs import BLOCK_VERIFIERS, FIELD_GUIDE, KnownVerifier, known_verifiers, rule_verifier
from .check import audit_drafter, audit_verifier
from .engines import Engine, EngineChain, SameSeed, audit_engine, engine_cases, same_seed
from .generation import LOGPROB_TOLERANCE, assert_generates, audit_generation
from .generation_adapters import GENERATION_CONVENTIONS, assisted_generate, speculate_fn
from .generation_battery import ChainModel, GenerationCase, HFChain, generation_cases, transformers_cases
from .laws import Law, block_rule, committed_block_law, complete, mean_accepted, target_law
from .randomness import PROBES, RAND_CONVENTIONS, ProbeResult, RandomnessReport, audit_randomness
from .randomness_refs import BROKEN, batch_stream, broken_verifier, keyed_by_position, keyed_by_step, library_verifier
from .report import CaseResult, DrafterReport, GenerationCaseResult, GenerationReport, VerifierReport


def assert_conformant(fn, **kwargs) -> VerifierReport:
    """One line in a test suite: audit_verifier(fn, **kwargs), raising AssertionError with the report on failure."""
    report = audit_verifier(fn, **kwargs)
    if not report.passed:
        raise AssertionError(f"\n{report}")
    return report


__all__ = ["audit_verifier", "audit_drafter", "assert_conformant", "VerifierReport", "CaseResult", "DrafterReport",
           "CONVENTIONS", "adapt", "Case", "battery", "power", "Power", "Promise", "PROMISE", "EPSILON", "BETA",
           "DELTA", "KnownVerifier", "FIELD_GUIDE", "BLOCK_VERIFIERS", "known_verifiers", "rule_verifier", "Law",
           "block_rule", "committed_block_law", "mean_accepted", "complete", "target_law",
           # the second tier: generation loops with the whole sampling surface, and randomness
           "audit_generation", "assert_generates", "LOGPROB_TOLERANCE", "GenerationReport", "GenerationCaseResult",
           "GENERATION_CONVENTIONS", "speculate_fn", "assisted_generate", "GenerationCase", "generation_cases",
           "transformers_cases", "ChainModel", "HFChain", "law_power", "audit_randomness", "RandomnessReport",
           "ProbeResult", "PROBES", "RAND_CONVENTIONS", "library_verifier", "keyed_by_step", "keyed_by_position",
           "batch_stream", "BROKEN", "broken_verifier",
           # real engines behind one interface
           "Engine", "EngineChain", "audit_engine", "engine_cases", "same_seed", "SameSeed"]
