"""Block verification (sd.block_verification): the paper's toy, never below the token rule, exact output law,
equal to the token rule at k = 1 and for one-hot drafts, and the sampler against the exact law."""
import itertools
import math
from fractions import Fraction

import pytest
import torch
from stats import tv_bound

import specdec_lib.verification as Vf
from specdec_lib.block_verification import (
    BlockWeights,
    block_residual,
    block_tau,
    block_weights,
    product_tau_law,
    tau_law,
    verify_batch_block,
)
from specdec_lib.sampling import accept_ratio, residual_weights, sample_rows

TOY_P, TOY_Q = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64), torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)


def softmax_rows(g, shape, sharp=1.5):
    return torch.softmax(torch.randn(*shape, generator=g, dtype=torch.float64) * sharp, -1)


class Tree:
    """History-dependent rows: the target's and the draft's next-token law after every prefix (seeded)."""

    def __init__(self, V, k, seed, sharp=1.5, one_hot=False):
        g = torch.Generator().manual_seed(seed)
        self.V, self.k = V, k
        prefixes = [pre for n in range(k + 2) for pre in itertools.product(range(V), repeat=n)]
        self.P = {pre: softmax_rows(g, (V,), sharp) for pre in prefixes}
        self.Q = {pre: softmax_rows(g, (V,), sharp) for pre in prefixes if len(pre) <= k}
        if one_hot:  # a deterministic draft: its argmax after every prefix
            self.Q = {pre: torch.nn.functional.one_hot(q.argmax(), V).double() for pre, q in self.Q.items()}

    def rows(self, x):
        """p_rows (k+1, V), q_rows (k, V) for the draft block x."""
        return (torch.stack([self.P[tuple(x[:i])] for i in range(self.k + 1)]),
                torch.stack([self.Q[tuple(x[:i])] for i in range(self.k)]))

    def drafts(self):
        """Every draft block with positive draft mass, and its mass."""
        for x in itertools.product(range(self.V), repeat=self.k):
            mass = torch.stack([self.Q[x[:i]][x[i]] for i in range(self.k)]).prod().item() if self.k else 1.0
            if mass > 0:
                yield x, mass


def flat(P_row, Q_row, k):
    """History-free rows: P_i = P_row, Q_i = Q_row at every position."""
    tree = Tree(len(P_row), k, seed=0)
    tree.P = {pre: P_row for pre in tree.P}
    tree.Q = {pre: Q_row for pre in tree.Q}
    return tree


def block_outcomes(p_rows, q_rows, x, naive=False):
    """(k+1, V): P(tau = i, Y = y) for one draft block x under block verification."""
    w = block_weights(p_rows, q_rows, torch.tensor(x, dtype=torch.long), naive=naive)
    res = block_residual(p_rows, q_rows, w, torch.arange(len(x) + 1), naive=naive)  # (k+1, V): one row per tau
    return tau_law(w.h)[:, None] * res / res.sum(-1, keepdim=True)


def token_outcomes(p_rows, q_rows, x):
    """(k+1, V): P(A = i, Y = y) for one draft block x under the token rule (first failure ends the block)."""
    k = len(x)
    idx = torch.tensor(x, dtype=torch.long)
    a = accept_ratio(p_rows[:k].gather(-1, idx[:, None]).squeeze(-1), q_rows.gather(-1, idx[:, None]).squeeze(-1))
    reach = torch.cat([torch.ones(1, dtype=torch.float64), a.cumprod(0)])  # P(A >= i)
    stop = reach * torch.cat([1 - a, torch.ones(1, dtype=torch.float64)])  # P(A = i)
    res = residual_weights(p_rows, torch.cat([q_rows, torch.zeros_like(q_rows[:1])]))
    return stop[:, None] * res / res.sum(-1, keepdim=True)


def expected_accepted(tree, outcomes):
    """E[accepted drafts] a block: the drafts enumerated, each outcome law summed."""
    return sum(m * (outcomes(*tree.rows(x), x).sum(-1) * torch.arange(tree.k + 1)).sum().item()
               for x, m in tree.drafts())


def output_law(tree, outcomes):
    """Law (V,) * (k+1) of the block's output, continued from the target's rows to k+1 tokens."""
    law = torch.zeros((tree.V,) * (tree.k + 1), dtype=torch.float64)
    for x, m in tree.drafts():
        out = outcomes(*tree.rows(x), x)
        for i, y in itertools.product(range(tree.k + 1), range(tree.V)):
            pre, w = x[:i] + (y,), m * out[i, y].item()
            if w > 0:
                fill(tree, law, pre, w)
    return law


def fill(tree, law, pre, w):
    if len(pre) == tree.k + 1:
        law[pre] += w
        return
    for z, pz in enumerate(tree.P[pre].tolist()):
        if pz > 0:
            fill(tree, law, pre + (z,), w * pz)


def target_law(tree):
    law = torch.zeros((tree.V,) * (tree.k + 1), dtype=torch.float64)
    fill(tree, law, (), 1.0)
    return law


# --- the paper's toy ---------------------------------------------------------------------------------
def test_paper_toy_token_rule_10_9_block_11_9():
    toy = flat(TOY_P, TOY_Q, k=2)
    token, block = expected_accepted(toy, token_outcomes), expected_accepted(toy, block_outcomes)
    assert Fraction(token).limit_denominator(100) == Fraction(10, 9) and abs(token - 10 / 9) < 1e-12
    assert Fraction(block).limit_denominator(100) == Fraction(11, 9) and abs(block - 11 / 9) < 1e-12
    assert abs(expected_accepted(toy, lambda p, q, x: block_outcomes(p, q, x, naive=True)) - block) > 1e-3


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [2, 3])
def test_block_never_below_the_token_rule(seed, k):
    tree = Tree(3, k, seed=seed)
    token, block = expected_accepted(tree, token_outcomes), expected_accepted(tree, block_outcomes)
    assert block >= token - 1e-12
    history_free = flat(tree.P[()], tree.Q[()], k)
    assert expected_accepted(history_free, block_outcomes) >= expected_accepted(history_free, token_outcomes) - 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_block_gains_on_some_pair(seed):
    # a strict gain exists: the claim above is not vacuous
    tree = Tree(3, 2, seed=seed)
    assert expected_accepted(tree, block_outcomes) > expected_accepted(tree, token_outcomes) + 1e-4


@pytest.mark.parametrize("seed", range(4))
def test_k1_is_the_token_rule(seed):
    tree = Tree(4, 1, seed=seed)
    for x, _ in tree.drafts():
        assert (block_outcomes(*tree.rows(x), x) - token_outcomes(*tree.rows(x), x)).abs().max().item() < 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_one_hot_drafts_are_the_token_rule(seed):
    tree = Tree(3, 3, seed=seed, one_hot=True)
    (x, m), = tree.drafts()  # one draft block, with mass 1
    assert m == 1.0
    assert (block_outcomes(*tree.rows(x), x) - token_outcomes(*tree.rows(x), x)).abs().max().item() < 1e-12
    # a sampled draft differs, so the comparison can fail
    sampled = Tree(3, 3, seed=seed)
    assert max((block_outcomes(*sampled.rows(x), x) - token_outcomes(*sampled.rows(x), x)).abs().max().item()
               for x, _ in sampled.drafts()) > 1e-3


# --- the output law is the target's ------------------------------------------------------------------
@pytest.mark.parametrize("seed, V, k", [(0, 3, 1), (1, 3, 2), (2, 3, 3), (3, 2, 4), (4, 4, 2)])
def test_output_law_is_exact(seed, V, k):
    tree = Tree(V, k, seed=seed)
    want = target_law(tree)
    assert (output_law(tree, block_outcomes) - want).abs().max().item() < 1e-12
    assert (output_law(tree, token_outcomes) - want).abs().max().item() < 1e-12
    if k >= 2:  # the naive port is not: the enumeration can fail
        naive = output_law(tree, lambda p, q, x: block_outcomes(p, q, x, naive=True))
        assert 0.5 * (naive - want).abs().sum().item() > 1e-3


def test_tau_law_is_the_last_passing_row():
    h = torch.tensor([[0.5, 0.25, 0.8], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    law = tau_law(h)
    want0 = [0.5 * 0.75 * 0.2, 0.5 * 0.75 * 0.2, 0.25 * 0.2, 0.8]  # h_0 = 1: P(tau = i) = h_i prod_{j > i} (1 - h_j)
    assert torch.allclose(law[0], torch.tensor(want0, dtype=torch.float64), atol=1e-15)
    assert law[1].tolist() == [1.0, 0.0, 0.0, 0.0] and law[2].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert (law.sum(-1) - 1).abs().max().item() < 1e-15
    with pytest.raises(ValueError, match="h must hold probabilities"):
        tau_law(torch.tensor([1.5], dtype=torch.float64))


def test_weights_broadcast_and_validate():
    tree = Tree(3, 2, seed=9)
    xs = torch.tensor([x for x, _ in tree.drafts()])  # (9, 2)
    p_rows, q_rows = tree.rows((0, 0))
    w = block_weights(p_rows, q_rows, xs)  # one pair of rows broadcast over nine blocks
    assert w.p.shape == (9, 3) and w.h.shape == (9, 2) and (w.p[:, 0] == 1).all()
    one = block_weights(p_rows, q_rows, xs[4])
    assert torch.equal(w.h[4], one.h) and torch.equal(w.p[4], one.p)
    with pytest.raises(ValueError, match="p_rows must hold k\\+1 rows"):
        block_weights(p_rows[:2], q_rows, xs)
    with pytest.raises(TypeError, match="proposals must be an integer tensor of token ids, got torch.float64"):
        block_weights(p_rows, q_rows, xs.double())
    with pytest.raises(ValueError, match="eta must hold one uniform per row of the block, shape \\(..., 2\\)"):
        block_tau(w, torch.rand(9, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="proposals must be \\(n, k\\)"):
        verify_batch_block(p_rows, q_rows, xs[4])
    with pytest.raises(ValueError, match="p must have a last axis of k\\+1 running weights"):
        product_tau_law(torch.tensor(1.0, dtype=torch.float64))
    with pytest.raises(ValueError, match="tau must count accepted drafts in \\[0, 2\\]"):
        block_residual(p_rows, q_rows, one, torch.tensor(3))


# --- the sampler -------------------------------------------------------------------------------------
N = 200_000


def sampled_law(tree, n, seed, naive=False):
    """Empirical law (V,) * (k+1): n blocks drafted from the tree, verified by verify_batch_block, then filled."""
    g = torch.Generator().manual_seed(seed)
    V, k = tree.V, tree.k
    # rows by prefix length, in itertools.product order: the prefix x_1..x_i sits at code sum_j x_j V^(i-j)
    P = [torch.stack([tree.P[pre] for pre in itertools.product(range(V), repeat=i)]) for i in range(k + 1)]
    Q = [torch.stack([tree.Q[pre] for pre in itertools.product(range(V), repeat=i)]) for i in range(k)]
    props, code = torch.zeros(n, k, dtype=torch.long), torch.zeros(n, k + 1, dtype=torch.long)
    for i in range(k):  # draft position by position from the draft's row after the prefix
        props[:, i] = sample_rows(Q[i][code[:, i]], g)
        code[:, i + 1] = code[:, i] * V + props[:, i]
    p_rows = torch.stack([P[i][code[:, i]] for i in range(k + 1)], 1)  # (n, k+1, V)
    q_rows = torch.stack([Q[i][code[:, i]] for i in range(k)], 1)  # (n, k, V)
    accepted, nxt = verify_batch_block(p_rows, q_rows, props, g, naive=naive)
    out = torch.cat([props, torch.zeros(n, 1, dtype=torch.long)], 1).scatter(1, accepted[:, None], nxt[:, None])
    at = torch.zeros(n, dtype=torch.long)
    for i in range(1, k + 1):  # fill the slots after the committed ones from the target's rows
        at = at * V + out[:, i - 1]
        out[:, i] = torch.where(accepted + 1 <= i, sample_rows(P[i][at], g), out[:, i])
    flat_index = (out * V ** torch.arange(k, -1, -1)).sum(-1)
    return torch.bincount(flat_index, minlength=V ** (k + 1)).double().reshape((V,) * (k + 1)) / n


@pytest.mark.stat
def test_sampler_matches_the_exact_law_and_the_naive_port_fails():
    tree = Tree(3, 2, seed=11, sharp=2.0)
    want = target_law(tree)
    assert (output_law(tree, block_outcomes) - want).abs().max().item() < 1e-12
    # tv_bound: P(TV of N exact samples > bound) < 1e-6 (Jensen + McDiarmid, specdec_lib.noise); 27 cells, N = 2e5
    bound = tv_bound(want, N)
    assert 0.5 * (sampled_law(tree, N, seed=1) - want).abs().sum().item() < bound
    # negative control: the naive port's exact TV is far above the bound, and its samples fail the same test
    naive_law = output_law(tree, lambda p, q, x: block_outcomes(p, q, x, naive=True))
    assert 0.5 * (naive_law - want).abs().sum().item() > 2 * bound
    assert 0.5 * (sampled_law(tree, N, seed=1, naive=True) - want).abs().sum().item() > bound


def test_draw_order_is_verify_batch_at_k1():
    # at k = 1 the rules coincide, and both read eta (n, k) then one residual uniform per row: same draws
    g = torch.Generator().manual_seed(3)
    n = 5000
    p_rows, q_rows = softmax_rows(g, (n, 2, 4)), softmax_rows(g, (n, 1, 4))
    props = sample_rows(q_rows[:, 0], g)[:, None]
    token = Vf.verify_batch(p_rows, q_rows, props, torch.Generator().manual_seed(7))
    block = verify_batch_block(p_rows, q_rows, props, torch.Generator().manual_seed(7))
    assert torch.equal(token[0], block[0]) and torch.equal(token[1], block[1])
    assert 0 < token[0].double().mean().item() < 1  # both outcomes occur


def test_verify_blocks_method():
    g = torch.Generator().manual_seed(4)
    p_rows, q_rows = softmax_rows(g, (50, 3, 4)).float(), softmax_rows(g, (50, 2, 4)).float()
    props = torch.stack([sample_rows(q_rows[:, j], g) for j in range(2)], 1)
    out = Vf.verify_blocks(p_rows, q_rows, props, torch.Generator().manual_seed(1), method="block")
    tau, nxt = verify_batch_block(p_rows, q_rows, props, torch.Generator().manual_seed(1))
    assert torch.equal(out.accepted, tau) and torch.equal(out.tokens, Vf.commit_tokens(props, tau, nxt))
    one = Vf.verify_block(p_rows[0], q_rows[0], props[0], torch.Generator().manual_seed(1), method="block")
    assert one.accepted == int(tau[0]) and one.tokens.tolist() == out.tokens[0, :one.accepted + 1].tolist()
    default = Vf.verify_blocks(p_rows, q_rows, props, torch.Generator().manual_seed(1))
    token = Vf.verify_blocks(p_rows, q_rows, props, torch.Generator().manual_seed(1), method="token")
    assert torch.equal(default.tokens, token.tokens) and Vf.METHODS == ("token", "block")
    with pytest.raises(ValueError, match="method must be one of 'token', 'block'; got 'blok'"):
        Vf.verify_blocks(p_rows, q_rows, props, method="blok")


# --- the naive port's test: the running product of the uniforms against p_i ----------------------------
def test_product_tau_law_by_hand_at_k2():
    # k = 2 by hand (R's derivation): P(tau = 2) = p_2 (1 - ln p_2); P(tau = 1) = p_1 - min(p_1, p_2) - p_2 ln(p_1/p_2)
    # when p_1 > p_2 (else p_1 - p_1); P(tau = 0) the rest
    for p1, p2 in ((0.5, 0.2), (0.3, 0.9), (1.0, 0.4), (0.25, 0.25)):
        law = product_tau_law(torch.tensor([1.0, p1, p2], dtype=torch.float64))
        two = p2 * (1 - math.log(p2))
        one = p1 - min(p1, p2) - (p2 * math.log(p1 / p2) if p1 > p2 else 0.0)
        assert law.tolist() == pytest.approx([1 - one - two, one, two], abs=1e-15)


def test_naive_hazards_reproduce_the_law():
    g = torch.Generator().manual_seed(5)
    p = torch.cat([torch.ones(50, 1, dtype=torch.float64), torch.rand(50, 5, generator=g, dtype=torch.float64)], -1)
    p[:5, 3:] = 0.0  # rows that can never pass
    p[5:10, 2] = 1.0  # a row that always passes
    law = product_tau_law(p)
    assert (law.sum(-1) - 1).abs().max().item() < 1e-12 and (law[5:10, :2] == 0).all()
    w = BlockWeights(p=p, h=torch.zeros(50, 5))
    hazard = torch.where(law.cumsum(-1)[:, 1:] > 0, law[:, 1:] / law.cumsum(-1)[:, 1:], 1.0)
    assert (tau_law(hazard) - law).abs().max().item() < 1e-12
    assert block_tau(w, torch.full((50, 5), 0.5, dtype=torch.float64), naive=True).shape == (50,)


def test_paper_toy_naive_port_numbers():
    # R's exact recomputation (research_block.md, an independent numpy script): E[tau] of the shipped port on the
    # toy is 1.6414 at k = 2, 2.6836 at k = 3, 3.7367 at k = 4 (block: 11/9, 15/9, 166/81)
    for k, want in ((2, 1.6414), (3, 2.6836), (4, 3.7367)):
        toy = flat(TOY_P, TOY_Q, k)
        assert abs(expected_accepted(toy, lambda p, q, x: block_outcomes(p, q, x, naive=True)) - want) < 1e-4


@pytest.mark.stat
def test_naive_sampler_follows_its_law():
    # the port's coins (running products) against tau_law(h) of its hazards; n draws of tau over k + 1 = 5 values
    n, g = 200_000, torch.Generator().manual_seed(6)
    p = torch.tensor([1.0, 0.6, 0.3, 0.8, 0.2], dtype=torch.float64)
    law = product_tau_law(p)
    tau = block_tau(BlockWeights(p=p.expand(n, 5), h=torch.zeros(n, 4)),
                    torch.rand(n, 4, dtype=torch.float64, generator=g), naive=True)
    freq = torch.bincount(tau, minlength=5).double() / n
    # tv_bound: P(TV of n exact samples > bound) < 1e-6 (specdec_lib.noise)
    assert 0.5 * (freq - law).abs().sum().item() < tv_bound(law, n)
    # negative control: independent coins with h_i = p_i (the first reading of the port) is another law
    coins = tau_law(p[1:])
    assert 0.5 * (freq - coins).abs().sum().item() > tv_bound(coins, n)
