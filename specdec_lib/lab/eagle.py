"""Lab: an EAGLE-style feature draft: one layer over the target's features and the next token's embedding.

EAGLE-1 (Li et al. 2024, arXiv 2401.15077; SafeAILab/EAGLE eagle/model/cnets.py, class Model, and
eagle/model/ea_model.py @2320d52e443672367a7b8447160f81af8318d1b1): `self.fc = nn.Linear(2 * hidden, hidden)` over
cat(input embeddings, hidden states), one decoder layer, and the target's own frozen lm_head on the draft's output; the
embeddings are the target's, frozen. The hidden states are the target's last ones after its final norm (our features,
lab/features.py). Training (eagle/train/main.py @41d8abbc15f82aa37d6b6c944e6857028130cc47) regresses the next
feature, SmoothL1, plus 0.1 x the cross-entropy of head(f-hat) against the target's own law softmax(head(f)); the
input features get uniform noise (tools/train_models.py does the same). Here the one layer is the lab's CachedBlock
with its own one-layer KVCache (EAGLE's layer 0 skips its input norm; ours keeps ln_1), there is no final norm (as in
EAGLE), and a learned position table stands in for EAGLE's rotary positions.

Row i of the draft reads (e_{i+1}, f_i): the embedding of token i+1 and the target's feature at slot i (which
predicted token i+1); it outputs f-hat_{i+1}, and head(f-hat_{i+1}) guesses token i+2. Row i sits at position i, the
slot of its feature (EAGLE's position_ids: the row index). After n committed tokens the target's cache holds slots
0 .. n-2 (lab/generation.py), so rows 0 .. n-2 have true features; row n-2 gives proposal 1. Proposal j+1 comes from
row n-2+j, which reads the predicted f-hat_{n-2+j} and proposal j: the draft autoregresses on its own features.

What is reused: the target's features (read from its FeatureCache, no pass over the target), its tok_emb and head, and
the draft's keys and values of every row whose feature is a true one. What is recomputed: rows n-1 .. n+k-3, built on
predicted features. Rollback crops the draft's cache to the n - 1 true rows (EAGLE-1's stable_kv, saved before the
draft expands its guesses); the next round recomputes the accepted rows from the true features that verification
wrote (a + 1 rows, one pass), as EAGLE-1 feeds `accept_hidden_state_new` back to topK_genrate.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .._checks import check_int
from .early_exit import run_layers
from .features import FeatureCache, FeatureTarget, check_feature_cache
from .steps import sample_token
from .transformer import CachedBlock, CachedLM, KVCache, LMConfig

__all__ = ["EagleDraft", "EagleState", "EagleDrafter", "eagle_pair", "eagle_config"]


def eagle_config(target: LMConfig) -> LMConfig:
    """The draft's shape for a target: its vocabulary, width, heads and max_len, one layer."""
    return LMConfig(vocab=target.vocab, d_model=target.d_model, n_head=target.n_head, n_layer=1,
                    max_len=target.max_len)


class EagleDraft(nn.Module):
    """f-hat = block(fc(cat(e, f)) + pos): (B, T, C) features and (B, T, C) embeddings -> (B, T, C) next features."""

    def __init__(self, config: LMConfig, *, seed: int = 0, init_std: float = 0.02):
        super().__init__()
        if not isinstance(config, LMConfig) or config.n_layer != 1:
            raise ValueError(f"config must be an LMConfig with n_layer = 1 (eagle_config(target.config)), got {config}")
        C = config.d_model
        self.config, self.vocab, self.max_len = config, config.vocab, config.max_len
        self.fc = nn.Linear(2 * C, C)  # EAGLE's fc over cat(embedding, feature)
        self.pos_emb = nn.Embedding(config.max_len, C)  # row i at position i
        self.blocks = nn.ModuleList([CachedBlock(C, config.n_head)])  # one layer (run_layers reads blocks)
        g = torch.Generator().manual_seed(check_int("seed", seed))
        with torch.no_grad():  # seeded, like CachedLM: zero biases, unit norms, normal weights
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln_" in name:
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=g) * init_std)
        self.eval()

    def new_cache(self) -> KVCache:
        """An empty one-layer cache for one sequence, on this draft's device and dtype."""
        w = self.fc.weight
        return KVCache(self.config, 1, dtype=w.dtype, device=w.device)

    def forward(self, f: torch.Tensor, e: torch.Tensor, cache: KVCache | None = None, start: int = 0) -> torch.Tensor:
        """f-hat (B, T, C) for rows start .. start+T-1: f the features there, e the next tokens' embeddings."""
        T = f.shape[1]
        if start + T > self.max_len:
            raise ValueError(f"rows {start} .. {start + T - 1} exceed the draft's max_len = {self.max_len}")
        if cache is not None and start != cache.length:
            raise ValueError(f"start must be the cache's length {cache.length} (rows are appended), got {start}")
        pos = torch.arange(start, start + T, device=f.device)  # (T,)
        x = self.fc(torch.cat([e, f], dim=-1)) + self.pos_emb(pos)  # (B, T, C)
        if cache is None:  # teacher forcing over whole windows: plain causal attention
            return run_layers(self, x, None, 0, range(1))  # (B, T, C)
        f_hat = run_layers(self, x, cache, start, range(1))  # (B, T, C), the rows' keys and values written
        cache.length = start + T
        return f_hat


@dataclass
class EagleState:
    """A run's state: the target's FeatureCache (shared), the draft's KVCache, and how many rows are true."""

    target: FeatureCache
    kv: KVCache
    true_rows: int = 0  # rows 0 .. true_rows-1 of kv were computed from the target's own features

    @property
    def length(self) -> int:
        """Rows in the draft's cache (true ones, then any built on predicted features)."""
        return self.kv.length


class EagleDrafter:
    """An EagleDraft as a drafter of a FeatureTarget: reads the true features, autoregresses on its own."""

    one_hot = False
    shares_cache = True  # start() is handed the target's cache

    def __init__(self, model: CachedLM, net: EagleDraft, name: str = "eagle"):
        self.model, self.net, self.name = model, net, name
        self.vocab, self.max_len = net.vocab, net.max_len

    def _rows(self, state: EagleState, f: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """f-hat (T, C) of the next T rows, from features f (T, C) and tokens x (T,), appended to the draft's cache."""
        return self.net(f[None], self.model.tok_emb(x)[None], state.kv, state.kv.length)[0]  # (T, C)

    def start(self, prompt: torch.Tensor, target_cache: FeatureCache | None = None) -> EagleState:
        """The target's FeatureCache (holding prompt[:-1]) and a draft cache of rows 0 .. L-3 (propose adds row L-2)."""
        check_feature_cache(target_cache, "target_cache")
        L = prompt.numel()
        if L < 2:
            raise ValueError(f"prompt must hold at least 2 tokens (row 0 reads the feature of token 0 and the "
                             f"embedding of token 1), got {L}")
        state = EagleState(target_cache, self.net.new_cache())
        if L >= 3:
            self._rows(state, target_cache.hidden[:L - 2], prompt[1:L - 1])
        state.true_rows = state.kv.length
        return state

    def propose(self, state: EagleState, seq: torch.Tensor, n: int, k: int, *, temperature: float, top_k,
                generator):
        """(proposals (k,), q rows (k, V) or None when greedy) after the committed seq[:n]: rows up to n-2 from the
        target's features, then k - 1 rows on the draft's own."""
        if state.target.length != n - 1:
            raise ValueError(f"the target's cache must hold the n - 1 = {n - 1} committed tokens but the last, "
                             f"holds {state.target.length}")
        if n + k - 2 > self.max_len:
            raise ValueError(f"k must be at most max_len - n + 2 = {self.max_len - n + 2} (the draft's rows reach "
                             f"n + k - 3), got {k}")
        state.kv.crop(min(state.kv.length, n - 2))  # always read row n-2 afresh: its output gives proposal 1
        m = state.kv.length
        f_hat = self._rows(state, state.target.hidden[m:n - 1], seq[m + 1:n])[-1]  # (C,) f-hat_{n-1}
        state.true_rows = n - 1
        proposals, q_rows = [], []
        for j in range(k):
            x, q = sample_token(self.model.head(f_hat), temperature, top_k, generator)  # (1,), (V,) or None
            proposals.append(x)
            q_rows.append(q)
            if j < k - 1:  # row n-1+j: the predicted feature and the proposal it just made
                f_hat = self._rows(state, f_hat[None], x)[-1]  # (C,)
        return torch.cat(proposals), (None if temperature == 0.0 else torch.stack(q_rows))

    def rollback(self, state: EagleState, n: int) -> None:
        """Forget every row built on a predicted feature (and any beyond n): the next round rebuilds them."""
        state.kv.crop(min(state.kv.length, state.true_rows, n))
        state.true_rows = state.kv.length


def eagle_pair(model: CachedLM, net: EagleDraft, name: str = "eagle") -> tuple[FeatureTarget, EagleDrafter]:
    """(target, draft) for sd.lab.generate_speculative: net drafting on model's features, head and embeddings."""
    if not isinstance(model, CachedLM):
        raise TypeError(f"model must be a CachedLM (the lab's transformer), got {type(model).__name__}")
    if not isinstance(net, EagleDraft):
        raise TypeError(f"net must be an EagleDraft, got {type(net).__name__}")
    if net.vocab != model.vocab or net.config.d_model != model.config.d_model:
        raise ValueError(f"net must match the model's vocabulary and width (vocab {model.vocab}, d_model "
                         f"{model.config.d_model}), got vocab {net.vocab}, d_model {net.config.d_model}")
    if net.max_len > model.max_len:
        raise ValueError(f"net's max_len must be at most the model's ({model.max_len}), got {net.max_len}")
    return FeatureTarget(model), EagleDrafter(model, net, name)
