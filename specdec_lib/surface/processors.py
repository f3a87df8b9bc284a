"""The processed distribution of the next token: every processor of the sampling surface, in one documented order.

`next_probs(model, prompt, generated, settings)` is the law of the token after prompt + generated. It is a
function of the text before it, nothing else: that is the whole contract a speculative loop must keep, since it
judges a drafted position with the text the drafted prefix produces. The order:

  1. repetition_penalty   over prompt + generated, each distinct token once: logit > 0 -> logit / r, else logit * r
  2. frequency_penalty,   over generated: logit -= f * count,  logit -= f * [count > 0]
     presence_penalty
  3. no_repeat_ngram_size over prompt + generated: ban every token that would complete an n-gram already there
  4. bad_words            a one-token word is always banned; a longer one's last token after its prefix
  5. logit_bias           logit += bias
  6. grammar              the automaton's state after generated: ban what it forbids; EOS only where it accepts
  7. policy               core policy.apply_policy: temperature (0 = greedy), min_p, top_k, top_p

A `View` says what history each stateful processor sees and which processors run; the default (None) is the
true history and every processor. The loop's variants (loop.LoopSpec) feed a stale or partial view: that is how
each shipped bug is written, with this one definition of processing.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch

from .._checks import check_choice
from ..policy import apply_policy
from .grammar import DEAD
from .settings import Settings

__all__ = ["PROCESSORS", "View", "next_probs", "logprob", "model_logits"]

PROCESSORS = ("repetition_penalty", "frequency_penalty", "presence_penalty", "no_repeat_ngram_size", "bad_words",
              "logit_bias", "grammar", "temperature", "min_p", "top_k", "top_p")


@dataclass(frozen=True)
class View:
    """What the processors see at one position; None everywhere is the correct view (the true history, all run).

    penalty_tokens   the generated tokens the repetition, frequency and presence penalties count
    ban_tokens       the generated tokens the n-gram and bad-word bans read (after the prompt)
    processors       the names (PROCESSORS) of the processors that run; the others act as if switched off
    """

    penalty_tokens: tuple[int, ...] | None = None
    ban_tokens: tuple[int, ...] | None = None
    processors: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.processors is not None:
            object.__setattr__(self, "processors", frozenset(self.processors))
            for name in self.processors:
                check_choice("processors", name, PROCESSORS)


def model_logits(model, context: tuple[int, ...]) -> torch.Tensor:
    """The model's logits (V,) after context, as float64; a clear error if it returns something else."""
    logits = model(tuple(context))
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() != 1:
        got = f"shape {tuple(logits.shape)}, dtype {logits.dtype}" if isinstance(logits, torch.Tensor) else \
            type(logits).__name__
        raise TypeError(f"model(context) must return a float tensor of logits (V,), got {got}")
    logits = logits.detach().double().clone()
    top = float(logits.max())  # NaN if any entry is NaN
    if top != top or top == float("inf"):
        raise ValueError(f"model(context) returned NaN or +inf logits after the text {tuple(context)}")
    return logits


def _penalised(logits: torch.Tensor, seen: tuple[int, ...], counted: tuple[int, ...], s: Settings) -> torch.Tensor:
    """Repetition over seen (each distinct token once), then frequency and presence over counted; on a list, since
    only a few entries change."""
    r, f, pres = s.repetition_penalty, s.frequency_penalty, s.presence_penalty
    if (r == 1.0 or not seen) and ((f == 0.0 and pres == 0.0) or not counted):
        return logits
    x = logits.tolist()
    if r != 1.0:
        for t in set(seen):
            x[t] = x[t] / r if x[t] > 0 else x[t] * r
    for t, count in Counter(counted).items():
        x[t] -= f * count + pres
    return torch.tensor(x, dtype=torch.float64)


def ngram_bans(text: tuple[int, ...], n: int) -> set[int]:
    """HF's no-repeat rule: the tokens x such that text[-(n-1):] + (x,) is an n-gram already in text."""
    if n == 0 or len(text) + 1 < n:
        return set()
    head = tuple(text[len(text) - n + 1:]) if n > 1 else ()
    return {text[i + n - 1] for i in range(len(text) - n + 1) if tuple(text[i:i + n - 1]) == head}


def bad_word_bans(text: tuple[int, ...], words: tuple[tuple[int, ...], ...]) -> set[int]:
    """HF's bad_words_ids rule: a word's last token is banned when the text ends with the rest of the word (HF 5.24.0
    drops a one-token word equal to the EOS; here it bans the EOS)."""
    return {w[-1] for w in words if len(w) == 1 or (len(text) >= len(w) - 1 and tuple(text[len(text) - len(w) + 1:])
                                                     == w[:-1])}


def _grammar_mask(logits: torch.Tensor, settings: Settings, read: tuple[int, ...]) -> torch.Tensor:
    g = settings.grammar
    if g.vocab != logits.shape[0]:
        raise ValueError(f"grammar has a vocabulary of {g.vocab} tokens, the model {logits.shape[0]}")
    state = g.state_after(read)
    allowed = g.allowed(state)
    if settings.eos is not None:
        allowed[settings.eos] = state == DEAD or state in g.accepting
    return logits.masked_fill(~allowed, float("-inf"))


def _check_vocab(settings: Settings, V: int) -> None:
    """Every token id a setting names must be one of the model's V tokens."""
    named = (("logit_bias", {t for t, _ in settings.logit_bias}),
             ("bad_words", {t for w in settings.bad_words for t in w}), ("eos", {settings.eos} - {None}))
    for name, ids in named:
        if max(ids, default=-1) >= V:
            raise ValueError(f"{name} names token {max(ids)}, outside the model's vocabulary of {V}")


def next_probs(model, prompt: tuple[int, ...], generated: tuple[int, ...], settings: Settings, *,
               view: View | None = None, strict: bool = True) -> torch.Tensor | None:
    """The processed distribution (V,) float64 of the token after prompt + generated (the order: module doc).

    A text after which every token is banned is an error, or None when strict is False (a draft's row, loop.py)."""
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    view = view or View()
    prompt, generated = tuple(prompt), tuple(generated)
    if view.processors is not None:
        settings = settings.off(set(PROCESSORS) - view.processors)
    text = prompt + generated
    logits = model_logits(model, text)  # (V,)
    _check_vocab(settings, logits.shape[0])
    counted = generated if view.penalty_tokens is None else tuple(view.penalty_tokens)
    # 1-2. penalties: the repetition penalty sees the prompt too, frequency and presence only what was generated
    logits = _penalised(logits, prompt + counted, counted, settings)
    # 3-4. bans read the whole text
    read = text if view.ban_tokens is None else prompt + tuple(view.ban_tokens)
    banned = ngram_bans(read, settings.no_repeat_ngram_size) | bad_word_bans(read, settings.bad_words)
    if banned:
        logits[sorted(banned)] = float("-inf")
    # 5. logit bias
    for token, bias in settings.logit_bias:
        logits[token] += bias
    # 6. the grammar's mask, from the automaton's state after what it has read
    if settings.grammar is not None:
        logits = _grammar_mask(logits, settings, generated)
    if float(logits.max()) == float("-inf"):
        if not strict:
            return None
        raise ValueError(f"every token is banned after the text {text} (penalties, bans and grammar together): "
                         f"choose settings that leave a token at every position")
    # 7. the sampling policy (the default one is the softmax itself)
    if settings.temperature == 1.0 and not settings.min_p and settings.top_k is None and settings.top_p is None:
        return torch.softmax(logits, -1)
    return apply_policy(logits, temperature=settings.temperature, min_p=settings.min_p, top_k=settings.top_k,
                        top_p=settings.top_p)


def logprob(model, prompt: tuple[int, ...], generated: tuple[int, ...], token: int, settings: Settings) -> float:
    """log next_probs(...)[token]: the processed log probability of token after prompt + generated (-inf if banned)."""
    p = float(next_probs(model, prompt, generated, settings)[token])
    return math.log(p) if p > 0 else float("-inf")
