"""The lab: a real causal transformer pair, speculative decoding on it, and the cost equation against the clock.

transformer  the course's one causal LM with a croppable KV cache (CachedLM; Act II's TinyCausalLM)
alignment    the block-versus-incremental alignment test
corpus       the standard library's source as bytes, and held-out prompts
weights      the trained target/draft pair (load_pair; `make models` retrains it)
generation   plain and speculative decoding, built from the phases the clock times
drafters     what proposes: the neural drafts, a byte n-gram table (ngram), prompt lookup; one interface
steps        the phases of a round (draft, verify, roll back)
accept       the lab's fast acceptance test: the token rule or block verification (verify_blocks' draws)
measure      the cost terms, timed, and the predicted speedup against the measured one
schema       the one schema-checked reader: a JSON file into a dataclass, every field checked by name and type
recordings   the recorded runs (`make measure`, `measure-self`, `measure-real`, `measure-real-self`, `measure-gpu`,
             `audit-engines`)
gpu_recording  the "measure-gpu" record: the real pair's cost terms on one GPU, column by column, and predictions
recorded_terms  what their terms say: ranges and rankings within the noise, T_1 outliers, what a step reads, rounds
batch_cost   one target pass over B x (k + 1) positions: c_v(k; B) and the best k per batch size
tree_attention  Act V: a draft tree scored in one target pass (ancestor mask, per-node positions)
early_exit   self-speculation: the target's first L layers and an exit head draft, one shared cache (lab or HF)
features     the target's last hidden state kept per cache slot (FeatureTarget), what heads and feature drafts read
tree_decoding  a draft tree per round, walked node by node with Act V's multi-draft rules; the path kept in cache
medusa       Medusa heads on the target's features: a chain or a tree of guesses, no second model
eagle        an EAGLE-style draft: one layer over the target's features and the next token's embedding
lookahead    lookahead decoding: the target's own Jacobi iterates and an n-gram pool, one pass, no draft at all
tree_measure  a tree's cost terms against the clock: S = E[N] / (c_d + c_v(tree))
hf_causal_lm  any Hugging Face causal LM as a lab model (its DynamicCache cropped on rejection); tiny random ones
static_lm    a transformers Llama or Qwen2 over a static KV cache, each pass shape captured as a CUDA graph

The names below are reached as sd.lab.<name>.
"""
from .accept import verify_block_logits
from .alignment import AlignmentReport, alignment_report, alignment_tv, block_scores, incremental_scores
from .batch_cost import LinearCost
from .corpus import corpus_prompts
from .drafters import NeuralDraft, PromptLookupDraft, TableDraft
from .eagle import EagleDraft, EagleDrafter, eagle_pair
from .early_exit import EarlyExitDraft, EarlyExitTarget, SharedCache, early_exit_pair, exit_logits
from .features import FeatureCache, FeatureTarget
from .generation import exact_continuations, generate_plain, generate_speculative
from .hf_causal_lm import HFCausalLM, set_matmul, tiny_hf_model
from .lookahead import LookaheadDraft
from .measure import SpeedupTable, measure_speedup, time_catch_up, time_terms
from .medusa import MedusaDraft, MedusaHeads, medusa_pair
from .ngram import NGramTable, SparseNGramTable, build_ngram, build_sparse_ngram, corpus_table
from .recordings import load_recording, recorded
from .static_lm import StaticLM
from .transformer import CachedLM, KVCache, LMConfig, TinyCausalLM, n_params
from .tree_attention import (
    FlatTree,
    TreeAlignmentReport,
    path_scores,
    tree_alignment_report,
    tree_from_widths,
    tree_mask,
    tree_positions,
    tree_scores,
)
from .tree_decoding import TREE_RULES, DraftTree, generate_tree
from .tree_measure import TreeTable, measure_trees, time_tree_terms
from .weights import load_draft, load_heads, load_pair, load_target

__all__ = [
    "CachedLM", "KVCache", "LMConfig", "TinyCausalLM", "n_params", "load_pair", "load_draft", "corpus_prompts",
    "incremental_scores", "block_scores", "alignment_report", "AlignmentReport", "alignment_tv", "verify_block_logits",
    "generate_plain", "generate_speculative", "exact_continuations", "time_terms", "time_catch_up",
    "measure_speedup", "SpeedupTable", "load_recording", "recorded", "LinearCost", "NeuralDraft",
    "TableDraft", "PromptLookupDraft", "NGramTable", "build_ngram", "corpus_table", "FlatTree", "tree_from_widths",
    "tree_mask", "tree_positions", "tree_scores", "path_scores", "tree_alignment_report", "TreeAlignmentReport",
    "HFCausalLM", "set_matmul", "tiny_hf_model", "SparseNGramTable", "build_sparse_ngram", "early_exit_pair",
    "EarlyExitTarget", "EarlyExitDraft", "SharedCache", "exit_logits", "load_target", "FeatureCache", "FeatureTarget",
    "MedusaDraft", "MedusaHeads", "medusa_pair", "load_heads", "TREE_RULES", "DraftTree", "generate_tree",
    "LookaheadDraft", "TreeTable", "measure_trees", "time_tree_terms", "EagleDraft", "EagleDrafter", "eagle_pair",
    "StaticLM",
]
