"""Lab: tree speculative decoding on a cached target: a draft tree scored in one pass and walked node by node.

A tree drafter (Medusa's heads, lab/medusa.py) proposes a FlatTree and, under sampling, the law q each node's
children were drawn from. The target scores the root (the last committed token) and every node in one pass, with
tree_attention's layout (depth positions, the ancestor mask). From the root down, a node's children are the drafts
of one multi-draft step, tested by a registered rule of Act V (sd.multidraft RULES: `mss` for children drawn
i.i.d. from q, `rrs` without replacement, `onehot_sequential` or `onehot_walk` for q's top tokens): a kept child is
descended into (the first child holding the kept token), a fallback token ends the round, and at a leaf the
bonus token is drawn from the leaf's own row. Greedy decoding keeps the child that is the target's argmax. The
cache then keeps the accepted path's slots only (KVCache.keep), moved to where a chain pass would have put them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_choice, check_int, check_widths
from ..cost import tree_nodes
from ..multidraft import RULES
from ..multidraft_rules import step_verify
from ..sampling import sample_rows
from ..telemetry import SpecDecodeLog
from .features import FeatureTarget
from .generation import check_decoding, check_log, check_prompt
from .hf_causal_lm import HFCausalLM
from .static_lm import StaticLM
from .steps import GREEDY, Decoding, clock, policy_probs, prefill
from .transformer import CachedLM
from .tree_attention import FlatTree, check_flat_tree, tree_layout

__all__ = ["DraftTree", "TREE_RULES", "tree_rule", "children", "walk_tree", "tree_round", "generate_tree"]

TREE_RULES = tuple(name for name, r in RULES.items() if r.nested)  # a node may have any number of children


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A proposed tree, and (under sampling) q (N+1, V) float64: row 0 the law the root's children were drawn
    from, row i+1 node i's children's law (None when greedy). Only the first `proposals` nodes (default all) are
    drafts the walk may keep; the rest are scored in the same pass and kept by no one (lookahead's window)."""

    tree: FlatTree
    q: torch.Tensor | None
    proposals: int | None = None

    def __post_init__(self):
        check_flat_tree(self.tree)
        if self.q is not None and (self.q.dim() != 2 or self.q.shape[0] != self.tree.n + 1):
            raise ValueError(f"q must have one row per node and one for the root, ({self.tree.n + 1}, V), "
                             f"got {tuple(self.q.shape)}")
        if self.proposals is None:
            object.__setattr__(self, "proposals", self.tree.n)
        check_int("proposals", self.proposals, minimum=0)
        if self.proposals > self.tree.n:
            raise ValueError(f"proposals must be at most the tree's {self.tree.n} nodes, got {self.proposals}")


def tree_rule(rule: str):
    """The registered multi-draft rule called rule, if a tree node can use it (TREE_RULES)."""
    return RULES[check_choice("rule", rule, TREE_RULES)]


def children(tree: FlatTree) -> list[list[int]]:
    """Each node's children in flat order: [0] the root's, [i + 1] node i's."""
    out = [[] for _ in range(tree.n + 1)]
    for i, a in enumerate(tree.parents.tolist()):
        out[a + 1].append(i)
    return out


def walk_tree(rows: torch.Tensor, draft: DraftTree, *, verifier, generator) -> tuple[list[int], int]:
    """(the accepted path's nodes, the round's last token) from the target's rows (N+1, V).

    Greedy (draft.q None) rows are logits and the argmax child is kept; otherwise rows are the policy's
    probabilities (float64) and each node's children are tested by verifier against q's row for that node.
    """
    tokens, kids = draft.tree.tokens.tolist(), children(draft.tree)
    path, node = [], -1
    while True:
        row, below = rows[node + 1], [i for i in kids[node + 1] if i < draft.proposals]
        if draft.q is None:
            token = int(row.argmax())
            kept = token in (tokens[i] for i in below)
        elif not below:
            token, kept = int(sample_rows(row, generator)), False
        else:
            X = torch.tensor([[tokens[i] for i in below]], device=rows.device)  # (1, w): this node's drafts
            step = step_verify(row, draft.q[node + 1], X, verifier=verifier, generator=generator)
            token, kept = int(step.token[0]), bool(step.kept[0])
        if not kept:
            return path, token
        node = next(i for i in below if tokens[i] == token)
        path.append(node)


def tree_round(target, cache, draft: DraftTree, last: torch.Tensor, *, n: int, decoding: Decoding,
               verifier) -> tuple[torch.Tensor, int, torch.Tensor]:
    """One verification of a tree: one pass over last (1,) and the nodes, the walk, the cache keeps the path.

    Returns (the accepted path's tokens (m,), the token after them, the pass's logits (1+N, V)). The cache holds
    n - 1 slots before and n + m after (every committed token but the last).
    """
    tree = draft.tree
    positions, mask = tree_layout(tree, n)  # (1+N,), (1+N, n+N)
    dev = last.device
    logits = target(torch.cat([last, tree.tokens.to(dev)])[None], cache, positions=positions.to(dev),
                    mask=mask.to(dev))[0]  # (1+N, V)
    rows = logits if draft.q is None else policy_probs(logits.double(), decoding.temperature, decoding.top_k)
    path, token = walk_tree(rows, draft, verifier=verifier, generator=decoding.generator)
    cache.keep(n, n + torch.tensor(path, dtype=torch.long, device=dev))  # node i sat at slot n + i
    return tree.tokens[path].to(dev), token, logits


@torch.inference_mode()
def generate_tree(target, drafter, prompt: torch.Tensor, n_new: int, widths=None, *, rule: str = "mss",
                  decoding: Decoding = GREEDY, log: SpecDecodeLog | None = None) -> torch.Tensor:
    """n_new tokens from target, a draft tree verified per round: a static one (widths[d] children per node at
    depth d), or, with widths None, the drafter's own (its tree_bounds() give its most nodes and depth).

    drafter has propose_tree (sd.lab.MedusaDraft, sd.lab.LookaheadDraft), and observe(state, draft, logits) if it
    learns from the pass (lookahead); rule names the multi-draft rule every node uses (TREE_RULES), which also
    says how the drafter draws the children (its verifier's draws). The output's law is the target's under
    decoding's policy whenever the rule is exact; greedy output equals plain greedy decoding.
    """
    if not isinstance(target, (CachedLM, FeatureTarget, HFCausalLM, StaticLM)):
        raise TypeError("target must be a CachedLM, a FeatureTarget, an HFCausalLM or a StaticLM (it takes positions "
                        f"and a tree mask), got {type(target).__name__}")
    if not callable(getattr(drafter, "propose_tree", None)):
        raise TypeError(f"drafter must propose trees (propose_tree), got {type(drafter).__name__}")
    n_new = check_int("n_new", n_new, minimum=1)
    if widths is None:
        if not callable(getattr(drafter, "tree_bounds", None)):
            raise ValueError(f"widths must be given for a drafter without a tree of its own, got None for "
                             f"{type(drafter).__name__}")
        nodes, depth = drafter.tree_bounds()
    else:
        widths = tuple(check_widths(widths))
        nodes, depth = tree_nodes(widths), len(widths)
    verifier = tree_rule(rule).verifier
    decoding = check_decoding(decoding)
    if decoding.verifier != "token":
        raise ValueError(f"decoding.verifier must be 'token' for a tree (each node is a multi-draft step), "
                         f"got {decoding.verifier!r}")
    prompt = check_prompt(prompt, target, n_new, extra=nodes)
    check_log(log, depth)
    L = prompt.numel()
    seq = prompt.new_empty(L + n_new + depth + 1)
    seq[:L] = prompt
    cache = prefill(target, prompt)
    state = drafter.start(prompt, cache)
    n, policy, observe = L, decoding.kwargs(), getattr(drafter, "observe", None)
    while n < L + n_new:
        t0 = clock()
        draft = drafter.propose_tree(state, seq, n, widths, draws=verifier.draws, **policy)
        t1 = clock(draft.tree.tokens if log is not None else None)  # a read that counts waits for the draft
        path, token, logits = tree_round(target, cache, draft, seq[n - 1:n], n=n, decoding=decoding,
                                         verifier=verifier)
        if observe is not None:
            observe(state, draft, logits)
        a = path.numel()
        seq[n:n + a] = path
        seq[n + a] = token
        emitted = min(a + 1, L + n_new - n)
        n += a + 1
        if log is not None:
            log.record_round(a, emitted, draft_time=t1 - t0, verify_time=clock(seq) - t1)
    return seq[L:L + n_new].clone()
