"""Lab: early exit (self-speculation): the target's first L layers and an exit head are the draft; one shared cache.

The draft is no second model. A draft step runs the target's blocks 0 .. L-1 on one token and reads the next-token
law off layer L's input through an exit head (by default the target's own ln_f and head, as LayerSkip does).

What the two share is one KVCache. Its layers < L may run ahead of the others:

  kv.length   slots valid at every layer: the committed tokens but the last (as for any target cache)
  low         slots valid at layers < L (>= kv.length): the draft has run the last committed token and its
              first k - 1 proposals through them, and kept each one's layer-L input in `hidden`

Verification reuses what the draft computed: for the block (last committed token, k proposals) it runs layers < L
on the last proposal only, and layers >= L on all k + 1 positions, starting from the kept hidden states. A kept
slot is reused only while the token it holds is the block's token at that slot, so a block the draft did not
propose is still scored exactly. Rollback is one crop for both: positions from n on are forgotten at every layer,
and the kept hidden states with them. Nothing is recomputed that a plain target pass would not compute, in the
same order for the lower layers as plain decoding (one position at a time), so the rows are the target's.

The model is the lab's CachedLM (LabLayers) or a transformers causal LM behind HFCausalLM (hf_causal_lm.HFLayers,
whose DynamicCache appends rather than writes by slot, so a layer is cropped back to `start` before it runs there).
Both give the few operations below the rule needs; the rule itself is written once, here.
"""
from __future__ import annotations

import torch

from .._checks import check_int, check_token_ids
from .steps import sample_token
from .transformer import CachedLM, KVCache

__all__ = ["SharedCache", "EarlyExitTarget", "EarlyExitDraft", "early_exit_pair", "exit_logits"]


class SharedCache:
    """The target's cache, shared with its early-exit draft: layers < exit_layer may hold `low` > length slots."""

    def __init__(self, kv, exit_layer: int, d_model: int, *, max_len: int, dtype=torch.float32, device=None):
        self.kv, self.exit_layer, self.max_len = kv, exit_layer, max_len
        self.low = kv.length  # slots valid at layers < exit_layer
        size = min(max_len, 256)  # grows (doubling) up to max_len as slots are kept
        self.hidden = torch.zeros(size, d_model, dtype=dtype, device=device)  # (size, C): each slot's layer-L input
        self.tokens = torch.full((size,), -1, dtype=torch.long, device=device)  # (size,): the token it was run on

    @property
    def length(self) -> int:
        """Slots valid at every layer."""
        return self.kv.length

    def crop(self, n: int) -> None:
        """Roll back to the first n positions at every layer (0 <= n <= length); the kept hidden states too."""
        self.kv.crop(n)
        self.low = min(self.low, n)

    def record(self, start: int, idx: torch.Tensor, h: torch.Tensor) -> None:
        """Record that slots start .. start+T-1 ran tokens idx (T,) to layer-L inputs h (T, C); nothing kept after.
        (Not `keep`: in the cache protocol, transformer.RollbackCache, keep moves a tree's accepted path.)"""
        end = start + idx.numel()
        if end > self.hidden.shape[0]:
            size = min(self.max_len, max(end, 2 * self.hidden.shape[0]))
            self.hidden = torch.cat([self.hidden, self.hidden.new_zeros(size - self.hidden.shape[0], h.shape[-1])])
            self.tokens = torch.cat([self.tokens, self.tokens.new_full((size - self.tokens.numel(),), -1)])
        self.hidden[start:end] = h
        self.tokens[start:end] = idx
        self.low = end  # what lay beyond was computed after other tokens: forget it


def causal_mask(T: int, start: int, device=None) -> torch.Tensor | None:
    """The mask (T, start+T) of T new positions after start cached ones (True = may attend); None where T == 1."""
    if T == 1 or start == 0:
        return None if T == 1 else torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return torch.ones(T, start + T, dtype=torch.bool, device=device).tril(diagonal=start)


def run_layers(model: CachedLM, x: torch.Tensor, kv: KVCache, start: int, layers: range) -> torch.Tensor:
    """x (1, T, C) at slots start .. start+T-1 through model.blocks[layers], reading and writing kv at those layers."""
    mask = None if start == 0 else causal_mask(x.shape[1], start, x.device)
    for layer in layers:
        x = model.blocks[layer](x, layer, kv, start, mask)  # (1, T, C)
    return x


class LabLayers:
    """The lab's CachedLM a range of layers at a time, as a shared-cache early exit runs it."""

    def __init__(self, model: CachedLM):
        self.model, self.n_layers, self.d_model = model, len(model.blocks), model.config.d_model
        self.dtype, self.device = model.tok_emb.weight.dtype, model.tok_emb.weight.device

    def new_kv(self) -> KVCache:
        return self.model.new_cache()

    def full(self, idx: torch.Tensor, kv: KVCache) -> torch.Tensor:
        """The model's own pass on idx (1, T) after kv.length slots: logits (1, T, V)."""
        return self.model(idx, kv)

    def embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        """Token plus position embeddings (1, T, C) of idx (1, T) at slots start .. start+T-1."""
        return self.model.tok_emb(idx) + self.model.pos_emb(torch.arange(start, start + idx.shape[1],
                                                                         device=idx.device))

    def run(self, x: torch.Tensor, kv: KVCache, start: int, layers: range) -> torch.Tensor:
        """x (1, T, C) at slots start.. through layers, writing their slots; kv.length = start + T after the last."""
        x = run_layers(self.model, x, kv, start, layers)
        if layers.stop == self.n_layers:
            kv.length = start + x.shape[1]
        return x

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """The model's final norm and head: logits (.., V) of hidden states (.., C)."""
        return self.model.head(self.model.ln_f(h))


def layers_of(model):
    """The layer runner of model: LabLayers for a CachedLM, the model's own (layer_runner()) for an HFCausalLM."""
    if isinstance(model, CachedLM):
        return LabLayers(model)
    if callable(getattr(model, "layer_runner", None)):  # hf_causal_lm.HFCausalLM: an HFLayers
        return model.layer_runner()
    raise TypeError(f"model must be a CachedLM (the lab's transformer) or an HFCausalLM, got {type(model).__name__}")


def _lower(layers, cache: SharedCache, idx: torch.Tensor, start: int) -> torch.Tensor:
    """Layers < exit_layer on idx (1, T) at slots start..: keeps each slot's token and layer-L input; (1, T, C)."""
    h = layers.run(layers.embed(idx, start), cache.kv, start, range(cache.exit_layer))  # (1, T, C)
    cache.record(start, idx[0], h[0])
    return h


class EarlyExitTarget:
    """The target scoring through a SharedCache: layers < L only where the draft has not already run them."""

    def __init__(self, model, exit_layer: int):
        self.model, self.exit_layer, self.layers = model, exit_layer, layers_of(model)
        self.vocab, self.max_len, self.name = model.vocab, model.max_len, getattr(model, "name", "target")

    def new_cache(self, batch: int = 1) -> SharedCache:
        """An empty shared cache (one sequence)."""
        if batch != 1:
            raise ValueError(f"batch must be 1 (a shared cache holds one sequence), got {batch}")
        return SharedCache(self.layers.new_kv(), self.exit_layer, self.layers.d_model, max_len=self.max_len,
                           dtype=self.layers.dtype, device=self.layers.device)

    def __call__(self, idx: torch.Tensor, cache: SharedCache | None = None) -> torch.Tensor:
        """Logits (1, T, vocab), the target's, for idx (1, T) after the cached positions; the cache grows by T."""
        if cache is None:
            return self.model(idx)
        if not isinstance(cache, SharedCache) or cache.exit_layer != self.exit_layer:
            raise TypeError(f"cache must be a SharedCache of exit layer {self.exit_layer} (from new_cache())")
        check_token_ids("idx", idx, self.vocab, dims=2)
        T, start = idx.shape[1], cache.length
        if idx.shape[0] != 1 or T == 0 or start + T > self.max_len:
            raise ValueError(f"idx must have shape (1, T), T >= 1 and {start} + T <= max_len = {self.max_len}, "
                             f"got {tuple(idx.shape)}")
        kept = cache.tokens[start:min(cache.low, start + T)] == idx[0, :max(0, cache.low - start)]  # (r,)
        r = int(kept.long().cumprod(0).sum())  # the kept slots whose token is the block's, from the start
        if r == 0:  # nothing to reuse (prefill, a plain step): the model's own pass, and nothing kept after it
            cache.low = start + T
            return self.layers.full(idx, cache.kv)
        h = cache.hidden[start:start + r][None]  # (1, r, C)
        if r < T:
            h = torch.cat([h, _lower(self.layers, cache, idx[:, r:], start + r)], dim=1)  # (1, T, C)
        x = self.layers.run(h, cache.kv, start, range(self.exit_layer, self.layers.n_layers))  # (1, T, C)
        return self.layers.head(x)  # (1, T, vocab)


class EarlyExitDraft:
    """The draft of an EarlyExitTarget: its layers < L on each token, then the exit head (default: the model's)."""

    one_hot = False
    shares_cache = True  # start() is handed the target's cache

    def __init__(self, model, exit_layer: int, head=None, name: str | None = None):
        self.model, self.exit_layer, self.layers = model, exit_layer, layers_of(model)
        self.head = head if head is not None else self.layers.head  # (.., C) -> (.., V)
        self.vocab, self.max_len = model.vocab, model.max_len
        self.name = name or f"exit@{exit_layer}"

    def start(self, prompt: torch.Tensor, target_cache: SharedCache | None = None) -> SharedCache:
        """The target's shared cache (prefilled with prompt[:-1]): the draft has no cache of its own."""
        if not isinstance(target_cache, SharedCache) or target_cache.exit_layer != self.exit_layer:
            raise TypeError(f"target_cache must be the SharedCache of an EarlyExitTarget at exit layer "
                            f"{self.exit_layer}: pass early_exit_pair(...)'s target and draft together")
        return target_cache

    def propose(self, state: SharedCache, seq: torch.Tensor, n: int, k: int, *, temperature: float, top_k,
                generator):
        """(proposals (k,), q rows (k, V) or None when greedy) after the committed seq[:n], through layers < L."""
        state.low = min(state.low, n - 1)  # re-read the last committed token: its layer-L input gives proposal 1
        x, proposals, q_rows = seq[state.low:n], [], []
        for _ in range(k):
            h = _lower(self.layers, state, x[None], state.low)  # (1, T, C)
            x, q = sample_token(self.head(h[0, -1]), temperature, top_k, generator)  # (1,), (V,) or None
            proposals.append(x)
            q_rows.append(q)
        return torch.cat(proposals), (None if temperature == 0.0 else torch.stack(q_rows))

    def rollback(self, state: SharedCache, n: int) -> None:
        """Forget the lower layers' slots from n on (verification has cropped the rest)."""
        state.low = min(state.low, n)


def early_exit_pair(model, exit_layer: int, *, head=None) -> tuple[EarlyExitTarget, EarlyExitDraft]:
    """(target, draft) for sd.lab.generate_speculative: model (a CachedLM or an HFCausalLM) drafting with its first
    exit_layer layers, one cache shared between them."""
    n_layers = layers_of(model).n_layers
    exit_layer = check_int("exit_layer", exit_layer, minimum=1)
    if exit_layer >= n_layers:
        raise ValueError(f"exit_layer must be below the model's {n_layers} layers (1 .. {n_layers - 1}), "
                         f"got {exit_layer}")
    return EarlyExitTarget(model, exit_layer), EarlyExitDraft(model, exit_layer, head)


def exit_logits(model: CachedLM, idx: torch.Tensor) -> list[torch.Tensor]:
    """Logits (B, T, vocab) read after each of model's layers through its ln_f and head, uncached: [L = 1, .., last].

    The last is model(idx). The early-exit loss of a LayerSkip-style fine-tune is a weighted sum of their
    cross-entropies; without one, the early rows are what the untrained exits predict.
    """
    check_token_ids("idx", idx, model.vocab, dims=2)
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1], device=idx.device))  # (B, T, C)
    out = []
    for layer, block in enumerate(model.blocks):
        x = block(x, layer, None, 0)  # (B, T, C)
        out.append(model.head(model.ln_f(x)))  # (B, T, vocab)
    return out
