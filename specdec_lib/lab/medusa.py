"""Lab: Medusa heads: extra heads on the target's last feature guess the tokens after the next one.

Medusa (Cai et al. 2024, arXiv 2401.10774; FasterDecoding/Medusa medusa/model/medusa_model.py
@60eeab92e98adb0e787987493b11fa38535a8260): head j is a residual block x + SiLU(W x) (W zero at init) and a linear
layer initialised from the target's own head, reading the base model's output after its final norm; head j at
position t predicts the token at t + 1 + j, the target's own head the one at t + 1. The heads are trained on the
frozen target (tools/train_models.py), so the target is unchanged and so is what "exact" refers to.

Here the newest feature after n committed tokens is slot n - 2's (lab/features.py), whose own head predicted token
n - 1: head j there guesses token n - 1 + j, proposal j. None of the heads sees token n - 1 (it is not yet through
the target), nor the proposals before its own: each guesses from one vector. That is why the heads are cheap
(one small layer each, no pass over the target, no cache) and why their proposals agree less the deeper they go.

As a chain (propose, k <= K) the heads go through generate_speculative and `make measure` like any draft; as a
tree (propose_tree) every node at depth d draws its children from head d's law q_d: i.i.d. ("mss"), without
replacement ("rrs"), or q_d's top tokens, the tree Medusa itself builds ("onehot_sequential", "onehot_walk").
"""
from __future__ import annotations

import torch
from torch import nn

from .._checks import check_int
from ..multidraft_draws import draw_drafts
from .features import FeatureCache, FeatureTarget, check_feature_cache
from .steps import policy_probs, sample_token
from .transformer import CachedLM
from .tree_attention import tree_from_widths
from .tree_decoding import DraftTree

__all__ = ["ResBlock", "MedusaHeads", "MedusaDraft", "medusa_pair"]


class ResBlock(nn.Module):
    """x + SiLU(linear(x)), the linear's weight zero at init (Medusa's ResBlock): the identity until trained."""

    def __init__(self, d_model: int):
        super().__init__()
        self.linear = nn.Linear(d_model, d_model)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.silu(self.linear(x))  # (.., C)


class MedusaHeads(nn.Module):
    """num_heads heads on a target's features: forward(h (.., C)) -> logits (.., num_heads, vocab)."""

    def __init__(self, target: CachedLM, num_heads: int):
        super().__init__()
        num_heads = check_int("num_heads", num_heads, minimum=1)
        C, V = target.config.d_model, target.vocab
        self.heads = nn.ModuleList([nn.Sequential(ResBlock(C), nn.Linear(C, V)) for _ in range(num_heads)])
        with torch.no_grad():
            for head in self.heads:  # start from the target's own head (Medusa: medusa_head[i][-1].weight = lm_head)
                head[1].weight.copy_(target.head.weight)
                head[1].bias.copy_(target.head.bias)
        self.num_heads, self.vocab = num_heads, V
        self.eval()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.stack([head(h) for head in self.heads], dim=-2)  # (.., K, V)


class MedusaDraft:
    """Medusa's heads as a drafter of a FeatureTarget: reads slot n - 2's feature from the shared cache."""

    one_hot = False
    shares_cache = True  # start() is handed the target's cache

    def __init__(self, heads: MedusaHeads, name: str = "medusa"):
        if not isinstance(heads, MedusaHeads):
            raise TypeError(f"heads must be MedusaHeads, got {type(heads).__name__}")
        self.heads, self.name = heads, name
        self.vocab, self.max_len = heads.vocab, None

    def start(self, prompt: torch.Tensor, target_cache: FeatureCache | None = None) -> FeatureCache:
        """The target's FeatureCache (prefilled with prompt[:-1]); the heads keep no state of their own."""
        check_feature_cache(target_cache, "target_cache")
        if prompt.numel() < 2:
            raise ValueError(f"prompt must hold at least 2 tokens (the heads read the feature of the one before "
                             f"the last), got {prompt.numel()}")
        return target_cache

    def _logits(self, state: FeatureCache, n: int) -> torch.Tensor:
        """The heads' logits (K, V) at slot n - 2, the newest feature the cache holds."""
        if state.length != n - 1:
            raise ValueError(f"the target's cache must hold the n - 1 = {n - 1} committed tokens but the last, "
                             f"holds {state.length}")
        return self.heads(state.hidden[n - 2])  # (K, V)

    def propose(self, state, seq: torch.Tensor, n: int, k: int, *, temperature: float, top_k, generator):
        """(proposals (k,), q rows (k, V) or None when greedy): head j's pick is proposal j, k <= num_heads."""
        if k > self.heads.num_heads:
            raise ValueError(f"k must be at most the number of heads ({self.heads.num_heads}), got {k}")
        logits = self._logits(state, n)[:k]  # (k, V)
        picks = [sample_token(row, temperature, top_k, generator) for row in logits]
        proposals = torch.cat([x for x, _ in picks])  # (k,)
        return proposals, (None if temperature == 0.0 else torch.stack([q for _, q in picks]))

    def rollback(self, state, n: int) -> None:
        """Nothing to undo: verification crops the shared cache."""

    def propose_tree(self, state, seq: torch.Tensor, n: int, widths, *, draws: str, temperature: float, top_k,
                     generator) -> DraftTree:
        """A static tree (widths[d] children per node at depth d), each node's children drawn from head d's q_d
        as draws says; greedy: head d's top widths[d] tokens under every node of depth d."""
        if len(widths) > self.heads.num_heads:
            raise ValueError(f"widths must have at most one depth per head ({self.heads.num_heads}), got {widths}")
        logits = self._logits(state, n)  # (K, V)
        tokens, q_rows, parents_at_depth = [], [], 1
        for d, w in enumerate(widths):
            if temperature == 0.0:
                x = torch.topk(logits[d], w).indices.expand(parents_at_depth, w)  # (parents, w)
            else:
                q = policy_probs(logits[d].double(), temperature, top_k)  # (V,)
                x = draw_drafts(q, w, draws, parents_at_depth, generator)  # (parents, w)
                q_rows.append(q.expand(parents_at_depth, -1))
            tokens.append(x.reshape(-1))
            parents_at_depth *= w
        tree = tree_from_widths(widths, torch.cat(tokens))
        if temperature == 0.0:
            return DraftTree(tree, None)
        leaves = logits.new_zeros(parents_at_depth, self.vocab, dtype=torch.float64)  # a leaf's children: none
        return DraftTree(tree, torch.cat(q_rows + [leaves]))


def medusa_pair(model: CachedLM, heads: MedusaHeads) -> tuple[FeatureTarget, MedusaDraft]:
    """(target, draft) for sd.lab.generate_speculative (k <= heads) or sd.lab.generate_tree."""
    if not isinstance(model, CachedLM):
        raise TypeError(f"model must be a CachedLM (the lab's transformer), got {type(model).__name__}")
    if not isinstance(heads, MedusaHeads) or heads.vocab != model.vocab:
        raise ValueError("heads must be MedusaHeads for this model's vocabulary")
    return FeatureTarget(model), MedusaDraft(heads)
