"""Tree attention: a whole draft tree scored in one target pass, against scoring every root path on its own.

Serving systems (SpecInfer, Medusa, EAGLE, SGLang) flatten the tree's nodes into one sequence after the prefix.
Two things keep that pass equal to running the target on each node's root path: node i attends to the prefix
and to its own ancestors only (the ancestor mask, not the causal mask over the flattened sequence), and its
position id is len(prefix) + depth(i) - 1, not its index in the flattened sequence. `tree_alignment_report`
compares the one pass with the ground truth `path_scores`, node by node, as `alignment_report` does for a chain.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .._checks import check_choice, check_int, check_numbers, check_real, check_token_ids, check_widths
from .alignment import max_row_tv
from .hf_causal_lm import HFCausalLM
from .static_lm import StaticLM
from .transformer import CachedLM

__all__ = ["MASKS", "POSITIONS", "FlatTree", "tree_from_widths", "check_flat_tree", "tree_mask", "tree_positions",
           "tree_layout", "check_tree_inputs", "tree_scores", "path_scores", "TreeAlignmentReport",
           "tree_alignment_report"]

MASKS = ("ancestor", "causal")  # the tree's ancestor mask; the causal mask over the flattened tree (wrong)
POSITIONS = ("depth", "flat")   # len(prefix) + depth - 1; len(prefix) + index in the flattened tree (wrong)


@dataclass(frozen=True, eq=False)
class FlatTree:
    """A draft tree flattened parents-first: a token and a parent index (-1 under the root) per node; depth derived."""

    tokens: torch.Tensor   # (N,) int64 token ids
    parents: torch.Tensor  # (N,) int64, parents[i] in [-1, i)
    depths: torch.Tensor = field(init=False)  # (N,) int64, 1 for a child of the root

    def __post_init__(self) -> None:
        tokens = self.tokens
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
            got = f"dtype {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"tokens must be a LongTensor (dtype torch.int64), got {got}")
        if tokens.dim() != 1 or tokens.numel() == 0:
            raise ValueError(f"tokens must be 1-D and non-empty (one id per node), got shape {tuple(tokens.shape)}")
        if int(tokens.min()) < 0:
            raise ValueError(f"tokens must hold token ids >= 0, got {int(tokens.min())}")
        parents = [check_int(f"parents[{i}]", a) for i, a in enumerate(check_numbers("parents", self.parents))]
        if len(parents) != tokens.numel():
            raise ValueError(f"parents must hold one index per node: {tokens.numel()} tokens, got {len(parents)}")
        depths = []
        for i, a in enumerate(parents):
            if not -1 <= a < i:
                raise ValueError(f"parents[{i}] must lie in [-1, {i}) (-1 = the root; a parent comes before its "
                                 f"children), got {a}")
            depths.append(1 if a == -1 else depths[a] + 1)
        object.__setattr__(self, "tokens", tokens.clone())
        # the tree's shape is read on the host (walks, masks); tree_round moves its layout to the pass's device once
        object.__setattr__(self, "parents", torch.tensor(parents, dtype=torch.long, device="cpu"))  # (N,)
        object.__setattr__(self, "depths", torch.tensor(depths, dtype=torch.long, device="cpu"))    # (N,)

    @property
    def n(self) -> int:
        """Number of nodes N (the root, the prefix's last token, is not a node)."""
        return self.tokens.numel()

    def path(self, i: int) -> list[int]:
        """The node indices from the root's child down to node i, inclusive."""
        out = []
        while i != -1:
            out.append(i)
            i = int(self.parents[i])
        return out[::-1]


def tree_from_widths(widths, tokens: torch.Tensor) -> FlatTree:
    """The static tree with widths[d] children per node at depth d, breadth-first, tokens (N,) in that order."""
    widths = list(check_widths(widths))
    parents, level = [], [-1]  # the nodes of the previous depth; the root is -1
    for w in widths:
        start = len(parents)
        parents += [a for a in level for _ in range(w)]
        level = list(range(start, len(parents)))
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.numel() != len(parents):
        got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be 1-D with one id per node: widths {tuple(widths)} give "
                         f"{len(parents)} nodes, got {got}")
    return FlatTree(tokens, torch.tensor(parents, dtype=torch.long, device="cpu"))


def check_flat_tree(tree) -> FlatTree:
    """Raise TypeError unless tree is a FlatTree."""
    if not isinstance(tree, FlatTree):
        raise TypeError(f"tree must be a FlatTree (see tree_from_widths), got {type(tree).__name__}")
    return tree


def tree_mask(tree: FlatTree, prefix_len: int) -> torch.Tensor:
    """(N, prefix_len + N) bool: node i may attend to every prefix position, to its ancestors and to itself."""
    tree, prefix_len = check_flat_tree(tree), check_int("prefix_len", prefix_len, minimum=0)
    anc = torch.eye(tree.n, dtype=torch.bool, device="cpu")  # (N, N) anc[i, j]: j is i or an ancestor of i (host)
    for i, a in enumerate(tree.parents.tolist()):
        if a >= 0:
            anc[i] |= anc[a]  # a < i, so anc[a] is complete
    return torch.cat([torch.ones(tree.n, prefix_len, dtype=torch.bool, device="cpu"), anc], dim=1)  # (N, prefix_len+N)


def tree_positions(tree: FlatTree, prefix_len: int) -> torch.Tensor:
    """(N,) position ids: prefix_len + depth - 1, where a path's tokens would sit after the prefix."""
    tree, prefix_len = check_flat_tree(tree), check_int("prefix_len", prefix_len, minimum=0)
    return prefix_len + tree.depths - 1  # (N,)


def tree_layout(tree: FlatTree, prefix_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions (1+N,), mask (1+N, prefix_len+N)) of one pass over the prefix's last token (the root) and the tree.

    The root sits at prefix_len - 1 and sees the prefix; node i sits at its depth's position and sees the prefix,
    its ancestors and itself. Both are built on the host, as the tree's shape is; a pass moves them to its device.
    """
    host = {"dtype": torch.bool, "device": "cpu"}
    root = torch.cat([torch.ones(1, prefix_len, **host), torch.zeros(1, tree.n, **host)], 1)  # (1, prefix_len+N)
    mask = torch.cat([root, tree_mask(tree, prefix_len)])  # (1+N, prefix_len+N)
    return torch.cat([torch.tensor([prefix_len - 1], device="cpu"), tree_positions(tree, prefix_len)]), mask


def check_tree_inputs(model, prefix, tree) -> tuple[CachedLM | HFCausalLM | StaticLM, torch.Tensor, FlatTree]:
    """Validate a model, a prefix (L,) and a tree for scoring; prefix + tree must fit in max_len."""
    if not isinstance(model, (CachedLM, HFCausalLM, StaticLM)):
        raise TypeError("model must be a CachedLM, an HFCausalLM or a StaticLM (it takes positions and a mask), got "
                        f"{type(model).__name__}")
    check_token_ids("prefix", prefix, model.vocab, dims=1, allow_empty=False, long_only=True)
    tree = check_flat_tree(tree)
    check_token_ids("tree.tokens", tree.tokens, model.vocab, dims=1)
    n = prefix.numel() + tree.n
    if n > model.max_len:
        raise ValueError(f"prefix + tree is too long: {prefix.numel()} + {tree.n} = {n} exceeds the model's "
                         f"max_len = {model.max_len}")
    return model, prefix, tree


@torch.no_grad()
def tree_scores(model: CachedLM | HFCausalLM, prefix: torch.Tensor, tree: FlatTree, *, mask: str = "ancestor",
                positions: str = "depth") -> torch.Tensor:
    """One target pass over prefix[-1] + the tree: row 0 judges the root's children, row i+1 node i's; (N+1, V).

    The cache holds prefix[:-1] first, as in decoding; mask and positions pick the correct (default) or wrong layout.
    """
    model, prefix, tree = check_tree_inputs(model, prefix, tree)
    check_choice("mask", mask, MASKS)
    check_choice("positions", positions, POSITIONS)
    L, N = prefix.numel(), tree.n
    dev = prefix.device
    pos, attend = (x.to(dev) for x in tree_layout(tree, L))  # (1+N,), (1+N, L+N)
    if mask == "causal":
        attend = torch.ones(1 + N, L + N, dtype=torch.bool, device=dev).tril(diagonal=L - 1)  # (1+N, L+N) causal
    if positions == "flat":
        pos = torch.arange(L - 1, L + N, device=dev)  # (1+N,)
    cache = model.new_cache()
    if L > 1:
        model(prefix[None, :-1], cache)  # the committed text but its last token, as generation keeps it
    seq = torch.cat([prefix[-1:], tree.tokens.to(dev)])  # (1+N,)
    logits = model(seq[None], cache, positions=pos, mask=attend)[0]  # (1+N, V)
    return torch.softmax(logits, dim=-1)  # (N+1, V)


@torch.no_grad()
def path_scores(model: CachedLM | HFCausalLM, prefix: torch.Tensor, tree: FlatTree) -> torch.Tensor:
    """Ground truth: row 0 is softmax at the end of prefix, row i+1 at the end of prefix + node i's path; (N+1, V)."""
    model, prefix, tree = check_tree_inputs(model, prefix, tree)
    tokens = tree.tokens.to(prefix.device)  # (N,)
    seqs = [prefix] + [torch.cat([prefix, tokens[tree.path(i)]]) for i in range(tree.n)]  # N+1 x (L + depth,)
    rows = [torch.softmax(model(s[None])[0, -1], dim=-1) for s in seqs]  # N+1 x (V,), one plain pass each
    return torch.stack(rows)  # (N+1, V)


@dataclass(frozen=True)
class TreeAlignmentReport:
    """Outcome of comparing one tree pass against scoring every root path on its own, row by row."""

    aligned: bool
    max_abs_diff: float
    max_tv: float
    nodes: int


def tree_alignment_report(model: CachedLM | HFCausalLM, prefix: torch.Tensor, tree: FlatTree, *, mask: str = "ancestor",
                         positions: str = "depth", atol: float = 1e-5) -> TreeAlignmentReport:
    """Does one tree pass with this mask and these positions reproduce path_scores at the root and every node?"""
    atol = check_real("atol", atol, low=0.0)
    one_pass = tree_scores(model, prefix, tree, mask=mask, positions=positions)  # (N+1, V)
    truth = path_scores(model, prefix, tree)                                       # (N+1, V)
    return TreeAlignmentReport(
        aligned=bool(torch.allclose(one_pass, truth, rtol=0.0, atol=atol)),
        max_abs_diff=(one_pass - truth).abs().max().item(),
        max_tv=max_row_tv(one_pass, truth),
        nodes=tree.n,
    )
