"""What a generation asks for (Settings) and how a speculative loop carries it (LoopSpec), validated once.

Settings: every knob of the sampling surface; a field at its default is off, and `Settings.features` names the ones
switched on (the kit's reports print them).

`LoopSpec()` is the correct loop. Every other value of a field is one way a serving stack carried a per-token
state wrong (registry.py names them and cites their sources). Rows: T_0 .. T_n of a round of n drafts, T_i judges
draft i + 1 at history generated + drafts[:i] (and gives the residual after a rejection there), T_n is the bonus
row. Draft rows are always processed correctly except for the grammar (a draft row never changes the law: the
verifier uses the q that produced each proposal).

  first_token  "round"          the first token comes from a speculative round like the others
               "plain"          it is drawn by one plain step first (as a prefill step does), then rounds follow
  penalties    "per_position"   repetition, frequency, presence count the drafted tokens before each row
               "round_start"    every row of a round counts the text committed before the round (no drafts)
               "last_commit"    every row counts one token per earlier round: the last token each round committed
               "bonus_only"     no penalty on T_0 .. T_n-1; the bonus row counts the text before the round
               "ignored"        no penalty on any target row
  processors   "all"            every processor on every row
               "bonus_only"     min_p and logit_bias only on the bonus row
               "bonus_only_all" T_0 .. T_n-1 keep only temperature, top_k, top_p (and the grammar); the bonus row
                                has everything, its penalties and bans reading the text before the round
               "ignored"        min_p and logit_bias on no target row
  grammar      "per_position"   the automaton reads the drafted tokens before each row
               "unmasked_after_illegal"  the draft samples unmasked; a target row is masked only while the drafts
                                before it are legal (exact: a row after an illegal draft is never read)
               "unmasked_drafts"  the draft samples unmasked and only T_0 is masked
               "ignored"        no row is masked (nor is EOS tied to the accepting states)
  eos          "truncate"       tokens after an EOS accepted mid-block are discarded
               "run_past"       drafting goes on past an EOS and nothing is discarded (a fully accepted block
                                ending in EOS gets no bonus); only a round whose last token is EOS stops
               "finish_round"   drafting goes on past an EOS and the round is committed whole (no bonus after a
                                final EOS), then a round holding an EOS stops generation
  length       "truncate"       an EOS inside the cap ends the text there
               "checked_first"  a round that reaches max_new_tokens is cut at the cap and stops as "length",
                                tokens after an EOS included
  logprobs     "target"         the target's processed log p of each committed token (plain's value)
               "zero"           0.0 for every token a speculative round commits
               "raw_bonus"      the bonus token reports the target's raw log softmax (no processor)
  verifier     "token" | "block"   the core verifier (verification.METHODS)
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

from .._checks import check_choice, check_int, check_real
from .grammar import DEAD, Grammar

__all__ = ["Settings", "FEATURES", "LoopSpec", "SPEC_CHOICES"]

# Settings.features' names, in the order next_probs applies them (max_new_tokens is always on: every run has a cap)
FEATURES = ("repetition_penalty", "frequency_penalty", "presence_penalty", "no_repeat_ngram_size", "bad_words",
            "logit_bias", "grammar", "temperature", "min_p", "top_k", "top_p", "eos", "max_new_tokens")


def _words(x) -> tuple[tuple[int, ...], ...]:
    """bad_words as a tuple of non-empty tuples of token ids."""
    if not isinstance(x, (tuple, list)):
        raise TypeError(f"bad_words must be a tuple of words (tuples of token ids), got {type(x).__name__}")
    words = []
    for i, word in enumerate(x):
        if not isinstance(word, (tuple, list)):
            raise TypeError(f"bad_words[{i}] must be a tuple of token ids, got {type(word).__name__}")
        if not word:
            raise ValueError(f"bad_words[{i}] must be non-empty")
        words.append(tuple(check_int(f"bad_words[{i}][{j}]", t, minimum=0) for j, t in enumerate(word)))
    return tuple(words)


def _bias(x) -> tuple[tuple[int, float], ...]:
    """logit_bias as a tuple of (token id, finite bias) pairs, each token once."""
    if isinstance(x, dict):
        x = tuple(x.items())
    if not isinstance(x, (tuple, list)):
        raise TypeError(f"logit_bias must be a tuple of (token, bias) pairs, got {type(x).__name__}")
    pairs = []
    for i, pair in enumerate(x):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"logit_bias[{i}] must be a (token, bias) pair, got {pair!r}")
        token = check_int(f"logit_bias[{i}] token", pair[0], minimum=0)
        bias = check_real(f"logit_bias[{i}] bias", pair[1])
        if not abs(bias) < float("inf"):
            raise ValueError(f"logit_bias[{i}] bias must be finite (ban a token with bad_words), got {bias}")
        pairs.append((token, bias))
    if len({t for t, _ in pairs}) != len(pairs):
        raise ValueError("logit_bias must name each token at most once")
    return tuple(pairs)


def _optional(name: str, x, check):
    return None if x is None else check(name, x)


@dataclass(frozen=True)
class Settings:
    """The whole sampling surface of one generation; validated on construction (errors name the field)."""

    temperature: float = 1.0  # 0 = greedy
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0  # CTRL/HF over prompt + generated: logit > 0 -> logit / r, else logit * r
    frequency_penalty: float = 0.0  # OpenAI/vLLM: logit -= f * count in generated
    presence_penalty: float = 0.0  # logit -= f * [count in generated > 0]
    no_repeat_ngram_size: int = 0  # HF: ban a token that would repeat an n-gram of prompt + generated
    bad_words: tuple[tuple[int, ...], ...] = ()  # HF bad_words_ids: ban a word's last token after its prefix
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token, added logit)
    grammar: Grammar | None = None
    eos: int | None = None
    max_new_tokens: int = 4

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen: normalise once)
        set_("temperature", check_real("temperature", self.temperature, low=0.0))
        set_("top_k", _optional("top_k", self.top_k, lambda n, x: check_int(n, x, minimum=1)))
        set_("top_p", _optional("top_p", self.top_p, lambda n, x: check_real(n, x, low=0.0, high=1.0, low_open=True)))
        set_("min_p", _optional("min_p", self.min_p, lambda n, x: check_real(n, x, low=0.0, high=1.0)))
        set_("repetition_penalty", check_real("repetition_penalty", self.repetition_penalty, low=0.0, low_open=True))
        for name in ("frequency_penalty", "presence_penalty"):
            value = check_real(name, getattr(self, name))
            if not abs(value) < float("inf"):
                raise ValueError(f"{name} must be finite, got {value}")
            set_(name, value)
        set_("no_repeat_ngram_size", check_int("no_repeat_ngram_size", self.no_repeat_ngram_size, minimum=0))
        set_("bad_words", _words(self.bad_words))
        set_("logit_bias", _bias(self.logit_bias))
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            raise TypeError(f"grammar must be a Grammar or None, got {type(self.grammar).__name__}")
        set_("eos", _optional("eos", self.eos, lambda n, x: check_int(n, x, minimum=0)))
        set_("max_new_tokens", check_int("max_new_tokens", self.max_new_tokens, minimum=1))
        self._check_grammar()

    def _check_grammar(self) -> None:
        """With an EOS, every state that may not end must still allow a token other than EOS."""
        g = self.grammar
        if g is None:
            return
        if self.eos is not None and self.eos >= g.vocab:
            raise ValueError(f"eos must be a token of the grammar's vocabulary [0, {g.vocab}), got {self.eos}")
        for s, row in enumerate(g.transitions):
            others = any(t != DEAD for x, t in enumerate(row) if x != self.eos)
            if not others and (self.eos is None or s not in g.accepting):
                raise ValueError(f"grammar: state {s} allows no token once EOS is ruled by the accepting states "
                                 f"(eos = {self.eos})")

    @property
    def features(self) -> tuple[str, ...]:
        """The names of the features switched on (FEATURES' order); max_new_tokens is always on."""
        on = [f.name for f in fields(self) if f.name == "max_new_tokens" or getattr(self, f.name) != f.default]
        return tuple(sorted(on, key=FEATURES.index))

    def off(self, names) -> Settings:
        """These settings with the named features switched off (their defaults): the processors that do not run."""
        defaults = {f.name: f.default for f in fields(self) if f.name in names and f.name != "max_new_tokens"}
        return replace(self, **defaults) if defaults else self


FirstToken = Literal["round", "plain"]  # each field's values, the correct one first
Penalties = Literal["per_position", "round_start", "last_commit", "bonus_only", "ignored"]
Processors = Literal["all", "bonus_only", "bonus_only_all", "ignored"]
GrammarRule = Literal["per_position", "unmasked_after_illegal", "unmasked_drafts", "ignored"]
EosRule = Literal["truncate", "run_past", "finish_round"]
LengthRule = Literal["truncate", "checked_first"]
Logprobs = Literal["target", "zero", "raw_bonus"]
Verifier = Literal["token", "block"]  # verification.METHODS

SPEC_CHOICES: dict[str, tuple[str, ...]] = {
    "first_token": FirstToken.__args__, "penalties": Penalties.__args__, "processors": Processors.__args__,
    "grammar": GrammarRule.__args__, "eos": EosRule.__args__, "length": LengthRule.__args__,
    "logprobs": Logprobs.__args__, "verifier": Verifier.__args__,
}


@dataclass(frozen=True)
class LoopSpec:
    """How the speculative loop carries each per-token state; LoopSpec() is the correct loop (module doc)."""

    first_token: FirstToken = "round"
    penalties: Penalties = "per_position"
    processors: Processors = "all"
    grammar: GrammarRule = "per_position"
    eos: EosRule = "truncate"
    length: LengthRule = "truncate"
    logprobs: Logprobs = "target"
    verifier: Verifier = "token"

    def __post_init__(self) -> None:
        for name, choices in SPEC_CHOICES.items():
            check_choice(name, getattr(self, name), choices)
