"""Act II's testbed: a Markov chain small enough to enumerate, and every block decoder on it.

chain        the reference chain (target P, draft Q, bad draft Q_bad) and its exact sequence law
semantics    what each DecoderSpec choice means, as tensor functions (one definition per rule)
spec         DecoderSpec: how a decoder drafts, verifies and commits (the correct one is the default)
registry     the correct decoder and every registered bug, with its reference; make_decoder
reference    speculative_decode, the algorithm for one sequence; decode_reference, the bug-capable one
batched      the same decoder for many sequences at once (decode_markov), tested against the reference
exact        the decoder's exact output law, with no sampling
q_contract   does a drafter sample the q it reports?
tree         Act V: a static draft tree verified root to leaf with a multi-draft rule (tree_step: one node)
tree_cost    a tree's speedup S(T) and the best tree under a node budget
tree_search  trees of any shape (OrderedTree): exact E[N], and the best one under a budget by a Pareto DP
tree_bugs    tree verification's field bugs (tree_bugs.tree_bugs()), from their source: EAGLE-1 at three commits, greedy
draft_rules  Act V, bending the rules: Medusa's typical test, transformers' k schedule, n-gram lookup
measures     a decoder's exact TV and KL to its target, tokens per call and speedup (DecoderStats)
lossy        typical acceptance swept over epsilon, its law in one line, and when it is exact
long_run     stopping rules that read the last q, at any k, in the long run: S = N̄ / C̄ (renewal reward)
hf_assisted  transformers 5.24.0's assisted generation on the chain: defaults, confidence re-tuning, a sampled text
adaptive     any stopping rule over the drafted path, and the oracle rule by policy iteration
lookup       n-gram lookup against a model draft
block_round  Act VI: the exact engine's round for a verifier that judges the whole block (block verification)
verifier_map Act VI: token rule, block verification and the oracle in the long run; which verifier fits which draft

The names below are reached as sd.markov.<name> (the Act II nouns and verbs are on `sd` too).
"""
from .adaptive import POLICIES, OptimalStop, PolicyResult, optimal_stopping, policy_speedup
from .batched import DECODER_MODES, decode_markov
from .chain import (
    ReferenceChain,
    direct_sample,
    empirical_sequences,
    random_table,
    reference_chain,
    sequence_law,
    sequence_tv,
)
from .draft_rules import ngram_proposals, typical_threshold
from .exact import decoder_law
from .hf_assisted import TRANSFORMERS, AssistedText, SettledThreshold, assisted_text, settled_threshold
from .long_run import mean_of_ratios, text_speedup
from .lookup import DraftCost, lookup_vs_model
from .lossy import (
    ExactSetting,
    TypicalPoint,
    cuts_nothing,
    typical_breakpoints,
    typical_exact_settings,
    typical_law,
    typical_sweep,
)
from .measures import DecoderStats, decoder_stats, kl_divergence
from .q_contract import audit_q_contract
from .reference import decode_reference, speculative_decode
from .registry import FailureMode, failure_modes, make_decoder
from .spec import Decoder, DecoderSpec
from .tree import Sampling, decode_tree_markov, tree_expected_tokens, tree_law
from .tree_bugs import EAGLE1_VERSIONS, TreeBug, eagle1_tree_law, greedy_law
from .tree_cost import BestTree, TreeSearch, best_tree, tree_nodes, tree_speedup
from .tree_search import (
    BestOrderedTree,
    OrderedTree,
    best_ordered_tree,
    best_ordered_trees,
    ordered_tree_speedup,
    ordered_tree_tokens,
)

__all__ = [
    # the chain and its law
    "ReferenceChain", "reference_chain", "random_table", "sequence_law", "direct_sample",
    "empirical_sequences", "sequence_tv",
    # decoders and their laws
    "DecoderSpec", "Decoder", "FailureMode", "failure_modes", "make_decoder", "speculative_decode",
    "decode_reference", "decode_markov", "DECODER_MODES", "decoder_law", "audit_q_contract",
    "decoder_stats", "DecoderStats", "kl_divergence",
    # Act V: trees
    "tree_law", "Sampling", "decode_tree_markov", "tree_expected_tokens", "tree_nodes", "tree_speedup", "TreeSearch",
    "best_tree", "BestTree", "OrderedTree", "ordered_tree_tokens", "ordered_tree_speedup", "best_ordered_tree",
    "best_ordered_trees", "BestOrderedTree", "eagle1_tree_law", "EAGLE1_VERSIONS", "greedy_law", "TreeBug",
    # Act V: bending the rules
    "typical_threshold", "typical_sweep", "TypicalPoint", "typical_exact_settings", "ExactSetting", "typical_law",
    "typical_breakpoints", "cuts_nothing", "policy_speedup", "POLICIES", "PolicyResult", "optimal_stopping",
    "OptimalStop", "ngram_proposals", "lookup_vs_model", "DraftCost", "text_speedup", "mean_of_ratios",
    "TRANSFORMERS", "settled_threshold", "SettledThreshold", "assisted_text", "AssistedText",
]
