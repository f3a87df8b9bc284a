"""Lab: the acceptance test of one block on the decode loop's hot path, by the core's one-block verifiers.

A decode loop verifies one block and needs the accepted count on the host (to crop the caches). verify_block_logits
computes the policy's rows from the target's logits once and hands them to the core: verify_one (the token
rule, Act II), verify_one_block (block verification, Act VI) or greedy_one (a greedy target under either
method: it keeps exactly the argmax-matching prefix). The core's one-block verifiers read their outcome to the
host in one transfer and build only the rows they need; they draw what verify_batch and verify_batch_block draw,
draw for draw.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_generator, check_tensor
from ..block_verification import verify_one_block
from ..verification import greedy_one, verify_one
from .steps import check_policy, check_verifier, policy_probs

__all__ = ["Acceptance", "verify_block_logits"]


@dataclass(frozen=True)
class Acceptance:
    """One block's test: `accepted` proposals kept (A), then `next_token` (0-d), the correction or the bonus."""

    accepted: int
    next_token: torch.Tensor


def verify_block_logits(p_logits: torch.Tensor, proposals: torch.Tensor, q_rows: torch.Tensor | None, *,
                 temperature: float, top_k, generator, one_hot: bool = False, method: str = "token") -> Acceptance:
    """Acceptance(A, the token after the A accepted proposals, 0-d) for target logits (k+1, V) and proposals (k,).

    Greedy (temperature 0) keeps proposals while they equal the target's argmax; otherwise q_rows (k, V) are
    the rows that drew the proposals, and one_hot=True says each is one-hot at its proposal (q is then built
    from the proposals, so q_rows may be None). method is "token" (the token rule) or "block" (block
    verification). Types, shapes, the policy and the method are checked; the values are not (that would cost a
    device sync per block).
    """
    temperature, top_k = check_policy(temperature, top_k)
    method = check_verifier(method, "method")
    k = _check_block(p_logits, proposals, q_rows, needs_q=temperature != 0.0 and not one_hot)
    check_generator(generator)
    if temperature == 0.0:  # a greedy target: block verification keeps the same prefix, so one rule serves both
        return Acceptance(*greedy_one(p_logits, proposals))
    p_rows = policy_probs(p_logits, temperature, top_k)  # (k+1, V)
    if one_hot:  # q is 1 at each proposal
        q_rows = torch.zeros_like(p_rows[:k]).scatter_(1, proposals[:, None], 1.0)  # (k, V)
    verify = verify_one_block if method == "block" else verify_one
    return Acceptance(*verify(p_rows, q_rows, proposals, generator))


def _check_block(p_logits, proposals, q_rows, *, needs_q: bool) -> int:
    """k, after checking p_logits is (k+1, V) floating, proposals (k,) integer and, when needed, q_rows (k, V)."""
    p_logits = check_tensor("p_logits", p_logits)
    if p_logits.dim() != 2 or p_logits.shape[0] == 0 or p_logits.shape[1] == 0:
        raise ValueError(f"p_logits must be (k+1, V) with V >= 1, got shape {tuple(p_logits.shape)}")
    if not isinstance(proposals, torch.Tensor) or proposals.is_floating_point() or proposals.dtype == torch.bool:
        got = f"dtype {proposals.dtype}" if isinstance(proposals, torch.Tensor) else type(proposals).__name__
        raise TypeError(f"proposals must be an integer tensor of token ids, got {got}")
    k = p_logits.shape[0] - 1
    if proposals.shape != (k,):
        raise ValueError(f"proposals must be (k,) with k + 1 = {k + 1} rows of p_logits, got shape "
                         f"{tuple(proposals.shape)}")
    if needs_q:
        if q_rows is None:
            raise ValueError("q_rows (k, V), the draft rows that drew the proposals, is required unless "
                             "temperature == 0 or one_hot=True; got None")
        q_rows = check_tensor("q_rows", q_rows)
        if q_rows.shape != (k, p_logits.shape[1]):
            raise ValueError(f"q_rows must be (k, V) = {(k, p_logits.shape[1])} to match p_logits, got shape "
                             f"{tuple(q_rows.shape)}")
    return k
