"""Lab: lookahead decoding: Jacobi iterations of the target itself, and an n-gram pool verified in the same pass.

Lookahead decoding (Fu, Bailis, Stoica, Zhang 2024, arXiv 2402.02057), modelled on its greedy loop as the code
runs: hao-ai-lab/LookaheadDecoding lade/decoding.py jacobi_greedy_search_multilevel and the mask of
lade/models/llama.py j_make_causal_mask_multilevel @7571393ef690ad1d1e4bc9e027d05b114f4734bf. No draft model:

  the window   levels P[0] .. P[N-2] of guesses (P[0] W - 1 tokens, the others W). Column i is a chain after the
               last committed token: P[0][0 .. i-1], then P[1][i], .., P[N-2][i], each token one position further,
               so the target's output at the chain's end is one more Jacobi iterate, new[i];
  the pool     each column yields an n-gram (P[0][i-1], P[1][i], .., P[N-2][i], new[i]) (the last committed token
               in place of P[0][-1] for column 0), kept under its first token, at most G per key, newest last;
  the guesses  the pool's n-grams under the last committed token: N - 1 proposals each, merged into a trie.

One target pass scores the trie and the window together: both are branches of one FlatTree after the root
(tree_attention's layout: depth positions, the ancestor mask). Only the trie's nodes are proposals; the window's
nodes are scored for the next iterate and dropped from the cache. Then every level moves up one (P[0] <- P[1][1:],
P[l] <- P[l + 1], P[N-2] <- new), whatever was accepted (LADE's ALWAYS_FWD_ONE). The first N - 2 rounds fill the
levels and propose nothing. LADE's window starts from tokens drawn at random from the prompt under a global seed;
this one copies the prompt's tokens in order (LADE's order_copy_from), with no hidden randomness.

What is exact: the iterates are argmax picks (LADE: TEMP_FOR_GUESS = 0), so every guess is a function of the
committed text alone, named outright, with no law it was drawn from. Verified greedily, the output is plain greedy
decoding; under sampling, by a one-hot rule (onehot_sequential, onehot_walk: keep x with the target's own
probability, else drop it from p), the output's law is the target's. A guess named outright is a point mass, and the
ratio rule min(1, p/q) with q = 1 is that one-hot rule; LADE's sampling loop (jacobi_sample_multilevel, added in
f7bca84, @eed010da9c7b1867912675d480feec5629e0c2d0 lines 506-526) tests its guesses so: prob_accept =
min(1, probs_next[draft_guess]) ("prob_draft is 1"), a rejected guess zeroed and the rest renormalised. Dividing by an
invented q spread over the guesses is not exact (the tests show how far off it lands).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .._checks import check_int
from .tree_attention import FlatTree
from .tree_decoding import DraftTree

__all__ = ["LookaheadState", "LookaheadDraft"]


@dataclass
class LookaheadState:
    """The window's levels, how many are filled beyond P[0], the pool, and the last pass's output rows."""

    levels: list[list[int]]
    filled: int = 0
    pool: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)
    out_rows: list[int] = field(default_factory=list)  # logits rows (node + 1; 0 = root) whose argmax is new
    root: int = -1  # the last committed token when the window was proposed: column 0's n-gram key


class LookaheadDraft:
    """Lookahead's window and pool as a tree drafter: window W, n-grams of N tokens, at most G per key."""

    one_hot = True  # the guesses are named outright

    def __init__(self, vocab: int, *, window: int = 4, ngram: int = 4, guesses: int = 4, name: str = "lookahead"):
        self.vocab = check_int("vocab", vocab, minimum=2)
        self.W = check_int("window", window, minimum=2)
        self.N = check_int("ngram", ngram, minimum=3)
        self.G = check_int("guesses", guesses, minimum=1)
        self.name, self.max_len = name, None

    def tree_bounds(self) -> tuple[int, int]:
        """(most nodes in one pass, most proposals on one path): the trie, the trunk, the levels; N - 1."""
        trunk = self.W + self.N - 3
        return self.G * (self.N - 1) + trunk + (self.N - 2) * (trunk + 1), self.N - 1

    def start(self, prompt: torch.Tensor, cache=None) -> LookaheadState:
        """Level P[0] filled with the prompt's tokens in order (cyclically), W + N - 3 of them."""
        tokens = prompt.tolist()
        return LookaheadState(levels=[[tokens[i % len(tokens)] for i in range(self.W + self.N - 3)]])

    def propose_tree(self, state: LookaheadState, seq: torch.Tensor, n: int, widths=None, *, draws: str,
                     temperature: float, top_k, generator) -> DraftTree:
        """The pool's guesses under seq[n - 1] as a trie (the proposals), then the window (scored only)."""
        if widths is not None:
            raise ValueError(f"widths must be None: lookahead builds its own tree, got {widths}")
        if draws != "top":
            raise ValueError("lookahead's guesses were drawn from no q: verify them with a one-hot rule "
                             f"(onehot_sequential, onehot_walk), not one that draws {draws!r}")
        last = int(seq[n - 1])
        guesses = state.pool.get(last, []) if state.filled == self.N - 2 else []
        tokens, parents, trie = [], [], {}  # trie: (parent node, token) -> node
        for guess in reversed(guesses):  # newest first: it takes the first child slots
            node = -1
            for x in guess:
                if (node, x) not in trie:
                    trie[(node, x)] = len(tokens)
                    tokens.append(x)
                    parents.append(node)
                node = trie[(node, x)]
        proposals = len(tokens)
        trunk = []
        for x in state.levels[0]:  # P[0] as one chain after the root
            trunk.append(len(tokens))
            parents.append(trunk[-2] if len(trunk) > 1 else -1)
            tokens.append(x)
        ends = [-1] + trunk  # column i hangs off P[0][i - 1] (the root for i = 0)
        for level in state.levels[1:]:  # P[l][i] one position below column i's chain so far
            for i, x in enumerate(level):
                parents.append(ends[i])
                ends[i] = len(tokens)
                tokens.append(x)
        state.out_rows, state.root = [e + 1 for e in ends], last  # each column's deepest node; its key
        tree = FlatTree(torch.tensor(tokens, dtype=torch.long, device=seq.device), parents)
        if temperature == 0.0:
            return DraftTree(tree, None, proposals)
        q = torch.zeros(tree.n + 1, self.vocab, dtype=torch.float64, device=seq.device)  # each node's proposals
        if trie:
            at = torch.tensor(list(trie), dtype=torch.long, device=seq.device)  # (T, 2): (parent node, token)
            q[at[:, 0] + 1, at[:, 1]] = 1.0
        q = q / q.sum(-1, keepdim=True).clamp(min=1.0)  # uniform over them
        return DraftTree(tree, q, proposals)

    def observe(self, state: LookaheadState, draft: DraftTree, logits: torch.Tensor) -> None:
        """One Jacobi iterate from the pass's logits (1+N, V): harvest n-grams, move every level up one."""
        new = logits[state.out_rows].argmax(-1).tolist()  # one per column
        P = state.levels
        if state.filled < self.N - 2:  # filling: the iterate is a new level; every level steps forward one
            state.levels = [level[1:] for level in P] + [new[1:]]
            state.filled += 1
            return
        for i in range(self.W):
            key = state.root if i == 0 else P[0][i - 1]
            self._remember(state.pool, key, tuple(level[i] for level in P[1:]) + (new[i],))
        state.levels = [P[1][1:]] + [list(level) for level in P[2:]] + [new]

    def _remember(self, pool: dict, key: int, gram: tuple[int, ...]) -> None:
        """Add gram under key: a repeat moves to the newest place; beyond G, the oldest goes (LADE's list)."""
        grams = pool.setdefault(key, [])
        if gram in grams:
            grams.remove(gram)
        elif len(grams) == self.G:
            grams.pop(0)
        grams.append(gram)
