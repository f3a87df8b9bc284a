"""Lab: a lab model over a static KV cache, each pass shape captured once as a CUDA graph (a transformers Llama or
Qwen2 through HFCausalLM, or the course's own CachedLM, the byte pair).

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
A pass is written once; what differs between a transformers model and CachedLM (embedding, rotary or learned
positions, the projections, the MLP) is read from the model's own modules (_HFStack, _ByteStack).
graphs="off" runs the same pass eagerly (the CPU's default): tests hold it against HFCausalLM's DynamicCache path and
CachedLM's own forward.
graphs="replay" keeps the capture path's bookkeeping without CUDA (one set of static inputs and one output per shape,
copied into and rerun), so a CPU test sees an input that is not copied in or an output a later pass overwrites.
The decoders take it as they take any lab model: vocab, max_len, new_cache(), model(ids, cache, positions=, mask=).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import check_choice, check_int
from .hf_causal_lm import HFCausalLM
from .transformer import CachedLM, KVCache, check_positions_and_mask

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


class _HFStack:
    """A transformers Llama or Qwen2's first `layers` layers, norm and head: a pass's pieces, as its forward runs."""

    def __init__(self, lm: HFCausalLM, layers: int):
        config, inner = lm.config, lm.model.model
        types = getattr(config, "layer_types", None) or ["full_attention"]
        if set(types) != {"full_attention"}:
            raise ValueError(f"model must use full attention at every layer, got layer types {sorted(set(types))}")
        self.blocks, self.embedding, self.rotary = list(inner.layers[:layers]), inner.embed_tokens, inner.rotary_emb
        self.final = [inner.norm, lm.model.lm_head]
        self.kv_heads, self.head_dim = config.num_key_value_heads, self.blocks[0].self_attn.head_dim
        self.scale = self.blocks[0].self_attn.scaling
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # Qwen2's is the same function

        self.rotate = apply_rotary_pos_emb

    def embed(self, ids, at):
        """(x (B, T, C), the rotary angles (cos, sin) at positions at (B, T))."""
        x = self.embedding(ids)
        return x, self.rotary(x, at)

    def attend_in(self, i, x, angles):
        """Queries (B, heads, T, hd), keys and values (B, kv heads, T, hd) of layer i, rotated."""
        layer, (B, T, _) = self.blocks[i], x.shape
        attn, h = layer.self_attn, layer.input_layernorm(x)
        q, k, v = (f(h).view(B, T, -1, self.head_dim).transpose(1, 2) for f in (attn.q_proj, attn.k_proj, attn.v_proj))
        return (*self.rotate(q, k, *angles), v)

    def attend_out(self, i, x, y):
        """x after layer i, given its attention's output y (B, T, heads x hd)."""
        layer = self.blocks[i]
        x = x + layer.self_attn.o_proj(y)
        return x + layer.mlp(layer.post_attention_layernorm(x))


class _ByteStack:
    """CachedLM's first `layers` blocks, ln_f and head: the same pieces of its pass."""

    def __init__(self, model: CachedLM, layers: int):
        self.model, self.blocks = model, list(model.blocks[:layers])
        self.embedding, self.final = model.tok_emb, [model.ln_f, model.head]
        config = model.config
        self.kv_heads, self.head_dim, self.scale = config.n_head, config.d_model // config.n_head, None

    def embed(self, ids, at):
        return self.model.tok_emb(ids) + self.model.pos_emb(at[0]), None  # (B, T, C); positions are shared by rows

    def attend_in(self, i, x, _):
        block = self.blocks[i]
        return tuple(block.attn.project(block.ln_1(x)))  # 3 x (B, nh, T, hs)

    def attend_out(self, i, x, y):
        block = self.blocks[i]
        x = x + block.attn.proj(y)
        return x + block.mlp(block.ln_2(x))


class StaticLM:
    """A lab model (an HFCausalLM over a Llama or Qwen2, or a CachedLM) over a static KV cache, its passes captured as
    CUDA graphs (graphs: GRAPH_MODES); layers below the model's runs its first layers, then its final norm and head
    (a draft by depth, sharing the weights). Passes of more than max_captured new tokens per row run uncaptured."""

    def __init__(self, model: HFCausalLM | CachedLM, *, max_len: int, layers: int | None = None,
                 graphs: str = "auto", max_captured: int = 256):
        if not isinstance(model, (HFCausalLM, CachedLM)):
            raise TypeError(f"model must be an HFCausalLM or a CachedLM, got {type(model).__name__}")
        hf = isinstance(model, HFCausalLM)
        n = model.config.num_hidden_layers if hf else model.config.n_layer
        layers = n if layers is None else check_int("layers", layers, minimum=1)
        if layers > n:
            raise ValueError(f"layers must lie in [1, {n}] (the model's layers), got {layers}")
        self.stack = _HFStack(model, layers) if hf else _ByteStack(model, layers)
        self.model, self.layers, self.vocab = model, layers, model.vocab
        self.max_len = check_int("max_len", max_len, minimum=2)
        if model.max_len is not None and self.max_len > model.max_len:
            raise ValueError(f"max_len must not exceed the model's {model.max_len} positions, got {self.max_len}")
        self.max_captured = check_int("max_captured", max_captured, minimum=1)
        name = getattr(model, "name", type(model).__name__)
        self.name = name if layers == n else f"{name}@{layers}"
        self.device = self.stack.embedding.weight.device
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
        return self.stack.embedding.weight.dtype

    def n_params(self) -> int:
        """Parameters this model's passes read (its layers, embeddings, final norm and head)."""
        modules = {id(m): m for m in [*self.stack.blocks, *self.stack.final, self.stack.embedding]}
        if isinstance(self.model, CachedLM):
            modules[id(self.model.pos_emb)] = self.model.pos_emb
        return sum(p.numel() for m in modules.values() for p in m.parameters())

    def new_cache(self, batch: int = 1) -> KVCache:
        """An empty cache for `batch` rows over this model's buffers for that batch size: one live cache per batch
        size (a captured pass holds the buffers' addresses), so this retires the last one handed out."""
        batch = check_int("batch", batch, minimum=1)
        if batch not in self._buffers:
            shape = (self.layers, batch, self.stack.kv_heads, self.max_len, self.stack.head_dim)
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
            cache = KVCache.over(*(torch.zeros(self.layers, B, self.stack.kv_heads, T, self.stack.head_dim,
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
        """Float32 logits (B, T, V): ids (B, T) at positions at (B, T), their keys written at slots (T,) of k, v
        (layers, B, kv heads, width, head dim), each reading the keys bias (T, width) leaves at 0. Static shapes."""
        B, T = ids.shape
        x, angles = self.stack.embed(ids, at)  # (B, T, C)
        for i in range(self.layers):
            q, kn, vn = self.stack.attend_in(i, x, angles)  # (B, heads, T, hd), (B, kv heads, T, hd) x 2
            k[i].index_copy_(2, slots, kn)
            v[i].index_copy_(2, slots, vn)
            y = F.scaled_dot_product_attention(q, k[i], v[i], attn_mask=bias, scale=self.stack.scale,
                                               enable_gqa=True)  # (B, heads, T, hd)
            x = self.stack.attend_out(i, x, y.transpose(1, 2).reshape(B, T, -1))
        norm, head = self.stack.final
        return head(norm(x)).float()  # (B, T, V)
