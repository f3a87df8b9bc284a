"""The course's one causal transformer: a small GPT with a KV cache that can be cropped (rollback).

The cache holds keys and values for every position the model has read. Speculative decoding writes the
k proposals into the caches before it knows which survive, so after verification both caches are
cropped back to the accepted prefix: the target's for correctness (it must never condition on a
rejected proposal), the draft's for efficiency (its next proposals start from the committed text).
Act II's `TinyCausalLM` is the same model in a tiny random configuration; the lab trains two larger ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._checks import check_int, check_token_ids

__all__ = [
    "LMConfig", "TARGET_CONFIG", "DRAFT_CONFIG", "RollbackCache", "KVCache", "CachedAttention", "CachedBlock",
    "CachedLM", "check_positions_and_mask", "check_kept_slots", "n_params", "TinyCausalLM"
]


@dataclass(frozen=True)
class LMConfig:
    """Shape of a CachedLM: vocabulary, width, heads, layers and the longest context it can hold."""

    vocab: int = 256
    d_model: int = 64
    n_head: int = 2
    n_layer: int = 1
    max_len: int = 512

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "n_head", "max_len"):
            check_int(name, getattr(self, name), minimum=2 if name == "vocab" else 1)
        check_int("n_layer", self.n_layer, minimum=0)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model must be divisible by n_head, got d_model={self.d_model}, n_head={self.n_head}")


# The trained pair (`make models`): the target has 4 layers of width 128, the draft 1 layer of width 32.
TARGET_CONFIG = LMConfig(vocab=256, d_model=128, n_head=4, n_layer=4, max_len=192)
DRAFT_CONFIG = LMConfig(vocab=256, d_model=32, n_head=1, n_layer=1, max_len=192)


@runtime_checkable
class RollbackCache(Protocol):
    """What every lab cache does, one meaning per name: `length` positions are valid; crop(n) forgets every
    position from n on (a rejected draft's); keep(start, slots) keeps, after the first start positions, only the
    ascending slots, moved down (a tree pass's accepted path). KVCache, FeatureCache and hf_causal_lm's HFCache
    follow it; early_exit.SharedCache crops but cannot compact a path, and records its kept states with `record`."""

    length: int

    def crop(self, n: int) -> None: ...

    def keep(self, start: int, slots: torch.Tensor) -> None: ...


class KVCache:
    """Keys and values of every layer, preallocated to max_len; `length` positions are valid.

    crop(n) is the rollback: it forgets every position from n on (O(1): the buffers are simply
    overwritten by the next forward).
    """

    def __init__(self, config: LMConfig, batch: int = 1, *, dtype=torch.float32, device=None):
        hs = config.d_model // config.n_head
        shape = (config.n_layer, batch, config.n_head, config.max_len, hs)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (n_layer, B, nh, max_len, hs)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (n_layer, B, nh, max_len, hs)
        self.max_len = config.max_len
        self.length = 0

    @classmethod
    def over(cls, k: torch.Tensor, v: torch.Tensor) -> KVCache:
        """An empty cache over given buffers k, v (n_layer, B, heads, max_len, head dim): a static decoder's, which
        hands the same buffers to each new cache so that its captured passes keep their addresses."""
        if k.dim() != 5 or k.shape != v.shape:
            raise ValueError(f"k and v must share one shape (n_layer, B, heads, max_len, head dim), got "
                             f"{tuple(k.shape)} and {tuple(v.shape)}")
        cache = cls.__new__(cls)
        cache.k, cache.v, cache.max_len, cache.length = k, v, k.shape[3], 0
        return cache

    def crop(self, n: int) -> None:
        """Roll back to the first n positions (0 <= n <= length)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"n must lie in [0, {self.length}] (the cached length), got {n}")
        self.length = n

    def keep(self, start: int, slots: torch.Tensor) -> None:
        """Keep, after the first start positions, only slots (m,) (ascending, in [start, length)), moved down to
        start .. start+m-1: a tree pass's accepted path, where a chain pass would have written it."""
        check_kept_slots(slots, start=start, length=self.length)
        m = slots.numel()
        self.k[:, :, :, start:start + m] = self.k[:, :, :, slots]  # indexing copies first: overlap is safe
        self.v[:, :, :, start:start + m] = self.v[:, :, :, slots]
        self.length = start + m


def check_kept_slots(slots, *, start: int, length: int) -> None:
    """slots: a LongTensor (m,), strictly increasing, in [start, length) (a path of a parents-first tree)."""
    if not isinstance(slots, torch.Tensor) or slots.dtype != torch.long or slots.dim() != 1:
        got = f"{slots.dtype} {tuple(slots.shape)}" if isinstance(slots, torch.Tensor) else type(slots).__name__
        raise TypeError(f"slots must be a 1-D LongTensor, got {got}")
    if not 0 <= start <= length:
        raise ValueError(f"start must lie in [0, {length}] (the cached length), got {start}")
    if slots.numel() and (int(slots.min()) < start or int(slots.max()) >= length or bool((slots.diff() <= 0).any())):
        raise ValueError(f"slots must be strictly increasing and lie in [{start}, {length}), got {slots.tolist()}")


class CachedAttention(nn.Module):
    """Causal self-attention that reads earlier positions from a KVCache and appends the new ones."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Queries, keys and values of x (B, T, C), stacked: (3, B, nh, T, hs)."""
        B, T, C = x.shape
        return self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)

    def forward(self, x: torch.Tensor, layer: int, cache: KVCache | None, start: int,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C) in cache slots start .. start+T-1; attends to cached slots 0 .. start-1 as well.

        mask (T, start+T), True = may attend, says which keys each new position sees; without it, causal.
        """
        B, T, C = x.shape
        q, k, v = self.project(x)  # 3 x (B, nh, T, hs)
        if cache is not None:
            end = start + T
            cache.k[layer, :, :, start:end] = k
            cache.v[layer, :, :, start:end] = v
            k, v = cache.k[layer, :, :, :end], cache.v[layer, :, :, :end]  # (B, nh, end, hs)
        if mask is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, nh, T, hs)
        elif cache is not None and T == 1:  # one new position sees everything cached: no mask
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # no cache, or an empty one: plain causal
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class CachedBlock(nn.Module):
    """Pre-LayerNorm block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CachedAttention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x, layer, cache, start, mask=None):
        x = x + self.attn(self.ln_1(x), layer, cache, start, mask)  # (B, T, C)
        return x + self.mlp(self.ln_2(x))  # (B, T, C)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward half's update (B, T, C) of normed x (B, T, C)."""
        return self.out(F.gelu(self.fc(x)))


class CachedLM(nn.Module):
    """A decoder-only causal LM with an optional KV cache; seeded init from a private generator."""

    def __init__(self, config: LMConfig, *, seed: int = 0, init_std: float = 0.02):
        super().__init__()
        self.config = config
        self.vocab, self.max_len = config.vocab, config.max_len  # what sd.lab.alignment_report reads
        with torch.random.fork_rng(devices=[]):  # the layers' default init draws from the global RNG; restore it
            self.tok_emb = nn.Embedding(config.vocab, config.d_model)
            self.pos_emb = nn.Embedding(config.max_len, config.d_model)
            self.blocks = nn.ModuleList([CachedBlock(config.d_model, config.n_head) for _ in range(config.n_layer)])
            self.ln_f = nn.LayerNorm(config.d_model)
            self.head = nn.Linear(config.d_model, config.vocab)
        self.init_weights(seed, init_std)  # every parameter, from a private generator
        self.eval()

    @torch.no_grad()
    def init_weights(self, seed: int, std: float = 0.02) -> None:
        """Normal weights at weight_std(name, std), zero biases, unit norms, all from one private generator."""
        g = torch.Generator().manual_seed(check_int("seed", seed))
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln_" in name or name.startswith("ln_"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * self.weight_std(name, std))

    def weight_std(self, name: str, std: float) -> float:
        """GPT-2's init: std everywhere, residual projections scaled down by 1/sqrt(2 n_layer)."""
        residual_out = name.endswith(("proj.weight", "out.weight"))
        return std / math.sqrt(2 * max(1, self.config.n_layer)) if residual_out else std

    def new_cache(self, batch: int = 1) -> KVCache:
        """An empty cache for `batch` sequences, on this model's device and dtype."""
        w = self.head.weight
        return KVCache(self.config, batch, dtype=w.dtype, device=w.device)

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None, *, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids (B, T); logits[:, r] predicts the token after position r.

        With a cache, idx continues the cached positions, and the cache grows by T. positions (T,) replaces the
        position ids start .. start+T-1 and mask (T, start+T) (True = may attend) the causal mask: a draft tree
        scored in one pass gives each node its depth's position and lets it see only its ancestors.
        """
        return self.head(self.features(idx, cache, positions=positions, mask=mask))  # (B, T, vocab)

    def features(self, idx: torch.Tensor, cache: KVCache | None = None, *, positions: torch.Tensor | None = None,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
        """The last hidden state after ln_f (B, T, C), what the head reads (Medusa's heads and EAGLE's draft too);
        the arguments are forward's."""
        check_token_ids("idx", idx, self.vocab, dims=2)
        start = 0 if cache is None else cache.length
        T = idx.shape[1]
        if T == 0:
            raise ValueError("idx must hold at least one position (T >= 1)")
        if start + T > self.max_len:
            raise ValueError(f"idx is too long: {start} cached + {T} new positions exceed max_len = {self.max_len}")
        check_positions_and_mask(positions, mask, T=T, start=start, max_len=self.max_len)
        pos = torch.arange(start, start + T, device=idx.device) if positions is None else positions  # (T,)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, C)
        if mask is None and cache is not None and start > 0 and T > 1:  # start+i sees keys 0 .. start+i; built once
            mask = torch.ones(T, start + T, dtype=torch.bool, device=idx.device).tril(diagonal=start)  # (T, start+T)
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, cache, start, mask)  # (B, T, C)
        if cache is not None:
            cache.length = start + T
        return self.ln_f(x)  # (B, T, C)


def check_positions_and_mask(positions, mask, *, T: int, start: int, max_len: int) -> None:
    """positions: None or a LongTensor (T,) in [0, max_len); mask: None or a bool (T, start+T), no row all False."""
    if positions is not None:
        if not isinstance(positions, torch.Tensor) or positions.dtype != torch.long:
            got = f"dtype {positions.dtype}" if isinstance(positions, torch.Tensor) else type(positions).__name__
            raise TypeError(f"positions must be a LongTensor (dtype torch.int64), got {got}")
        if positions.shape != (T,):
            raise ValueError(f"positions must have shape (T,) = ({T},), one id per new token, "
                             f"got {tuple(positions.shape)}")
        if int(positions.min()) < 0 or int(positions.max()) >= max_len:
            raise ValueError(f"positions must lie in [0, {max_len}) (max_len), "
                             f"got values in [{int(positions.min())}, {int(positions.max())}]")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(f"mask must be a bool tensor (True = may attend), got {got}")
        if mask.shape != (T, start + T):
            raise ValueError(f"mask must have shape (T, cached + T) = ({T}, {start + T}), got {tuple(mask.shape)}")
        if not mask.any(-1).all():
            raise ValueError("mask must let every new position attend to at least one key (a row of all False)")


def n_params(model: nn.Module) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())


class TinyCausalLM(CachedLM):
    """Act II's tiny random transformer: the same CachedLM in a small configuration, seeded, never trained.

    Its init is wider than a trainable GPT's, so its next-token distributions are clearly non-uniform
    (max probability ~0.2 against 1/12) and differ between positions: a misaligned slice of its rows is
    visibly wrong (max TV ~0.3 between the aligned and the shifted slice; the post's model gave 0.337).
    """

    EMB_STD, PROJ_STD, HEAD_STD = 1.0, 0.2, 0.12  # embeddings; every linear layer in the blocks; the output head

    def __init__(self, *, vocab: int = 12, d_model: int = 32, n_head: int = 2, n_layer: int = 2,
                 max_len: int = 64, seed: int = 0):
        self.seed = check_int("seed", seed)
        super().__init__(LMConfig(vocab=vocab, d_model=d_model, n_head=n_head, n_layer=n_layer, max_len=max_len),
                         seed=self.seed)

    def weight_std(self, name: str, std: float) -> float:
        """The three scales above, whatever std says."""
        return self.EMB_STD if "emb" in name else self.HEAD_STD if name.startswith("head") else self.PROJ_STD
