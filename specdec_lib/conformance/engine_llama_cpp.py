"""llama-cpp-python in process behind the kit's Engine interface (engines.py): plain and prompt-lookup sampling.

Read from the installed llama-cpp-python 0.3.36 (llama_cpp/llama.py; byte-identical to upstream tag v0.3.35, commit
3691546f1c9e) and its vendored llama.cpp (src/llama-sampler.cpp). Samples come from `Llama.generate`, the loop that
`create_completion` drives, given token ids (the tiny vocabulary has no text); what create_completion adds is done
here as it does it: logit_bias as its logits processor (L1321-1339), the stop at an end-of-generation token (L1412),
the max_tokens cap, and logprobs as the log-softmax of the engine's own rows (`Llama.logits_to_logprobs`, L1752).
"prompt lookup" is `Llama(draft_model=LlamaPromptLookupDecoding(max_ngram_size, num_pred_tokens=k))`: each drafted
token is kept when the token sampled at its row equals it (sample-and-match, L1010-1012), so every seed must give
plain's tokens. The exact law reads a third, plain `Llama` by teacher forcing (eval, scores); every Llama has an F32
KV cache (type_k = type_v = 0) and logits_all.

The sampler chain (_init_sampler, L717-795): [logits processor], penalties, [grammar], then greedy at temperature
0, else top_k, typical, top_p, min_p, temperature, dist (seeded by Llama.set_seed, one fresh chain per generate).
Where that equals the kit's processors (surface/processors.py) and where it does not:
  * top_p and min_p act before the temperature: the kit's law only at temperature 0 or 1; together, top_p acts
    before min_p (the kit: min_p first): left out. top_k commutes with the temperature and with min_p.
  * penalties (llama-sampler.cpp L2919-2988) count the tokens the chain accepted, and llama_sampler_sample accepts
    each sampled token only (L895-960), never the prompt: frequency and presence are the kit's (generated tokens,
    window last_n_tokens_size = 64 >> max_new_tokens); the repetition penalty misses the prompt: left out.
  * logit_bias runs before the penalties; both frequency and presence add, so only the repetition penalty (left
    out) would not commute with it.
  * no n-gram ban, bad words or token automaton (a GBNF grammar reads text): left out.
  * logprobs are the raw row's (no temperature, penalty or bias), float32, and a row moves by up to 7e-6 between a
    one-token batch and a longer one: never within the kit's 1e-6 of plain's value. They are reported only with
    logprobs=True (tests compare them at a float32 tolerance); audit_engine runs without them.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from .._checks import check_choice, check_int
from ..surface.settings import Settings
from ..surface.tiny_model import TinyConfig, tiny_causal_lm
from .gguf_model import TinyGGUF, write_gguf

__all__ = ["MODES", "PROMPT", "VOCAB", "HEAD_SCALE", "MODEL_SEED", "LogitBias", "generate_kwargs",
           "llama_cpp_unsupported", "tiny_gguf", "LookupCounter", "LlamaCppEngine", "audit_llama_cpp"]

MODES = ("plain", "prompt lookup")
# The tiny model and prompt, chosen by an exact search (vocabulary 8, head scales 1-3, model seeds 0-7, greedy and
# periodic prompts, every row read from llama.cpp): the lookup drafts at the second token with probability 0.82 and
# the target keeps that draft with probability 0.48 (0.58 of the drafts), while the rows stay spread enough that the
# battery's top_p 0.7 and min_p 0.2 keep 6 and 8 two-token outcomes and EOS has probability 0.06 within two tokens.
PROMPT = (1, 4, 6, 5, 4, 6, 5, 4, 6)  # BOS, then a repeated trigram: the last bigram (4, 6) was followed by 5
VOCAB, HEAD_SCALE, MODEL_SEED = 8, 1.25, 6
MAX_NGRAM = 2  # LlamaPromptLookupDecoding's max_ngram_size (its default)


class LogitBias:
    """create_completion's logit_bias processor (llama_cpp/llama.py L1324-1333): scores[token] + bias on a copy."""

    def __init__(self, pairs: tuple[tuple[int, float], ...]):
        self.pairs = tuple((int(t), float(b)) for t, b in pairs)

    def __call__(self, input_ids, scores):
        new = scores.copy()
        for token, bias in self.pairs:
            new[token] = scores[token] + bias
        return new


def generate_kwargs(settings: Settings) -> dict:
    """Llama.generate's keyword arguments for settings (the ones llama_cpp_unsupported lets through)."""
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    s = settings
    return {"temp": s.temperature, "top_k": s.top_k or 0, "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0, "typical_p": 1.0, "repeat_penalty": s.repetition_penalty,
            "frequency_penalty": s.frequency_penalty, "presence_penalty": s.presence_penalty, "mirostat_mode": 0,
            "logits_processor": [LogitBias(s.logit_bias)] if s.logit_bias else None}


def llama_cpp_unsupported(settings: Settings, eog: frozenset[int] = frozenset({2})) -> str | None:
    """None, or why llama-cpp-python's sampler is not the kit's law under settings (module doc); eog: the model's
    end-of-generation ids, the only tokens it stops at."""
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    s = settings
    if s.grammar is not None:
        return "a GBNF grammar reads text; the kit's token automaton is not translated to one"
    if s.no_repeat_ngram_size or s.bad_words:
        return "llama-cpp-python has no n-gram or bad-words ban"
    if s.repetition_penalty != 1.0:
        return ("its penalties count only sampled tokens (llama_sampler_sample accepts each one, the prompt never): "
                "the repetition penalty misses the prompt, which the kit's counts")
    truncating = s.top_p is not None or bool(s.min_p)
    if truncating and s.temperature not in (0.0, 1.0):
        return "top_p and min_p act before the temperature in its chain (the kit's after it)"
    if s.top_p is not None and s.min_p and s.temperature != 0.0:
        return "its chain applies top_p before min_p (the kit's min_p first)"
    if s.eos is not None and s.eos not in eog:
        return f"it stops only at the model's end-of-generation tokens {sorted(eog)}, not at {s.eos}"
    return None


def tiny_gguf(path, *, vocab: int = VOCAB, head_scale: float = HEAD_SCALE, seed: int = MODEL_SEED) -> TinyGGUF:
    """The project's tiny Llama for llama.cpp (gguf_model's shape, head scaled: peaked rows), written to path."""
    vocab = check_int("vocab", vocab, minimum=4)
    config = TinyConfig("llama", vocab=vocab, hidden=32, intermediate=64, heads=2, kv_heads=2, layers=2,
                        max_positions=256, tokens=(("bos_token_id", 1), ("eos_token_id", 2)))
    model = tiny_causal_lm(config, seed=seed, init="normal", head_scale=head_scale)
    return TinyGGUF(write_gguf(model, path, bos_id=1, eos_id=2), model, 1, 2)


class LookupCounter:
    """A draft model that counts: calls, drafted tokens, and after each generation (settle) the drafted tokens
    compared with a sampled one (checked) and kept (accepted)."""

    def __init__(self, draft):
        self.draft = draft
        self.calls = self.drafted = self.checked = self.accepted = 0
        self._rounds: list[tuple[int, tuple[int, ...]]] = []

    def __call__(self, input_ids, /, **kwargs):
        proposed = self.draft(input_ids, **kwargs)
        self.calls += 1
        self.drafted += len(proposed)
        self._rounds.append((len(input_ids), tuple(int(t) for t in proposed)))
        return proposed

    def settle(self, text: tuple[int, ...]) -> None:
        """Score this generation's rounds against its whole text (prompt + new tokens)."""
        for at, proposed in self._rounds:
            sampled = text[at:at + len(proposed)]
            kept = next((i for i, (d, t) in enumerate(zip(proposed, sampled)) if d != t), len(sampled))
            self.accepted += kept
            self.checked += min(len(sampled), kept + 1)
        self._rounds = []

    def counts(self) -> dict[str, int]:
        return {"calls": self.calls, "drafted": self.drafted, "checked": self.checked, "accepted": self.accepted}


class LlamaCppEngine:
    """llama-cpp-python on a GGUF file: modes "plain" and "prompt lookup" (module doc); close() frees the models."""

    name = "llama-cpp-python"
    modes = MODES

    def __init__(self, path, *, max_ngram_size: int = MAX_NGRAM, threads: int = 1, n_ctx: int = 64,
                 logprobs: bool = False):
        if not isinstance(path, (str, Path)) or not Path(path).is_file():
            raise ValueError(f"path must name a GGUF file, got {path!r}")
        if not isinstance(logprobs, bool):
            raise TypeError(f"logprobs must be a bool, got {type(logprobs).__name__}")
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        common = {"model_path": str(path), "n_ctx": check_int("n_ctx", n_ctx, minimum=8), "type_k": 0, "type_v": 0,
                  "n_threads": check_int("threads", threads, minimum=1), "n_threads_batch": threads,
                  "logits_all": True, "verbose": False}
        self.version, self.report_logprobs, self._llama = llama_cpp.__version__, logprobs, llama_cpp.Llama
        self.lookup = LookupCounter(LlamaPromptLookupDecoding(
            max_ngram_size=check_int("max_ngram_size", max_ngram_size, minimum=1), num_pred_tokens=1))
        self._teacher = llama_cpp.Llama(**common)
        self._runners = {"plain": llama_cpp.Llama(**common),
                         "prompt lookup": llama_cpp.Llama(draft_model=self.lookup, **common)}
        self.vocab = int(self._teacher.n_vocab())
        vocab = llama_cpp.llama_model_get_vocab(self._teacher.model)
        self.eog = frozenset(t for t in range(self.vocab) if llama_cpp.llama_vocab_is_eog(vocab, t))

    def _ids(self, name: str, ids) -> tuple[int, ...]:
        if not isinstance(ids, (tuple, list)) or not ids:
            raise TypeError(f"{name} must be a non-empty tuple of token ids, got {ids!r}")
        ids = tuple(check_int(f"{name}[{i}]", t, minimum=0) for i, t in enumerate(ids))
        if max(ids) >= self.vocab:
            raise ValueError(f"{name} names token {max(ids)}, outside the vocabulary of {self.vocab}")
        return ids

    def logits(self, context: tuple[int, ...]) -> torch.Tensor:
        """(V,) float32 logits after context: the teacher's last row, the whole context evaluated as one batch."""
        context = self._ids("context", context)
        self._teacher.reset()
        self._teacher.eval(list(context))
        return torch.tensor(self._teacher.scores[len(context) - 1], dtype=torch.float32)

    def unsupported(self, settings: Settings, mode: str = "plain") -> str | None:
        """Why these settings cannot run the kit's way (the same in both modes), or None."""
        return llama_cpp_unsupported(settings, self.eog)

    def generate(self, mode: str, prompt: tuple[int, ...], settings: Settings, k: int, seeds: list[int]) -> list:
        """One (new tokens, logprobs or None, "eos" | "length") per seed; k: the lookup's num_pred_tokens."""
        llm = self._runners[check_choice("mode", mode, self.modes)]
        why = self.unsupported(settings, mode)  # a TypeError for a non-Settings
        if why is not None:
            raise ValueError(f"settings: {why}")
        prompt = self._ids("prompt", prompt)
        self.lookup.draft.num_pred_tokens = check_int("k", k, minimum=1)
        if not isinstance(seeds, (list, tuple)):
            raise TypeError(f"seeds must be a list of ints, got {type(seeds).__name__}")
        kwargs, out = generate_kwargs(settings), []
        for i, seed in enumerate(seeds):
            seed = check_int(f"seeds[{i}]", seed, minimum=0)
            if seed >= 2**32 - 1:  # LLAMA_DEFAULT_SEED (2**32 - 1) asks for a random seed; larger ones do not fit
                raise ValueError(f"seeds[{i}] must be below 2**32 - 1, got {seed}")
            llm.set_seed(seed)
            tokens, stop = [], "length"
            stream = llm.generate(list(prompt), **kwargs)
            for token in stream:
                tokens.append(int(token))
                if token == settings.eos:
                    stop = "eos"
                    break
                if len(tokens) == settings.max_new_tokens:
                    break
            stream.close()
            self.lookup.settle(prompt + tuple(tokens))
            lp = None
            if self.report_logprobs:  # row len(prompt) - 1 + i gave token i (create_completion L1752)
                rows = self._llama.logits_to_logprobs(llm.scores[len(prompt) - 1:len(prompt) - 1 + len(tokens)])
                lp = tuple(float(rows[i, t]) for i, t in enumerate(tokens))
            out.append((tuple(tokens), lp, stop))
        return out

    def close(self) -> None:
        for llm in (self._teacher, *self._runners.values()):
            llm.close()


def audit_llama_cpp(path, *, modes=MODES, num_samples: int | None = None, seed: int = 0, same_n: int = 300,
                    out=print) -> dict:
    """audit_engine on every mode over engine_cases (PROMPT, the model's EOS), the same-seed count and the lookup's
    draft counts per mode; each report printed by out. {mode: {"report", "left", "seconds", "drafts", "same"}}."""
    from .engines import EngineChain, audit_engine, engine_cases, same_seed

    engine = LlamaCppEngine(path)
    try:
        eos = min(engine.eog)
        cases = engine_cases(EngineChain("llama.cpp tiny", engine), prompt=PROMPT, eos=eos)
        results = {}
        for mode in modes:
            before, began = engine.lookup.counts(), time.perf_counter()
            report, left = audit_engine(engine, mode, cases=cases, seed=seed, num_samples=num_samples)
            seconds = time.perf_counter() - began
            drafts = {k: v - before[k] for k, v in engine.lookup.counts().items()}
            same = None if mode == "plain" else same_seed(engine, mode, cases[-1], n=same_n, seed=seed)
            results[mode] = {"report": report, "left": left, "seconds": seconds, "drafts": drafts, "same": same}
            out(f"{report}\nleft out: {left or 'none'}\n{mode}: {seconds:.1f} s, drafts {drafts}"
                + ("" if same is None else f", same seed {same.equal} of {same.n} ({same.case})"))
        return results
    finally:
        engine.close()


if __name__ == "__main__":  # the engines venv: python -m specdec_lib.conformance.engine_llama_cpp
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        audit_llama_cpp(tiny_gguf(Path(folder) / "tiny.gguf").path)
