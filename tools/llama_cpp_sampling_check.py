"""A first sketch of the kit's llama-cpp-python adapter: plain and prompt-lookup sampling against the exact law.

    ~/.cache/specdec/engines/venv/bin/python tools/llama_cpp_sampling_check.py [--samples 3000] [--temperature 1]

Runs in the engines venv (`make engines-env`) on the tiny GGUF that tools/engine_logits_check.py writes (run that
first). The exact law of the first two new tokens comes from the engine's own plain path by teacher forcing: the
prompt's last row, then the row after prompt + [x1] for every x1, at the temperature asked, F32 KV cache. Samples come
from `Llama.generate` (the loop create_completion drives), one seed per sample, plain and with
`LlamaPromptLookupDecoding` (sample-and-match: a drafted token is kept when the sampled one equals it). Each is a
chi-square test over the V^2 pairs (cells expected below 5 pooled) at level 1e-3; a negative control samples at
0.7 x the temperature and must fail. Because lookup only keeps tokens the target itself sampled, the same seed should
give the same tokens plain and speculative: that count is printed too. numpy only, no torch: the sketch of an
adapter, not yet the kit's (which will report through audit_generation's tiers).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

LEVEL = 1e-3  # each verdict's false-alarm rate for a correct sampler
PROMPT = [1, 5, 6, 7, 5, 6, 7, 5, 6]  # a repeated trigram: prompt lookup has an n-gram to draft from


def gguf_path() -> Path:
    """The tiny GGUF tools/engine_logits_check.py writes under the cache."""
    root = Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser()
    return root / "engines" / "check" / "tiny.gguf"


def softmax(row, temperature: float):
    """A float64 softmax of logits / temperature."""
    import numpy as np

    z = np.asarray(row, dtype=np.float64) / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


def exact_law(path: Path, prompt: list[int], temperature: float):
    """P(x1, x2) (V, V) of plain sampling at temperature, from the engine's own teacher-forced rows."""
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, logits_all=True, type_k=0, type_v=0, n_threads=1,
                          verbose=False)
    llm.eval(prompt)
    first = softmax(llm.scores[len(prompt) - 1], temperature)
    law = np.zeros((len(first), len(first)))
    for x1 in range(len(first)):
        llm.reset()
        llm.eval(prompt + [x1])
        law[x1] = first[x1] * softmax(llm.scores[len(prompt)], temperature)
    llm.close()
    return law


def draw_pairs(llm, prompt: list[int], temperature: float, seeds: range) -> list[tuple[int, int]]:
    """The first two tokens Llama.generate samples, one seed each (top-k, top-p, min-p and penalties off)."""
    pairs = []
    for seed in seeds:
        llm.set_seed(seed)
        stream = llm.generate(prompt, temp=temperature, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
        pairs.append((next(stream), next(stream)))
        stream.close()
    return pairs


def chi_square(pairs: list[tuple[int, int]], law) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value by Wilson-Hilferty) of the pairs' counts against law."""
    import numpy as np

    counts = np.zeros_like(law)
    for x1, x2 in pairs:
        counts[x1, x2] += 1
    expected = law.ravel() * len(pairs)
    observed = counts.ravel()
    small = expected < 5
    exp = np.append(expected[~small], expected[small].sum())
    obs = np.append(observed[~small], observed[small].sum())
    keep = exp > 0
    if (obs[~keep] > 0).any():
        return math.inf, int(keep.sum()) - 1, 0.0
    stat, dof = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()), int(keep.sum()) - 1
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return stat, dof, 0.5 * math.erfc(z / math.sqrt(2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--draft", type=int, default=3, help="LlamaPromptLookupDecoding's num_pred_tokens")
    args = parser.parse_args(argv)
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    path = gguf_path()
    if not path.exists():
        print(f"no {path}: run tools/engine_logits_check.py first", file=sys.stderr)
        return 2
    law = exact_law(path, PROMPT, args.temperature)
    common = dict(model_path=str(path), n_ctx=64, type_k=0, type_v=0, n_threads=1, verbose=False)
    engines = {"plain": llama_cpp.Llama(**common),
               "prompt lookup": llama_cpp.Llama(draft_model=LlamaPromptLookupDecoding(
                   num_pred_tokens=args.draft, max_ngram_size=2), **common)}
    seeds = range(1, args.samples + 1)
    drawn, failures = {}, []
    print(f"llama-cpp-python {llama_cpp.__version__}, {path.name}, prompt {PROMPT}, T = {args.temperature}, "
          f"{args.samples} samples each, level {LEVEL:g}")
    for name, llm in engines.items():
        began = time.perf_counter()
        drawn[name] = draw_pairs(llm, PROMPT, args.temperature, seeds)
        seconds = time.perf_counter() - began
        stat, dof, p = chi_square(drawn[name], law)
        verdict = "pass" if p >= LEVEL else "FAIL"
        failures += [name] if verdict == "FAIL" else []
        print(f"  {name:<14} chi-square {stat:8.1f} on {dof:3d} df, p = {p:.3g}: {verdict}  "
              f"({args.samples / seconds:,.0f} two-token generations/s)")
    cold = exact_law(path, PROMPT, 0.7 * args.temperature)  # negative control: the law at another temperature
    stat, dof, p = chi_square(drawn["plain"], cold)
    caught = p < LEVEL
    print(f"  control: plain's samples against the law at T x 0.7: chi-square {stat:.1f}, p = {p:.3g}: "
          f"{'caught' if caught else 'NOT caught'}")
    same = sum(a == b for a, b in zip(drawn["plain"], drawn["prompt lookup"]))
    print(f"  same seed, same two tokens, plain and prompt lookup: {same} of {args.samples}")
    return 1 if failures or not caught else 0


if __name__ == "__main__":
    sys.exit(main())
