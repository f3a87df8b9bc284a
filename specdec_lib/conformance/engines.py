"""The kit meets real engines: an engine behind one small interface, audited by audit_generation on its own law.

An engine adapter (one module per engine; each imports its engine only when built) gives
  name, version      what ran, as the recording names it
  modes              its decoding modes: "plain" first, then the speculative ones ("prompt lookup", "ngram", ...)
  vocab              V of the model it serves
  logits(context)    (V,) float logits of the token after context (a tuple of ids), read from the engine's own plain
                     path by teacher forcing: the exact law's source
  unsupported(settings, mode)  None, or why the engine cannot run these settings in mode (the case is left out,
                     and said so)
  generate(mode, prompt, settings, k, seeds) -> one (tokens, logprobs | None, stop | None) per seed: seeded
                     generations of the new tokens (logprobs None where the engine reports none)
  close()            stop what it started (a server process, an engine's workers)

audit_engine(engine, mode) builds each case's target as an EngineChain over engine.logits, so the exact law is the
kit's processors (surface.exact.plain_law) on the engine's own raw rows, and runs audit_generation's batched
convention with seeds drawn from the kit's generator. "plain" is audited the same way, and comes first: it is the
control that the kit's law is the engine's (a plain failure says the kit models the engine's processors wrongly, not
that speculation is wrong). same_seed counts the seeds whose speculative tokens equal plain's: an engine whose
speculation is sample-and-match (a drafted token is kept when the target's own sampled token equals it) must give
all of them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

import torch

from .._checks import check_choice, check_int
from ..surface.loop import Output
from ..surface.settings import Settings
from .battery import PROMISE, Promise
from .generation import audit_generation
from .generation_battery import GenerationCase
from .report import GenerationReport

__all__ = ["Engine", "EngineChain", "engine_cases", "engine_fn", "audit_engine", "same_seed", "SameSeed",
           "with_settings"]


@runtime_checkable
class Engine(Protocol):
    """What the kit needs of a real engine (module docstring)."""

    name: str
    version: str
    modes: tuple[str, ...]
    vocab: int

    def logits(self, context: tuple[int, ...]) -> torch.Tensor: ...

    def unsupported(self, settings: Settings, mode: str) -> str | None: ...

    def generate(self, mode: str, prompt: tuple[int, ...], settings: Settings, k: int, seeds: list[int]) -> list: ...

    def close(self) -> None: ...


@dataclass(frozen=True, eq=False)
class EngineChain:
    """An engine's plain path as a battery model: model(context) -> (V,) float32 logits, memoised per context."""

    name: str
    engine: object
    _rows: dict = field(default_factory=dict, repr=False, compare=False)

    def __call__(self, context: tuple[int, ...]) -> torch.Tensor:
        context = tuple(context)
        if context not in self._rows:
            row = torch.as_tensor(self.engine.logits(context), dtype=torch.float32).flatten()
            if row.numel() != self.engine.vocab or not torch.isfinite(row).all():
                raise ValueError(f"{self.name}: engine.logits({context}) must be {self.engine.vocab} finite floats, "
                                 f"got {row.numel()} values")
            self._rows[context] = row
        return self._rows[context].clone()  # (V,)


def engine_cases(chain: EngineChain, *, prompt: tuple[int, ...], eos: int, k: int = 3,
                 draft: object | None = None) -> list[GenerationCase]:
    """The engine battery: each setting an engine serves, alone, over two new tokens (three for the length and EOS
    cases), then greedy and top-k over five (an engine may cap a draft at the tokens left, minus one: a short case
    never speculates there); on the engine's own model (the draft, for a draft-model mode's diagnosis, defaults to
    the target)."""
    draft = chain if draft is None else draft

    def case(name: str, purpose: str, **settings) -> GenerationCase:
        return GenerationCase(name, chain, draft, tuple(prompt), Settings(**{"max_new_tokens": 2, **settings}), k,
                              purpose)

    return [case("plain", "temperature 1, no processor: the model's own law"),
            case("temperature", "every row sharpened by temperature 0.7", temperature=0.7),
            case("greedy", "temperature 0: one output", temperature=0.0),
            case("top_k", "two tokens kept per row", top_k=2),
            case("top_p", "the smallest set holding 70% of each row", top_p=0.7),
            case("min_p", "tokens below 20% of the row's best dropped", min_p=0.2),
            case("repetition", "a repetition penalty of 2 over prompt + generated", repetition_penalty=2.0),
            case("frequency", "a frequency penalty of 1 over the generated tokens", frequency_penalty=1.0),
            case("presence", "a presence penalty of 1 over the generated tokens", presence_penalty=1.0),
            case("logit_bias", "two tokens pushed up, one down", logit_bias=((1, 1.5), (2, 1.0), (0, -2.0))),
            case("eos", "an end of sequence inside the cap: three new tokens", max_new_tokens=3, eos=eos),
            case("length", "three new tokens against drafts of k", max_new_tokens=3),
            case("greedy x5", "temperature 0 over five new tokens: drafts inside the cap", temperature=0.0,
                 max_new_tokens=5),
            case("top_k x5", "top-k 2 over five new tokens: at most 32 outputs, drafts inside the cap", top_k=2,
                 max_new_tokens=5)]


def _check_mode(engine, mode: str) -> str:
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must follow the Engine interface (name, version, modes, vocab, logits, unsupported, "
                        f"generate, close), got {type(engine).__name__}")
    return check_choice("mode", mode, engine.modes)


def engine_fn(engine, mode: str) -> Callable:
    """engine's mode under audit_generation's batched convention: one seed per sample, drawn from the kit's
    generator (a 31-bit int: every engine's seed type holds it)."""
    _check_mode(engine, mode)

    def fn(target, draft, prompt, settings, k, num_samples, generator):
        seeds = torch.randint(0, 2**31 - 1, (num_samples,), generator=generator).tolist()
        return [Output(tuple(tokens), None if lp is None else tuple(lp), stop)
                for tokens, lp, stop in engine.generate(mode, tuple(prompt), settings, k, seeds)]

    return fn


def audit_engine(engine, mode: str, *, cases=None, seed: int = 0, num_samples: int | None = None,
                 promise: Promise = PROMISE) -> tuple[GenerationReport, dict[str, str]]:
    """(audit_generation's report on the cases engine serves in mode, {left-out case: why}); cases: GenerationCases
    whose target reads the engine (engine_cases over an EngineChain)."""
    _check_mode(engine, mode)
    if cases is None:
        raise ValueError("cases must be given: engine_cases(EngineChain(name, engine), prompt=..., eos=...) builds "
                         "the battery on the engine's model")
    served, left = [], {}
    for case in cases:
        why = engine.unsupported(case.settings, mode)
        if why is None:
            served.append(case)
        else:
            left[case.name] = why
    if not served:
        raise ValueError(f"{engine.name} serves none of the cases in mode {mode!r}: {left}")
    report = audit_generation(engine_fn(engine, mode), convention="batched", cases=served, seed=seed,
                              num_samples=num_samples, promise=promise,
                              subject=f"{engine.name} {engine.version} ({mode})")
    return report, left


@dataclass(frozen=True)
class SameSeed:
    """How many seeds gave the same tokens in plain and in mode (sample-and-match engines: all of them)."""

    mode: str
    case: str
    equal: int
    n: int
    first_difference: tuple | None  # (seed, plain's tokens, mode's tokens) of the first seed that differs

    @property
    def all_equal(self) -> bool:
        return self.equal == self.n


def same_seed(engine, mode: str, case: GenerationCase, *, n: int = 300, seed: int = 0) -> SameSeed:
    """Run case's prompt and settings with n seeds in "plain" and in mode, and count equal token tuples."""
    _check_mode(engine, mode)
    n = check_int("n", n, minimum=1)
    seeds = torch.randint(0, 2**31 - 1, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    runs = [engine.generate(m, tuple(case.prompt), case.settings, case.k, seeds) for m in ("plain", mode)]
    tokens = [[tuple(int(t) for t in out[0]) for out in run] for run in runs]
    differ = [(s, a, b) for s, a, b in zip(seeds, *tokens) if a != b]
    return SameSeed(mode, case.name, n - len(differ), n, differ[0] if differ else None)


def with_settings(case: GenerationCase, **settings) -> GenerationCase:
    """case with some settings changed (a grammar, a penalty window an engine needs)."""
    return replace(case, settings=replace(case.settings, **settings))
