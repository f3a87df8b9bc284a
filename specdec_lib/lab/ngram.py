"""Lab: a token n-gram table built from a corpus in one vectorised pass, the table draft's whole model.

For each context length c = 0 .. order-1 the table stores, for every possible context of c tokens, the next
token seen most often after it in the corpus (ties to the smallest id). A context never seen backs off to
its latest c - 1 tokens, so every entry is filled and a lookup is one array read.
"""
from __future__ import annotations

import array
import functools
from dataclasses import dataclass

import torch

from .._checks import check_int, check_token_ids
from .corpus import corpus

__all__ = ["MAX_CONTEXTS", "NGramTable", "SparseNGramTable", "build_ngram", "build_sparse_ngram", "corpus_table"]

MAX_CONTEXTS = 1 << 24  # entries of the largest dense table (16 MB of bytes): 256**3, orders up to 4 over bytes


@dataclass(frozen=True)
class NGramTable:
    """tables[c][code] is the argmax next token after a context of c tokens (code: base vocab, oldest first)."""

    vocab: int
    order: int
    tables: tuple[array.array, ...]  # tables[c] holds vocab**c entries, c = 0 .. order-1

    def next_token(self, context) -> int:
        """The table's next token after a sequence of ids (its last order-1 ids are read; fewer at the start)."""
        c = min(self.order - 1, len(context))
        code = 0
        for tok in context[len(context) - c:]:
            code = code * self.vocab + tok
        return self.tables[c][code]


def build_ngram(data: torch.Tensor, vocab: int, order: int = 4) -> NGramTable:
    """The n-gram table of data (1-D ids below vocab), contexts of 0 .. order-1 tokens, with backoff."""
    vocab = check_int("vocab", vocab, minimum=2)
    order = check_int("order", order, minimum=1)
    data = check_token_ids("data", data, vocab, dims=1, allow_empty=False).long()
    if data.numel() < order:
        raise ValueError(f"data must hold at least order = {order} tokens, got {data.numel()}")
    if vocab ** (order - 1) > MAX_CONTEXTS:
        raise ValueError(f"vocab**(order-1) = {vocab ** (order - 1)} contexts is too many for a dense table "
                         f"(at most {MAX_CONTEXTS}): lower order")
    N = data.numel()
    code_dtype = torch.uint8 if vocab <= 256 else torch.int64
    tables, prev = [], None
    for c in range(order):
        code = data.new_zeros(N - c)  # (N-c,) the context before each next token, base vocab
        for i in range(c):
            code = code * vocab + data[i:N - c + i]
        key, counts = torch.unique(code * vocab + data[c:], return_counts=True)  # (U,) each (context, next) seen
        # one score per (context, next): more counts first, then the smaller token (vocab - 1 - token is larger)
        score = (counts * vocab + (vocab - 1 - key % vocab)).to(torch.int64)  # (U,)
        best = data.new_full((vocab ** c,), -1).scatter_reduce_(0, key // vocab, score, "amax")
        tok = vocab - 1 - best % vocab  # (V^c,) argmax next token of every seen context
        if prev is not None:  # unseen contexts back off to their latest c - 1 tokens: code mod vocab**(c-1)
            tok = torch.where(best >= 0, tok, prev.expand(vocab, -1).reshape(-1))  # (V^c,)
        prev = tok.to(code_dtype)
        arr = array.array("B" if vocab <= 256 else "q")
        arr.frombytes(prev.cpu().numpy().tobytes())  # the table is read on the host
        tables.append(arr)
    return NGramTable(vocab=vocab, order=order, tables=tuple(tables))


@dataclass(frozen=True)
class SparseNGramTable:
    """tables[c] maps each context of c tokens SEEN in the corpus (its base-vocab code) to its argmax next token."""

    vocab: int
    order: int
    tables: tuple[dict[int, int], ...]  # tables[c], c = 0 .. order-1; tables[0] = {0: the commonest token}

    def next_token(self, context) -> int:
        """The next token after the latest order-1 ids of context, backing off to shorter contexts until one is seen."""
        for c in range(min(self.order - 1, len(context)), 0, -1):
            code = 0
            for tok in context[len(context) - c:]:
                code = code * self.vocab + tok
            tok = self.tables[c].get(code)
            if tok is not None:
                return tok
        return self.tables[0][0]


def build_sparse_ngram(data: torch.Tensor, vocab: int, order: int = 3) -> SparseNGramTable:
    """build_ngram's table for any vocabulary (a tokenizer's): only seen contexts stored, the same argmax and ties."""
    vocab = check_int("vocab", vocab, minimum=2)
    order = check_int("order", order, minimum=1)
    data = check_token_ids("data", data, vocab, dims=1, allow_empty=False).long()
    if data.numel() < order:
        raise ValueError(f"data must hold at least order = {order} tokens, got {data.numel()}")
    if max(vocab ** order, vocab * data.numel()) >= 1 << 63:  # the largest code, and the largest score
        raise ValueError(f"vocab**order = {vocab ** order} (context, next) codes overflow int64: lower order")
    N, tables = data.numel(), []
    for c in range(order):
        code = data.new_zeros(N - c)  # (N-c,) the context before each next token, base vocab
        for i in range(c):
            code = code * vocab + data[i:N - c + i]
        key, counts = torch.unique(code * vocab + data[c:], return_counts=True)  # (U,) each (context, next) seen
        score = counts * vocab + (vocab - 1 - key % vocab)  # (U,) more counts first, then the smaller token
        ctx, slot = torch.unique(key // vocab, return_inverse=True)  # (C,), (U,)
        best = data.new_full((len(ctx),), -1).scatter_reduce_(0, slot, score, "amax")  # (C,)
        tables.append(dict(zip(ctx.tolist(), (vocab - 1 - best % vocab).tolist())))
    return SparseNGramTable(vocab=vocab, order=order, tables=tuple(tables))


@functools.lru_cache(maxsize=4)
def corpus_table(order: int = 4) -> NGramTable:
    """The n-gram table of the lab's training corpus (bytes; the held-out files never enter it), built once."""
    return build_ngram(corpus("train"), 256, order)
