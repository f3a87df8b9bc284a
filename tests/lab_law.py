"""The lab's law test: seeded decodes of a tiny model's continuations, counted against their exact law."""
from __future__ import annotations

import torch


def empirical(decode, *, vocab: int, horizon: int, n: int, seed: int = 0) -> torch.Tensor:
    """Frequencies (vocab**horizon,) of n decodes: decode(generator) -> (horizon,) tokens, the first most significant.

    One generator, seeded once, is handed to every decode, so the n samples are independent and the run repeats.
    """
    g = torch.Generator().manual_seed(seed)
    base = vocab ** torch.arange(horizon - 1, -1, -1)  # (h,)
    codes = torch.tensor([int((decode(g) * base).sum()) for _ in range(n)])
    return torch.bincount(codes, minlength=vocab ** horizon).double() / n  # (V^h,)
