"""The lab: a real causal transformer pair, speculative decoding on it, and the cost equation against the clock.

transformer  the course's one causal LM with a croppable KV cache (CachedLM; Act II's TinyCausalLM)
alignment    the block-versus-incremental alignment test
corpus       the standard library's source as bytes, and held-out prompts
weights      the trained target/draft pair (load_pair; `make models` retrains it)
generation   plain and speculative decoding, built from the phases the clock times
drafters     what proposes: the neural drafts, a byte n-gram table (ngram), prompt lookup; one interface
steps        the phases of a round (draft, verify, roll back)
accept       the lab's fast acceptance test (the same draws as specdec_lib.verification.verify_batch)
measure      the cost terms, timed, and the predicted speedup against the measured one
batch_cost   one target pass over B x (k + 1) positions: c_v(k; B) and the best k per batch size
tree_attention  Act V: a draft tree scored in one target pass (ancestor mask, per-node positions)
"""
