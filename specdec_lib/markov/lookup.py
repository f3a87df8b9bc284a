"""Act V, drafts without a model: n-gram lookup against a model draft, exactly, on the chain.

Prompt lookup proposes what followed the latest earlier occurrence of the current token (one-hot, so the
match rule verifies it exactly); it costs almost nothing to draft (c_d near 0), and a round that finds no
match is a plain decode step. Its proposals are only as good as the text repeats itself: on a Markov chain
a copied token was once drawn from the same row of P, so it is accepted with probability about sum p^2.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .measures import DecoderStats, decoder_stats

__all__ = ["DraftCost", "lookup_vs_model"]


@dataclass(frozen=True)
class DraftCost:
    """One way of drafting: its exact stats over the horizon, the draft cost used, and the speedup."""

    name: str
    c_d: float
    stats: DecoderStats
    speedup: float


def lookup_vs_model(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, c_d_model: float,
                    c_v: float, c_d_lookup: float = 0.0) -> list[DraftCost]:
    """[n-gram lookup at c_d_lookup, the model draft Q at c_d_model]: exact tokens per call, acceptance and S.
    The lookup matches the latest occurrence (ngram_match="latest", the registry's default)."""
    lookup = decoder_stats(P, Q, start=start, horizon=horizon, k=k, mode="ngram_lookup",
                           options={"ngram_match": "latest"})
    model = decoder_stats(P, Q, start=start, horizon=horizon, k=k, mode="correct")
    return [DraftCost("ngram_lookup", c_d_lookup, lookup, lookup.speedup(c_d=c_d_lookup, c_v=c_v)),
            DraftCost("model draft", c_d_model, model, model.speedup(c_d=c_d_model, c_v=c_v))]
