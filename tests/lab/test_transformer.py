"""Tests for the tiny causal LM and the block-versus-incremental alignment check."""
import dataclasses

import pytest
import torch

from specdec_lib.lab.alignment import (
    AlignmentReport,
    alignment_report,
    alignment_tv,
    block_scores,
    incremental_scores,
)
from specdec_lib.lab.transformer import TinyCausalLM

V = 12


def tokens(n: int, seed: int) -> torch.Tensor:
    """n random token ids from a private generator."""
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model():
    return TinyCausalLM(seed=1)


# --- the model -------------------------------------------------------------------------------------

def test_forward_shape_and_probabilities(model):
    logits = model(torch.stack([tokens(7, 0), tokens(7, 1)]))
    assert logits.shape == (2, 7, V)
    assert torch.isfinite(logits).all()


def test_distributions_are_non_uniform_and_vary_by_position(model):
    with torch.no_grad():
        p = torch.softmax(model(tokens(20, 3)[None])[0], -1)  # (20, V)
    assert p.max(-1).values.min() > 1.5 / V  # every row clearly peaked
    assert (0.5 * (p[1:] - p[:-1]).abs().sum(-1)).max() > 0.1  # rows differ position to position


def test_causality_later_token_does_not_change_earlier_logits(model):
    x = tokens(10, 4)
    y = x.clone()
    y[6] = (y[6] + 1) % V
    with torch.no_grad():
        a, b = model(x[None])[0], model(y[None])[0]
    assert torch.allclose(a[:6], b[:6], atol=1e-6, rtol=0)
    assert not torch.allclose(a[6:], b[6:], atol=1e-4)


def test_same_seed_same_weights_different_seed_different():
    a, b, c = TinyCausalLM(seed=5), TinyCausalLM(seed=5), TinyCausalLM(seed=6)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[n], sb[n]) for n in sa)
    assert any(not torch.equal(sa[n], sc[n]) for n in sa)
    assert not torch.equal(sa["tok_emb.weight"], sc["tok_emb.weight"])


def test_construction_leaves_global_rng_untouched():
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    TinyCausalLM(seed=3, n_layer=3)
    assert torch.equal(torch.get_rng_state(), before)


def test_model_is_in_eval_mode_and_parameters_are_finite(model):
    assert not model.training
    assert all(torch.isfinite(p).all() for p in model.parameters())


# --- alignment ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("L,k", [(1, 0), (1, 1), (3, 0), (3, 1), (5, 4), (8, 6)])
def test_offset_zero_reproduces_incremental_scoring(seed, L, k):
    m = TinyCausalLM(seed=seed)
    prefix, props = tokens(L, 10 * seed + L), tokens(k, 100 * seed + k)
    rep = alignment_report(m, prefix, props)
    assert rep.aligned and rep.rows == k + 1
    assert rep.max_abs_diff < 1e-5 and rep.max_tv < 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_offset_one_is_the_bug_and_is_caught(seed):
    m = TinyCausalLM(seed=seed)
    prefix, props = tokens(5, seed), tokens(4, 50 + seed)
    rep = alignment_report(m, prefix, props, offset=1)
    assert not rep.aligned
    assert rep.rows == 4  # k rows: the shifted slice runs off the end
    assert rep.max_tv > 0.05
    assert alignment_tv(m, prefix, props) > 0.05


def test_offset_minus_one_is_not_aligned(model):
    rep = alignment_report(model, tokens(5, 7), tokens(3, 8), offset=-1)
    assert not rep.aligned and rep.rows == 4


def test_alignment_tv_matches_the_shifted_report(model):
    prefix, props = tokens(5, 11), tokens(4, 12)
    # offset 0 equals the truth, so the offset-1 report's TV is the TV between the two slices
    assert alignment_tv(model, prefix, props) == pytest.approx(
        alignment_report(model, prefix, props, offset=1).max_tv, abs=1e-5)


def test_scores_shapes_and_rows_are_distributions(model):
    prefix, props = tokens(4, 1), tokens(3, 2)
    inc = incremental_scores(model, prefix, props)
    assert inc.shape == (4, V)
    assert block_scores(model, prefix, props).shape == (4, V)
    assert block_scores(model, prefix, props, offset=1).shape == (3, V)
    assert block_scores(model, prefix, props, offset=3).shape == (1, V)
    assert torch.allclose(inc.sum(-1), torch.ones(4), atol=1e-5)
    assert (inc >= 0).all() and not inc.requires_grad


def test_empty_proposals_give_the_single_bonus_row(model):
    prefix = tokens(3, 9)
    empty = torch.empty(0, dtype=torch.long)
    inc = incremental_scores(model, prefix, empty)
    with torch.no_grad():
        direct = torch.softmax(model(prefix[None])[0, -1], -1)
    assert inc.shape == (1, V) and torch.allclose(inc[0], direct, atol=1e-6)


def test_report_is_frozen(model):
    rep = alignment_report(model, tokens(2, 0), tokens(1, 0))
    assert isinstance(rep, AlignmentReport)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rep.aligned = False


# --- validation --------------------------------------------------------------------------------------

def test_forward_validates_idx(model):
    with pytest.raises(TypeError, match="idx"):
        model(torch.zeros(1, 3))
    with pytest.raises(TypeError, match="idx"):
        model([[1, 2]])
    with pytest.raises(ValueError, match="idx"):
        model(torch.tensor([[0, V]]))
    with pytest.raises(ValueError, match="idx"):
        model(torch.tensor([[-1, 0]]))
    with pytest.raises(ValueError, match="idx"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="idx"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="idx"):
        model(torch.zeros(1, 0, dtype=torch.long))


@pytest.mark.parametrize("fn", [incremental_scores, block_scores, alignment_report])
def test_scoring_validates_prefix_and_proposals(model, fn):
    ok = tokens(3, 0)
    with pytest.raises(TypeError, match="prefix"):
        fn(model, ok.float(), ok)
    with pytest.raises(TypeError, match="proposals"):
        fn(model, ok, ok.int())
    with pytest.raises(ValueError, match="prefix"):
        fn(model, torch.empty(0, dtype=torch.long), ok)
    with pytest.raises(ValueError, match="proposals"):
        fn(model, ok, torch.tensor([0, V]))
    with pytest.raises(ValueError, match="prefix"):
        fn(model, ok[None], ok)
    with pytest.raises(ValueError, match="prefix \\+ proposals"):
        fn(model, torch.zeros(40, dtype=torch.long), torch.zeros(30, dtype=torch.long))


def test_offset_and_atol_validation(model):
    prefix, props = tokens(3, 0), tokens(2, 1)
    with pytest.raises(TypeError, match="offset"):
        block_scores(model, prefix, props, offset=1.0)
    with pytest.raises(TypeError, match="offset"):
        alignment_report(model, prefix, props, offset=True)
    with pytest.raises(ValueError, match="offset"):
        block_scores(model, prefix, props, offset=3)   # past the end: no rows left
    with pytest.raises(ValueError, match="offset"):
        block_scores(model, prefix, props, offset=-3)  # before the start
    with pytest.raises(ValueError, match="atol"):
        alignment_report(model, prefix, props, atol=-1.0)
    with pytest.raises(ValueError, match="proposals"):
        alignment_tv(model, prefix, torch.empty(0, dtype=torch.long))


def test_constructor_validation():
    with pytest.raises(ValueError, match="d_model"):
        TinyCausalLM(d_model=30, n_head=4)
    with pytest.raises(TypeError, match="seed"):
        TinyCausalLM(seed=0.5)
