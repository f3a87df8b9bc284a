"""Tree attention: one target pass over a flattened draft tree against scoring each node's root path on its own."""
import dataclasses

import pytest
import torch

import specdec_lib as sd
from specdec_lib.lab.alignment import block_scores, incremental_scores
from specdec_lib.lab.transformer import TinyCausalLM
from specdec_lib.lab.tree_attention import (
    FlatTree,
    TreeAlignmentReport,
    path_scores,
    tree_alignment_report,
    tree_from_widths,
    tree_mask,
    tree_positions,
    tree_scores,
)

V = 12
# Measured on the seeds and trees below: the correct layout's max TV is 2e-7 at most (float32 rounding); every
# wrong layout's is 0.07 at least (the smallest: causal mask with depth positions). 1e-2 sits seven times below
# the smallest wrong value and five orders of magnitude above the noise.
WRONG_TV = 1e-2
WRONG = [("causal", "depth"), ("ancestor", "flat"), ("causal", "flat")]


def tokens(n: int, seed: int, vocab: int = V) -> torch.Tensor:
    """n random token ids from a private generator."""
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


def random_tree(widths, seed: int, vocab: int = V) -> FlatTree:
    """The static tree of these widths with random tokens."""
    return tree_from_widths(widths, tokens(sd.markov.tree_nodes(widths), seed, vocab))


@pytest.fixture(scope="module")
def model():
    return TinyCausalLM(seed=1)


# --- the flattened tree --------------------------------------------------------------------------------

def test_widths_give_breadth_first_parents_and_depths():
    tree = tree_from_widths((2, 2), torch.arange(6))
    assert tree.parents.tolist() == [-1, -1, 0, 0, 1, 1]
    assert tree.depths.tolist() == [1, 1, 2, 2, 2, 2]
    assert tree.n == 6 and tree.path(5) == [1, 5] and tree.path(0) == [0]
    big = random_tree((3, 2, 1), 0)
    assert big.n == 15 and big.depths.tolist() == [1] * 3 + [2] * 6 + [3] * 6
    assert big.path(14) == [2, 8, 14]  # the last leaf hangs under the last node of each depth


def test_ancestor_mask_and_depth_positions_by_hand():
    tree = tree_from_widths((2, 2), torch.arange(6))
    L = 3
    anc = torch.tensor([[1, 0, 0, 0, 0, 0],   # node 0: itself
                        [0, 1, 0, 0, 0, 0],   # node 1: itself, not its sibling
                        [1, 0, 1, 0, 0, 0],   # node 2: its parent 0
                        [1, 0, 0, 1, 0, 0],
                        [0, 1, 0, 0, 1, 0],   # node 4: its parent 1
                        [0, 1, 0, 0, 0, 1]], dtype=torch.bool)
    mask = tree_mask(tree, L)
    assert mask.shape == (6, L + 6) and mask.dtype == torch.bool
    assert mask[:, :L].all() and torch.equal(mask[:, L:], anc)
    assert tree_positions(tree, L).tolist() == [3, 3, 4, 4, 4, 4]  # len(prefix) + depth - 1, not 3 .. 8
    assert tree_mask(tree, 0).shape == (6, 6)


def test_a_chain_mask_is_the_causal_mask():
    chain = tree_from_widths((1, 1, 1, 1), tokens(4, 0))
    causal = torch.ones(4, 7, dtype=torch.bool).tril(diagonal=3)
    assert torch.equal(tree_mask(chain, 3), causal)
    assert torch.equal(tree_positions(chain, 3), torch.arange(3, 7))


def test_tree_copies_its_inputs_and_is_frozen():
    toks = tokens(3, 1)
    tree = FlatTree(toks, [-1, 0, 0])
    toks[0] = (toks[0] + 1) % V
    assert tree.tokens[0] != toks[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tree.tokens = toks


# --- the model takes positions and a mask ----------------------------------------------------------------

def test_explicit_default_positions_and_causal_mask_change_nothing(model):
    x = tokens(9, 2)[None]  # (1, 9)
    with torch.no_grad():
        plain = model(x)  # (1, 9, V)
        explicit = model(x, positions=torch.arange(9), mask=torch.ones(9, 9, dtype=torch.bool).tril())
        cache = model.new_cache()
        model(x[:, :4], cache)
        cached = model(x[:, 4:], cache, positions=torch.arange(4, 9),
                       mask=torch.ones(5, 9, dtype=torch.bool).tril(diagonal=4))
    torch.testing.assert_close(explicit, plain, rtol=0, atol=1e-6)
    torch.testing.assert_close(cached, plain[:, 4:], rtol=0, atol=1e-6)


def test_positions_and_mask_each_move_the_logits(model):
    x = tokens(6, 3)[None]
    with torch.no_grad():
        plain = model(x)
        shifted = model(x, positions=torch.arange(1, 7))
        blind = model(x, mask=torch.eye(6, dtype=torch.bool))  # each position sees only itself
    assert (shifted - plain).abs().max() > 1e-2
    assert (blind[:, 1:] - plain[:, 1:]).abs().max() > 1e-2
    torch.testing.assert_close(blind[:, 0], plain[:, 0], rtol=0, atol=1e-6)  # position 0 saw only itself anyway


def test_a_masked_out_token_cannot_change_the_logits(model):
    x = tokens(6, 4)
    y = x.clone()
    y[2] = (y[2] + 1) % V
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    mask[3:, 2] = False  # later positions skip position 2
    with torch.no_grad():
        a, b = model(x[None], mask=mask)[0], model(y[None], mask=mask)[0]
    torch.testing.assert_close(a[3:], b[3:], rtol=0, atol=1e-6)
    assert (a[2] - b[2]).abs().max() > 1e-3  # position 2 itself did change: the test sees a real edit


# --- alignment on the tiny model ------------------------------------------------------------------------

@pytest.mark.heavy
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("widths", [(3, 2, 1), (2, 2), (1, 1, 1), (2, 3)])
@pytest.mark.parametrize("L", [1, 5])
def test_ancestor_mask_and_depth_positions_align(seed, widths, L):
    m = TinyCausalLM(seed=seed)
    tree = random_tree(widths, 100 + seed)
    rep = tree_alignment_report(m, tokens(L, seed), tree)
    assert rep.aligned and rep.nodes == sd.markov.tree_nodes(widths)
    assert rep.max_abs_diff < 1e-5 and rep.max_tv < 1e-5


@pytest.mark.heavy
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("widths", [(3, 2, 1), (2, 2)])
@pytest.mark.parametrize("mask,positions", WRONG)
def test_wrong_mask_or_positions_are_caught(seed, widths, mask, positions):
    m = TinyCausalLM(seed=seed)
    rep = tree_alignment_report(m, tokens(5, seed), random_tree(widths, 100 + seed), mask=mask, positions=positions)
    assert not rep.aligned
    assert rep.max_tv > WRONG_TV, rep.max_tv


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_chain_is_block_scoring(seed):
    m = TinyCausalLM(seed=seed)
    prefix, props = tokens(4, seed), tokens(3, 50 + seed)
    chain = tree_from_widths((1, 1, 1), props)
    torch.testing.assert_close(tree_scores(m, prefix, chain), block_scores(m, prefix, props), rtol=0, atol=1e-5)
    torch.testing.assert_close(path_scores(m, prefix, chain), incremental_scores(m, prefix, props), rtol=0, atol=1e-6)


@pytest.mark.parametrize("mask,positions", WRONG)
def test_the_wrong_layouts_are_right_on_a_chain(model, mask, positions):
    # on a chain the flattened index is the depth and the causal mask is the ancestor mask: the controls above
    # fail because of branching, not because the wrong layouts break every pass
    chain = tree_from_widths((1, 1, 1, 1), tokens(4, 7))
    rep = tree_alignment_report(model, tokens(3, 8), chain, mask=mask, positions=positions)
    assert rep.aligned and rep.max_tv < 1e-5


def test_an_irregular_tree_aligns(model):
    tree = FlatTree(tokens(7, 9), [-1, -1, 0, 0, 0, 3, 1])  # node 3 has a child, node 4 none; node 6 under node 1
    prefix = tokens(4, 10)
    assert tree_alignment_report(model, prefix, tree).aligned
    assert tree_alignment_report(model, prefix, tree, mask="causal").max_tv > WRONG_TV


def test_scores_shapes_and_rows_are_distributions(model):
    tree = random_tree((2, 2), 3)
    prefix = tokens(3, 4)
    for scores in (tree_scores(model, prefix, tree), path_scores(model, prefix, tree)):
        assert scores.shape == (7, V) and not scores.requires_grad
        assert torch.allclose(scores.sum(-1), torch.ones(7), atol=1e-5) and (scores >= 0).all()
    with torch.no_grad():
        direct = torch.softmax(model(prefix[None])[0, -1], -1)
    torch.testing.assert_close(tree_scores(model, prefix, tree)[0], direct, rtol=0, atol=1e-6)


def test_report_is_frozen(model):
    rep = tree_alignment_report(model, tokens(2, 0), random_tree((2,), 0))
    assert isinstance(rep, TreeAlignmentReport) and rep.nodes == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        rep.aligned = False


# --- the trained target --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return sd.lab.load_pair()[0]


def test_trained_target_aligns_and_catches_every_wrong_layout(target):
    prompt = sd.lab.corpus_prompts(1, 31, seed=3)[0]
    prefix, tree = prompt[:16], tree_from_widths((3, 2, 1), prompt[16:])  # a real text's bytes as the drafts
    rep = tree_alignment_report(target, prefix, tree)
    assert rep.aligned and rep.max_tv < 1e-5, rep
    for mask, positions in WRONG:  # measured: max TV 0.84 to 0.97
        wrong = tree_alignment_report(target, prefix, tree, mask=mask, positions=positions)
        assert not wrong.aligned and wrong.max_tv > 0.1, (mask, positions, wrong.max_tv)


# --- validation ---------------------------------------------------------------------------------------

def test_forward_validates_positions_and_mask(model):
    x = tokens(4, 0)[None]
    cases = [
        (TypeError, "positions", {"positions": torch.arange(4.0)}),
        (TypeError, "positions", {"positions": [0, 1, 2, 3]}),
        (ValueError, "positions", {"positions": torch.arange(3)}),
        (ValueError, "positions", {"positions": torch.arange(4)[None]}),
        (ValueError, "positions", {"positions": torch.tensor([0, 1, 2, -1])}),
        (ValueError, "positions", {"positions": torch.tensor([0, 1, 2, model.max_len])}),
        (TypeError, "mask", {"mask": torch.ones(4, 4)}),
        (TypeError, "mask", {"mask": [[True] * 4] * 4}),
        (ValueError, "mask", {"mask": torch.ones(4, 5, dtype=torch.bool)}),
        (ValueError, "at least one key", {"mask": torch.ones(4, 4, dtype=torch.bool).tril(diagonal=-1)}),
    ]
    for error, match, kwargs in cases:
        with pytest.raises(error, match=match):
            model(x, **kwargs)
    cache = model.new_cache()
    model(x, cache)
    with pytest.raises(ValueError, match=r"mask must have shape \(T, cached \+ T\) = \(4, 8\)"):
        model(x, cache, mask=torch.ones(4, 4, dtype=torch.bool))


def test_flat_tree_validation():
    ok = tokens(3, 0)
    cases = [
        (TypeError, "tokens", (ok.int(), [-1, 0, 0])),
        (TypeError, "tokens", ([1, 2, 3], [-1, 0, 0])),
        (ValueError, "tokens", (ok[None], [-1, 0, 0])),
        (ValueError, "tokens", (torch.empty(0, dtype=torch.long), [])),
        (ValueError, "tokens", (torch.tensor([0, -1, 2]), [-1, 0, 0])),
        (ValueError, "one index per node", (ok, [-1, 0])),
        (ValueError, r"parents\[1\]", (ok, [-1, 1, 0])),   # a node cannot be its own parent
        (ValueError, r"parents\[1\]", (ok, [-1, 2, 0])),   # a parent comes first
        (ValueError, r"parents\[0\]", (ok, [-2, 0, 0])),
        (TypeError, r"parents\[2\]", (ok, [-1, 0, 0.5])),
        (TypeError, "parents", (ok, "abc")),
    ]
    for error, match, args in cases:
        with pytest.raises(error, match=match):
            FlatTree(*args)


def test_tree_from_widths_validation():
    with pytest.raises(TypeError, match="widths"):
        tree_from_widths(3, tokens(3, 0))
    with pytest.raises(ValueError, match="widths"):
        tree_from_widths((), tokens(3, 0))
    with pytest.raises(ValueError, match=r"widths\[1\]"):
        tree_from_widths((2, 0), tokens(2, 0))
    with pytest.raises(TypeError, match=r"widths\[0\]"):
        tree_from_widths((2.0,), tokens(2, 0))
    with pytest.raises(ValueError, match="15 nodes"):
        tree_from_widths((3, 2, 1), tokens(14, 0))
    with pytest.raises(ValueError, match="tokens"):
        tree_from_widths((2,), [1, 2])


def test_mask_and_positions_validation():
    tree = random_tree((2,), 0)
    for fn in (tree_mask, tree_positions):
        with pytest.raises(TypeError, match="tree"):
            fn((0, 1), 3)
        with pytest.raises(ValueError, match="prefix_len"):
            fn(tree, -1)
        with pytest.raises(TypeError, match="prefix_len"):
            fn(tree, 2.0)


@pytest.mark.parametrize("fn", [tree_scores, path_scores, tree_alignment_report])
def test_scoring_validates_model_prefix_and_tree(model, fn):
    prefix, tree = tokens(3, 0), random_tree((2, 2), 1)
    with pytest.raises(TypeError, match="model"):
        fn(torch.nn.Linear(2, 2), prefix, tree)
    with pytest.raises(TypeError, match="prefix"):
        fn(model, prefix.float(), tree)
    with pytest.raises(TypeError, match="prefix"):
        fn(model, prefix.int(), tree)
    with pytest.raises(ValueError, match="prefix"):
        fn(model, torch.empty(0, dtype=torch.long), tree)
    with pytest.raises(ValueError, match="prefix"):
        fn(model, prefix[None], tree)
    with pytest.raises(TypeError, match="tree"):
        fn(model, prefix, tokens(6, 1))
    with pytest.raises(ValueError, match="tree.tokens"):
        fn(model, prefix, tree_from_widths((2,), torch.tensor([0, V])))
    with pytest.raises(ValueError, match="prefix \\+ tree is too long"):
        fn(model, torch.zeros(60, dtype=torch.long), tree)


def test_unknown_options_and_atol(model):
    prefix, tree = tokens(3, 0), random_tree((2,), 1)
    for fn in (tree_scores, tree_alignment_report):
        with pytest.raises(ValueError, match="'ancestor', 'causal'"):
            fn(model, prefix, tree, mask="tree")
        with pytest.raises(ValueError, match="'depth', 'flat'"):
            fn(model, prefix, tree, positions="index")
    with pytest.raises(ValueError, match="atol"):
        tree_alignment_report(model, prefix, tree, atol=-1.0)
