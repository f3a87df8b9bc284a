"""The alignment test ("the logit at r predicts r+1"): block scoring in one pass against incremental scoring.

A causal LM run on prefix + proposals returns one row per position; the row at position r judges the token
at r + 1. `alignment_report` compares the k + 1 rows a verifier slices from one pass with the rows computed
by running the model on exactly each proposal's own prefix, so an off-by-one slice cannot hide.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .._checks import check_int, check_real, check_token_ids
from ..sampling import total_variation

__all__ = ["max_row_tv", "incremental_scores", "block_scores", "AlignmentReport", "alignment_report", "alignment_tv"]


def _check_block(model: nn.Module, prefix, proposals) -> torch.Tensor:
    """Validate prefix and proposals for model and return their concatenation (L + k,)."""
    check_token_ids("prefix", prefix, model.vocab, dims=1, allow_empty=False, long_only=True)
    check_token_ids("proposals", proposals, model.vocab, dims=1, long_only=True)
    n = prefix.numel() + proposals.numel()
    if n > model.max_len:
        raise ValueError(f"prefix + proposals is too long: {prefix.numel()} + {proposals.numel()} = {n} "
                         f"exceeds the model's max_len = {model.max_len}")
    return torch.cat([prefix, proposals])  # (L + k,)


def max_row_tv(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest TV between matching rows of two (m, V) stacks of distributions."""
    return max(total_variation(x, y) for x, y in zip(a, b))


@torch.no_grad()
def incremental_scores(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
    """Ground truth: row j is softmax of the last logits on exactly prefix + proposals[:j]; shape (k+1, V)."""
    seq = _check_block(model, prefix, proposals)  # (L + k,)
    L, k = prefix.numel(), proposals.numel()
    rows = [torch.softmax(model(seq[None, :L + j])[0, -1], dim=-1) for j in range(k + 1)]  # k+1 x (V,)
    return torch.stack(rows)  # (k+1, V)


@torch.no_grad()
def block_scores(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """One pass over prefix + proposals; row j is softmax at position L-1+offset+j, rows past the end dropped."""
    seq = _check_block(model, prefix, proposals)  # (L + k,)
    offset = check_int("offset", offset)
    L, k = prefix.numel(), proposals.numel()
    start = L - 1 + offset
    if start < 0 or start >= L + k:
        raise ValueError(f"offset = {offset} selects no rows: with L = {L} and k = {k} "
                         f"it must lie in [{-(L - 1)}, {k}]")
    probs = torch.softmax(model(seq[None])[0], dim=-1)  # (L + k, V)
    return probs[start:start + k + 1]                    # (min(k+1, L+k-start), V)


@dataclass(frozen=True)
class AlignmentReport:
    """Outcome of comparing block scoring against incremental scoring, row by row."""

    aligned: bool
    max_abs_diff: float
    max_tv: float
    rows: int


def alignment_report(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor,
                    offset: int = 0, atol: float = 1e-5) -> AlignmentReport:
    """Does block scoring at this offset reproduce incremental scoring on every row both have?"""
    atol = check_real("atol", atol, low=0.0)
    block = block_scores(model, prefix, proposals, offset)  # (m, V), m <= k+1
    truth = incremental_scores(model, prefix, proposals)     # (k+1, V)
    m = block.shape[0]
    truth = truth[:m]                                         # (m, V)
    diff = (block - truth).abs()                              # (m, V)
    return AlignmentReport(
        aligned=bool(torch.allclose(block, truth, rtol=0.0, atol=atol)),
        max_abs_diff=diff.max().item(),
        max_tv=max_row_tv(block, truth),
        rows=m,
    )


def alignment_tv(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor) -> float:
    """Max TV between the aligned (offset 0) and shifted (offset 1) slices on their k common rows."""
    _check_block(model, prefix, proposals)
    if proposals.numel() == 0:
        raise ValueError("proposals must be non-empty: with k = 0 the shifted slice has no rows")
    aligned = block_scores(model, prefix, proposals, offset=0)  # (k+1, V)
    shifted = block_scores(model, prefix, proposals, offset=1)  # (k, V)
    k = shifted.shape[0]
    return max_row_tv(aligned[:k], shifted)
