"""specdec_lib: the library under the specdec course, in layers that only import downwards.

core (this folder, torch only)   _checks, sampling, policy, noise, verification, accounting, cost, telemetry
  Act I    sampling, policy       one speculative step; temperature, top-k, top-p
  Act II   verification, noise    a block of k proposals verified; how far exact samples land by chance
  Act III  accounting             tokens retired per block; survivor statistics; the Bayes curve
  Act IV   cost, telemetry        the speedup equation and best k; what to log
  Act V    multidraft             many drafts at one position: every rule's exact law and sampler
markov/  (imports core)           Act II's testbed: the chain, the decoder spec and registry, the reference
                                  decoder, the batched decoder, the exact engine; Act V's draft trees
lab/     (imports core)           a causal transformer with a croppable KV cache, the alignment test, a trained
                                  pair, generation, the cost equation against the clock
presentation/, exercises/         figures and sliders; the workshop's checkers (import them explicitly:
                                  `import specdec_lib.exercises`); nothing in the layers above imports them
"""
from .accounting import (BayesCurve, SurvivorStats, bayes_conditional_acceptance, expected_accepted,
                         expected_tokens, full_block_probability, reach_probabilities, simulate_blocks,
                         simulate_mixture, survivor_statistics)
from .cost import BestK, best_k, speedup, speedup_grid
from .lab.alignment import AlignmentReport, alignment_tv, block_scores, check_alignment, incremental_scores
from .lab.accept import accept_block
from .lab.corpus import corpus_prompts
from .lab.drafters import NeuralDraft, PromptLookupDraft, TableDraft
from .lab.generation import exact_continuations, generate_plain, generate_speculative
from .lab.measure import SpeedupTable, measure_speedup, time_catch_up, time_terms
from .lab.ngram import NGramTable, build_ngram, corpus_table
from .lab.transformer import CachedLM, KVCache, LMConfig, TinyCausalLM, n_params
from .lab.tree_attention import (FlatTree, TreeAlignmentReport, check_tree_alignment, path_scores,
                                 tree_from_widths, tree_mask, tree_positions, tree_scores)
from .lab.weights import load_draft, load_pair
from .markov.adaptive import (OptimalStop, PolicyResult, confidence_speedup, fixed_k_speedups, hf_schedule_speedup,
                              optimal_stopping, policy_speedup)
from .markov.batched import DECODER_MODES, decode_markov
from .markov.chain import (ReferenceChain, direct_sample, empirical_sequences, exact_sequence_distribution,
                           random_table, reference_chain, sequence_tv)
from .markov.draft_rules import ngram_proposals, typical_threshold
from .markov.exact import exact_decoder_distribution
from .markov.hf_assisted import TRANSFORMERS, AssistedText, SettledThreshold, assisted_text, settled_threshold
from .markov.long_run import mean_of_ratios, text_speedup
from .markov.lookup import DraftCost, lookup_vs_model
from .markov.lossy import (ExactSetting, TypicalPoint, cuts_nothing, typical_breakpoints, typical_exact_settings,
                           typical_law, typical_sweep)
from .markov.measures import DecoderStats, decoder_stats, kl_divergence
from .markov.q_contract import check_q_contract
from .markov.reference import decode_reference
from .markov.registry import FailureMode, failure_modes
from .markov.spec import DecoderSpec
from .markov.tree import decode_tree_markov, exact_tree_distribution, tree_expected_tokens
from .markov.tree_bugs import EAGLE1_VERSIONS, TreeBug, eagle1_tree_distribution, greedy_law, tree_bugs
from .markov.tree_cost import BestTree, best_tree, tree_nodes, tree_speedup
from .markov.tree_search import (BestOrderedTree, OrderedTree, best_ordered_tree, best_ordered_trees,
                                 ordered_tree_speedup, ordered_tree_tokens)
from .multidraft import multidraft_accept_probability, multidraft_law, multidraft_rules, sample_multidraft
from .noise import rate_noise, tv_noise_bound, tv_noise_mean
from .policy import apply_policy, greedy_token, policy_table
from .sampling import (SAMPLER_MODES, acceptance_probability, empirical, overlap, post_pair, residual,
                       sample_from, sample_rows, speculative_sample, total_variation)
from .telemetry import SpecDecodeLog, SpecDecodeSummary, accepted_counts, emitted_until_eos
from .verification import Verdict, verify_block, verify_blocks, verify_greedy

__version__ = "0.1.0"

__all__ = [
    # Act I
    "residual", "acceptance_probability", "speculative_sample", "total_variation", "overlap", "empirical",
    "sample_from", "sample_rows", "post_pair", "SAMPLER_MODES", "apply_policy", "greedy_token", "policy_table",
    "tv_noise_bound", "tv_noise_mean", "rate_noise",
    # Act II
    "Verdict", "verify_block", "verify_blocks", "verify_greedy", "ReferenceChain", "reference_chain",
    "random_table", "exact_sequence_distribution", "direct_sample", "empirical_sequences", "sequence_tv",
    "decode_markov", "decode_reference", "DECODER_MODES", "exact_decoder_distribution", "failure_modes", "FailureMode",
    "DecoderSpec", "check_q_contract", "TinyCausalLM", "incremental_scores", "block_scores", "check_alignment",
    "AlignmentReport", "alignment_tv",
    # Act III
    "expected_accepted", "expected_tokens", "full_block_probability", "reach_probabilities", "simulate_blocks",
    "simulate_mixture", "survivor_statistics", "SurvivorStats", "bayes_conditional_acceptance", "BayesCurve",
    # Act IV
    "speedup", "speedup_grid", "best_k", "BestK", "SpecDecodeLog", "SpecDecodeSummary", "accepted_counts",
    "emitted_until_eos",
    # Lab: measure it
    "CachedLM", "KVCache", "LMConfig", "n_params", "load_pair", "corpus_prompts", "generate_plain",
    "generate_speculative", "exact_continuations", "time_terms", "time_catch_up", "measure_speedup", "SpeedupTable",
    "load_draft", "NeuralDraft", "TableDraft", "PromptLookupDraft", "NGramTable", "build_ngram", "corpus_table",
    "accept_block",
    # Act V
    "multidraft_rules", "multidraft_law", "multidraft_accept_probability", "sample_multidraft",
    "exact_tree_distribution", "decode_tree_markov", "tree_expected_tokens", "tree_nodes", "tree_speedup",
    "best_tree", "BestTree",
    "OrderedTree", "ordered_tree_tokens", "ordered_tree_speedup", "best_ordered_tree", "best_ordered_trees",
    "BestOrderedTree",
    "eagle1_tree_distribution", "EAGLE1_VERSIONS", "greedy_law", "tree_bugs", "TreeBug",
    "FlatTree", "tree_from_widths", "tree_mask", "tree_positions", "tree_scores", "path_scores",
    "check_tree_alignment", "TreeAlignmentReport",
    # Act V, bending the rules (lossy acceptance, adaptive k, model-free drafts)
    "decoder_stats", "DecoderStats", "kl_divergence", "typical_threshold", "typical_sweep", "TypicalPoint",
    "typical_exact_settings", "ExactSetting", "policy_speedup", "fixed_k_speedups", "hf_schedule_speedup",
    "confidence_speedup", "optimal_stopping", "OptimalStop", "PolicyResult", "ngram_proposals", "lookup_vs_model",
    "DraftCost", "typical_law", "typical_breakpoints", "cuts_nothing", "text_speedup", "mean_of_ratios",
    "TRANSFORMERS", "settled_threshold", "SettledThreshold", "assisted_text", "AssistedText",
]
