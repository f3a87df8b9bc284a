"""audit_generation's battery: small history-dependent chains, each sampling feature on alone and a few together.

A case is a target and a draft (`ChainModel`s: context -> logits (V,) read from the last token, so every row
depends on what came before, and the penalties, n-gram bans, bad words and the grammar add the rest of the
history), a prompt, the `Settings` of one generation and the draft length k. Every plain law is enumerated
exactly (surface.exact.plain_law) and is small (V = 4, max_new_tokens 2 to 4: at most 16 outcomes), so the
power calculation's n stays a few thousand per case. The values are strong on purpose: each feature moves the
law far from the plain chain's, so a loop that applies it with a stale state (the penalty counts, the automaton's
state, the length, the EOS) lands far from plain decoding's law on at least one case.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from ..surface import grammar as grammars
from ..surface.settings import Settings

__all__ = ["ChainModel", "HFChain", "GenerationCase", "generation_cases", "transformers_cases", "TARGET", "DRAFT",
           "EOS", "V"]

V, EOS = 4, 3  # tokens 0..2, and 3: the end of sequence where a case's settings name it (else a fourth token)


@dataclass(frozen=True, eq=False)
class ChainModel:
    """A model over V tokens whose logits depend on the last token of the context: rows[last] (the `start` row for
    an empty context). Called as model(context: tuple[int, ...]) -> (V,) float32 logits, a fresh tensor each call.
    Hashed by identity (one object per battery model)."""

    name: str
    rows: tuple[tuple[float, ...], ...]  # (V, V) logits row after each last token
    start: tuple[float, ...]  # (V,) logits of the first token when the context is empty
    _table: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table = torch.tensor((*self.rows, self.start), dtype=torch.float32)  # (V+1, V); the last row: empty context
        if table.dim() != 2 or table.shape[0] != table.shape[1] + 1:
            raise ValueError(f"ChainModel {self.name!r}: rows must be (V, V) and start (V,), got {tuple(table.shape)}")
        object.__setattr__(self, "_table", table)

    @property
    def V(self) -> int:
        return self._table.shape[1]

    def __call__(self, context: tuple[int, ...]) -> torch.Tensor:
        return self._table[context[-1] if len(context) else -1].clone()  # (V,)


# the target likes repeating 0 and 2 and ending after them; the draft believes 1 and an early end more often
TARGET = ChainModel("target", rows=((1.6, 0.2, -0.3, 0.4),
                                    (0.3, 0.9, 0.8, -0.6),
                                    (-0.2, 0.4, 1.4, 0.6),
                                    (0.0, 0.0, 0.0, 0.0)), start=(0.8, 0.5, 0.1, -1.0))
DRAFT = ChainModel("draft", rows=((0.6, 1.0, -0.5, 0.9),
                                  (0.2, 1.5, 0.0, 0.2),
                                  (0.5, 0.8, 0.4, 0.3),
                                  (0.0, 0.0, 0.0, 0.0)), start=(0.3, 1.0, 0.0, -0.5))


@dataclass(frozen=True)
class GenerationCase:
    """One generation: target and draft models, the prompt, the settings, the draft length k, and its purpose.

    Its attributes are what surface.registry.variant_table reads, so a list of these is a table's cases."""

    name: str
    target: object  # model(context: tuple[int, ...]) -> (V,) logits
    draft: object
    prompt: tuple[int, ...]
    settings: Settings
    k: int
    purpose: str

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(self.settings.features)

    @property
    def V(self) -> int:
        return int(self.target(self.prompt).numel())


def _case(name: str, purpose: str, *, k: int = 2, prompt: tuple[int, ...] = (1,), draft: ChainModel = DRAFT,
          **settings) -> GenerationCase:
    return GenerationCase(name, TARGET, draft, prompt, Settings(**{"max_new_tokens": 2, **settings}), k, purpose)


@functools.lru_cache(maxsize=1)
def _cases() -> tuple[GenerationCase, ...]:
    g = grammars
    return (
        _case("plain", "no feature on: the chain's own law; two new tokens, drafts of two (the bonus is past the "
              "cap, as in every case with k >= max_new_tokens)"),
        _case("temperature", "a cooler target and draft: every row sharpened", temperature=0.6),
        _case("greedy", "temperature 0: one output, which speculation must reproduce", temperature=0.0),
        _case("top_k", "two tokens kept per row: the others are never emitted", top_k=2),
        _case("top_p", "the smallest set holding 60% of each row", top_p=0.6),
        _case("min_p", "tokens below 40% of the row's best dropped", min_p=0.4),
        _case("repetition", "a strong CTRL penalty over prompt + generated: the second position must see the "
              "draft before it", repetition_penalty=4.0),
        _case("frequency", "counts of the generated tokens, the drafts before the position included",
              frequency_penalty=2.0),
        _case("presence", "a flat penalty once a token was generated", presence_penalty=2.0),
        _case("no_repeat_ngram", "no bigram twice over prompt + generated", prompt=(0, 0), no_repeat_ngram_size=2),
        _case("bad_words", "0 banned right after 1, and 2 right after 2", bad_words=((1, 0), (2, 2))),
        _case("logit_bias", "token 1 pushed up, token 0 down, on every row", logit_bias=((1, 1.5), (0, -2.0))),
        _case("grammar", "an automaton that forbids a token right after itself", grammar=g.no_immediate_repeat(V)),
        _case("eos", "an end of sequence often drafted and accepted mid-block", eos=EOS),
        _case("penalties_rounds", "repetition, frequency and presence over three tokens and several rounds, top-k 2",
              k=2, max_new_tokens=3, repetition_penalty=2.5, frequency_penalty=1.0, presence_penalty=0.5, top_k=2),
        _case("grammar_eos_min_p", "a grammar whose accepting states allow EOS, with min_p; three tokens, k = 3",
              k=3, max_new_tokens=3, grammar=g.alternating(V), eos=EOS, min_p=0.2),
        _case("min_p_bonus", "min_p over four tokens, the draft the target itself: blocks are kept whole, so the "
              "bonus row is read inside the cap (it must be processed like every row)", draft=TARGET, max_new_tokens=4,
              min_p=0.5),
        _case("eos_rounds", "EOS under top-k 2 over four tokens, the draft the target: an EOS accepted mid-block, "
              "inside the cap, must end the text", draft=TARGET, prompt=(2,), max_new_tokens=4, eos=EOS, top_k=2),
        _case("bias_top_p_eos", "logit bias under top-p with an EOS; three tokens, k = 3", k=3, max_new_tokens=3,
              logit_bias=((2, 1.0),), top_p=0.7, eos=EOS),
    )


def generation_cases() -> list[GenerationCase]:
    """The battery: each feature alone, then a few combinations; k = 2 or 3, V = 4, max_new_tokens 2 to 4."""
    return list(_cases())


@dataclass(frozen=True, eq=False)
class HFChain:
    """A transformers causal LM as a battery model: model(context) -> (V,) float32 logits at the last position
    (hf.context_logits: one forward, memoised per context); `.model` is what the transformers convention drives."""

    name: str
    model: object  # a transformers PreTrainedModel
    _logits: object = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from .hf import context_logits

        object.__setattr__(self, "_logits", context_logits(self.model))

    def __call__(self, context: tuple[int, ...]) -> torch.Tensor:
        return self._logits(tuple(context))


@functools.lru_cache(maxsize=1)
def _hf_cases() -> tuple[GenerationCase, ...]:
    from . import hf  # transformers is imported there, offline, only when called

    target, draft = hf.tiny_llama(1, head_scale=8.0), hf.tiny_llama(1, head_scale=3.0)
    tm, dm = HFChain("tiny_llama(1)", target), HFChain("tiny_llama(1) x 0.4", draft)

    def case(name: str, purpose: str, *, k: int = 2, **settings) -> GenerationCase:
        return GenerationCase(name, tm, dm, (1, 2), Settings(**{"max_new_tokens": 2, **settings}), k, purpose)

    return (
        case("hf_plain", "assisted sampling, no processor"),
        case("hf_top_k", "top-k 2 on every row", top_k=2),
        case("hf_repetition", "repetition penalty 3 over prompt + generated", repetition_penalty=3.0),
        case("hf_eos", "token 3 as the end of sequence, accepted mid-block inside the cap", max_new_tokens=3, eos=EOS),
        case("hf_length", "max_new_tokens 2 against drafts of three", k=3),
    )


def transformers_cases() -> list[GenerationCase]:
    """The transformers convention's cases: a tiny random Llama (vocabulary 4) and the same network at a flatter
    head as its assistant, prompt (1, 2), one HF-supported feature per case, two or three new tokens (needs the
    `audit` extra; the kit's processor order is transformers' for one feature at a time, hf.py checks it)."""
    return list(_hf_cases())
