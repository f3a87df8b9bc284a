"""Lab: where verification's block pass and incremental decoding disagree in finite precision, measured on one prompt.

Speculative decoding is exact in law: given exact arithmetic, verification's row j equals the row a plain decode
would compute at the same position. A real model computes the (k+1)-row block with other kernels (another
reduction order, other tiles) than a one-row step, so the two rows differ by rounding: about 1e-5 in float32, far
more in bfloat16. Under greedy decoding a difference matters exactly where it flips an argmax: where the top two
logits of the plain row lie closer than the rounding. `block_vs_incremental` decodes plainly (greedy), keeps every
row, re-scores the same tokens in verification blocks of k+1 through a cache, and reports the gaps and the flips.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_int
from .steps import prefill

__all__ = ["Numerics", "block_vs_incremental"]


@dataclass(frozen=True)
class Numerics:
    """Block against incremental rows of one greedy continuation (the recording's NumericsRow fields, task aside)."""

    dtype: str
    positions: int
    max_abs_diff: float  # max |block - incremental| logit over every position and token
    flips: int  # positions whose argmax differs
    first_flip: int | None
    min_gap: float  # the smallest top-1 minus top-2 logit gap of the incremental rows
    gap_at_first_flip: float | None


@torch.inference_mode()
def block_vs_incremental(model, prompt: torch.Tensor, n: int, *, k: int = 4) -> Numerics:
    """Greedy-decode n tokens one row at a time, then score them again in blocks of k+1 rows, as verification does."""
    n, k = check_int("n", n, minimum=1), check_int("k", k, minimum=1)
    cache = prefill(model, prompt)
    last, rows, out = prompt[-1:], [], []
    for _ in range(n):  # the plain loop: one position per call
        row = model(last[None], cache)[0, -1]  # (V,)
        last = row.argmax(-1, keepdim=True)
        rows.append(row)
        out.append(last)
    inc, seq = torch.stack(rows), torch.cat([prompt, *out])  # (n, V), (L + n,)
    cache, L, block = prefill(model, prompt), prompt.numel(), []
    for start in range(0, n, k + 1):  # verification: the last committed token and the next k, one call each
        stop = min(start + k + 1, n)
        block.append(model(seq[None, L - 1 + start:L - 1 + stop], cache)[0])  # (stop - start, V)
    blk = torch.cat(block)  # (n, V): row i predicts continuation token i, as inc's
    top2 = inc.topk(2, dim=-1).values  # (n, 2)
    gaps = top2[:, 0] - top2[:, 1]  # (n,)
    flipped = (blk.argmax(-1) != inc.argmax(-1)).nonzero()
    first = None if flipped.numel() == 0 else int(flipped[0, 0])
    return Numerics(dtype=str(model.dtype).removeprefix("torch."), positions=n,
                    max_abs_diff=(blk - inc).abs().max().item(), flips=flipped.numel(), first_flip=first,
                    min_gap=gaps.min().item(), gap_at_first_flip=None if first is None else gaps[first].item())
