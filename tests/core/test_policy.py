"""Sampling policies: the post's temperature table, greedy as T = 0, top-k and top-p, and their validation."""
import pytest
import torch

from specdec_lib.policy import apply_policy, greedy_token, policy_table
from specdec_lib.sampling import overlap

PAIRS = {
    "same argmax": (torch.tensor([4.0, 2.0, 1.0, 0.5]), torch.tensor([4.0, 0.5, 1.0, 2.0])),
    "different argmax": (torch.tensor([4.0, 3.6, 1.0, 0.5]), torch.tensor([3.6, 4.0, 1.0, 0.5])),
}
TEMPS = [0.1, 0.3, 0.7, 1.0, 2.0, 5.0, 20.0]
POST_TABLE = {  # the post's overlap table, 3 decimals
    "same argmax": [1.000, 0.999, 0.953, 0.913, 0.890, 0.936, 0.982],
    "different argmax": [0.036, 0.417, 0.725, 0.812, 0.918, 0.974, 0.995],
}


@pytest.mark.parametrize("name", list(PAIRS))
def test_temperature_table_matches_post(name):
    lp, lq = PAIRS[name]
    got = [round(overlap(apply_policy(lp, temperature=t), apply_policy(lq, temperature=t)), 3) for t in TEMPS]
    assert got == POST_TABLE[name]


def test_u_shape_and_monotone_rise():
    lp, lq = PAIRS["same argmax"]
    same = [overlap(apply_policy(lp, temperature=t), apply_policy(lq, temperature=t)) for t in TEMPS]
    assert min(same) < same[0] and min(same) < same[-1]  # U-shaped
    lp, lq = PAIRS["different argmax"]
    diff = [overlap(apply_policy(lp, temperature=t), apply_policy(lq, temperature=t)) for t in TEMPS]
    assert all(a < b for a, b in zip(diff, diff[1:]))  # rises monotonically


def test_temperature_one_is_softmax():
    x = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    assert torch.allclose(apply_policy(x), torch.softmax(x, -1))


def test_greedy_is_one_hot_argmax_first_tie():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [5.0, 1.0, 1.0, 1.0]])
    out = apply_policy(x, temperature=0.0)
    assert torch.equal(out, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
    assert torch.equal(greedy_token(out), torch.tensor([1, 0]))


def test_tiny_temperature_is_finite_and_near_greedy():
    x = torch.tensor([4.0, 3.9, -2.0, float("-inf")])
    for t in (1e-3, 1e-20, 1e-45):
        out = apply_policy(x, temperature=t)
        assert torch.isfinite(out).all() and out[0].item() == pytest.approx(1.0, abs=1e-12)
    assert apply_policy(x)[3].item() == 0.0  # -inf logits are banned tokens


def test_top_k_keeps_k_largest():
    x = torch.tensor([0.1, 2.0, 1.0, 3.0, -1.0])
    out = apply_policy(x, top_k=2)
    assert torch.equal(out > 0, torch.tensor([False, True, False, True, False]))
    assert torch.allclose(out[[1, 3]], torch.softmax(torch.tensor([2.0, 3.0]), 0))
    assert torch.allclose(apply_policy(x, top_k=10), torch.softmax(x, 0))


def test_top_p_smallest_prefix_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    x = probs.log()
    assert torch.equal(apply_policy(x, top_p=0.5) > 0, torch.tensor([True, False, False, False]))
    assert torch.equal(apply_policy(x, top_p=0.6) > 0, torch.tensor([True, True, False, False]))
    assert torch.equal(apply_policy(x, top_p=0.81) > 0, torch.tensor([True, True, True, False]))
    assert torch.allclose(apply_policy(x, top_p=1.0), probs)
    assert torch.allclose(apply_policy(x, top_p=0.6), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    batched = apply_policy(torch.stack([x, x.flip(0)]), top_p=0.6)
    assert torch.allclose(batched[1], torch.tensor([0.0, 0.0, 0.375, 0.625]))


def test_order_temperature_then_top_k_then_top_p():
    x = torch.tensor([2.0, 1.0, 0.0, -1.0])
    out = apply_policy(x, temperature=0.5, top_k=3, top_p=0.9)
    ref = torch.softmax(torch.tensor([2.0, 1.0, 0.0]) / 0.5, 0)
    keep = (ref.cumsum(0) - ref) < 0.9
    ref = torch.where(keep, ref, torch.zeros_like(ref))
    ref = ref / ref.sum()
    assert torch.allclose(out[:3], ref) and out[3] == 0


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(temperature=-0.1), ValueError, "temperature must lie in"),
    (dict(temperature=float("nan")), ValueError, "temperature must not be NaN"),
    (dict(top_k=0), ValueError, "top_k must be >= 1"),
    (dict(top_k=2.5), TypeError, "top_k must be an integer"),
    (dict(top_p=0.0), ValueError, r"top_p must lie in \(0, 1\]"),
    (dict(top_p=1.5), ValueError, r"top_p must lie in \(0, 1\]"),
    (dict(top_p=-0.2), ValueError, "top_p"),
])
def test_policy_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        apply_policy(torch.tensor([1.0, 2.0]), **kwargs)


def test_logits_validation():
    with pytest.raises(ValueError, match="logits must not contain NaN"):
        apply_policy(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="at least one token"):
        apply_policy(torch.tensor([float("-inf"), float("-inf")]))
    with pytest.raises(TypeError, match="logits must be a torch.Tensor"):
        apply_policy([1.0, 2.0])


def test_greedy_token_validation():
    with pytest.raises(TypeError, match="p_rows must be a torch.Tensor, got list"):
        greedy_token([1, 2])
    with pytest.raises(TypeError, match="p_rows must be a floating-point tensor"):
        greedy_token(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="p_rows must have a non-empty last axis"):
        greedy_token(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="p_rows must not contain NaN"):
        greedy_token(torch.tensor([0.5, float("nan")]))
    assert torch.equal(greedy_token(torch.tensor([0.2, 0.5, 0.3])), torch.tensor(1))  # valid input: unchanged
    assert greedy_token(torch.tensor([float("-inf"), 0.0])).item() == 1  # logits with a banned token still work


def test_policy_table_rejects_rows_that_are_not_distributions():
    good = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    assert policy_table(good) is good  # the default policy still returns the table itself
    assert torch.equal(policy_table(good, temperature=0.5), apply_policy(good.double().log(), temperature=0.5))
    assert policy_table(good + torch.tensor([5e-5, 0.0, 0.0])) is not None  # inside SUM_TOL = 1e-4: accepted
    bad = torch.tensor([[0.6, 0.6], [0.5, 0.5]])  # row 0 sums to 1.2
    for policy in ({}, {"temperature": 0.5}, {"top_k": 1}):
        with pytest.raises(ValueError, match=r"table must sum to 1 along its last axis \(within 0.0001\); off by 0.2"):
            policy_table(bad, **policy)
    with pytest.raises(ValueError, match="table must sum to 1"):
        policy_table(good + torch.tensor([2e-4, 0.0, 0.0]))  # just outside SUM_TOL
    with pytest.raises(ValueError, match="table must be non-negative"):
        policy_table(torch.tensor([[1.2, -0.2]]))
    with pytest.raises(TypeError, match="table must be a torch.Tensor, got list"):
        policy_table([[0.5, 0.5]])


def test_min_p_off_is_the_identity_and_a_hand_computed_row():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64))
    plain = apply_policy(logits)
    for off in (None, 0, 0.0):
        assert torch.equal(apply_policy(logits, min_p=off), plain)
    # min_p = 0.2: keep p >= 0.2 * 0.5 = 0.1, renormalise the kept 0.95
    want = torch.tensor([0.5, 0.3, 0.15, 0.0], dtype=torch.float64) / 0.95
    assert torch.allclose(apply_policy(logits, min_p=0.2), want, atol=1e-12)
    table = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    assert torch.allclose(policy_table(table, min_p=0.2)[0], want, atol=1e-12)
    assert torch.equal(policy_table(table, min_p=0.0), table)


def test_min_p_runs_before_top_p_as_in_vllm():
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    got = apply_policy(torch.log(p), min_p=0.3, top_p=0.75)
    # min_p first drops 0.1 (< 0.3 * 0.4); renormalised, 0.4 + 0.3 already reach 0.75, so top_p keeps two
    assert torch.allclose(got, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0], dtype=torch.float64), atol=1e-12)
    # the other order (top_p first keeps three, min_p then keeps them all) gives another row
    other = torch.tensor([4 / 9, 3 / 9, 2 / 9, 0.0], dtype=torch.float64)
    assert not torch.allclose(got, other, atol=1e-6)


def test_min_p_validation_and_keyword_only_configuration():
    logits = torch.tensor([1.0, 0.0])
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="min_p"):
            apply_policy(logits, min_p=bad)
    with pytest.raises(TypeError):
        apply_policy(logits, 0.5)  # temperature is keyword-only
    with pytest.raises(TypeError):
        policy_table(torch.tensor([[0.5, 0.5]]), 0.5)
