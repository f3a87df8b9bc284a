"""Seeded draft/target pairs for the multi-draft tests: one place that draws them."""
from __future__ import annotations

import torch


def f64(x) -> torch.Tensor:
    """x as a float64 distribution (normalised)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    return x / x.sum()


def random_pairs(count: int, seed: int, *, sizes: int, low: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded (p, q) pairs over 2 .. 1 + sizes tokens, softmax scales in [low, low + 3), a third with a zero in q."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for i in range(count):
        V = 2 + i % sizes
        scale = low + 3 * torch.rand(1, generator=g, dtype=torch.float64)
        p = torch.softmax(scale * torch.randn(V, generator=g, dtype=torch.float64), 0)
        q = torch.softmax(scale * torch.randn(V, generator=g, dtype=torch.float64), 0)
        if i % 3 == 2:
            q[int(torch.randint(V, (1,), generator=g))] = 0.0
        pairs.append((p, q / q.sum()))
    return pairs
