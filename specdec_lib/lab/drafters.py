"""Lab: the drafts a speculative decoder can use, one class per kind, all behind one small interface.

A drafter keeps a per-run state (start), proposes k tokens after the n committed ones with the rows q that
drew them (propose), and forgets what verification rejected (rollback):

  NeuralDraft        a small CachedLM with a rollback KV cache; q is its policy's distribution
  TableDraft         a token n-gram table from a corpus (dense: build_ngram; sparse, any vocab: build_sparse_ngram)
  PromptLookupDraft  copies what followed the latest earlier match of the last m tokens; one-hot q

A one-hot q proposes one token with probability 1, so the acceptance test keeps it with probability p(x) and
a rejection draws from p without x: the same verify_batch stays exact. Greedy decoding never reads q.
"""
from __future__ import annotations

import torch

from .._checks import check_int
from .ngram import NGramTable, SparseNGramTable
from .steps import prefill, sample_token

__all__ = ["draft_block", "NeuralDraft", "OneHotDraft", "TableDraft", "PromptLookupDraft", "as_drafter", "start_states"]


def draft_block(draft, cache, x: torch.Tensor, k: int, *, temperature: float, top_k, generator):
    """k sequential draft steps (D(k)) after feeding x (the 1 or 2 committed tokens the cache lacks).

    Returns the proposals (k,) and the rows q that drew them ((k, V), or None when greedy).
    """
    proposals, q_rows = [], []
    for _ in range(k):
        x, q = sample_token(draft(x[None], cache)[0, -1], temperature, top_k, generator)  # (1,), (V,) or None
        proposals.append(x)
        q_rows.append(q)
    return torch.cat(proposals), (None if temperature == 0.0 else torch.stack(q_rows))


class NeuralDraft:
    """A draft network with a KV cache that lags the committed text by 1 token (2 after a full block)."""

    one_hot = False

    def __init__(self, model, name: str = "draft"):
        self.model, self.name = model, name
        self.vocab, self.max_len = model.vocab, model.max_len

    def start(self, prompt: torch.Tensor):
        """A cache holding every prompt token but the last."""
        return prefill(self.model, prompt)

    def propose(self, state, seq: torch.Tensor, n: int, k: int, *, temperature: float, top_k, generator):
        """(proposals (k,), q rows (k, V) or None when greedy) after the committed seq[:n]."""
        return draft_block(self.model, state, seq[state.length:n], k, temperature=temperature, top_k=top_k,
                           generator=generator)

    def rollback(self, state, n: int) -> None:
        """Crop the cache to the n committed tokens (it may hold fewer: after a full block it lags one more)."""
        state.crop(min(state.length, n))


class OneHotDraft:
    """A draft that names its tokens outright: q is one-hot at each proposal. Subclasses define next_tokens."""

    one_hot = True
    max_len = None  # no context limit of its own

    def __init__(self, vocab: int, name: str):
        self.vocab = check_int("vocab", vocab, minimum=2)
        self.name = name

    def start(self, prompt: torch.Tensor) -> bytearray | list[int]:
        """The committed tokens seen so far on the host (filled by propose): bytes when vocab <= 256, else ints."""
        return bytearray() if self.vocab <= 256 else []

    def next_tokens(self, text: bytearray | list[int], k: int) -> list[int]:
        raise NotImplementedError

    def propose(self, state, seq: torch.Tensor, n: int, k: int, *, temperature: float, top_k, generator):
        """(proposals (k,), one-hot q rows (k, V) or None when greedy) after the committed seq[:n]."""
        state.extend(seq[len(state):n].tolist())  # committed tokens never change: read only the new ones
        proposals = torch.tensor(self.next_tokens(state, k), dtype=torch.long, device=seq.device)  # (k,)
        if temperature == 0.0:
            return proposals, None
        q_rows = torch.zeros(k, self.vocab, device=seq.device).scatter_(1, proposals[:, None], 1.0)  # (k, V)
        return proposals, q_rows

    def rollback(self, state, n: int) -> None:
        """Nothing to undo: the state holds committed tokens only (it may lag behind n)."""
        del state[n:]


class TableDraft(OneHotDraft):
    """Each proposal is the table's argmax next token after the text so far, proposals included."""

    def __init__(self, table: NGramTable | SparseNGramTable, name: str = "table"):
        if not isinstance(table, (NGramTable, SparseNGramTable)):
            raise TypeError("table must be an NGramTable (sd.lab.build_ngram) or a SparseNGramTable "
                            f"(sd.lab.build_sparse_ngram), got {type(table).__name__}")
        super().__init__(table.vocab, name)
        self.table = table

    def next_tokens(self, text, k: int) -> list[int]:
        o1, V, tables = self.table.order - 1, self.vocab, self.table.tables
        ext = list(text[len(text) - o1:]) if o1 else []  # the context the next lookup reads, proposals included
        out = []
        if isinstance(self.table, SparseNGramTable):  # only seen contexts are stored: next_token backs off
            for _ in range(k):
                out.append(self.table.next_token(ext))
                ext.append(out[-1])
            return out
        for _ in range(k):
            c = min(o1, len(ext))
            code = 0
            for tok in ext[len(ext) - c:]:
                code = code * V + tok
            out.append(tables[c][code])
            ext.append(out[-1])
        return out


class PromptLookupDraft(OneHotDraft):
    """Prompt lookup: copy the continuation of the latest earlier occurrence of the text's last m tokens.

    The longest suffix of m, m-1, ..., 1 tokens that occurred before (ending at least one token before the
    end) is matched at its latest occurrence i, and proposal j is the token at i + len + j of the text
    extended by the proposals: a continuation that reaches the end keeps copying what it just proposed (a
    repeat of period n - i - len). When even the last token never occurred before, the draft proposes it k
    times (a period-1 copy). Every round therefore verifies exactly k proposals, so c_v(k) is one number.
    """

    def __init__(self, vocab: int = 256, m: int = 3, name: str = "lookup"):
        super().__init__(vocab, name)
        self.m = check_int("m", m, minimum=1)

    def next_tokens(self, text, k: int) -> list[int]:
        n = len(text)
        start = n - 1  # no match: copy the last token
        for size in range(min(self.m, n - 1), 0, -1):
            i = _rfind(text, text[n - size:], n - 1)  # latest occurrence ending before the last token
            if i >= 0:
                start = i + size
                break
        ext = text[start:]  # what follows the match; extended as it is copied
        out = []
        for j in range(k):
            x = ext[j]
            out.append(x)
            ext.append(x)
        return out


def _rfind(text, pattern, end: int) -> int:
    """The latest i with text[i:i + len(pattern)] == pattern, ending at or before end; -1 if none (bytes.rfind)."""
    if isinstance(text, (bytes, bytearray)):
        return text.rfind(pattern, 0, end)
    size, first = len(pattern), pattern[0]
    for i in range(end - size, -1, -1):
        if text[i] == first and text[i:i + size] == pattern:
            return i
    return -1


def as_drafter(draft):
    """draft itself if it is a drafter (has propose, start, rollback); a model with a cache becomes a NeuralDraft."""
    if all(callable(getattr(draft, m, None)) for m in ("propose", "start", "rollback")):
        return draft
    if callable(getattr(draft, "new_cache", None)) and hasattr(draft, "vocab"):
        return NeuralDraft(draft)
    raise TypeError("draft must be a drafter (NeuralDraft, TableDraft, PromptLookupDraft) or a model with "
                    f"new_cache(), got {type(draft).__name__}")


def start_states(target, drafter, prompt: torch.Tensor):
    """(the target's cache holding prompt[:-1], the drafter's state); a drafter that shares_cache gets the first."""
    t_cache = prefill(target, prompt)
    if getattr(drafter, "shares_cache", False):  # sd.lab.EarlyExitDraft: the target's own layers, one cache
        return t_cache, drafter.start(prompt, t_cache)
    return t_cache, drafter.start(prompt)
