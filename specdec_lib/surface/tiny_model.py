"""A tiny randomly initialised transformers causal LM, built from a config (nothing downloaded): the one recipe behind
the kit's tiny Llamas (conformance.hf.tiny_llama) and the lab's tiny Qwen2 and Llama models (lab.tiny_hf_model).

Two initialisations (INITS), both determined by `seed` alone:
  "transformers"  the library's own init, drawn from torch's global generator seeded with `seed` inside
                  torch.random.fork_rng (the caller's global state is left as it was);
  "normal"        every weight and bias redrawn from N(0, NORMAL_STD^2) by a torch.Generator seeded with `seed`, the
                  norm scales left at 1: peaked, seed-determined rows.
transformers (the `audit` extra) is imported inside the functions, with HF_HUB_OFFLINE=1 set first, so surface imports
without it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .._checks import check_choice, check_int, check_real

__all__ = ["ARCHES", "INITS", "NORMAL_STD", "SPECIAL_TOKENS", "TinyConfig", "offline_transformers", "tiny_causal_lm"]

ARCHES = ("qwen2", "llama")  # the architectures tiny_causal_lm builds (the real pair is Qwen2)
INITS = ("transformers", "normal")
NORMAL_STD = 0.3  # "normal": the standard deviation of every redrawn weight and bias
SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")  # the ids TinyConfig.tokens may set


@dataclass(frozen=True)
class TinyConfig:
    """A tiny causal LM's shape: architecture (ARCHES), vocabulary, hidden and MLP widths, query and key-value heads,
    layers, positions, and special token ids set on its config ((name, id) pairs; the others keep the defaults)."""

    arch: str = "qwen2"
    vocab: int = 64
    hidden: int = 32
    intermediate: int = 64
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    max_positions: int = 256
    tokens: tuple[tuple[str, int | None], ...] = ()

    def __post_init__(self):
        check_choice("arch", self.arch, ARCHES)
        check_int("vocab", self.vocab, minimum=2)
        for name in ("hidden", "intermediate", "heads", "kv_heads", "layers", "max_positions"):
            check_int(name, getattr(self, name), minimum=1)
        if self.hidden % self.heads:
            raise ValueError(f"hidden must be a multiple of heads ({self.heads}), got {self.hidden}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads must be a multiple of kv_heads ({self.kv_heads}), got {self.heads}")
        if not isinstance(self.tokens, tuple) or not all(isinstance(t, tuple) and len(t) == 2 for t in self.tokens):
            raise TypeError(f"tokens must be a tuple of (name, id) pairs, got {self.tokens!r}")
        for name, token in self.tokens:
            check_choice("tokens' name", name, SPECIAL_TOKENS)
            if token is not None and check_int(name, token, minimum=0) >= self.vocab:
                raise ValueError(f"{name} must be None or a token id below vocab ({self.vocab}), got {token}")


def offline_transformers():
    """The transformers module, imported with HF_HUB_OFFLINE=1 set first: nothing is downloaded."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    return transformers


def tiny_causal_lm(config: TinyConfig | None = None, *, seed: int = 0, init: str = "normal", head_scale: float = 1.0,
                   dtype: torch.dtype = torch.float32):
    """A transformers causal LM of config's shape (None: TinyConfig()) in eval mode, its weights from seed by init
    (INITS), then its head scaled by head_scale (above 1: peaked next-token laws)."""
    config = TinyConfig() if config is None else config
    if not isinstance(config, TinyConfig):
        raise TypeError(f"config must be a TinyConfig, got {type(config).__name__}")
    seed = check_int("seed", seed, minimum=0)
    init = check_choice("init", init, INITS)
    head_scale = check_real("head_scale", head_scale, low=0.0, low_open=True)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    tf = offline_transformers()
    kind = {"qwen2": tf.Qwen2Config, "llama": tf.LlamaConfig}[config.arch]
    hf_config = kind(vocab_size=config.vocab, hidden_size=config.hidden, intermediate_size=config.intermediate,
                     num_hidden_layers=config.layers, num_attention_heads=config.heads,
                     num_key_value_heads=config.kv_heads, max_position_embeddings=config.max_positions,
                     tie_word_embeddings=False, **dict(config.tokens))
    with torch.random.fork_rng(devices=[]):  # transformers' init draws from the global generator: restored after
        torch.manual_seed(seed)
        model = tf.AutoModelForCausalLM.from_config(hf_config, dtype=dtype).eval()
    with torch.no_grad():
        if init == "normal":
            g = torch.Generator().manual_seed(seed)
            for p in model.parameters():  # every weight and bias from g; the norm scales (all 1) stay
                if p.dim() >= 2 or not torch.all(p == 1):
                    p.copy_(torch.randn(p.shape, generator=g) * NORMAL_STD)
        if head_scale != 1.0:
            model.lm_head.weight.mul_(head_scale)
    return model
