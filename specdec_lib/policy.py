"""Sampling policies: temperature, min-p, top-k and top-p change p and q before any acceptance arithmetic runs.

The order is vLLM's: temperature, then min-p (on the softmax at that temperature), then top-k, then top-p.
"""
from __future__ import annotations

import torch

from ._checks import check_distribution, check_int, check_real, check_tensor

__all__ = ["apply_policy", "greedy_token", "policy_table"]


def apply_policy(logits: torch.Tensor, *, temperature: float = 1.0, min_p: float | None = None,
                 top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Probabilities (..., V) after temperature, min-p, top-k, then top-p; temperature 0 is greedy (one-hot argmax).

    min_p keeps the tokens whose probability at that temperature is >= min_p times the largest one (0 or None: off).
    """
    logits = check_tensor("logits", logits)
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last axis (the vocabulary), got shape {tuple(logits.shape)}")
    if torch.isnan(logits).any() or (logits == float("inf")).any():
        raise ValueError("logits must not contain NaN or +inf (-inf marks a banned token)")
    if (logits == float("-inf")).all(-1).any():
        raise ValueError("logits must leave at least one token with a finite value in every row")
    temperature = check_real("temperature", temperature, low=0.0)
    vocab = logits.shape[-1]
    if top_k is not None:
        top_k = check_int("top_k", top_k, minimum=1)
    if top_p is not None:
        top_p = check_real("top_p", top_p, low=0.0, high=1.0, low_open=True)
    if min_p is not None:
        min_p = check_real("min_p", min_p, low=0.0, high=1.0)
    if temperature == 0.0:  # greedy: a point mass on the first argmax
        return torch.nn.functional.one_hot(logits.argmax(-1), vocab).to(logits.dtype)
    z = (logits - logits.amax(-1, keepdim=True)) / temperature  # (..., V); shifting first keeps tiny T finite
    if min_p:  # keep p_i >= min_p * max p at this temperature; the argmax always stays
        probs = torch.softmax(z, dim=-1)  # (..., V)
        z = z.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), float("-inf"))
    if top_k is not None and top_k < vocab:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]  # (..., 1) smallest kept logit
        z = z.masked_fill(z < kth, float("-inf"))
    probs = torch.softmax(z, dim=-1)  # (..., V)
    if top_p is not None and top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)  # (..., V)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly ahead of each token
        keep_sorted = before < top_p  # smallest prefix reaching top_p; the top token always stays
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def greedy_token(p_rows: torch.Tensor) -> torch.Tensor:
    """Argmax token of each row (..., V) -> (...,): the greedy policy's choice (the first one on a tie)."""
    p_rows = check_tensor("p_rows", p_rows)
    if p_rows.dim() < 1 or p_rows.shape[-1] == 0:
        raise ValueError(f"p_rows must have a non-empty last axis (the vocabulary), got shape {tuple(p_rows.shape)}")
    if torch.isnan(p_rows).any():
        raise ValueError("p_rows must not contain NaN (a NaN row has no argmax)")
    return p_rows.argmax(-1)


def policy_table(table: torch.Tensor, *, temperature: float = 1.0, min_p: float | None = None,
                 top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Apply a sampling policy to every row of a probability table; the default policy returns it unchanged.

    Every row (the last axis) must be a distribution: finite, >= 0, summing to 1 within 1e-4 (_checks.SUM_TOL).
    """
    table = check_distribution("table", table)
    if temperature == 1.0 and not min_p and top_k is None and top_p is None:
        return table
    return apply_policy(torch.log(table.double()), temperature=temperature, min_p=min_p, top_k=top_k, top_p=top_p)
