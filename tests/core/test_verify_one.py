"""The one-block verifiers read on the host (verify_one, verify_one_block, greedy_one) are the batched ones at n = 1,
draw for draw, on hard blocks: zeros in q, a draft equal to the target, Z_i = 0 at p_i = 1, a proposal the draft
gives no mass (the ratio's inf), one-hot drafts, top-1 targets (p_i drops to 0)."""
import pytest
import torch

from specdec_lib.block_verification import (
    block_weights,
    pass_chances,
    running_weights,
    verify_batch_block,
    verify_one_block,
)
from specdec_lib.lab.steps import policy_probs
from specdec_lib.verification import greedy_batch, greedy_one, verify_batch, verify_one

KINDS = ["soft", "zeros", "equal", "over", "no_mass", "one_hot"]
POLICIES = [(1.0, None), (0.7, 3), (1.5, None), (1.0, 1)]  # top_k = 1: P_i(X_i) is 0 or 1


def _hard_case(g, trial, k, V, kind, p):
    """(q (k, V), proposals (k,)) of one kind: a soft draft, one with zeros, the target's rows but the last, the
    target's rows with one scaled by 1.5 (Z_i = 0 at p_i = 1, so h_i's 0/0 and an all-zero residual decide: no
    normalised draft gets there), one that gives a proposal no mass (the ratio's inf), or a one-hot draft."""
    q = torch.softmax(torch.randn(k, V, generator=g) * 2, -1).double()  # (k, V)
    if kind == "zeros":
        q = policy_probs(torch.randn(k, V, generator=g) * 2, 1.0, 2).double()  # two tokens a row
    if kind == "equal":
        q = torch.cat([p[:k - 1], q[-1:]])
    if kind == "over":
        q = p[:k].clone()
        q[trial % k] *= 1.5
    proposals = torch.multinomial(q.float(), 1, generator=g)[:, 0]  # (k,)
    if kind == "no_mass":
        q[trial % k, proposals[trial % k]] = 0.0
    if kind == "one_hot":
        q = torch.zeros(k, V, dtype=torch.float64).scatter_(1, proposals[:, None], 1.0)
    return q, proposals


def _blocks(seed, count):
    """(trial, kind, p (k+1, V), q (k, V), proposals (k,)): k = 1..8, V in 6, 32, 256, four policies, six kinds."""
    g = torch.Generator().manual_seed(seed)
    for trial in range(count):
        k, V = 1 + trial % 8, (6, 32, 256)[trial % 3]
        (temperature, top_k), kind = POLICIES[trial // 8 % 4], KINDS[trial // 32 % 6]
        logits = torch.randn(k + 1, V, generator=g) * (4.0 if trial % 2 else 1.0)  # (k+1, V)
        p = policy_probs(logits, temperature, top_k).double()  # (k+1, V)
        q, proposals = _hard_case(g, trial, k, V, kind, p)
        yield trial, kind, p, q, proposals


def _same_draws(one, batch, p, q, proposals, trial):
    """(accepted, next) of the one-block call equal the batch's row 0, and both used the same number of draws."""
    g1, g2 = torch.Generator().manual_seed(trial), torch.Generator().manual_seed(trial)
    a, nxt = one(p, q, proposals, g1)
    acc, ref = batch(p[None], q[None], proposals[None], g2)
    assert isinstance(a, int) and nxt.dim() == 0
    assert (a, int(nxt)) == (int(acc[0]), int(ref[0])), trial
    assert torch.rand(1, generator=g1) == torch.rand(1, generator=g2)  # the same number of draws
    return a


@pytest.mark.heavy
def test_verify_one_block_draws_what_verify_batch_block_draws_on_hard_blocks():
    seen, other_state = set(), 0
    for trial, kind, p, q, proposals in _blocks(9, 960):
        k = proposals.shape[0]
        a = _same_draws(verify_one_block, verify_batch_block, p, q, proposals, trial)
        seen.add((kind, "none" if a == 0 else "all" if a == k else "some"))
        acc, ref = verify_batch_block(p[None], q[None], proposals[None], torch.Generator().manual_seed(trial + 1))
        other_state += (a, int(verify_one_block(p, q, proposals, torch.Generator().manual_seed(trial))[1])) != \
            (int(acc[0]), int(ref[0]))
    # every kind stops before its first row, in the middle and after the last (one-hot: a full block is rare)
    assert seen >= {(kind, where) for kind in KINDS for where in ("none", "some", "all")} - {("one_hot", "all")}
    assert other_state > 200  # negative control: another generator state draws other outcomes (not a constant)


@pytest.mark.heavy
def test_verify_one_draws_what_verify_batch_draws_on_hard_blocks():
    seen = set()
    for trial, kind, p, q, proposals in _blocks(10, 480):
        if kind == "no_mass":  # the token rule needs q(x) > 0 (the checked verify_block refuses it)
            continue
        k = proposals.shape[0]
        a = _same_draws(verify_one, verify_batch, p, q, proposals, trial)
        seen.add("none" if a == 0 else "all" if a == k else "some")
    assert seen == {"none", "some", "all"}


def test_greedy_one_is_greedy_batch():
    g = torch.Generator().manual_seed(3)
    seen = set()
    for trial in range(200):
        k = 1 + trial % 6
        logits = torch.randn(k + 1, 3, generator=g)  # (k+1, 3): small V, so proposals often match
        proposals = torch.randint(0, 3, (k,), generator=g)
        a, nxt = greedy_one(logits, proposals)
        acc, ref = greedy_batch(logits[None], proposals[None])
        assert (a, int(nxt)) == (int(acc[0]), int(ref[0]))
        seen.add(a)
    assert len(seen) >= 4  # rejections at several positions, and full blocks


def test_block_weights_is_running_weights_then_pass_chances():
    """The pieces by hand on one block: p_i = min(1, p_{i-1} r_i) and h_i = Z_i / (Z_i + 1 - p_i), h_k = p_k."""
    p_rows = torch.tensor([[0.25, 0.25, 0.5], [0.3125, 0.3125, 0.375], [0.125, 0.125, 0.75]], dtype=torch.float64)
    q_rows = torch.tensor([[0.5, 0.25, 0.25], [0.0625, 0.4375, 0.5]], dtype=torch.float64)
    x = torch.tensor([0, 2])  # ratios 0.25 / 0.5 and 0.375 / 0.5: binary fractions, so every step is exact
    p = running_weights(p_rows[:2].gather(1, x[:, None])[:, 0], q_rows.gather(1, x[:, None])[:, 0])
    assert p.tolist() == [1.0, 0.5, 0.375]
    z_1 = (0.5 * p_rows[1] - q_rows[1]).clamp(min=0).sum()  # 0.15625 - 0.0625 = 0.09375, the other two owe nothing
    assert z_1 == 0.09375
    h = pass_chances(z_1[None], p)
    assert torch.allclose(h, torch.tensor([0.09375 / (0.09375 + 0.5), 0.375], dtype=torch.float64), atol=1e-15)
    w = block_weights(p_rows, q_rows, x)
    assert torch.equal(w.p, p) and torch.equal(w.h, h)
    assert running_weights(torch.tensor([0.0, 0.5]), torch.tensor([0.5, 0.0])).tolist() == [1.0, 0.0, 0.0]  # stays 0
    assert running_weights(torch.tensor([0.2, 0.5]), torch.tensor([0.4, 0.0])).tolist() == [1.0, 0.5, 1.0]  # inf: 1
