"""specdec_lib: the library under the specdec course, in layers that only import downwards.

`import specdec_lib as sd` gives the nouns and verbs of the Acts (`sd.__all__`, at most 60 names); everything else
is reached through its layer: sd.markov.<name>, sd.lab.<name>, sd.conformance.<name>, sd.presentation.<name>
(the last two, and `sd.exercises`, are imported on first use, so this facade never imports a layer above it).

core (this folder, torch only)   _checks, sampling, policy, noise, verification, accounting, cost, telemetry,
                                  variant (the entry type every registry of named variants shares)
  Act I    sampling, policy       one speculative step; temperature, min-p, top-k, top-p
  Act II   verification, noise    a block of k proposals verified; how far exact samples land by chance
  Act III  accounting             tokens retired per block; survivor statistics; the Bayes curve
  Act IV   cost, telemetry        the speedup equation and best k; what to log
  Act V    multidraft             many drafts at one position: every rule's exact law and sampler, and (Act VI)
                                  the most any exact verifier can keep of them
  Act VI   block_verification     the k drafts judged together: block verification and its known wrong port
surface/ (imports core)           02d: generation with the whole sampling surface (penalties, processors, a grammar,
                                  EOS, max_new_tokens, logprobs), plain and speculative, their exact laws, the
                                  loop's registered variants (the field guide's sampling-surface chapter)
markov/  (imports core)           Act II's testbed: the chain, the decoder spec and registry, the reference
                                  decoder, the batched decoder, the exact engine; Act V's draft trees
lab/     (imports core)           a causal transformer with a croppable KV cache, the alignment test, a trained
                                  pair, generation, the cost equation against the clock
conformance/ (core, markov)       the kit: audit anyone's verifier, drafter or generation loop against exact laws
presentation/, exercises/         figures and sliders; the workshop's graders; nothing in the layers below
                                  imports them
"""
import importlib

from . import lab, markov, surface
from .accounting import (BayesCurve, SurvivorStats, bayes_conditional_acceptance, expected_accepted,
                         expected_tokens, full_block_probability, reach_probabilities, simulate_blocks,
                         simulate_mixture, survivor_statistics)
from .block_verification import block_weights, tau_law
from .cost import BestK, best_k, speedup, speedup_grid
from .markov.adaptive import policy_speedup
from .markov.batched import decode_markov
from .markov.chain import (ReferenceChain, direct_sample, empirical_sequences, sequence_law,
                           random_table, reference_chain, sequence_tv)
from .markov.exact import decoder_law
from .markov.measures import decoder_stats
from .markov.reference import speculative_decode
from .markov.registry import FailureMode, failure_modes
from .markov.spec import DecoderSpec
from .markov.tree import tree_law
from .multidraft import multidraft_law, multidraft_optimum, sample_multidraft
from .noise import rate_noise, tv_noise_bound, tv_noise_mean
from .policy import apply_policy, greedy_token, policy_table
from .sampling import (SAMPLER_MODES, acceptance_probability, empirical, overlap, post_pair, residual,
                       sample_from, sample_rows, speculative_sample, total_variation)
from .telemetry import SpecDecodeLog, SpecDecodeSummary, accepted_counts, emitted_until_eos
from .verification import Verdict, verify_block, verify_blocks, verify_greedy

__version__ = "0.1.0"

__all__ = [
    # Act I: one speculative step, sampling policies, sampling noise
    "residual", "acceptance_probability", "speculative_sample", "total_variation", "overlap", "empirical",
    "sample_from", "sample_rows", "post_pair", "SAMPLER_MODES", "apply_policy", "greedy_token", "policy_table",
    "tv_noise_bound", "tv_noise_mean", "rate_noise",
    # Act II: a block verified; the reference chain; the decoders and their exact laws
    "Verdict", "verify_block", "verify_blocks", "verify_greedy", "ReferenceChain", "reference_chain",
    "random_table", "sequence_law", "direct_sample", "empirical_sequences", "sequence_tv",
    "speculative_decode", "decode_markov", "decoder_law", "DecoderSpec", "failure_modes",
    "FailureMode",
    # Act III: token accounting
    "expected_accepted", "expected_tokens", "full_block_probability", "reach_probabilities", "simulate_blocks",
    "simulate_mixture", "survivor_statistics", "SurvivorStats", "bayes_conditional_acceptance", "BayesCurve",
    # Act IV: the cost equation, telemetry
    "speedup", "speedup_grid", "best_k", "BestK", "SpecDecodeLog", "SpecDecodeSummary", "accepted_counts",
    "emitted_until_eos",
    # Act V: many drafts, trees, bending the rules
    "multidraft_law", "sample_multidraft", "tree_law", "decoder_stats", "policy_speedup",
    # Act VI: the best exact verifier
    "block_weights", "tau_law", "multidraft_optimum",
]
_LAYERS = (lab, markov, surface)  # sd.lab, sd.markov and sd.surface are attributes of the facade

_LAZY = ("conformance", "presentation", "exercises")  # layers above the facade: imported on first use


def __getattr__(name: str):
    """sd.conformance, sd.presentation, sd.exercises: imported when first reached, never by `import specdec_lib`."""
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
