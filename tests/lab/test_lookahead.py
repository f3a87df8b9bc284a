"""Lookahead decoding: the window's iterates are the target's own argmax along each column, greedy output is the
target's, and under sampling a one-hot rule keeps the target's law while a ratio rule with an invented q does not."""
import pytest
import torch
from lab_law import accepts_first_proposals, empirical_with_first_rounds, primed_lookahead

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding, exact_continuations, generate_plain
from specdec_lib.lab.lookahead import LookaheadDraft
from specdec_lib.lab.measure import MeasurePlan
from specdec_lib.lab.steps import prefill
from specdec_lib.lab.transformer import TinyCausalLM
from specdec_lib.lab.tree_attention import path_scores, tree_alignment_report
from specdec_lib.lab.tree_decoding import generate_tree, tree_round
from specdec_lib.lab.tree_measure import measure_trees

GREEDY_RULE = "onehot_sequential"


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    return sd.lab.load_target()


def _round(model, draft, state, seq):
    """One lookahead round at the end of seq: (the proposed tree, the pass's logits); the state observes it."""
    n = seq.numel()
    cache = prefill(model, seq)
    tree = draft.propose_tree(state, seq, n, None, draws="top", temperature=0.0, top_k=None, generator=None)
    _, _, logits = tree_round(model, cache, tree, seq[-1:], n=n, decoding=Decoding(), verifier=None)
    return tree, logits


# --- the window: Jacobi iterates along each column -----------------------------------------------------------------
def test_each_iterate_is_the_targets_argmax_after_its_columns_chain_and_the_levels_move_up():
    model = TinyCausalLM(vocab=12, n_layer=2, seed=1)
    draft = LookaheadDraft(12, window=3, ngram=4, guesses=2)
    seq = torch.tensor([1, 5, 2, 7, 3, 9, 4])
    state = draft.start(seq)
    assert [len(level) for level in state.levels] == [3 + 4 - 3]
    for filled in range(1, 3):  # the first N - 2 rounds fill the levels, each one position further on
        tree, logits = _round(model, draft, state, seq)
        truth = path_scores(model, seq, tree.tree)  # (N+1, V): one plain pass per node's root path
        new = truth[state.out_rows].argmax(-1).tolist()
        before = [list(level) for level in state.levels]
        draft.observe(state, tree, logits)
        assert state.filled == filled and state.levels == [level[1:] for level in before] + [new[1:]]
        assert tree.proposals == 0 and tree_alignment_report(model, seq, tree.tree).aligned
    assert [len(level) for level in state.levels] == [2, 3, 3]  # W - 1, then W per level
    tree, logits = _round(model, draft, state, seq)
    P = [list(level) for level in state.levels]
    new = path_scores(model, seq, tree.tree)[state.out_rows].argmax(-1).tolist()
    for i in range(3):  # column i's chain: P[0][:i], then P[1][i], P[2][i] one position each
        chain = P[0][:i] + [P[1][i], P[2][i]]
        want = int(model(torch.cat([seq, torch.tensor(chain)])[None])[0, -1].argmax())
        assert new[i] == want
    draft.observe(state, tree, logits)
    assert state.levels == [P[1][1:], P[2], new]
    assert state.pool[int(seq[-1])] == [(P[1][0], P[2][0], new[0])]  # column 0, under the last committed token
    assert state.pool[P[0][0]][-1] == (P[1][1], P[2][1], new[1])


def test_the_pool_keeps_g_grams_per_key_newest_last():
    draft = LookaheadDraft(8, window=2, ngram=3, guesses=2)
    pool = {}
    for gram in [(1, 2), (3, 4), (1, 2), (5, 6)]:
        draft._remember(pool, 0, gram)
    assert pool == {0: [(1, 2), (5, 6)]}  # (1, 2) moved to the end on its repeat; (3, 4), the oldest, went


def test_the_guesses_form_a_trie_of_proposals_before_the_window():
    draft = LookaheadDraft(12, window=2, ngram=3, guesses=3)
    seq = torch.tensor([1, 2, 3])
    state = draft.start(seq)
    state.levels, state.filled = [[4], [5, 6]], 1
    state.pool = {3: [(7, 8), (7, 9), (10, 11)]}
    tree = draft.propose_tree(state, seq, 3, None, draws="top", temperature=1.0, top_k=None, generator=None)
    assert tree.proposals == 5  # 10-11, then 7 with children 9 and 8: the newest gram first
    assert tree.tree.tokens[:5].tolist() == [10, 11, 7, 9, 8] and tree.tree.parents[:5].tolist() == [-1, 0, -1, 2, 2]
    assert tree.tree.tokens[5:].tolist() == [4, 5, 6] and tree.tree.parents[5:].tolist() == [-1, -1, 5]
    assert torch.equal(tree.q[0, [7, 10]], torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert tree.q[6:].sum() == 0  # the window's nodes propose nothing


# --- greedy: token for token -----------------------------------------------------------------------------------------
def test_lookahead_greedy_equals_plain_greedy_on_a_tiny_model():
    model = TinyCausalLM(vocab=6, n_layer=2, seed=2)
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    plain = generate_plain(model, prompt, 30)
    for W, N, G in [(2, 3, 1), (3, 4, 2), (4, 3, 4)]:
        out = generate_tree(model, LookaheadDraft(6, window=W, ngram=N, guesses=G), prompt, 30, rule=GREEDY_RULE)
        assert torch.equal(out, plain), (W, N, G)


@pytest.mark.heavy
def test_lookahead_greedy_equals_plain_greedy_on_the_trained_target(trained):
    prompt = sd.lab.corpus_prompts(1, 48, seed=1)[0]
    plain = generate_plain(trained, prompt, 96)
    for W, N, G in [(4, 3, 4), (4, 4, 4), (6, 4, 6)]:
        log = sd.SpecDecodeLog(k=N - 1, policy="greedy", temperature=0.0)
        out = generate_tree(trained, LookaheadDraft(256, window=W, ngram=N, guesses=G), prompt, 96,
                            rule=GREEDY_RULE, log=log)
        assert torch.equal(out, plain), (W, N, G)
        assert log.summary().tokens_per_target_call > 1.2  # measured 1.48-1.68 on this prompt: it does retire more


# --- the exact law, by teacher forcing -----------------------------------------------------------------------------
# V**HORIZON = 64 continuations; N decodes land within sd.tv_noise_bound(exact, N) = 0.134 (N = 2000) of the target's
# exact law when the decoder is exact (exceeded with probability < 1e-6). A decode of 3 tokens would end before the
# pool fills, so _Primed starts with full levels and a pool of seeded guesses (any pool that is a function of the
# past keeps the rule exact): measured, the one-hot rules 0.06, the ratio rule with an invented q 0.65.
#
# The law alone cannot tell lookahead from plain sampling: a pool whose guesses are never kept (_EmptyPool below)
# samples the target's law too. So the same runs count the proposals each decode's first round kept. Its tree is the
# primed pool's guesses under PROMPT[-1], a function of the prompt alone (roots {0, 2, 3}); a one-hot rule keeps one
# exactly when the target's first token is a root, with probability beta = sum of p_1 over the roots = 0.525 (p_1 the
# first token's exact marginal). Over N independent decodes the fraction that kept one falls below beta - 5 sigma,
# sigma = sqrt(beta (1 - beta) / N) = 0.011 (floor 0.469), with probability < exp(-50 beta (1 - beta)) = 4e-6
# (Hoeffding, accepts_first_proposals in tests/lab_law.py). Measured when written: 0.533 (onehot_sequential) and
# 0.547 (onehot_walk); the empty pool keeps none (0.0).
V, HORIZON, N = 4, 3, 2000
PROMPT = torch.tensor([1, 2, 3, 1])


_Primed = primed_lookahead()  # full levels and seeded guesses from the start (tests/lab_law.py)


class _InventedQ(_Primed):
    """Negative control: the guesses verified by mss, dividing by the uniform q over each node's guesses."""

    def propose_tree(self, state, seq, n, widths=None, *, draws, **policy):
        return super().propose_tree(state, seq, n, widths, draws="top", **policy)


class _EmptyPool(_Primed):
    """Negative control of the acceptance check: the primed levels with no guesses, so every round proposes nothing
    (exact, since plain sampling is; lookahead with a pool that never fills)."""

    def start(self, prompt, cache=None):
        state = super().start(prompt, cache)
        state.pool = {}
        return state


def _draft():
    return _Primed(V, window=3, ngram=3, guesses=3)


def _model():
    return TinyCausalLM(vocab=V, n_layer=2, seed=5)


def _empirical(draft, rule, seed=1):
    """(frequencies of N decodes, the exact law, the proposals each decode's first round kept (N,))."""
    model = _model()
    got, accepted = empirical_with_first_rounds(
        lambda g, log: generate_tree(model, draft, PROMPT, HORIZON, rule=rule, log=log, decoding=Decoding(
            temperature=1.0, generator=g)), k=draft.tree_bounds()[1], vocab=V, horizon=HORIZON, n=N, seed=seed)
    return got, exact_continuations(model, PROMPT, HORIZON, temperature=1.0), accepted


def _first_guess_chance(exact):
    """beta: the target's first token is one of the primed pool's first guesses (the roots of its first tree)."""
    draft = _draft()
    tree = draft.propose_tree(draft.start(PROMPT), PROMPT, PROMPT.numel(), None, draws="top", temperature=1.0,
                              top_k=None, generator=None)
    roots = tree.tree.tokens[:tree.proposals][tree.tree.parents[:tree.proposals] == -1]
    p_1 = exact.view(V, -1).sum(-1)  # (V,) the first token's exact marginal
    assert sorted(roots.tolist()) == [0, 2, 3] and abs(float(p_1.sum()) - 1) < 1e-12
    return float(p_1[roots].sum())


@pytest.mark.stat
@pytest.mark.parametrize("rule", ["onehot_sequential", "onehot_walk"])
def test_lookahead_under_a_one_hot_rule_samples_the_exact_target_distribution(rule):
    torch.set_num_threads(1)
    got, exact, accepted = _empirical(_draft(), rule)
    assert sd.total_variation(got, exact) < sd.tv_noise_bound(exact, N)
    beta = _first_guess_chance(exact)
    with torch.no_grad():  # beta by hand: p_1 from one forward pass, summed over the roots {0, 2, 3}
        p_1 = torch.softmax(_model()(PROMPT[None])[0, -1].double(), -1)
    assert abs(beta - float(p_1[[0, 2, 3]].sum())) < 1e-6 and 0.5 < beta < 0.55, beta  # float32 logits; Hoeffding
    assert accepts_first_proposals(accepted, beta), (float((accepted > 0).double().mean()), beta)


@pytest.mark.stat
def test_the_ratio_rule_with_an_invented_q_fails_the_same_test():
    torch.set_num_threads(1)
    got, exact, _ = _empirical(_InventedQ(V, window=3, ngram=3, guesses=3), "mss")
    assert sd.total_variation(got, exact) > sd.tv_noise_bound(exact, N)


@pytest.mark.stat
def test_an_empty_pool_samples_the_law_but_fails_the_acceptance_check():
    """Negative control: what the law test alone would pass. No proposal is ever kept."""
    torch.set_num_threads(1)
    got, exact, accepted = _empirical(_EmptyPool(V, window=3, ngram=3, guesses=3), "onehot_sequential")
    assert sd.total_variation(got, exact) < sd.tv_noise_bound(exact, N)
    assert int(accepted.sum()) == 0
    assert not accepts_first_proposals(accepted, _first_guess_chance(exact))


# --- measured like every other draft -------------------------------------------------------------------------------
def test_measure_trees_takes_lookahead_and_a_static_medusa_tree():
    model = TinyCausalLM(vocab=6, n_layer=2, seed=2)
    prompts = [torch.tensor([1, 2, 3, 1, 2, 3, 1]), torch.tensor([4, 5, 4, 5, 4, 5, 4])]
    plan = MeasurePlan(n_new=12, repeats=1, reps=1)
    t = measure_trees(model, LookaheadDraft(6, window=2, ngram=3, guesses=2), prompts, [None], plan=plan)
    assert t.trees == [None] and t.nodes == [LookaheadDraft(6, window=2, ngram=3, guesses=2).tree_bounds()[0]]
    assert t.T_1 > 0 and 1.0 <= t.e_n[0] <= 3 and t.c_v[0] > 0
    assert "own" in str(t)
    heads_target, heads = sd.lab.medusa_pair(model, sd.lab.MedusaHeads(model, 2))
    t = measure_trees(heads_target, heads, prompts, [(2,), (2, 1)], rule="mss", plan=plan, temperature=1.0)
    assert t.nodes == [2, 4] and all(1.0 <= e <= len(w) + 1 for e, w in zip(t.e_n, t.trees))


# --- bad input ---------------------------------------------------------------------------------------------------
def test_bad_arguments_are_named():
    model = TinyCausalLM(vocab=6, n_layer=2, seed=2)
    prompt = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="verify them with a one-hot rule"):
        generate_tree(model, LookaheadDraft(6), prompt, 4, rule="mss")
    with pytest.raises(ValueError, match="widths must be None: lookahead builds its own tree"):
        generate_tree(model, LookaheadDraft(6), prompt, 4, (2,), rule=GREEDY_RULE)
    with pytest.raises(ValueError, match="widths must be given for a drafter without a tree of its own"):
        generate_tree(*sd.lab.medusa_pair(model, sd.lab.MedusaHeads(model, 2)), prompt, 4)
    with pytest.raises(ValueError, match="ngram must be >= 3"):
        LookaheadDraft(6, ngram=2)
    with pytest.raises(ValueError, match="window must be >= 2"):
        LookaheadDraft(6, window=1)
    with pytest.raises(ValueError, match="trees must hold at least one tree"):
        measure_trees(model, LookaheadDraft(6), [prompt], [])
