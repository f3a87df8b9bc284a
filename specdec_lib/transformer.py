"""A tiny causal transformer and the block-versus-incremental alignment test ("the logit at r predicts r+1")."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_int, check_real

# Init scales, chosen so next-token distributions are clearly non-uniform (max prob ~0.2 against 1/12) and
# differ between positions: on a random 5-token prefix and 4 proposals, the aligned and shifted slices sit
# at max TV ~0.33-0.41 across seeds 0-7 (the post's model gave 0.337).
EMB_STD = 1.0    # token and position embeddings
PROJ_STD = 0.2   # every linear layer inside the blocks (attention and MLP)
HEAD_STD = 0.12  # the output head, which reads a LayerNorm-ed residual of norm ~sqrt(d_model)


class _Linear(nn.Linear):
    """nn.Linear left uninitialised (no global RNG draw); TinyCausalLM fills it from its own generator."""

    def reset_parameters(self) -> None:
        pass


class _Embedding(nn.Embedding):
    """nn.Embedding left uninitialised (no global RNG draw); TinyCausalLM fills it from its own generator."""

    def reset_parameters(self) -> None:
        pass


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; q, k, v are computed separately so a KV cache can slot in later."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.q_proj = _Linear(d_model, d_model)
        self.k_proj = _Linear(d_model, d_model)
        self.v_proj = _Linear(d_model, d_model)
        self.out_proj = _Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend from every position to itself and the positions before it."""
        B, T, C = x.shape
        hs = C // self.n_head
        q = self.q_proj(x).view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = self.k_proj(x).view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = self.v_proj(x).view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)     # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                # (B, T, C)
        return self.out_proj(y)                                         # (B, T, C)


class MLP(nn.Module):
    """Position-wise feed-forward: expand 4x, GELU, project back."""

    def __init__(self, d_model: int):
        super().__init__()
        self.fc = _Linear(d_model, 4 * d_model)
        self.proj = _Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP to each position independently."""
        return self.proj(F.gelu(self.fc(x)))  # (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run one residual attention step and one residual MLP step."""
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))   # (B, T, C)
        return x


class TinyCausalLM(nn.Module):
    """A tiny decoder-only causal LM, initialised deterministically from `seed` without touching global RNG."""

    def __init__(self, *, vocab: int = 12, d_model: int = 32, n_head: int = 2, n_layer: int = 2,
                 max_len: int = 64, seed: int = 0):
        super().__init__()
        self.vocab = check_int("vocab", vocab, minimum=2)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.n_head = check_int("n_head", n_head, minimum=1)
        self.n_layer = check_int("n_layer", n_layer, minimum=0)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.seed = check_int("seed", seed)
        if d_model % n_head != 0:
            raise ValueError(f"d_model must be divisible by n_head, got d_model={d_model}, n_head={n_head}")
        self.tok_emb = _Embedding(vocab, d_model)
        self.pos_emb = _Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = _Linear(d_model, vocab)
        self._init_weights(torch.Generator().manual_seed(self.seed))
        self.eval()

    @torch.no_grad()
    def _init_weights(self, g: torch.Generator) -> None:
        """Fill every parameter from the private generator g: normals for weights, zeros/ones elsewhere."""
        for name, module in self.named_modules():
            if isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, EMB_STD, generator=g)
            elif isinstance(module, nn.Linear):
                std = HEAD_STD if name == "head" else PROJ_STD
                module.weight.normal_(0.0, std, generator=g)
                module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Map token ids (B, T) to next-token logits (B, T, vocab); logits[:, r] predicts token r+1."""
        _check_idx(idx, self.vocab, self.max_len)
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, C)
        for block in self.blocks:
            x = block(x)                           # (B, T, C)
        x = self.ln_f(x)                           # (B, T, C)
        return self.head(x)                        # (B, T, vocab)


def _check_ids(name: str, x, vocab: int, *, dims: int) -> torch.Tensor:
    """Raise unless x is a LongTensor of token ids in [0, vocab) with `dims` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.long:
        raise TypeError(f"{name} must be a LongTensor (dtype torch.int64), got dtype {x.dtype}")
    if x.dim() != dims:
        want = "shape (B, T)" if dims == 2 else "1-D"
        raise ValueError(f"{name} must {'have ' if dims == 2 else 'be '}{want}, got shape {tuple(x.shape)}")
    if x.numel() and (x.min() < 0 or x.max() >= vocab):
        raise ValueError(f"{name} must hold token ids in [0, {vocab}), got min {x.min().item()}, max {x.max().item()}")
    return x


def _check_idx(idx, vocab: int, max_len: int) -> None:
    """Raise unless idx is a (B, T) LongTensor of token ids in [0, vocab) with 1 <= T <= max_len."""
    _check_ids("idx", idx, vocab, dims=2)
    if idx.shape[1] == 0:
        raise ValueError("idx must hold at least one position (T >= 1)")
    if idx.shape[1] > max_len:
        raise ValueError(f"idx is too long: T = {idx.shape[1]} exceeds max_len = {max_len}")


def _check_tokens(name: str, x, vocab: int, *, allow_empty: bool) -> torch.Tensor:
    """Raise unless x is a 1-D LongTensor of token ids in [0, vocab) (non-empty unless allow_empty)."""
    _check_ids(name, x, vocab, dims=1)
    if not allow_empty and x.numel() == 0:
        raise ValueError(f"{name} must be non-empty")
    return x


def _check_block(model: nn.Module, prefix, proposals) -> torch.Tensor:
    """Validate prefix and proposals for model and return their concatenation (L + k,)."""
    _check_tokens("prefix", prefix, model.vocab, allow_empty=False)
    _check_tokens("proposals", proposals, model.vocab, allow_empty=True)
    n = prefix.numel() + proposals.numel()
    if n > model.max_len:
        raise ValueError(f"prefix + proposals is too long: {prefix.numel()} + {proposals.numel()} = {n} "
                         f"exceeds the model's max_len = {model.max_len}")
    return torch.cat([prefix, proposals])  # (L + k,)


@torch.no_grad()
def incremental_scores(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
    """Ground truth: row j is softmax of the last logits on exactly prefix + proposals[:j]; shape (k+1, V)."""
    seq = _check_block(model, prefix, proposals)  # (L + k,)
    L, k = prefix.numel(), proposals.numel()
    rows = [torch.softmax(model(seq[None, :L + j])[0, -1], dim=-1) for j in range(k + 1)]  # k+1 x (V,)
    return torch.stack(rows)  # (k+1, V)


@torch.no_grad()
def block_scores(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """One pass over prefix + proposals; row j is softmax at position L-1+offset+j, rows past the end dropped."""
    seq = _check_block(model, prefix, proposals)  # (L + k,)
    offset = check_int("offset", offset)
    L, k = prefix.numel(), proposals.numel()
    start = L - 1 + offset
    if start < 0 or start >= L + k:
        raise ValueError(f"offset = {offset} selects no rows: with L = {L} and k = {k} "
                         f"it must lie in [{-(L - 1)}, {k}]")
    probs = torch.softmax(model(seq[None])[0], dim=-1)  # (L + k, V)
    return probs[start:start + k + 1]                    # (min(k+1, L+k-start), V)


@dataclass(frozen=True)
class AlignmentReport:
    """Outcome of comparing block scoring against incremental scoring, row by row."""

    aligned: bool
    max_abs_diff: float
    max_tv: float
    rows: int


def check_alignment(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor,
                    offset: int = 0, atol: float = 1e-5) -> AlignmentReport:
    """Does block scoring at this offset reproduce incremental scoring on every row both have?"""
    atol = check_real("atol", atol, low=0.0)
    block = block_scores(model, prefix, proposals, offset)  # (m, V), m <= k+1
    truth = incremental_scores(model, prefix, proposals)     # (k+1, V)
    m = block.shape[0]
    truth = truth[:m]                                         # (m, V)
    diff = (block - truth).abs()                              # (m, V)
    return AlignmentReport(
        aligned=bool(torch.allclose(block, truth, rtol=0.0, atol=atol)),
        max_abs_diff=diff.max().item(),
        max_tv=(0.5 * diff.sum(-1)).max().item(),
        rows=m,
    )


def alignment_tv(model: nn.Module, prefix: torch.Tensor, proposals: torch.Tensor) -> float:
    """Max TV between the aligned (offset 0) and shifted (offset 1) slices on their k common rows."""
    _check_block(model, prefix, proposals)
    if proposals.numel() == 0:
        raise ValueError("proposals must be non-empty: with k = 0 the shifted slice has no rows")
    aligned = block_scores(model, prefix, proposals, offset=0)  # (k+1, V)
    shifted = block_scores(model, prefix, proposals, offset=1)  # (k, V)
    k = shifted.shape[0]
    return (0.5 * (aligned[:k] - shifted).abs().sum(-1)).max().item()
