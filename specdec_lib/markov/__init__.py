"""Act II's testbed: a Markov chain small enough to enumerate, and every block decoder on it.

chain        the reference chain (target P, draft Q, bad draft Q_bad) and its exact sequence distribution
spec         DecoderSpec: how a decoder drafts, verifies and commits (the correct one is the default)
registry     the correct decoder and every registered bug, with its reference; make_decoder
reference    the block decoder for one sequence, written to be read
batched      the same decoder for n sequences at once (decode_markov), tested against the reference
exact        the decoder's exact output distribution, with no sampling (exact_decoder_distribution)
q_contract   does a drafter sample the q it reports?
tree         Act V: a static draft tree verified root to leaf with a multi-draft rule (tree_step: one node)
tree_cost    a tree's speedup S(T) and the best tree under a node budget
tree_search  trees of any shape (OrderedTree): exact E[N], and the best one under a budget by a Pareto DP
tree_bugs    tree verification's field bugs, modelled from their source: EAGLE-1 at three commits, greedy verify
draft_rules  Act V, bending the rules: Medusa's typical test, transformers' k schedule, n-gram lookup
measures     a decoder's exact TV and KL to its target, tokens per call and speedup (DecoderStats)
lossy        typical acceptance swept over epsilon, its law in one line, and when it is exact
long_run     stopping rules that read the last q, at any k, in the long run: S = N̄ / C̄ (renewal reward)
hf_assisted  transformers 5.24.0's assisted generation on the chain: defaults, confidence re-tuning, a sampled text
adaptive     any stopping rule over the drafted path, and the oracle rule by policy iteration
lookup       n-gram lookup against a model draft
"""
