"""Lab: the target's features, kept per cache slot: what Medusa's heads and EAGLE's draft read.

A feature is the target's last hidden state after ln_f at one position, the vector its own head turns into the
next-token logits. A FeatureTarget scores exactly as its model does and writes each new slot's feature beside
that slot's keys and values, so a draft that reads features needs no pass of its own over the target. The
cache invariant is the lab's: the target's cache holds every committed token but the last, so the newest
feature a draft can read after n committed tokens is slot n - 2's, which predicted token n - 1 (committed).
Rollback is the KVCache's crop (a feature beyond the cached length is never read); after a tree pass, `keep`
moves the accepted path's keys, values and features down to consecutive slots.
"""
from __future__ import annotations

import torch

from .transformer import CachedLM, KVCache

__all__ = ["FeatureCache", "FeatureTarget", "check_feature_cache"]


class FeatureCache(KVCache):
    """A target's KVCache that also keeps each slot's feature: hidden (max_len, C)."""

    def __init__(self, model: CachedLM):
        w = model.head.weight
        super().__init__(model.config, 1, dtype=w.dtype, device=w.device)
        self.hidden = torch.zeros(self.max_len, model.config.d_model, dtype=w.dtype, device=w.device)  # (max_len, C)

    def keep(self, start: int, slots: torch.Tensor) -> None:
        """KVCache.keep, the features moved with the keys and values."""
        super().keep(start, slots)
        self.hidden[start:start + slots.numel()] = self.hidden[slots]


class FeatureTarget:
    """A CachedLM that records its features in a FeatureCache; its logits are the model's."""

    def __init__(self, model: CachedLM):
        if not isinstance(model, CachedLM):
            raise TypeError(f"model must be a CachedLM (the lab's transformer), got {type(model).__name__}")
        self.model = model
        self.vocab, self.max_len, self.name = model.vocab, model.max_len, getattr(model, "name", "target")
        self.config = model.config

    def new_cache(self, batch: int = 1) -> FeatureCache:
        """An empty cache for one sequence (features are kept for one)."""
        if batch != 1:
            raise ValueError(f"batch must be 1 (a FeatureCache holds one sequence), got {batch}")
        return FeatureCache(self.model)

    def __call__(self, idx: torch.Tensor, cache: FeatureCache | None = None, *, positions: torch.Tensor | None = None,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab), the model's; with a cache, each new slot's feature is kept."""
        if cache is not None:
            check_feature_cache(cache)
        start = 0 if cache is None else cache.length
        h = self.model.features(idx, cache, positions=positions, mask=mask)  # (B, T, C)
        if cache is not None:
            cache.hidden[start:start + idx.shape[1]] = h[0]
        return self.model.head(h)  # (B, T, vocab)


def check_feature_cache(cache, name: str = "cache") -> FeatureCache:
    """Raise TypeError unless cache is a FeatureCache (from a FeatureTarget's new_cache)."""
    if not isinstance(cache, FeatureCache):
        raise TypeError(f"{name} must be a FeatureCache (a FeatureTarget's new_cache(): a draft that reads the "
                        f"target's features needs the target wrapped in sd.lab.FeatureTarget), "
                        f"got {type(cache).__name__}")
    return cache
