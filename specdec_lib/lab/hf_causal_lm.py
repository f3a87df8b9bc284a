"""Lab: any Hugging Face causal LM behind the lab's model interface, so the same loop decodes the toy and real pairs.

The lab's decoders ask a model for three things: `vocab` and `max_len`, `new_cache()` (a cache with `length` and
`crop(n)`), and a call `model(ids (1, T), cache)` returning float logits (1, T, V) for the T new positions. HFCausalLM
gives a transformers `AutoModelForCausalLM` exactly that: its cache is a DynamicCache, cropped on rejection
(transformers 5.x crops by a negative count of tokens to remove), and after a tree pass it keeps the accepted path
(`keep`, as KVCache.keep), so sd.lab.generate_tree runs on it too (lookahead, a tree of one-hot guesses). HFLayers
runs the decoder a range of layers at a time, so sd.lab.early_exit_pair shares one DynamicCache between the model and
its first layers. Nothing in the decoders knows which model it runs.
transformers is imported lazily (HFCache, surface.tiny_causal_lm behind tiny_hf_model), so the lab imports without it.
"""
from __future__ import annotations

import torch

from .._checks import check_choice, check_int
from ..surface.tiny_model import ARCHES, TinyConfig, tiny_causal_lm
from .early_exit import causal_mask
from .transformer import check_kept_slots

__all__ = ["ARCHES", "MATMUL_PATHS", "HFCache", "HFCausalLM", "HFLayers", "set_matmul", "early_exit_lm",
           "tiny_hf_model"]

MATMUL_PATHS = ("default", "onednn")  # set_matmul: torch's default CPU kernels, or oneDNN linear layers (fp32)


class HFCache:
    """A transformers DynamicCache with the lab's interface: `length` positions held, crop(n) keeps the first n."""

    def __init__(self, config):
        from transformers import DynamicCache

        self.kv = DynamicCache(config=config)

    @property
    def length(self) -> int:
        """Positions held at every layer (the last layer's: an early exit's lower layers may run ahead)."""
        return self.kv.get_seq_length(len(self.kv.layers) - 1) if self.kv.layers else 0

    def crop(self, n: int) -> None:
        """Roll back to the first n positions (0 <= n <= length)."""
        length = self.length
        if not 0 <= n <= length:
            raise ValueError(f"n must lie in [0, {length}] (the cached length), got {n}")
        self.crop_layers(n, range(len(self.kv.layers)))

    def crop_layers(self, n: int, layers: range) -> None:
        """Keep at most the first n positions at each of layers (each may hold another number)."""
        for i in layers:
            held = self.kv.get_seq_length(i)
            if held > n:
                self.kv.layers[i].crop(n - held)  # transformers 5.x: a negative count of tokens to remove

    def keep(self, start: int, slots: torch.Tensor) -> None:
        """KVCache.keep on a DynamicCache: the first start positions, then slots (ascending) moved down after them,
        by new tensors (a remembered prefill's keys and values are never written in place)."""
        check_kept_slots(slots, start=start, length=self.length)
        slots = slots.to(self.kv.layers[0].keys.device)
        for layer in self.kv.layers:
            if layer.is_initialized:
                layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys[..., slots, :]], dim=-2)
                layer.values = torch.cat([layer.values[..., :start, :], layer.values[..., slots, :]], dim=-2)


class HFCausalLM:
    """A transformers causal LM as a lab model: vocab, max_len, new_cache(), (1, T) ids -> float logits (1, T, V)."""

    def __init__(self, model, name: str = "target"):
        config = getattr(model, "config", None)
        if config is None or not callable(getattr(model, "forward", None)):
            raise TypeError(f"model must be a transformers causal LM (with .config and forward), got "
                            f"{type(model).__name__}")
        self.model, self.name, self.config = model.eval(), name, config
        self.vocab = check_int("config.vocab_size", config.vocab_size, minimum=2)  # the logits' width
        self.max_len = getattr(config, "max_position_embeddings", None)
        self._prefills = None  # remember_prefills: {ids: (per-layer keys and values, logits)} or None (off)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def new_cache(self, batch: int = 1) -> HFCache:
        """An empty DynamicCache (it takes any batch size: batch is accepted for the lab models' one signature)."""
        check_int("batch", batch, minimum=1)
        return HFCache(self.config)

    def remember_prefills(self, on: bool = True) -> None:
        """Keep what each call on an empty cache computed, by its ids, and hand it back on the same ids (no pass).

        A prompt's prefill is the same for every run that starts from it (plain, speculative, each timed term), and on
        a real model it costs seconds; the decoders' round timers never include it. The stored keys and values are
        never written in place (a DynamicCache appends by concatenation and crops by slicing), so runs share them.
        """
        self._prefills = {} if on else None

    def __call__(self, ids: torch.Tensor, cache: HFCache | None = None, *, positions: torch.Tensor | None = None,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
        """Float32 logits (B, T, V) for ids (B, T); with a cache, the T positions after its `length` (appended).

        positions (T,) replaces the position ids and mask (T, length + T) (True = may attend) the causal mask, as
        CachedLM takes them: a draft tree in one pass (lab/tree_attention.py), through transformers' 4-D mask path.
        """
        memo = self._prefills is not None and cache is not None and cache.length == 0 and mask is None
        key = (tuple(ids.shape), tuple(ids.flatten().tolist())) if memo else None
        if memo and key in self._prefills:
            layers, logits = self._prefills[key]
            for i, (k, v) in enumerate(layers):
                cache.kv.update(k, v, i)
            return logits
        kv, extra = None if cache is None else cache.kv, {}
        if positions is not None:
            extra["position_ids"] = positions.expand(ids.shape[0], -1)  # (B, T)
        if mask is not None:
            extra["attention_mask"] = _bias(mask, self.dtype).expand(ids.shape[0], 1, -1, -1)  # (B, 1, T, length + T)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, cache=kv, use_cache=cache is not None, **extra).logits.float()
        if memo:
            self._prefills[key] = ([(layer.keys, layer.values) for layer in cache.kv.layers], logits)
        return logits

    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def layer_runner(self) -> HFLayers:
        """The decoder a range of layers at a time (HFLayers), as sd.lab.early_exit_pair runs it."""
        return HFLayers(self)


def _bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive attention mask (T, S) of a boolean one (True = may attend), as transformers uses it as given."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


class HFLayers:
    """An HFCausalLM's decoder a range of layers at a time, as sd.lab.early_exit_pair runs it (one cache, shared).

    It drives transformers' own modules (embed_tokens, rotary_emb, layers[i], norm, lm_head) the way the model's
    forward does, with an explicit causal mask, so the lower layers may hold more positions than the upper ones.
    A DynamicCache appends, so run() first crops the layers it runs back to `start`. Full-attention models only
    (Qwen2 and Llama in transformers 5; a sliding-window layer would need its own mask).
    """

    def __init__(self, lm: HFCausalLM):
        types = getattr(lm.config, "layer_types", None) or ["full_attention"]
        if set(types) != {"full_attention"}:
            raise ValueError(f"lm must use full attention at every layer for a shared-cache early exit, got "
                             f"layer types {sorted(set(types))}")
        self.lm, self.inner = lm, lm.model.model
        self.n_layers, self.d_model, self.dtype = lm.config.num_hidden_layers, lm.config.hidden_size, lm.dtype
        self.device = self.inner.embed_tokens.weight.device

    def new_kv(self) -> HFCache:
        return self.lm.new_cache()

    def full(self, idx: torch.Tensor, kv: HFCache) -> torch.Tensor:
        """The model's own pass on idx (1, T) after kv.length positions (lower layers cropped back to it first)."""
        kv.crop_layers(kv.length, range(self.n_layers))
        return self.lm(idx, kv)

    def embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        """Token embeddings (1, T, C) of idx (1, T) (positions enter through the rotary angles in run)."""
        with torch.inference_mode():
            return self.inner.embed_tokens(idx)

    @torch.inference_mode()
    def run(self, x: torch.Tensor, kv: HFCache, start: int, layers: range) -> torch.Tensor:
        """x (1, T, C) at positions start.. through layers, each first cropped to start positions; (1, T, C)."""
        T = x.shape[1]
        kv.crop_layers(start, layers)
        positions = torch.arange(start, start + T, device=x.device)[None]  # (1, T)
        angles = self.inner.rotary_emb(x, positions)
        mask = causal_mask(T, start, x.device)
        bias = None if mask is None else _bias(mask, x.dtype)[None, None]  # (1, 1, T, start + T)
        for i in layers:
            x = self.inner.layers[i](x, attention_mask=bias, position_embeddings=angles, position_ids=positions,
                                     cache=kv.kv, use_cache=True)
        return x

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """The final norm and head: float32 logits (.., V) of hidden states (.., C)."""
        with torch.inference_mode():
            return self.lm.model.lm_head(self.inner.norm(h)).float()


def set_matmul(lm: HFCausalLM, path: str) -> HFCausalLM:
    """lm with its linear layers on a matrix-multiply path (MATMUL_PATHS); "onednn" needs float32 weights.

    "onednn" swaps every nn.Linear for torch.utils.mkldnn's MkldnnLinear, whose weights oneDNN packs once for its own
    kernels: on this machine the (k+1)-row verification pass costs far less against a one-row step than with the
    default kernels (c_v(4) 1.55 against 2.34 in the issue's probe). Values agree to float32 rounding, not bit for bit.
    """
    path = check_choice("path", path, MATMUL_PATHS)
    if not isinstance(lm, HFCausalLM):
        raise TypeError(f"lm must be an HFCausalLM, got {type(lm).__name__}")
    lm._prefills = None if lm._prefills is None else {}  # another kernel computes other (rounding-level) values
    if path == "default":
        return lm
    if lm.dtype != torch.float32:
        raise ValueError(f"path 'onednn' needs float32 weights, got {lm.dtype}")
    from torch.utils import mkldnn

    def swap(module):
        for name, child in module.named_children():
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, mkldnn.MkldnnLinear(child, torch.float32))
            else:
                swap(child)

    swap(lm.model)
    return lm


def early_exit_lm(lm: HFCausalLM, exit_layer: int) -> HFCausalLM:
    """lm's first exit_layer decoder layers, then its final norm and head, sharing lm's weights (no copy): an early
    exit of a transformers model, to draft for lm as a NeuralDraft.

    Unlike sd.lab.early_exit_pair(lm, exit_layer), which shares one cache with lm, it keeps a cache of its own
    (exit_layer layers), so verification recomputes the lower layers the draft ran: set beside the shared cache, it
    shows what sharing saves. It works wherever the model's decoder loops over `layers[:config.num_hidden_layers]`
    (Qwen2 and Llama in transformers 5).
    """
    import copy

    if not isinstance(lm, HFCausalLM):
        raise TypeError(f"lm must be an HFCausalLM, got {type(lm).__name__}")
    layers = lm.config.num_hidden_layers
    exit_layer = check_int("exit_layer", exit_layer, minimum=1)
    if exit_layer >= layers:
        raise ValueError(f"exit_layer must be below the model's {layers} layers (1 .. {layers - 1}), got {exit_layer}")
    config = copy.deepcopy(lm.config)
    config.num_hidden_layers = exit_layer
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types[:exit_layer])
    outer, inner = copy.copy(lm.model), copy.copy(lm.model.model)  # new objects, the same submodules and weights
    outer._modules, inner._modules = dict(outer._modules), dict(inner._modules)  # so the swaps below stay ours
    inner.config = config
    outer.model, outer.config = inner, config
    return HFCausalLM(outer, name=f"{lm.name}@exit{exit_layer}")


def tiny_hf_model(arch: str = "qwen2", *, vocab: int = 64, seed: int = 0, layers: int = 2,
                  dtype=torch.float32) -> HFCausalLM:
    """surface.tiny_causal_lm of the given architecture (ARCHES; hidden 32, every weight from N(0, 0.3^2) by seed),
    2 layers by default, as an HFCausalLM, for tests: no download."""
    config = TinyConfig(arch, vocab=vocab, layers=layers)
    return HFCausalLM(tiny_causal_lm(config, seed=seed, init="normal", dtype=dtype), name=f"tiny-{arch}")
