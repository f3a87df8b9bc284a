"""Lab: the acceptance test of one block on the decode loop's hot path, the same arithmetic as verify_batch.

specdec_lib.verification.verify_batch is written for n blocks at once on the device; a decode loop verifies
one block and needs the accepted count on the host anyway (to crop the caches). accept_block takes the
target's logits, computes the policy's rows once, tests the k proposals in one vectorised comparison, reads
the outcomes to the host in one transfer, and builds the residual of the one row it needs (verify_batch
builds a padded q for all rows). It draws the same uniforms in the same order, so for the same generator
state it returns the same tokens as greedy_batch or verify_batch (tests/lab/test_drafters.py checks both, draw
for draw). method="block" is block verification (Sun et al., ICLR 2025) on the same policy rows, a fast
one-block version of the core's verify_batch_block (specdec_lib/block_verification.py): P_i(X_i), Q_i(X_i) and
the uniforms eta reach the host in one transfer, the running p_i and h_i are Python floats computed by the
core's float64 operations in the core's order (so bit for bit its values), the rows max(p_i P_{i+1} - Q_{i+1}, 0)
are built only if the last row fails and only while p_i > 0 (their sums are Z_i, one of them is the residual);
it draws what verify_batch_block draws, draw for draw (tests/lab/test_drafters.py).
Greedy is the token rule under either method (a greedy target keeps exactly the argmax-matching prefix).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_generator, check_tensor
from ..sampling import accept_ratio, residual_weights, sample_rows
from .steps import check_policy, check_verifier, policy_probs

__all__ = ["Acceptance", "accept_block"]


@dataclass(frozen=True)
class Acceptance:
    """One block's test: `accepted` proposals kept (A), then `next_token` (0-d), the correction or the bonus."""

    accepted: int
    next_token: torch.Tensor


def accept_block(p_logits: torch.Tensor, proposals: torch.Tensor, q_rows: torch.Tensor | None, *,
                 temperature: float, top_k, generator, one_hot: bool = False, method: str = "token") -> Acceptance:
    """Acceptance(A, the token after the A accepted proposals, 0-d) for target logits (k+1, V) and proposals (k,).

    Greedy (temperature 0) keeps proposals while they equal the target's argmax; otherwise q_rows (k, V) are
    the rows that drew the proposals, and one_hot=True says each is one-hot at its proposal (the residual
    is then p with the proposal removed, computed without q). method is "token" (the token rule) or "block"
    (block verification; a one-hot draft's q is built from the proposals). Types, shapes, the policy and the
    method are checked; the values are not (that would cost a device sync per block).
    """
    temperature, top_k = check_policy(temperature, top_k)
    method = check_verifier(method, "method")
    k = _check_block(p_logits, proposals, q_rows, needs_q=temperature != 0.0 and not one_hot)
    check_generator(generator)
    if temperature == 0.0:  # a greedy target: block verification keeps the same prefix, so one rule serves both
        best = p_logits.argmax(-1)  # (k+1,) the target's greedy choice at every slot
        both = torch.cat([best[:k], proposals]).tolist()  # one transfer: argmaxes, then proposals
        a = next((j for j in range(k) if both[j] != both[k + j]), k)
        return Acceptance(a, best[a])
    p_rows = policy_probs(p_logits, temperature, top_k)  # (k+1, V)
    if method == "block" and k > 0:  # k = 0 is the bonus token alone under either rule
        return _block_rule(p_rows, proposals, q_rows, generator, one_hot=one_hot)
    idx = proposals[:, None]  # (k, 1)
    p_x = p_rows[:k].gather(1, idx).T  # (1, k) target prob of each proposal
    q_x = torch.ones_like(p_x) if one_hot else q_rows.gather(1, idx).T  # (1, k) draft prob of each proposal
    u = torch.rand(1, k, dtype=torch.float64, generator=generator, device=p_rows.device)  # (1, k), verify_batch's
    ok = (u < accept_ratio(p_x, q_x).double())[0].tolist()  # k outcomes, one transfer
    a = next((j for j, passed in enumerate(ok) if not passed), k)
    if a == k:
        r = p_rows[k]  # (V,) the bonus row: no draft there, the residual is p itself
    elif one_hot:
        r = p_rows[a].clone()  # (V,) [p - onehot(x)]_+: p with x removed (a rejection needs p(x) < 1)
        r[proposals[a]] = 0.0
    else:
        r = residual_weights(p_rows[a], q_rows[a])  # (V,)
    return Acceptance(a, sample_rows(r, generator))  # 0-d; its own uniform, after the k acceptance ones


def _block_rule(p_rows, proposals, q_rows, generator, *, one_hot: bool) -> Acceptance:
    """Block verification of one block in float64, draw for draw the core's verify_batch_block (n = 1)."""
    p = p_rows.double()  # (k+1, V): the core works in float64
    idx = proposals.long().unsqueeze(1)  # (k, 1)
    if one_hot:  # q is 1 at each proposal: built here, so q_rows may be None
        q = torch.zeros_like(p[:-1]).scatter_(1, idx, 1.0)  # (k, V)
    else:
        q = q_rows.double()  # (k, V)
    k = idx.shape[0]
    eta = torch.rand(1, k, dtype=torch.float64, generator=generator, device=p.device)  # (1, k), the core's
    p_x, q_x, eta = zip(*torch.cat([p.gather(1, idx), q.gather(1, idx), eta.T], 1).tolist())  # one transfer
    weight = _running_weights(p_x, q_x)  # p_0 .. p_k
    if eta[k - 1] < weight[k]:  # the last row passes (h_k = p_k): tau = k, no Z_i needed, the bonus row P_{k+1}
        return Acceptance(k, sample_rows(p[k], generator))  # the core's max(1 P_{k+1} - 0, 0) is P_{k+1} itself
    owed, z = _owed(p, q, weight)  # rows 0 .. m-1; rows m .. k-1 have p_i = 0, so h_i = 0: none passes
    h = _pass_chances(z, weight)  # h_1 .. h_{m-1}
    tau = next((i for i in range(len(h), 0, -1) if eta[i - 1] < h[i - 1]), 0)  # the last passing row, 0 if none
    r = owed[tau] if z[tau] > 0 else p[tau]  # max(p_tau P_{tau+1} - Q_{tau+1}, 0), P_{tau+1} where nothing is owed
    return Acceptance(tau, sample_rows(r, generator))  # 0-d; its own uniform, after eta


def _running_weights(p_x, q_x) -> list[float]:
    """p_0 = 1, p_i = min(1, p_{i-1} P_i(X_i) / Q_i(X_i)): block_weights' float64 steps, in its order, in Python."""
    weight = [1.0]
    for px, qx in zip(p_x, q_x):
        ratio = px / qx if qx > 0 else (math.inf if px > 0 else 0.0)  # a draft that gives X no mass: inf or 0
        prev = weight[-1]
        weight.append(min(prev * ratio, 1.0) if prev > 0 else 0.0)  # once 0, it stays 0 (never 0 * inf)
    return weight


def _owed(p: torch.Tensor, q: torch.Tensor, weight: list[float]) -> tuple[torch.Tensor, list[float]]:
    """The core's residual rows max(p_i P_{i+1} - Q_{i+1}, 0) (m, V) and Z_i, i < m (the first p_i = 0, or k)."""
    m = next((i for i in range(1, q.shape[0]) if weight[i] <= 0), q.shape[0])
    scale = torch.tensor(weight[:m], dtype=torch.float64, device=p.device).unsqueeze(1)  # (m, 1) p_0 .. p_{m-1}
    owed = (scale * p[:m] - q[:m]).clamp(min=0)  # (m, V)
    return owed, owed.sum(-1).tolist()


def _pass_chances(z: list[float], weight: list[float]) -> list[float]:
    """h_i = Z_i / (Z_i + 1 - p_i), 1 at 0/0, for i = 1 .. m-1 from Z_0 .. Z_{m-1}: block_weights' steps."""
    dens = [z_i + (1 - p_i) for z_i, p_i in zip(z[1:], weight[1:])]  # the core's den = z + (1 - p)
    return [min(z_i / den, 1.0) if den > 0 else 1.0 for z_i, den in zip(z[1:], dens)]


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
