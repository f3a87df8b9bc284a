"""Act V, bending the rules: Medusa's threshold and the n-gram lookup every Markov engine shares (what each spec
value means, the k schedule included, is semantics.py's).

typical    Medusa's typical acceptance: keep y when p(y) > min(epsilon, delta exp(-H(p))), H with log(p + 1e-5)
           as in FasterDecoding/Medusa medusa/model/utils.py; the token after the prefix is argmax p (fast=True,
           the default) or a sample of p restricted to p >= the threshold (get_typical_one_token, fast=False)
lookup     prompt lookup with a 1-gram: copy what followed an earlier occurrence of the current token
"""
from __future__ import annotations

import torch

__all__ = ["MEDUSA_EPS", "typical_threshold", "typical_accept", "typical_table", "argmax_table", "ngram_proposals",
           "ngram_proposals_batch"]

MEDUSA_EPS = 1e-5  # Medusa's entropy is -sum p log(p + 1e-5)


def typical_threshold(P: torch.Tensor, *, epsilon: float, delta: float) -> torch.Tensor:
    """min(epsilon, delta exp(-H(p))) for every row of P (..., V) -> (...,), in float64, Medusa's entropy."""
    p = P.double()
    entropy = -(p * torch.log(p + MEDUSA_EPS)).sum(-1)  # (...,)
    return torch.minimum(torch.full_like(entropy, epsilon), delta * torch.exp(-entropy))


def typical_accept(P: torch.Tensor, *, epsilon: float, delta: float) -> torch.Tensor:
    """(V, V) of 0.0 / 1.0: does target row r keep proposal y? p_r(y) > threshold_r, deterministic."""
    t = typical_threshold(P, epsilon=epsilon, delta=delta)  # (V,)
    return (P.double() > t[:, None]).double()


def typical_table(P: torch.Tensor, *, epsilon: float, delta: float) -> torch.Tensor:
    """Rows of P restricted to p >= their threshold and renormalised (Medusa's get_typical_one_token)."""
    p = P.double()
    kept = p * (p >= typical_threshold(p, epsilon=epsilon, delta=delta)[:, None])  # (V, V)
    if (kept.sum(-1) <= 0).any():
        raise ValueError(f"delta = {delta:g} puts the typical threshold above every token of some row; lower delta")
    return kept / kept.sum(-1, keepdim=True)


def argmax_table(P: torch.Tensor) -> torch.Tensor:
    """One-hot rows at each row's argmax (the first one on a tie): greedy target tokens."""
    return torch.nn.functional.one_hot(P.double().argmax(-1), P.shape[-1]).double()


def ngram_proposals(history: list[int], k: int, match: str = "latest") -> list[int]:
    """Up to k tokens that followed the latest (or earliest) earlier occurrence of history[-1]; [] without one."""
    t = len(history) - 1
    hits = [i for i in range(t) if history[i] == history[t]]
    if not hits:
        return []
    i = hits[-1] if match == "latest" else hits[0]
    return history[i + 1:i + 1 + k]


def ngram_proposals_batch(full: torch.Tensor, at: torch.Tensor, k: torch.Tensor, K: int, match: str):
    """ngram_proposals for m histories at once: full (m, W) holds each one in columns 0 .. at (its current token).

    Returns (proposals (K, m), count (m,)): count = min(k, at - i) after a hit at column i, 0 without one;
    slots past count hold the current token (any valid id: they are never read as proposals).
    """
    pos = torch.arange(full.shape[1])  # (W,)
    current = full.gather(1, at[:, None])  # (m, 1)
    hit = (full == current) & (pos < at[:, None])  # (m, W)
    if match == "latest":
        i = torch.where(hit, pos, -1).max(1).values  # (m,)
    else:
        i = torch.where(hit, pos, full.shape[1]).min(1).values
    found = hit.any(1)
    cols = (i[:, None] + 1 + torch.arange(K)).clamp(0, full.shape[1] - 1)  # (m, K)
    count = torch.where(found, torch.minimum(k, at - i), 0)
    props = torch.where(torch.arange(K) < count[:, None], full.gather(1, cols), current)  # (m, K)
    return props.T, count
