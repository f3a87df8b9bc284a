"""specdec_lib: the library under the specdec course, laid out in the course's order.

Act I   sampling, policy      one speculative step; temperature, top-k, top-p
Act II  verification, chain,  a block of k proposals; the reference Markov chain;
        decoders, transformer the five decoders; the block-versus-incremental alignment test
Act III accounting            tokens retired per block; survivor statistics; the Bayes curve
Act IV  cost, telemetry       the speedup equation and best k; what to log
Lab     models, generation,   a trained transformer pair with rollback KV caches; the equation against the clock
        measure
"""
from .accounting import (BayesCurve, SurvivorStats, bayes_conditional_acceptance, expected_accepted,
                         expected_tokens, full_block_probability, reach_probabilities, simulate_blocks,
                         simulate_mixture, survivor_statistics)
from .chain import (ReferenceChain, direct_sample, empirical_sequences, exact_sequence_distribution,
                    random_table, reference_chain, sequence_tv)
from .cost import BestK, best_k, speedup, speedup_grid
from .decoders import DECODER_MODES, decode_markov
from .exact import exact_decoder_distribution
from .failures import DecoderSpec, FailureMode, check_q_contract, failure_modes
from .generation import exact_continuations, generate_plain, generate_speculative
from .measure import SpeedupTable, measure_speedup, time_catch_up, time_terms
from .models import CachedLM, KVCache, LMConfig, corpus_prompts, load_pair
from .noise import rate_noise, tv_noise_bound, tv_noise_mean
from .policy import apply_policy, greedy_token, policy_table
from .sampling import (SAMPLER_MODES, acceptance_probability, empirical, overlap, residual, sample_from,
                       sample_rows, speculative_sample, total_variation)
from .telemetry import SpecDecodeLog, SpecDecodeSummary, accepted_counts, emitted_until_eos
from .transformer import (AlignmentReport, TinyCausalLM, alignment_tv, block_scores, check_alignment,
                          incremental_scores)
from .verification import Verdict, verify_block, verify_blocks, verify_greedy
from . import exercises  # noqa: F401  (the checkers: sd.exercises.check_residual(residual), ...)

__version__ = "0.1.0"

__all__ = [
    # Act I
    "residual", "acceptance_probability", "speculative_sample", "total_variation", "overlap", "empirical",
    "sample_from", "sample_rows", "SAMPLER_MODES", "apply_policy", "greedy_token", "policy_table",
    "tv_noise_bound", "tv_noise_mean", "rate_noise",
    # Act II
    "Verdict", "verify_block", "verify_blocks", "verify_greedy", "ReferenceChain", "reference_chain",
    "random_table", "exact_sequence_distribution", "direct_sample", "empirical_sequences", "sequence_tv",
    "decode_markov", "DECODER_MODES", "exact_decoder_distribution", "failure_modes", "FailureMode",
    "DecoderSpec", "check_q_contract", "TinyCausalLM", "incremental_scores", "block_scores", "check_alignment",
    "AlignmentReport", "alignment_tv",
    # Act III
    "expected_accepted", "expected_tokens", "full_block_probability", "reach_probabilities", "simulate_blocks",
    "simulate_mixture", "survivor_statistics", "SurvivorStats", "bayes_conditional_acceptance", "BayesCurve",
    # Act IV
    "speedup", "speedup_grid", "best_k", "BestK", "SpecDecodeLog", "SpecDecodeSummary", "accepted_counts",
    "emitted_until_eos",
    # Lab: measure it
    "CachedLM", "KVCache", "LMConfig", "load_pair", "corpus_prompts", "generate_plain", "generate_speculative",
    "exact_continuations", "time_terms", "time_catch_up", "measure_speedup", "SpeedupTable",
]
