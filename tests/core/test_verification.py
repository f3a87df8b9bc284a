"""Block verification: exactness of one block in isolation, greedy verification, and negative controls."""
import itertools

import pytest
import torch
from stats import tv_bound

import specdec_lib.verification as Vf
from specdec_lib.markov.chain import sequence_tv
from specdec_lib.sampling import accept_ratio, sample_from, sample_rows

V, K = 4, 2


def rows(seed, n_rows, sharp=1.5):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n_rows, V, generator=g) * sharp, -1)


P_ROWS = rows(1, K + 1)  # context-free target rows: slot j's true distribution is P_ROWS[j]
Q_ROWS = rows(2, K)  # the draft rows that really propose
Q_OTHER = rows(3, K)  # a different draft, for the mismatched-q control


# --- wrong verifiers with the right signature: the negative controls -----------------------------
def p_on_reject(p_rows, q_rows, props, g):
    """Resamples from p instead of the residual."""
    n, k = props.shape
    p_x = p_rows[:, :k].gather(-1, props[..., None]).squeeze(-1)
    q_x = q_rows.gather(-1, props[..., None]).squeeze(-1)
    ok = torch.rand(n, k, generator=g, dtype=torch.float64) < accept_ratio(p_x, q_x).double()
    a = ok.long().cumprod(-1).sum(-1)
    nxt = sample_rows(p_rows[torch.arange(n), a], g)
    return Vf.BlockVerdicts(a, Vf.commit_tokens(props, a, nxt))


def always_accept(p_rows, q_rows, props, g):
    """Keeps every proposal, then draws the bonus."""
    n, k = props.shape
    a = torch.full((n,), k)
    return Vf.BlockVerdicts(a, Vf.commit_tokens(props, a, sample_rows(p_rows[:, k], g)))


def off_by_one(p_rows, q_rows, props, g):
    """Judges proposal j with the row for slot j + 1."""
    shifted = torch.cat([p_rows[:, 1:], p_rows[:, -1:]], dim=1)
    return Vf.verify_blocks(shifted, q_rows, props, g)


def mismatched_q(p_rows, q_rows, props, g):
    """Computes the ratio with a q other than the one that proposed."""
    return Vf.verify_blocks(p_rows, Q_OTHER.expand(props.shape[0], K, V), props, g)


def block_then_fill(verify, n, seed):
    """Verify one block of K proposals per row, then fill the uncommitted slots from their true rows."""
    g = torch.Generator().manual_seed(seed)
    props = torch.stack([sample_from(Q_ROWS[j], num_samples=n, generator=g) for j in range(K)], dim=1)  # (n, K)
    tokens = verify(P_ROWS.expand(n, K + 1, V), Q_ROWS.expand(n, K, V), props, g).tokens  # (n, K+1), -1 padded
    fill = torch.stack([sample_from(P_ROWS[j], num_samples=n, generator=g) for j in range(K + 1)], dim=1)
    return torch.where(tokens < 0, fill, tokens)


EXACT = P_ROWS[0][:, None, None] * P_ROWS[1][None, :, None] * P_ROWS[2][None, None, :]  # (V, V, V) independent slots
N = 300_000


@pytest.mark.stat
def test_one_block_is_exact_including_bonus():
    out = block_then_fill(Vf.verify_blocks, N, seed=4)
    assert sequence_tv(out, EXACT) < tv_bound(EXACT, N)


@pytest.mark.stat
@pytest.mark.parametrize("wrong", [p_on_reject, always_accept, off_by_one, mismatched_q])
def test_negative_controls_fail_the_block_test(wrong):
    out = block_then_fill(wrong, N, seed=4)
    tv = sequence_tv(out, EXACT)
    assert tv > tv_bound(EXACT, N), f"{wrong.__name__} passed (TV {tv:.4f})"


def test_verdict_structure():
    g = torch.Generator().manual_seed(0)
    props = torch.tensor([1, 2])
    for _ in range(50):
        v = Vf.verify_block(P_ROWS, Q_ROWS, props, generator=g)
        assert 0 <= v.accepted <= K and v.tokens.shape == (v.accepted + 1,)
        assert torch.equal(v.tokens[:v.accepted], props[:v.accepted])


def test_identical_rows_accept_everything():
    g = torch.Generator().manual_seed(0)
    p = P_ROWS
    for _ in range(20):
        v = Vf.verify_block(p, p[:K].clone(), torch.tensor([3, 0]), generator=g)
        assert v.accepted == K


def test_disjoint_rows_reject_at_once_and_sample_p():
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]] * 2)
    q = torch.tensor([[0.0, 0.0, 0.5, 0.5]])
    g = torch.Generator().manual_seed(0)
    out = Vf.verify_blocks(p.expand(1000, 2, 4), q.expand(1000, 1, 4), torch.full((1000, 1), 2), g)
    acc, tok = out.accepted, out.tokens
    assert (acc == 0).all() and set(tok[:, 0].unique().tolist()) == {0, 1} and (tok[:, 1] == -1).all()


def test_k_zero_is_plain_sampling():
    g = torch.Generator().manual_seed(0)
    v = Vf.verify_block(P_ROWS[:1], torch.empty(0, V), torch.empty(0, dtype=torch.long), generator=g)
    assert v.accepted == 0 and v.tokens.shape == (1,)


def test_commit_tokens_layout():
    props = torch.tensor([[5, 6, 7], [5, 6, 7], [5, 6, 7]])
    out = Vf.commit_tokens(props, torch.tensor([0, 2, 3]), torch.tensor([9, 8, 1]))
    assert out.tolist() == [[9, -1, -1, -1], [5, 6, 8, -1], [5, 6, 7, 1]]


def test_greedy_verification():
    p = torch.nn.functional.one_hot(torch.tensor([2, 0, 3]), V).float() * 0.7 + 0.075
    assert Vf.verify_greedy(p, torch.tensor([2, 0])).tokens.tolist() == [2, 0, 3]
    assert Vf.verify_greedy(p, torch.tensor([2, 1])).tokens.tolist() == [2, 0]
    v = Vf.verify_greedy(p, torch.tensor([1, 0]))
    assert v.accepted == 0 and v.tokens.tolist() == [2]


def test_greedy_equals_plain_greedy_on_every_block():
    # whatever the proposals, the committed tokens are a prefix of the target's greedy path
    p = rows(7, 5, sharp=3.0)
    target = p.argmax(-1)
    for props in itertools.product(range(V), repeat=4):
        props = torch.tensor(props)
        v = Vf.verify_greedy(p, props)
        assert torch.equal(v.tokens, target[:v.accepted + 1])


@pytest.mark.parametrize("args, exc, match", [
    ((P_ROWS[:2], Q_ROWS, torch.tensor([0, 1])), ValueError, "p_rows must hold k\\+1 rows"),
    ((P_ROWS, Q_ROWS, torch.tensor([0, 1, 2])), ValueError, "proposals must have shape"),
    ((P_ROWS, Q_ROWS, torch.tensor([0, 9])), ValueError, "proposals must hold token ids"),
    ((P_ROWS, Q_ROWS, torch.tensor([0.0, 1.0])), TypeError, "proposals"),
    ((P_ROWS * 2, Q_ROWS, torch.tensor([0, 1])), ValueError, "p_rows must sum to 1"),
    ((P_ROWS, Q_ROWS.log(), torch.tensor([0, 1])), ValueError, "q_rows must be non-negative"),
    ((P_ROWS, torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]), torch.tensor([0, 1])), ValueError,
     "q_rows must give every proposal positive probability"),
    ((P_ROWS[0], Q_ROWS, torch.tensor([0, 1])), ValueError, "p_rows must have at least 2"),
])
def test_verify_block_validation(args, exc, match):
    with pytest.raises(exc, match=match):
        Vf.verify_block(*args)


def test_verify_blocks_validation_and_generator():
    with pytest.raises(ValueError, match="p_rows must have at least 3"):
        Vf.verify_blocks(P_ROWS, Q_ROWS, torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="generator"):
        Vf.verify_block(P_ROWS, Q_ROWS, torch.tensor([0, 1]), generator=42)
    with pytest.raises(ValueError, match="proposals must have shape"):
        Vf.verify_greedy(P_ROWS, torch.tensor([0]))


def test_greedy_is_the_sampling_rule_on_one_hot_rows():
    # temperature 0 turns p and q into one-hot rows; the general rule then accepts while the argmaxes agree
    from specdec_lib.policy import apply_policy
    g = torch.Generator().manual_seed(3)
    for _ in range(30):
        p = rows(int(torch.randint(0, 10_000, (1,), generator=g)), K + 1, sharp=2.0)
        props = torch.randint(0, V, (K,), generator=g)
        q1 = torch.nn.functional.one_hot(props, V).float()  # a greedy draft proposes its argmax for sure
        sampled = Vf.verify_block(apply_policy(p.log(), temperature=0.0), q1, props, generator=g)
        greedy = Vf.verify_greedy(p, props)
        assert torch.equal(sampled.tokens, greedy.tokens)
