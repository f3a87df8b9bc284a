"""The transformers audit's helpers: tiny random Llamas (surface.tiny_model), their exact law by teacher forcing,
generate() sampled from an explicit generator, and greedy speculation against plain greedy; and the bridge to the
sampling surface (surface.Settings as a GenerationConfig, a model as a context -> logits callable, one generate()
sample as tokens and logprobs), with generate()'s own processors and speculative rounds for hf_surface's audit.

transformers (the `audit` extra) is imported inside each function, with HF_HUB_OFFLINE=1 set first, so the kit
never requires it and nothing is downloaded. transformers draws from torch's global generator: every sampling call
here runs inside torch.random.fork_rng seeded from the caller's torch.Generator, leaving the global state as it was.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
from dataclasses import dataclass, field, replace

import torch

from .._checks import check_choice, check_generator, check_int, check_real
from ..surface.tiny_model import TinyConfig, offline_transformers, tiny_causal_lm

__all__ = ["V", "HORIZON", "PROMPT", "quiet", "tiny_llama", "tiny_pair", "exact_law", "sample_config", "sampled_law",
           "greedy_prompts", "greedy_mismatches", "context_logits", "generation_kwargs", "generation_config",
           "assistant_settings", "generate_once", "plain_processors", "recorded_rounds", "PlainLaw", "generate_law"]

V, HORIZON = 4, 3  # the audit's vocabulary and horizon: 4^3 = 64 outcomes
PROMPT = (1, 2)
# tiny_llama's shape: no BOS and no EOS token (generate() runs every sample to its length), pad 0
_TINY_LLAMA = TinyConfig("llama", vocab=V, hidden=16, intermediate=32, heads=2, kv_heads=2, max_positions=32,
                         tokens=(("bos_token_id", None), ("eos_token_id", None), ("pad_token_id", 0)))


@contextlib.contextmanager
def quiet():
    """transformers' own logging at error level while inside (its assisted path warns about its internal calls)."""
    logging = offline_transformers().utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def tiny_llama(seed: int, *, layers: int = 2, head_scale: float = 40.0, vocab: int = V):
    """A Llama over `vocab` tokens (hidden 16, transformers' own init from seed), its head scaled so next-token laws
    are peaked: surface.tiny_causal_lm."""
    config = replace(_TINY_LLAMA, layers=layers, vocab=vocab)
    return tiny_causal_lm(config, seed=seed, init="transformers", head_scale=head_scale)


def tiny_pair():
    """The target, and a draft that is the same network at temperature 2.5 (head x 0.4): often kept, often not."""
    return tiny_llama(1), tiny_llama(1, head_scale=16.0)


def _prompt(prompt) -> torch.Tensor:
    return torch.tensor([list(prompt)], dtype=torch.long)  # (1, len)


def exact_law(model, *, prompt=PROMPT, horizon: int = HORIZON) -> torch.Tensor:
    """The model's law over its next `horizon` tokens, (V,) * horizon, by teacher forcing: one batched forward."""
    horizon = check_int("horizon", horizon, minimum=1)
    vocab, ids0 = model.config.vocab_size, _prompt(prompt)
    heads = torch.tensor(list(itertools.product(range(vocab), repeat=horizon - 1)),
                         dtype=torch.long).reshape(-1, horizon - 1)  # (V^(h-1), h-1) every head of the sequence
    ids = torch.cat([ids0.expand(heads.shape[0], -1), heads], dim=1)  # (V^(h-1), len + h - 1)
    with torch.no_grad():
        rows = model(ids).logits[:, ids0.shape[1] - 1:].double().softmax(-1)  # (V^(h-1), h, V) each next token
    law = torch.zeros((vocab,) * horizon, dtype=torch.float64)
    for b, head in enumerate(heads.tolist()):
        for z in range(vocab):
            seq = (*head, z)
            law[seq] = torch.prod(torch.stack([rows[b, i, t] for i, t in enumerate(seq)])).item()
    return law


def sample_config(**kw):
    """A GenerationConfig that samples the raw softmax (no top-k, no top-p) for HORIZON new tokens, unless kw says."""
    base = {"max_new_tokens": HORIZON, "top_k": None, "top_p": None, "temperature": 1.0, "pad_token_id": 0, **kw}
    return offline_transformers().GenerationConfig(**base)


def sampled_law(target, num_samples: int, generator: torch.Generator, *, prompt=PROMPT,
                **generate_kw) -> torch.Tensor:
    """Frequencies (V,) * HORIZON of the new tokens of num_samples calls target.generate(..., do_sample=True, ...)."""
    n = check_int("num_samples", num_samples, minimum=1)
    if check_generator(generator) is None:
        raise TypeError("generator must be a torch.Generator (transformers' draws are seeded from it)")
    ids0, cfg = _prompt(prompt), sample_config(do_sample=True)
    counts = torch.zeros((target.config.vocab_size,) * HORIZON, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet():
        torch.default_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        for _ in range(n):
            out = target.generate(ids0, generation_config=cfg, **generate_kw)  # (1, len + HORIZON)
            counts[tuple(out[0, ids0.shape[1]:].tolist())] += 1
    return counts / n


def greedy_prompts(num_prompts: int = 12, *, length: int = 6, vocab: int = V, seed: int = 1) -> list[torch.Tensor]:
    """num_prompts random prompts (1, length) over the vocabulary, from a generator seeded with `seed`."""
    n, length = check_int("num_prompts", num_prompts, minimum=1), check_int("length", length, minimum=1)
    g = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    return [torch.randint(check_int("vocab", vocab, minimum=2), (1, length), generator=g) for _ in range(n)]


def greedy_mismatches(target, prompts: list[torch.Tensor], *, new_tokens: int = 10, **speculation) -> list[int]:
    """Indices of the prompts where greedy generate(**speculation) differs from plain greedy, token for token."""
    tf = offline_transformers()
    plain = tf.GenerationConfig(max_new_tokens=check_int("new_tokens", new_tokens, minimum=1), do_sample=False,
                                pad_token_id=0)
    fast = tf.GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                               prompt_lookup_num_tokens=speculation.pop("prompt_lookup_num_tokens", None))
    bad = []
    with torch.no_grad(), quiet():
        for i, ids in enumerate(prompts):
            if not torch.equal(target.generate(ids, generation_config=plain),
                               target.generate(ids, generation_config=fast, **speculation)):
                bad.append(i)
    return bad


# -- the bridge to surface.Settings (the kit's transformers adapter), and generate()'s own processors and rounds

def context_logits(model):
    """`model` as the surface's model: context (tuple of ids) -> float32 logits (V,), one full forward, memoised."""

    @functools.cache
    def cached(context: tuple[int, ...]) -> torch.Tensor:
        with torch.no_grad():
            return model(_prompt(context)).logits[0, -1].to(torch.float32)  # (V,)

    return lambda context: cached(tuple(context)).clone()


_UNMAPPED = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "grammar": None}


def generation_kwargs(settings, *, k: int | None = None, method: str = "assisted") -> dict:
    """GenerationConfig kwargs giving surface's next_probs law for each feature alone (HF: sequence_bias first, min_p
    last); ValueError for what HF lacks (frequency, presence, grammar) or drops (a bad word (eos,)); k: block size."""
    for name, off in _UNMAPPED.items():
        if getattr(settings, name) != off:
            raise ValueError(f"settings.{name} has no transformers equivalent (it must be {off!r} here)")
    check_choice("method", method, ("assisted", "prompt_lookup"))
    if settings.eos is not None and (settings.eos,) in settings.bad_words:
        raise ValueError("settings.bad_words must not hold the one-token word (eos,): transformers ignores it")
    kw = {"max_new_tokens": settings.max_new_tokens, "do_sample": settings.temperature > 0, "pad_token_id": 0,
          "top_k": settings.top_k or 0, "top_p": settings.top_p, "min_p": settings.min_p,
          "repetition_penalty": settings.repetition_penalty, "no_repeat_ngram_size": settings.no_repeat_ngram_size,
          "temperature": settings.temperature or None, "eos_token_id": settings.eos}
    if settings.bad_words:
        kw["bad_words_ids"] = [list(w) for w in settings.bad_words]
    if settings.logit_bias:
        kw["sequence_bias"] = {(t,): float(b) for t, b in settings.logit_bias}
    if k is not None:
        kw["prompt_lookup_num_tokens" if method == "prompt_lookup" else "num_assistant_tokens"] = check_int("k", k,
                                                                                                          minimum=1)
    return kw


def generation_config(settings, *, k: int | None = None, method: str = "assisted", scores: bool = False):
    """The GenerationConfig of generation_kwargs(settings, k=k, method=method); scores: generate() returns its
    processed scores too (return_dict_in_generate, output_scores: the reported logprobs)."""
    if not isinstance(scores, bool):
        raise TypeError(f"scores must be a bool, got {type(scores).__name__}")
    config = offline_transformers().GenerationConfig(**generation_kwargs(settings, k=k, method=method))
    if scores:
        config.return_dict_in_generate, config.output_scores = True, True
    return config


@contextlib.contextmanager
def assistant_settings(draft, *, num_assistant_tokens: int, threshold: float = 0.0, schedule: str = "constant"):
    """The assistant drafts num_assistant_tokens a round, never stopping early, while inside (restored after): 5.24.0
    reads them from the assistant's generation_config only (candidate_generator.py L115-119; defaults 20, 0.4)."""
    cfg = draft.generation_config
    new = {"num_assistant_tokens": check_int("num_assistant_tokens", num_assistant_tokens, minimum=1),
           "assistant_confidence_threshold": check_real("threshold", threshold, low=0.0, high=1.0),
           "num_assistant_tokens_schedule": check_choice("schedule", schedule,
                                                         ("constant", "heuristic", "heuristic_transient"))}
    old = {key: getattr(cfg, key, None) for key in new}
    for key, value in new.items():
        setattr(cfg, key, value)
    try:
        yield
    finally:
        for key, value in old.items():
            setattr(cfg, key, value)


def generate_once(target, draft, prompt, settings, k: int, generator: torch.Generator, *,
                    method: str = "assisted"):
    """One seeded generate() sample, assisted (k drafts) or prompt lookup (k candidates), as (tokens, log p of each
    from output_scores, "eos" | "length"); all-ones attention mask (else prompt tokens equal to pad read as padding)."""
    if check_generator(generator) is None:
        raise TypeError("generator must be a torch.Generator (transformers' draws are seeded from it)")
    cfg = generation_config(settings, k=k, method=method, scores=True)
    ids0 = _prompt(prompt)
    extra = {"assistant_model": draft} if method == "assisted" else {}
    setting = assistant_settings(draft, num_assistant_tokens=k) if method == "assisted" else contextlib.nullcontext()
    with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet(), setting:
        torch.default_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        out = target.generate(ids0, attention_mask=torch.ones_like(ids0), generation_config=cfg, **extra)
    tokens = tuple(out.sequences[0, ids0.shape[1]:].tolist())
    logprobs = tuple(torch.log_softmax(s[0].double(), -1)[t].item() for s, t in zip(out.scores, tokens))
    return tokens, logprobs, "eos" if settings.eos is not None and tokens and tokens[-1] == settings.eos else "length"


def plain_processors(model, prompt, config):
    """(processors, stopping criteria) generate(prompt, generation_config=config) prepares, via custom_generate."""
    got = {}

    def capture(_model, input_ids, logits_processor, stopping_criteria, generation_config, **_):
        got.update(processors=logits_processor, stopping=stopping_criteria)
        return input_ids

    with torch.no_grad(), quiet():
        ids = _prompt(prompt)
        model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config, custom_generate=capture)
    return got["processors"], got["stopping"]


@contextlib.contextmanager
def recorded_rounds(log: list):
    """While inside, every get_candidates of the assistant and of prompt lookup appends (input length, candidates)."""
    cg = offline_transformers().generation.candidate_generator
    classes = (cg.AssistedCandidateGenerator, cg.PromptLookupCandidateGenerator)
    originals = [c.__dict__["get_candidates"] for c in classes]

    def wrap(fn):
        def get_candidates(self, input_ids, **kw):
            ids, logits = fn(self, input_ids, **kw)
            log.append((input_ids.shape[1], ids.shape[1] - input_ids.shape[1]))
            return ids, logits
        return get_candidates

    for c, fn in zip(classes, originals):
        c.get_candidates = wrap(fn)
    try:
        yield
    finally:
        for c, fn in zip(classes, originals):
            c.get_candidates = fn


@dataclass(frozen=True)
class PlainLaw:
    """Plain sampling's exact law {new tokens: p}, and per prefix its processed scores and raw logits (V,)."""

    law: dict[tuple[int, ...], float]
    scores: dict[tuple[int, ...], torch.Tensor] = field(repr=False)
    logits: dict[tuple[int, ...], torch.Tensor] = field(repr=False)


def generate_law(model, prompt, config, *, stale: bool = False) -> PlainLaw:
    """generate(prompt, generation_config=config)'s exact law by teacher forcing through its own processors and
    stopping criteria, every prefix of the support (stale: a control, the processors see the prompt alone)."""
    processors, stopping = plain_processors(model, prompt, config)
    law, scores, logits = {}, {}, {}
    frontier = {(): 1.0}  # unfinished prefixes of new tokens and their probabilities
    with torch.no_grad():
        while frontier:
            heads = list(frontier)
            ids = torch.tensor([list(prompt) + list(h) for h in heads], dtype=torch.long)  # (B, L)
            raw = model(ids).logits[:, -1].to(dtype=torch.float32)  # (B, V), as _sample takes it
            nxt = {}
            for b, head in enumerate(heads):
                row = processors(_prompt(prompt) if stale else ids[b:b + 1], raw[b:b + 1].clone())  # (1, V)
                scores[head], logits[head] = row[0].clone(), raw[b].clone()
                probs = row[0].double().softmax(-1)  # (V,)
                for z in torch.nonzero(probs > 0).flatten().tolist():
                    seq, pr = (*head, z), frontier[head] * probs[z].item()
                    into = law if bool(stopping(torch.tensor([list(prompt) + list(seq)]), ())[0]) else nxt
                    into[seq] = into.get(seq, 0.0) + pr
            frontier = nxt
    return PlainLaw(law, scores, logits)
