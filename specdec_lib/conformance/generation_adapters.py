"""audit_generation's conventions: what a user's generation function takes and returns, turned into the kit's one
sampler, sample(case, n, generator) -> list[Sample].

  loop          fn(target, draft, prompt, settings, k, generator) -> Output | (tokens, logprobs)   one sample
  batched       fn(target, draft, prompt, settings, k, num_samples, generator) -> list of num_samples of those
  transformers  fn(target_model, draft_model, input_ids (1, L), generation_config) -> sequences (1, L + new) or a
                generate() output with .sequences and .scores, as model.generate(input_ids, generation_config=...,
                assistant_model=...) (assisted_generate is that call); the case's models must be HFChain; each
                call runs in torch.random.fork_rng with the global generator seeded from ours
tokens: a sequence or 1-D tensor of token ids (the new tokens only); logprobs: one float per token, or None (not
reported: nothing to check); an Output's stop, when it has one, is checked against its tokens. transformers is
imported only by the transformers convention, offline (hf.py). generate() takes no generator, so that convention
alone seeds torch's global one, inside torch.random.fork_rng (restored after), from draws of ours: the one place
the kit touches global randomness, on purpose.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._checks import check_choice
from .generation_battery import GenerationCase

__all__ = ["GENERATION_CONVENTIONS", "RULES", "Sample", "parse_output", "adapt_generation", "assisted_generate",
           "from_generate", "speculate_fn"]

GENERATION_CONVENTIONS = ("loop", "batched", "transformers")
RULES = {
    "loop": "fn(target, draft, prompt, settings, k, generator) -> Output | (tokens, logprobs), one sample per call",
    "batched": "fn(target, draft, prompt, settings, k, num_samples, generator) -> a list of num_samples Outputs or "
               "(tokens, logprobs) pairs",
    "transformers": "fn(target_model, draft_model, input_ids (1, L), generation_config) -> sequences (1, L + new) or "
                    "a generate() output with .sequences (and .scores)",
}


@dataclass(frozen=True)
class Sample:
    """One parsed output: the tokens, the reported logprobs (None: not reported) and stop (None: not reported)."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    stop: str | None


def _bind(fn: Callable, convention: str, nargs: int) -> None:
    """TypeError naming the convention's rule unless fn takes nargs positional arguments."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to read, its first call will tell
        return
    try:
        sig.bind(*range(nargs))
    except TypeError as err:
        raise TypeError(f"fn does not follow the {convention!r} convention, {RULES[convention]}: {err}") from None


def _tokens(x, where: str) -> tuple[int, ...]:
    if isinstance(x, torch.Tensor):
        x = x[0] if x.dim() == 2 and x.shape[0] == 1 else x
        if x.dim() != 1 or x.dtype.is_floating_point or x.dtype == torch.bool:
            raise TypeError(f"{where}: tokens must be a 1-D integer tensor or a sequence of ints, got a {x.dtype} "
                            f"tensor of shape {tuple(x.shape)}")
        return tuple(x.tolist())
    if isinstance(x, list | tuple) and all(isinstance(t, int) and not isinstance(t, bool) for t in x):
        return tuple(x)
    raise TypeError(f"{where}: tokens must be a 1-D integer tensor or a sequence of ints, got {type(x).__name__}")


def _logprobs(x, where: str) -> tuple[float, ...] | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return tuple(float(v) for v in x.reshape(-1).tolist())
    try:
        return tuple(float(v) for v in x)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: logprobs must be None or one float per token, got {type(x).__name__}") from None


def parse_output(out, rule: str) -> Sample:
    """A Sample from an Output (tokens, logprobs, stop) or a (tokens, logprobs) pair; TypeError naming the rule."""
    where = f"fn ({rule})"
    if hasattr(out, "tokens") and hasattr(out, "logprobs"):
        stop = getattr(out, "stop", None)
        return Sample(_tokens(out.tokens, where), _logprobs(out.logprobs, where), None if stop is None else str(stop))
    if isinstance(out, tuple | list) and len(out) == 2:
        return Sample(_tokens(out[0], where), _logprobs(out[1], where), None)
    raise TypeError(f"{where} must return an Output or a (tokens, logprobs) pair, got {type(out).__name__}")


def _loop(fn: Callable) -> Callable:
    def sample(case: GenerationCase, n: int, generator: torch.Generator) -> list[Sample]:
        return [parse_output(fn(case.target, case.draft, case.prompt, case.settings, case.k, generator), RULES["loop"])
                for _ in range(n)]

    return sample


def _batched(fn: Callable) -> Callable:
    def sample(case: GenerationCase, n: int, generator: torch.Generator) -> list[Sample]:
        outs = fn(case.target, case.draft, case.prompt, case.settings, case.k, n, generator)
        if not isinstance(outs, tuple | list) or len(outs) != n:
            got = f"{len(outs)} outputs" if isinstance(outs, tuple | list) else type(outs).__name__
            raise TypeError(f"fn ({RULES['batched']}) returned {got} for num_samples = {n}")
        return [parse_output(o, RULES["batched"]) for o in outs]

    return sample


def adapt_generation(fn: Callable, convention: str) -> Callable:
    """fn as sample(case, n, generator) -> list[Sample], its signature checked against the convention first."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    check_choice("convention", convention, GENERATION_CONVENTIONS)
    _bind(fn, convention, {"loop": 6, "batched": 7, "transformers": 4}[convention])
    return {"loop": _loop, "batched": _batched, "transformers": from_generate}[convention](fn)


def speculate_fn(spec=None) -> Callable:
    """The library's surface.speculate under the loop convention, with a LoopSpec (None: the correct loop)."""
    from ..surface.loop import LoopSpec, speculate

    spec = LoopSpec() if spec is None else spec

    def fn(target, draft, prompt, settings, k, generator):
        return speculate(target, draft, prompt, settings, k=k, spec=spec, generator=generator)

    fn.__qualname__ = f"speculate(spec={spec!r})"
    return fn


# ---- transformers' generate ------------------------------------------------------------------------------------

def assisted_generate(target, draft, input_ids: torch.Tensor, config):
    """transformers' own assisted generation, the transformers convention's fn: target.generate(input_ids,
    generation_config=config, assistant_model=draft)."""
    return target.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config,
                           assistant_model=draft)


def _parse_generate(out, length: int) -> Sample:
    """A Sample from generate()'s result: the new tokens of .sequences (or of a tensor), logprobs from .scores (each
    the processed row of one new token; a count that is not the token count breaks the contract)."""
    seq = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
    if not isinstance(seq, torch.Tensor) or seq.dim() != 2 or seq.shape[0] != 1:
        raise TypeError(f"fn ({RULES['transformers']}) returned {type(out).__name__}")
    tokens = tuple(seq[0, length:].tolist())
    scores = None if isinstance(out, torch.Tensor) else getattr(out, "scores", None)
    if scores is None:
        return Sample(tokens, None, None)
    rows = [torch.log_softmax(s[0].double(), -1) for s in scores]  # (V,) each
    lp = tuple(row[t].item() for row, t in zip(rows, tokens)) + (math.nan,) * max(0, len(rows) - len(tokens))
    return Sample(tokens, lp, None)


def from_generate(fn: Callable) -> Callable:
    """The transformers convention as sample(case, n, generator): the assistant set to draft k tokens a round with
    no early stop (hf.assistant_settings: transformers 5.24.0 reads these from the assistant's config only)."""
    from . import hf

    def sample(case: GenerationCase, n: int, generator: torch.Generator) -> list[Sample]:
        target, draft = getattr(case.target, "model", None), getattr(case.draft, "model", None)
        if target is None or draft is None:
            raise TypeError(f"case {case.name!r}: the transformers convention needs HF models (HFChain) as target "
                            "and draft")
        config = hf.generation_config(case.settings, k=case.k, scores=True)  # assisted, k drafts a round
        ids = torch.tensor([case.prompt], dtype=torch.long)  # (1, L)
        seeds = torch.randint(2**62, (n,), generator=generator).tolist()
        out = []
        with torch.random.fork_rng(devices=[]), torch.no_grad(), hf.quiet(), \
                hf.assistant_settings(draft, num_assistant_tokens=case.k):
            for s in seeds:
                torch.default_generator.manual_seed(s)
                out.append(_parse_generate(fn(target, draft, ids, config), ids.shape[1]))
        return out

    return sample
