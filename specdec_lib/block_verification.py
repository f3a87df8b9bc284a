"""Block verification (Sun et al., ICLR 2025): the k drafts of a block judged together; the last passing row wins.

Notation (one block, rows in float64, leading axes broadcast): P_i = p_rows[..., i-1, :] the target's row at
position i (i = 1 .. k+1), Q_i = q_rows[..., i-1, :] the draft's row that proposed X_i = proposals[..., i-1].

  p_0 = 1,  p_i = min(1, p_{i-1} P_i(X_i) / Q_i(X_i))             how much of the target the prefix X_1..X_i carries
  Z_i = sum_x max(p_i P_{i+1}(x) - Q_{i+1}(x), 0)                  the mass a stop after X_i can still hand out
  h_i = Z_i / (Z_i + 1 - p_i) for i < k (1 if that is 0/0),  h_k = p_k    the chance row i passes
  tau = the largest i with eta_i < h_i (0 if none), eta_i ~ U[0, 1)   keep X_1..X_tau, then draw Y from
  P_{k+1} if tau = k, else max(p_tau P_{tau+1} - Q_{tau+1}, 0) normalised.

The token rule keeps a prefix only while every test passes; block verification lets a later row vouch for the
rows before it, keeps the output law exact for any draft, and accepts at least as much (equal at k = 1 and for
one-hot drafts). The naive port (`naive=True`) is vllm-ascend's kernel (PR #5542 until the fix #7808): it keeps
p_i but never computes h_i: row i passes iff the running product eta_1 ... eta_i <= p_i, the last passing row
wins, and the residual is the ordinary max(P_{tau+1} - Q_{tau+1}, 0). Its h is the backward hazard
P(tau = i) / P(tau <= i) of that test's exact law, so `tau_law(h)` is its law too; it is not exact. As shipped it
only ever saw one-hot drafts read with q = 1 (its callers passed no draft probabilities): give it one-hot q rows.

verify_one_block is the same rule for one block with its outcome read on the host (a decode loop needs the count
there anyway): it builds Z_i only when the last row fails and only while p_i > 0, and draws what
verify_batch_block draws, draw for draw, from the same running_weights, owed_rows and pass_chances.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._checks import check_generator, check_tensor
from .sampling import sample_rows

__all__ = ["BlockWeights", "block_weights", "running_weights", "owed_rows", "pass_chances", "block_residual",
           "tau_law", "product_tau_law", "block_tau", "verify_batch_block", "verify_one_block"]


@dataclass(frozen=True)
class BlockWeights:
    """The running weights p (..., k+1), p_0 = 1, and the chances h (..., k) that rows 1..k pass."""

    p: torch.Tensor
    h: torch.Tensor


def _block_shapes(p_rows, q_rows, proposals) -> int:
    """k, after checking that p_rows (..., k+1, V), q_rows (..., k, V) and proposals (..., k) fit together."""
    p_rows, q_rows = check_tensor("p_rows", p_rows), check_tensor("q_rows", q_rows)
    if not isinstance(proposals, torch.Tensor) or proposals.is_floating_point():
        got = proposals.dtype if isinstance(proposals, torch.Tensor) else type(proposals).__name__
        raise TypeError(f"proposals must be an integer tensor of token ids, got {got}")
    if p_rows.dim() < 2 or q_rows.dim() < 2:
        raise ValueError(f"p_rows and q_rows must have shapes (..., k+1, V) and (..., k, V), "
                         f"got {tuple(p_rows.shape)} and {tuple(q_rows.shape)}")
    k = q_rows.shape[-2]
    if p_rows.shape[-2] != k + 1 or p_rows.shape[-1] != q_rows.shape[-1] or proposals.shape[-1:] != (k,):
        raise ValueError(f"p_rows must hold k+1 rows for the k = {k} rows of q_rows, over the same vocabulary, "
                         f"and proposals one token per q row; got {tuple(p_rows.shape)}, {tuple(q_rows.shape)} "
                         f"and {tuple(proposals.shape)}")
    return k


def _lead(*shapes: torch.Size) -> torch.Size:
    """The broadcast of leading shapes; torch.broadcast_shapes (Python, ~0.1 ms) only where they differ."""
    return shapes[0] if all(shape == shapes[0] for shape in shapes) else torch.broadcast_shapes(*shapes)


def block_weights(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor, *,
                  naive: bool = False) -> BlockWeights:
    """p_i and h_i of one block (or a batch): p_rows (..., k+1, V), q_rows (..., k, V), proposals (..., k)."""
    k = _block_shapes(p_rows, q_rows, proposals)
    lead = _lead(p_rows.shape[:-2], q_rows.shape[:-2], proposals.shape[:-1])
    V = p_rows.shape[-1]
    p_rows, q_rows = p_rows.double().expand(*lead, k + 1, V), q_rows.double().expand(*lead, k, V)
    idx = proposals.long().expand(*lead, k)[..., None]  # (..., k, 1)
    # 1. each draft's probability under the target and under the draft: P_i(X_i), Q_i(X_i); 2-3. the running weights
    p_x = p_rows[..., :k, :].gather(-1, idx).squeeze(-1)  # (..., k)
    p = running_weights(p_x, q_rows.gather(-1, idx).squeeze(-1))  # (..., k+1)
    if naive:  # the wrong port: its test's exact law of tau, as the hazards h_i = P(tau = i) / P(tau <= i)
        law = product_tau_law(p)
        below = law.cumsum(-1)[..., 1:]  # P(tau <= i), i = 1 .. k
        hazard = torch.where(below > 0, law[..., 1:] / torch.where(below > 0, below, 1.0), 1.0)
        return BlockWeights(p=p, h=hazard.clamp(0.0, 1.0))
    # 4. Z_i = sum_x max(p_i P_{i+1}(x) - Q_{i+1}(x), 0) for i = 1 .. k-1; 5. h_i from Z_i and p_i
    z = owed_rows(p[..., 1:k, None], p_rows[..., 1:k, :], q_rows[..., 1:k, :]).sum(-1)  # (..., k-1)
    return BlockWeights(p=p, h=pass_chances(z, p))


def running_weights(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """p_0 = 1, p_i = min(1, p_{i-1} P_i(X_i) / Q_i(X_i)) (..., k+1) from P_i(X_i), Q_i(X_i) (..., k), float64."""
    # the likelihood ratio; a draft q gives no mass: inf if the target gives some, else 0 (0/0)
    ratio = (p_x.double() / q_x.double()).nan_to_num(nan=0.0, posinf=math.inf)  # (..., k)
    # once 0, p stays 0: 0 * inf is NaN, and NaN stays NaN down the row (clamp and products keep it) until it is
    # read as 0 at the end
    running = [torch.ones(ratio.shape[:-1], dtype=torch.float64, device=ratio.device)]  # p_0
    for r in ratio.unbind(-1):
        running.append((running[-1] * r).clamp_(max=1.0))
    return torch.stack(running, -1).nan_to_num_(nan=0.0)  # (..., k+1)


def owed_rows(p_i: torch.Tensor, p_next: torch.Tensor, q_next: torch.Tensor) -> torch.Tensor:
    """max(p_i P_{i+1} - Q_{i+1}, 0) (..., V): what the target still owes after a stop at row i; its sum is Z_i."""
    return (p_i * p_next - q_next).clamp(min=0)


def pass_chances(z: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """h (..., m) from Z_1 .. Z_{m-1} (..., m-1) and p_0 .. p_m (..., m+1): Z_i / (Z_i + 1 - p_i), then h_m = p_m.

    With m = k these are the block's h_1 .. h_k; 1 where the denominator is 0 (Z_i = 0 and p_i = 1: 0/0, NaN)."""
    h_mid = (z / (z + (1 - p[..., 1:-1]))).nan_to_num(nan=1.0).clamp(max=1.0)  # (..., m-1)
    return torch.cat([h_mid, p[..., 1:][..., -1:]], -1)  # k = 0: no rows, h empty


def block_residual(p_rows: torch.Tensor, q_rows: torch.Tensor, weights: BlockWeights, tau: torch.Tensor, *,
                   naive: bool = False) -> torch.Tensor:
    """Unnormalised weights (..., V) of the token after tau (...,) accepted drafts: P_{k+1} if tau = k, else
    max(p_tau P_{tau+1} - Q_{tau+1}, 0) (naive: max(P_{tau+1} - Q_{tau+1}, 0)); P_{tau+1} where that is all 0."""
    p_rows, q_rows = check_tensor("p_rows", p_rows), check_tensor("q_rows", q_rows)
    k = q_rows.shape[-2]
    tau = torch.as_tensor(tau).long()
    if tau.numel() and (int(tau.min()) < 0 or int(tau.max()) > k):
        raise ValueError(f"tau must count accepted drafts in [0, {k}], got values in [{int(tau.min())}, "
                         f"{int(tau.max())}]")
    return _residual(p_rows, q_rows, weights, tau, naive)


def _residual(p_rows, q_rows, weights: BlockWeights, tau: torch.Tensor, naive: bool) -> torch.Tensor:
    """block_residual without its checks (tau in [0, k] by construction: no host sync)."""
    k, V = q_rows.shape[-2], q_rows.shape[-1]
    p_rows, q_rows = p_rows.double(), q_rows.double()
    lead = _lead(p_rows.shape[:-2], q_rows.shape[:-2], tau.shape)
    tau = tau.expand(lead)
    at = tau[..., None, None].expand(*lead, 1, V)  # (..., 1, V) the row index tau, per vocabulary entry
    # 1. the target's row after the accepted prefix, P_{tau+1}, and the draft's, Q_{tau+1} (read only where tau < k)
    p_next = p_rows.expand(*lead, k + 1, V).gather(-2, at).squeeze(-2)  # (..., V)
    q_next = q_rows.expand(*lead, k, V).gather(-2, at.clamp(max=k - 1)).squeeze(-2) if k else p_next  # (..., V)
    # 2. the weight the target keeps there: p_tau (the naive port forgets it: 1)
    scale = 1.0 if naive else weights.p.expand(*lead, k + 1).gather(-1, tau[..., None])  # (..., 1)
    # 3. what the target still owes: max(scale P_{tau+1} - Q_{tau+1}, 0); P_{tau+1} itself after a full block (no
    # draft there) or where nothing is owed
    w = owed_rows(scale, p_next, q_next)
    return torch.where((tau[..., None] < k) & (w.sum(-1, keepdim=True) > 0), w, p_next)


def tau_law(h: torch.Tensor) -> torch.Tensor:
    """P(tau = i) = h_i prod_{j > i} (1 - h_j), h_0 = 1, for i = 0 .. k: shape (..., k+1) from h (..., k)."""
    h = check_tensor("h", h).double()
    if h.dim() < 1:
        raise ValueError(f"h must have a last axis of k pass chances, got shape {tuple(h.shape)}")
    if ((h < 0) | (h > 1)).any():
        raise ValueError("h must hold probabilities in [0, 1]")
    ones = torch.ones(h.shape[:-1] + (1,), dtype=torch.float64, device=h.device)
    # 1. tail[i] = prod_{j > i} (1 - h_j): every later row fails (suffix products, empty product 1 at i = k)
    tail = torch.cat([(1 - h).flip(-1).cumprod(-1).flip(-1), ones], -1)  # (..., k+1)
    # 2. row i passes (row 0 always does) and is the last one that passes
    return torch.cat([ones, h], -1) * tail


def _poly(coef: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """sum_m coef[..., m] x^m by Horner."""
    out = torch.zeros_like(x)
    for m in range(coef.shape[-1] - 1, -1, -1):
        out = out * x + coef[..., m]
    return out


def _integral(coef: torch.Tensor) -> torch.Tensor:
    """Coefficients of the antiderivative that is 0 at 0 (one degree more)."""
    m = torch.arange(1, coef.shape[-1] + 1, dtype=torch.float64, device=coef.device)
    return torch.cat([torch.zeros_like(coef[..., :1]), coef / m], -1)


def product_tau_law(p: torch.Tensor) -> torch.Tensor:
    """P(tau = i) (..., k+1) from p (..., k+1): tau = the largest i with eta_1 ... eta_i <= p_i, eta i.i.d. U[0, 1)."""
    # With S_i = -ln(eta_1 ... eta_i) (a Gamma(i) variable), row i passes iff S_i >= c_i = -ln p_i. No row after t
    # passes iff S_j < b_j for j > t, b_j = min_{l >= j} c_l; given S_t = s that chance is 1 + e^s g_t(s) on
    # s < b_{t+1}, with polynomials g_k = 0, g_{j-1}(s) = -e^{-b_j} + G_j(b_j) - G_j(s) (G_j the antiderivative of
    # g_j), and P(tau = t) = int_{c_t}^{b_{t+1}} s^{t-1} / (t-1)! (e^{-s} + g_t(s)) ds.
    p = check_tensor("p", p).double()
    if p.dim() < 1 or p.shape[-1] < 1:
        raise ValueError(f"p must have a last axis of k+1 running weights p_0 .. p_k, got shape {tuple(p.shape)}")
    k = p.shape[-1] - 1
    c = torch.where(p[..., 1:] > 0, -torch.log(p[..., 1:].clamp(min=1e-300)), torch.inf)  # (..., k)
    b = torch.cat([c.flip(-1).cummin(-1).values.flip(-1), torch.full_like(p[..., :1], torch.inf)], -1)  # b_1..b_k+1
    # 1. the polynomials g_t, from g_k = 0 backwards (0 wherever no later row can pass: b_{t+1} = inf)
    g = [p.new_zeros(p.shape[:-1] + (1,))] * (k + 1)
    for j in range(k, 0, -1):
        G, bj = _integral(g[j]), b[..., j - 1]
        finite = torch.isfinite(bj)
        at = torch.where(finite, bj, 0.0)
        new = -G
        new[..., 0] += torch.where(finite, -torch.exp(-at) + _poly(G, at), 0.0)
        g[j - 1] = torch.where(finite[..., None], new, 0.0)
    # 2. tau = 0: no row passes from S_0 = 0
    law = [torch.where(b[..., 0] > 0, 1 + g[0][..., 0], 0.0)]
    # 3. tau = t: row t passes (S_t >= c_t) and no later one does (S_t < b_{t+1}); Gamma(t) tails in closed form
    for t in range(1, k + 1):
        lo, hi = c[..., t - 1], b[..., t]
        ok, hi_finite = lo < hi, torch.isfinite(hi)
        lo_, hi_ = torch.where(ok, lo, 0.0), torch.where(hi_finite, hi, 0.0)
        tail_lo = torch.exp(-lo_) * sum(lo_ ** m / math.factorial(m) for m in range(t))
        tail_hi = torch.where(hi_finite, torch.exp(-hi_) * sum(hi_ ** m / math.factorial(m) for m in range(t)), 0.0)
        shifted = torch.cat([p.new_zeros(g[t].shape[:-1] + (t - 1,)), g[t]], -1)
        integral = _integral(shifted / math.factorial(t - 1))
        part = tail_lo - tail_hi + torch.where(hi_finite, _poly(integral, hi_) - _poly(integral, lo_), 0.0)
        law.append(torch.where(ok, part, 0.0))
    return torch.stack(law, -1).clamp(min=0.0)


def block_tau(weights: BlockWeights, eta: torch.Tensor, *, naive: bool = False) -> torch.Tensor:
    """tau (...,) from the uniforms eta (..., k): the largest i with eta_i < h_i (naive: eta_1 ... eta_i <= p_i)."""
    k = weights.h.shape[-1]
    eta = check_tensor("eta", eta).double()
    if eta.shape[-1:] != (k,):
        raise ValueError(f"eta must hold one uniform per row of the block, shape (..., {k}); got {tuple(eta.shape)}")
    passed = eta.cumprod(-1) <= weights.p[..., 1:] if naive else eta < weights.h  # (..., k)
    rank = torch.arange(1, k + 1, device=eta.device)  # (k,)
    return torch.where(passed, rank, 0).amax(-1) if k else torch.zeros(eta.shape[:-1], dtype=torch.long,
                                                                          device=eta.device)


def verify_batch_block(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor,
                       generator: torch.Generator | None = None, *,
                       naive: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification of n blocks: (accepted (n,), next token (n,)) for p_rows (n, k+1, V), q_rows (n, k, V)."""
    generator = check_generator(generator)
    p_rows, q_rows = check_tensor("p_rows", p_rows).double(), check_tensor("q_rows", q_rows).double()  # once
    weights = block_weights(p_rows, q_rows, proposals, naive=naive)
    if proposals.dim() != 2:
        raise ValueError(f"proposals must be (n, k), one block a row; got shape {tuple(proposals.shape)}")
    n, k = proposals.shape
    # 1. one uniform per row, drawn as verify_batch draws its acceptance uniforms
    eta = torch.rand(n, k, dtype=torch.float64, generator=generator, device=p_rows.device)  # (n, k)
    # 2. tau = the largest i whose row passes (eta_i < h_i), 0 if none: not the first failure
    tau = block_tau(weights, eta, naive=naive)
    # 3. the token after the kept prefix, from its own uniform
    nxt = sample_rows(_residual(p_rows, q_rows, weights, tau, naive), generator)  # (n,)
    return tau, nxt


def verify_one_block(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor,
                     generator: torch.Generator | None = None) -> tuple[int, torch.Tensor]:
    """verify_batch_block on one block, read on the host: (tau, next token 0-d) for p_rows (k+1, V), q_rows (k, V)."""
    p_rows, q_rows = p_rows.double(), q_rows.double()
    k = proposals.shape[0]
    idx = proposals.long()[:, None]  # (k, 1)
    p = running_weights(p_rows[:k].gather(1, idx)[:, 0], q_rows.gather(1, idx)[:, 0])  # (k+1,) p_0 .. p_k
    eta = torch.rand(k, dtype=torch.float64, generator=generator, device=p_rows.device)  # (k,), the batch's row
    read = torch.cat([p, eta]).tolist()  # one transfer
    weight, eta = read[:k + 1], read[k + 1:]
    if k == 0 or eta[k - 1] < weight[k]:  # the last row passes (h_k = p_k): tau = k, the bonus row, no Z_i needed
        return k, sample_rows(p_rows[k], generator)  # 0-d; its own uniform, after eta
    m = next((i for i in range(1, k) if weight[i] <= 0), k)  # rows m .. k-1 have p_i = 0, so h_i = 0: none passes
    owed = owed_rows(p[:m, None], p_rows[:m], q_rows[:m])  # (m, V) rows 0 .. m-1; row i sums to Z_i
    z = owed.sum(-1)  # (m,)
    read = torch.cat([z, pass_chances(z[1:], p[:m + 1])]).tolist()  # one transfer: Z_0 .. Z_{m-1}, h_1 .. h_m
    z, h = read[:m], read[m:]  # h_m never passes: p_m = 0, or m = k and the last row failed above
    tau = next((i for i in range(m, 0, -1) if eta[i - 1] < h[i - 1]), 0)  # the last passing row, 0 if none
    r = owed[tau] if z[tau] > 0 else p_rows[tau]  # (V,) P_{tau+1} where nothing is owed
    return tau, sample_rows(r, generator)
