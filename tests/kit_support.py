"""What the kit's tests share: the completed law of n blocks a sampler committed on one battery case."""
from __future__ import annotations

import torch

import specdec_lib as sd
from specdec_lib.conformance import complete


def sampled_law(verify, case, n: int, generator: torch.Generator) -> torch.Tensor:
    """Run verify(p, q, proposals, generator) on n blocks of `case`; the empirical completed law (V,) * (k+1)."""
    p, q = case.p_rows.expand(n, -1, -1), case.q_rows.expand(n, -1, -1)
    _, tokens = verify(p, q, sd.sample_rows(q, generator), generator)
    counts: dict[tuple[int, ...], float] = {}
    for row in tokens.tolist():
        t = tuple(x for x in row if x != -1)  # the committed tokens, padding dropped
        counts[t] = counts.get(t, 0) + 1 / n
    return complete(counts, case.p_rows)
