"""Lab: a transformers Llama or Qwen2 model over a static KV cache, each pass shape captured once as a CUDA graph.

Eager transformers spends most of a small model's GPU step launching kernels from Python (the H200 recording: 21 ms a
step for the 1.5B target, against 3.3 ms for a minimal decoder captured as CUDA graphs). A CUDA graph records a pass's
kernels once and replays them with one launch, but only if every tensor the pass touches keeps its address and shape.
So StaticLM
  - keeps keys and values in buffers allocated once per batch size (a KVCache (layers, B, kv heads, max_len, head
    dim)): rollback moves a length (crop), a tree's accepted path is gathered down (keep);
  - writes a pass's T new keys at slots given as a tensor and attends over the whole buffer under an additive mask
    that hides every key after the pass's own (a rejected draft's stale keys included), so a pass of shape (B, T) is
    the same kernels wherever it starts;
  - captures a (B, T) pass the first time that shape runs (lazily), then copies each call's inputs into the captured
    ones and replays it.
graphs="off" runs the same pass eagerly (the CPU's default): tests hold it against HFCausalLM's DynamicCache path.
graphs="replay" keeps the capture path's bookkeeping without CUDA (one set of static inputs and one output per shape,
copied into and rerun), so a CPU test sees an input that is not copied in or an output a later pass overwrites.
The decoders take it as they take any lab model: vocab, max_len, new_cache(), model(ids, cache, positions=, mask=).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import check_choice, check_int
from .hf_causal_lm import HFCausalLM
from .transformer import KVCache, check_positions_and_mask

__all__ = ["GRAPH_MODES", "StaticLM"]

GRAPH_MODES = ("auto", "cuda", "replay", "off")  # auto: "cuda" on a CUDA model, else "off"


class _Graph:
    """One captured pass shape: its static inputs, its output, and how to rerun it (a CUDA graph, or the pass)."""

    def __init__(self, run, inputs: tuple[torch.Tensor, ...], *, cuda: bool, pool=None):
        self.inputs = tuple(x.clone() for x in inputs)
        self.run, self.graph = run, None
        if not cuda:
            self.out = run(*self.inputs)
            return
        side = torch.cuda.Stream(self.inputs[0].device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture: lazy init, cuBLAS workspaces
            run(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.out = run(*self.inputs)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The pass on inputs: copied into the captured ones, replayed; a copy of the output (the next replay
        overwrites the captured one)."""
        for static, x in zip(self.inputs, inputs):
            static.copy_(x)
        if self.graph is not None:
            self.graph.replay()
        else:
            self.out.copy_(self.run(*self.inputs))
        return self.out.clone()


class StaticLM:
    """A transformers causal LM (Llama or Qwen2, full attention) as a lab model over a static KV cache, its passes
    captured as CUDA graphs (graphs: GRAPH_MODES); layers < the model's runs its first layers, then its norm and head
    (a draft by depth, sharing the weights). Passes of more than max_captured new tokens per row run uncaptured."""

    def __init__(self, lm: HFCausalLM, *, max_len: int, layers: int | None = None, graphs: str = "auto",
                 max_captured: int = 256):
        if not isinstance(lm, HFCausalLM):
            raise TypeError(f"lm must be an HFCausalLM, got {type(lm).__name__}")
        config = lm.config
        types = getattr(config, "layer_types", None) or ["full_attention"]
        if set(types) != {"full_attention"}:
            raise ValueError(f"lm must use full attention at every layer, got layer types {sorted(set(types))}")
        inner = lm.model.model
        n = config.num_hidden_layers
        layers = n if layers is None else check_int("layers", layers, minimum=1)
        if layers > n:
            raise ValueError(f"layers must lie in [1, {n}] (the model's layers), got {layers}")
        self.lm, self.layers = lm, list(inner.layers[:layers])
        self.embed, self.rotary, self.norm = inner.embed_tokens, inner.rotary_emb, inner.norm
        self.head = lm.model.lm_head
        self.vocab = lm.vocab
        self.max_len = check_int("max_len", max_len, minimum=2)
        if lm.max_len is not None and self.max_len > lm.max_len:
            raise ValueError(f"max_len must not exceed the model's {lm.max_len} positions, got {self.max_len}")
        self.max_captured = check_int("max_captured", max_captured, minimum=1)
        self.name = lm.name if layers == n else f"{lm.name}@{layers}"
        attn = self.layers[0].self_attn
        self.kv_heads, self.head_dim = config.num_key_value_heads, attn.head_dim
        self.device = self.embed.weight.device
        graphs = check_choice("graphs", graphs, GRAPH_MODES)
        if graphs == "auto":
            graphs = "cuda" if self.device.type == "cuda" else "off"
        if graphs == "cuda" and self.device.type != "cuda":
            raise ValueError(f"graphs 'cuda' needs the model on a CUDA device, got {self.device}")
        self.graphs = graphs
        self._buffers, self._live, self._captured = {}, {}, {}  # batch -> (k, v); batch -> cache; (B, T) -> _Graph
        self._pool = torch.cuda.graph_pool_handle() if graphs == "cuda" else None

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def n_params(self) -> int:
        """Parameters this model runs (its layers, embedding, norm and head)."""
        modules = [*self.layers, self.embed, self.norm, self.head]
        return sum(p.numel() for m in modules for p in m.parameters())

    def new_cache(self, batch: int = 1) -> KVCache:
        """An empty cache for `batch` rows over this model's buffers for that batch size: one live cache per batch
        size (a captured pass holds the buffers' addresses), so this retires the last one handed out."""
        batch = check_int("batch", batch, minimum=1)
        if batch not in self._buffers:
            shape = (len(self.layers), batch, self.kv_heads, self.max_len, self.head_dim)
            self._buffers[batch] = tuple(torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in "kv")
        self._live[batch] = KVCache.over(*self._buffers[batch])
        return self._live[batch]

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, cache: KVCache | None = None, *, positions: torch.Tensor | None = None,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
        """Float32 logits (B, T, V) for ids (B, T); with a cache (this model's live one), the T positions after its
        length, appended. positions (T,) and mask (T, length + T) (True = may attend) as CachedLM takes them."""
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2 or ids.shape[1] == 0:
            got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise TypeError(f"ids must be a LongTensor (B, T) with T >= 1, got {got}")
        B, T = ids.shape
        if cache is None:
            cache = KVCache.over(*(torch.zeros(len(self.layers), B, self.kv_heads, T, self.head_dim,
                                               dtype=self.dtype, device=self.device) for _ in "kv"))
        elif self._live.get(B) is not cache:
            raise ValueError(f"cache must be this model's latest new_cache({B}) (a newer one reuses its buffers)")
        start = cache.length
        if start + T > cache.max_len:
            raise ValueError(f"ids is too long: {start} cached + {T} new positions exceed max_len = {cache.max_len}")
        check_positions_and_mask(positions, mask, T=T, start=start, max_len=self.max_len)
        slots = torch.arange(start, start + T, device=self.device)  # (T,)
        at = (slots if positions is None else positions.to(self.device))[None].expand(B, T)  # (B, T)
        inputs = (ids.to(self.device), slots, at, self._bias(slots, mask, cache.max_len))
        captured = self.graphs != "off" and T <= self.max_captured and cache is self._live.get(B)
        if captured:
            if (B, T) not in self._captured:
                self._captured[B, T] = _Graph(self._runner(cache), inputs, cuda=self.graphs == "cuda",
                                              pool=self._pool)
            logits = self._captured[B, T](*inputs)
        else:
            logits = self._pass(*inputs, cache.k, cache.v)
        cache.length = start + T
        return logits

    def _runner(self, cache: KVCache):
        """The pass on the buffers a captured shape keeps (this batch size's, allocated once)."""
        k, v = cache.k, cache.v
        return lambda ids, slots, at, bias: self._pass(ids, slots, at, bias, k, v)

    def _bias(self, slots: torch.Tensor, mask: torch.Tensor | None, width: int) -> torch.Tensor:
        """Additive mask (T, width): 0 where new position t may read key j, the dtype's minimum elsewhere (every key
        after the pass's own slots); causal (j <= slots[t]) unless mask (T, start + T) says which."""
        keys = torch.arange(width, device=self.device)  # (width,)
        if mask is None:
            see = keys[None] <= slots[:, None]  # (T, width)
        else:
            see = F.pad(mask.to(self.device), (0, width - mask.shape[1]))  # (T, width), False past the pass
        bias = torch.zeros(see.shape, dtype=self.dtype, device=self.device)
        return bias.masked_fill(~see, torch.finfo(self.dtype).min)

    def _pass(self, ids, slots, at, bias, k, v) -> torch.Tensor:
        """Float32 logits (B, T, V): ids (B, T) at rotary positions at (B, T), their keys written at slots (T,) of
        k, v (layers, B, kv heads, width, head dim), each reading the keys bias (T, width) leaves at 0. Static."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # Qwen2's is the same function

        B, T = ids.shape
        x = self.embed(ids)  # (B, T, C)
        cos, sin = self.rotary(x, at)  # (B, T, head dim) each
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, heads, T, hd)
            kn = attn.k_proj(h).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, kv heads, T, hd)
            vn = attn.v_proj(h).view(B, T, -1, self.head_dim).transpose(1, 2)
            q, kn = apply_rotary_pos_emb(q, kn, cos, sin)
            k[i].index_copy_(2, slots, kn)
            v[i].index_copy_(2, slots, vn)
            y = F.scaled_dot_product_attention(q, k[i], v[i], attn_mask=bias, scale=attn.scaling,
                                               enable_gqa=True)  # (B, heads, T, hd)
            x = x + attn.o_proj(y.transpose(1, 2).reshape(B, T, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.head(self.norm(x)).float()  # (B, T, V)
