"""The second transformers audit: assisted generation and prompt lookup, sampled, on the whole sampling surface.

Oracle: plain generate(do_sample=True) by teacher forcing through the processors and stopping criteria generate()
prepares itself (hf.generate_law); runs end at max_length or an EOS (batch size 1: no padding, variable-length tuples).
Speculative runs are sampled from an explicit torch.Generator and compared by TV with sd.tv_noise_bound, delta split
over the cases, with negative controls that must fail; reported scores and logits are checked against plain's.
"""
from __future__ import annotations

import collections
import contextlib
import math
import time
import unittest.mock
import zlib
from dataclasses import dataclass, field

import torch

from .._checks import check_choice, check_generator, check_int, check_real
from ..noise import DELTA, tv_noise_bound
from ..surface import law_tv
from . import hf

__all__ = ["AUDIT_NOTES", "PROMPT", "SPECULATIVE", "SurfaceCase", "surface_cases", "surface_pair", "sampling_config",
           "GenerateRun", "generate_samples", "empirical_law", "block_stats", "law_tv", "law_bound",
           "score_error", "SurfaceVerdict", "surface_verdicts", "format_verdicts", "COIN_RESOLUTION", "zero_coins",
           "CoinEdge", "coin_edge"]

PROMPT = (1, 2, 3, 1, 2)  # a repeated bigram: prompt lookup has candidates from the first round on; no pad token (0)
_METHODS = ("plain", "assisted", "prompt_lookup")  # plain: the oracle's own check
SPECULATIVE = ("assisted", "prompt_lookup")

AUDIT_NOTES = (  # transformers 5.24.0 src/transformers/generation/, read at these lines
    "utils.py L4109-4111: each candidate position i is processed by plain's list at its own prefix;",
    "utils.py L4116-4123, _speculative_sampling L4444-4507: q = softmax of the assistant's processed scores (the ones "
    "it sampled from); the coin is `r_i <= probability_ratio` (L4479): r_i == 0 keeps a token with p = 0;",
    "candidate_generator.py L115-119, L288: num_assistant_tokens (default 20) and assistant_confidence_threshold "
    "(0.4) are read from assistant_model.generation_config, not generate(); drafts are capped at the budget - 1;",
    "candidate_generator.py L1099: prompt lookup caps candidates at min(.., input_length, max_length), not at the "
    "budget; utils.py L4153-4156 crops valid_tokens to it; L4158-4163 crops them after the first EOS;",
    "utils.py L4129-4132: prompt lookup (no draft logits) samples every position from the target's processed law and "
    "keeps candidates to the first mismatch plus that draw: exact for a fixed draft; it never proposes an EOS "
    "(candidate_generator.py L1136-1141); utils.py L4202-4204: output_scores/logits = processed/raw target rows.",
)


@dataclass(frozen=True)
class SurfaceCase:
    """One setting: GenerationConfig kwargs, prompt, method, block (drafts or candidates a round), controls."""

    name: str
    method: str
    config: tuple[tuple[str, object], ...]
    prompt: tuple[int, ...] = PROMPT
    block: int = 2
    controls: tuple[str, ...] = ("off",)  # "off": setting off; "stale": processors see the prompt; "draft"; "past_cap"
    off: tuple[tuple[str, object], ...] = ()  # the kwargs of the "off" control's law

    def __post_init__(self):
        check_choice("method", self.method, _METHODS)
        for c in self.controls or (None,):
            check_choice("controls", c, ("off", "stale", "draft", "past_cap"))

    @property
    def kwargs(self) -> dict:
        return dict(self.config)

    @property
    def settings(self) -> str:
        block = {"assisted": [f"num_assistant_tokens={self.block}"],
                 "prompt_lookup": [f"prompt_lookup_num_tokens={self.block}"]}.get(self.method, [])
        return ", ".join([f"{k}={v!r}" for k, v in self.config] + block + [f"prompt={self.prompt}"])


# (name, config, prompt, block, controls, off-config): blocks of 2 (+1: the 3-token horizon), 4 past the length cap
_SETTINGS = (
    ("repetition_penalty", (("repetition_penalty", 10.0),), (3, 1, 3, 1), 2, ("off", "stale"), ()),
    ("no_repeat_ngram_size", (("no_repeat_ngram_size", 3),), (1, 3, 1, 3), 2, ("off", "stale"), ()),
    ("min_p", (("temperature", 2.0), ("min_p", 0.3)), PROMPT, 2, ("off", "draft"), (("temperature", 2.0),)),
    ("top_k+top_p", (("temperature", 2.0), ("top_k", 2), ("top_p", 0.8)), PROMPT, 2, ("off",), (("temperature", 2.0),)),
    ("sequence_bias", (("sequence_bias", {(1, 0): -8.0, (2,): -3.0}),), PROMPT, 2, ("off", "stale"), ()),
    ("bad_words_ids", (("bad_words_ids", [[2], [1, 0]]),), PROMPT, 2, ("off", "stale"), ()),
    ("eos_mid_block", (("eos_token_id", 0),), PROMPT, 2, ("off",), ()),
    ("max_new_tokens_mid_block", (("max_new_tokens", hf.HORIZON),), PROMPT, 4, ("draft", "past_cap"), ()),
)


def surface_cases(methods=SPECULATIVE) -> tuple[SurfaceCase, ...]:
    """Each setting with each method (("plain",): the settings sampled without speculation, the oracle's check)."""
    return tuple(SurfaceCase(name, m, config, prompt, block, controls, off)
                 for m in methods for name, config, prompt, block, controls, off in _SETTINGS)


def surface_pair():
    """The first audit's pair: the target, and the same network at temperature 2.5 as the draft."""
    return hf.tiny_pair()


def sampling_config(**kw):
    """A sampling GenerationConfig, raw softmax unless kw says otherwise (hf.sample_config with do_sample=True)."""
    return hf.sample_config(**{"do_sample": True, **kw})


@dataclass(frozen=True)
class GenerateRun:
    """One generate() run: new tokens, reported scores and raw logits (T, V), rounds (tokens before, candidates)."""

    tokens: tuple[int, ...]
    scores: torch.Tensor = field(repr=False)
    logits: torch.Tensor = field(repr=False)
    rounds: tuple[tuple[int, int], ...] = ()


def generate_samples(target, num_samples: int, generator: torch.Generator, *, prompt=PROMPT, method: str = "plain",
                    draft=None, block: int = 2, **config) -> list[GenerateRun]:
    """num_samples seeded runs of generate(do_sample=True, **config): plain, assisted by `draft`, or prompt lookup."""
    n = check_int("num_samples", num_samples, minimum=1)
    if check_generator(generator) is None:
        raise TypeError("generator must be a torch.Generator (transformers' draws are seeded from it)")
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if method == "assisted" and draft is None:
        raise ValueError("method 'assisted' needs a draft model")
    extra = {"assistant_model": draft} if method == "assisted" else {}
    if method == "prompt_lookup":
        config = {**config, "prompt_lookup_num_tokens": check_int("block", block, minimum=1)}
    cfg = sampling_config(return_dict_in_generate=True, output_scores=True, output_logits=True, **config)
    ids0 = hf._prompt(prompt)
    setting = (hf.assistant_settings(draft, num_assistant_tokens=block) if method == "assisted"
               else contextlib.nullcontext())
    out, log = [], []
    with torch.random.fork_rng(devices=[]), torch.no_grad(), hf.quiet(), setting, hf.recorded_rounds(log):
        torch.default_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        for _ in range(n):
            log.clear()  # all-ones mask: generate() would read prompt tokens equal to pad_token_id as padding
            res = target.generate(ids0, attention_mask=torch.ones_like(ids0), generation_config=cfg, **extra)
            out.append(GenerateRun(tuple(res.sequences[0, ids0.shape[1]:].tolist()), torch.cat(res.scores).float(),
                              torch.cat(res.logits).float(), tuple(log)))
    return out


def empirical_law(samples) -> dict[tuple[int, ...], float]:
    """The empirical law {new tokens: frequency} of GenerateRuns (or token tuples)."""
    counts = collections.Counter(s.tokens if isinstance(s, GenerateRun) else tuple(s) for s in samples)
    return {k: c / len(samples) for k, c in counts.items()}


def block_stats(samples, *, prompt_len: int, max_new_tokens: int = hf.HORIZON, eos: int | None = None) -> dict:
    """Rounds per run, share with candidates, candidates per round, runs whose block crossed the cap, EOS inside."""
    rounds = [r for s in samples for r in s.rounds]
    crossing = sum(any(c + 1 > prompt_len + max_new_tokens - at for at, c in s.rounds) for s in samples)
    inside = sum(eos is not None and bool(s.tokens) and s.tokens[-1] == eos and bool(s.rounds)
                 and prompt_len + len(s.tokens) - s.rounds[-1][0] < s.rounds[-1][1] + 1 for s in samples)
    n, m = max(len(samples), 1), max(len(rounds), 1)  # inside: the last round committed fewer than its c + 1
    return {"rounds": len(rounds) / n, "with_candidates": sum(c > 0 for _, c in rounds) / m,
            "candidates": sum(c for _, c in rounds) / m, "crossing": crossing / n, "eos_inside": inside / n}


def law_bound(law: hf.PlainLaw | dict, num_samples: int, delta: float = DELTA) -> float:
    """sd.tv_noise_bound of the law: n exact samples exceed it with probability below delta."""
    probs = law.law if isinstance(law, hf.PlainLaw) else law
    return tv_noise_bound(torch.tensor(list(probs.values()), dtype=torch.float64), num_samples, delta)


def score_error(samples, law: hf.PlainLaw) -> tuple[float, float]:
    """Largest |reported - plain's| over the samples' scores and raw logits (inf: -inf pattern or length differ)."""
    worst = [0.0, 0.0]
    for s in samples:
        if not s.scores.shape[0] == s.logits.shape[0] == len(s.tokens):
            return math.inf, math.inf
        for i in range(len(s.tokens)):
            for j, (got, ref) in enumerate(((s.scores[i], law.scores.get(s.tokens[:i])),
                                            (s.logits[i], law.logits.get(s.tokens[:i])))):  # (V,) each
                if ref is None or not torch.equal(got.isinf(), ref.isinf()):
                    return math.inf, math.inf
                worst[j] = max(worst[j], torch.where(got.isinf(), 0.0, got - ref).abs().max().item())
    return worst[0], worst[1]


@dataclass(frozen=True)
class SurfaceVerdict:
    """A case's TV against its bound; controls (label, exact TV, samples' TV, own bound): caught when the samples' TV
    > bound, powered when exact TV > bound + own bound (so a sampler with that law fails w.p. >= 1 - delta/split)."""

    name: str
    method: str
    settings: str
    n: int
    outcomes: int
    tv: float
    bound: float
    controls: tuple[tuple[str, float, float, float], ...]
    score_error: float
    logit_error: float
    seconds: float
    stats: dict = field(default_factory=dict, compare=False)

    @property
    def passed(self) -> bool:
        return self.tv <= self.bound

    @property
    def controls_caught(self) -> bool:
        return all(sampled > self.bound for _, _, sampled, _ in self.controls)

    @property
    def powered(self) -> tuple[str, ...]:
        return tuple(kind for kind, exact, _, own in self.controls if exact > self.bound + own)

    @property
    def verdict(self) -> str:
        return "exact (TV <= bound)" if self.passed else "FAILS (TV > bound)"


def _control_law(case: SurfaceCase, kind: str, target, draft) -> dict:
    kw = dict(case.off) if kind == "off" else case.kwargs  # past_cap: one token more than max_new_tokens
    kw = {**kw, "max_new_tokens": kw.get("max_new_tokens", hf.HORIZON) + 1} if kind == "past_cap" else kw
    return hf.generate_law(draft if kind == "draft" else target, case.prompt, sampling_config(**kw),
                           stale=kind == "stale").law


def surface_verdicts(num_samples: int = 400, *, seed: int = 0, cases=None, pair=None, delta: float = DELTA,
                     split: int | None = None) -> tuple[SurfaceVerdict, ...]:
    """Each case's verdict from num_samples runs, at false-failure delta / split a case (split: len(cases))."""
    n = check_int("num_samples", num_samples, minimum=1)
    cases = surface_cases() if cases is None else tuple(cases)
    split = len(cases) if split is None else check_int("split", split, minimum=len(cases))
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    target, draft = surface_pair() if pair is None else pair
    out = []
    for case in cases:  # each case has its own generator (seed, name, method): a subset sees the full run's draws
        t0, kw = time.perf_counter(), case.kwargs
        law = hf.generate_law(target, case.prompt, sampling_config(**kw))
        g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(f"{case.name}/{case.method}".encode()))
        samples = generate_samples(target, n, g, prompt=case.prompt, method=case.method, draft=draft,
                                  block=case.block, **kw)
        emp, bound = empirical_law(samples), law_bound(law, n, delta / split)
        controls = tuple((kind, law_tv(law.law, c), law_tv(emp, c), law_bound(c, n, delta / split))
                         for kind, c in ((k, _control_law(case, k, target, draft)) for k in case.controls))
        stats = block_stats(samples, prompt_len=len(case.prompt), max_new_tokens=kw.get("max_new_tokens", hf.HORIZON),
                            eos=kw.get("eos_token_id"))
        out.append(SurfaceVerdict(case.name, case.method, case.settings, n, len(law.law), law_tv(emp, law.law),
                                  bound, controls, *score_error(samples, law), time.perf_counter() - t0, stats))
    return tuple(out)


def format_verdicts(verdicts) -> str:
    """A table: setting, method, n, outcomes, TV, bound, verdict, controls (exact / sampled TV), score errors."""
    lines = [f"{'setting':<25} {'method':<13} {'n':>4} {'outc':>4} {'TV':>6} {'bound':>6}  {'verdict':<20} "
             f"{'controls: exact TV / sampled TV':<36} {'|d score|':>9} {'|d logit|':>9}"]
    for v in verdicts:
        ctl = "  ".join(f"{k} {a:.3f}/{b:.3f}{'' if b > v.bound else ' MISSED'}" for k, a, b, _ in v.controls)
        lines.append(f"{v.name:<25} {v.method:<13} {v.n:>4} {v.outcomes:>4} {v.tv:>6.3f} {v.bound:>6.3f}  "
                     f"{v.verdict:<20} {ctl:<36} {v.score_error:>9.1e} {v.logit_error:>9.1e}")
    return "\n".join(lines)


COIN_RESOLUTION = 2.0**-24  # torch.rand draws float32 multiples of 2^-24 on CPU, 0 included


def zero_coins():
    """A context in which torch.rand_like returns zeros: every coin of _speculative_sampling is exactly 0."""
    return unittest.mock.patch.object(torch, "rand_like", lambda x, **kw: torch.zeros_like(x, **kw))


@dataclass(frozen=True)
class CoinEdge:
    """The zero-coin edge: share of all-zero-coin runs outside plain's support, one such output, and tv_first = 2^-24 *
    q1(tokens the target bans at the first drafted position), the TV it adds there alone (a lower bound)."""

    name: str
    n: int
    outside: float
    example: tuple[int, ...] | None
    tv_first: float


def coin_edge(num_samples: int = 20, *, name: str = "min_p", seed: int = 0, pair=None) -> CoinEdge:
    """Assisted sampling of the named setting with every coin 0, against plain's support (see CoinEdge)."""
    cases = {c.name: c for c in surface_cases(("assisted",))}
    if name not in cases:
        raise ValueError(f"name must be one of {sorted(cases)}, got {name!r}")
    case, (target, draft) = cases[name], surface_pair() if pair is None else pair
    law = hf.generate_law(target, case.prompt, sampling_config(**case.kwargs))
    with zero_coins():
        samples = generate_samples(target, check_int("num_samples", num_samples, minimum=1),
                                  torch.Generator().manual_seed(seed), prompt=case.prompt, method="assisted",
                                  draft=draft, block=case.block, **case.kwargs)
    bad = [s.tokens for s in samples if s.tokens not in law.law]
    p1 = law.scores[()].double().softmax(-1)  # (V,) the target's first-position law
    q1 = hf.generate_law(draft, case.prompt, sampling_config(**case.kwargs)).scores[()]  # (V,) the draft's scores
    q1 = q1.double().softmax(-1)  # (V,) the draft's first-position law
    return CoinEdge(name, len(samples), len(bad) / len(samples), bad[0] if bad else None,
                    COIN_RESOLUTION * q1[p1 == 0].sum().item())
