"""Minimal reproduction: vLLM CPU's speculative decoding divides the target's draft-position logits by uninitialised
memory instead of the temperature, so n-gram speculation samples the wrong law (docs/bugs/vllm-cpu-ngram.md).

Standalone (vllm, torch and transformers only; no project code), run in the engines venv:

    VLLM_ENABLE_V1_MULTIPROCESSING=0 ~/.cache/specdec/engines/venv/bin/python tools/repro_vllm_ngram.py

1. The kernel: rejection_sampler.expand_batch_to_tokens([0.7, 1.0, 0.0], cu [2, 5, 6]) on the CPU platform must give
   [0.7, 0.7, 1, 1, 1, 1]; it returns whatever the fresh tensor held (the CPU fallback writes an int64 copy).
2. End to end: a tiny random Llama written here (vocabulary 8, hidden 128, 2 heads of 64, 2 layers), the prompt
   [1, 2, 3, 1, 2, 3, 4], N seeded requests of two new tokens at temperature 1, plain and with n-gram speculation
   (k = 3, prompt lookup 1-2); the two tokens' exact law from transformers' float64 forward of the same weights;
   chi-square over the outcomes expected 5 times or more (the rest pooled in one bin), and the TV.
3. The same n-gram run in a fresh process with the one-function fix (a dtype-preserving expand) registered first;
   then, in another, one n-gram request with top_k = 2, which raises (a second CPU bug: apply_top_k_only takes k.max()
   of the empty top-k tensor of a step without drafts), fix or not.
Exit status 1 when the bug shows (the kernel check fails, or n-gram fails the chi-square at level 1e-3 while plain
passes), else 0.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

V, PROMPT, LEVEL = 8, [1, 2, 3, 1, 2, 3, 4], 1e-3


def expand_fixed(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
    """The fix: expand in torch, keeping output's dtype and writing output itself."""
    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    output[:int(cu[-1])] = values.repeat_interleave(counts).to(output.dtype)


def kernel_check() -> bool:
    """True when expand_batch_to_tokens gives the right floats on this platform."""
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()  # what the CPU worker does at start
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    got = expand_batch_to_tokens(torch.tensor([0.7, 1.0, 0.0]), torch.tensor([2, 5, 6], dtype=torch.int32), 6,
                                 replace_from=0, replace_to=1)
    want = torch.tensor([0.7, 0.7, 1.0, 1.0, 1.0, 1.0])
    print(f"expand_batch_to_tokens(temperature [0.7, 1.0, 0.0]): {got.tolist()}\n  expected {want.tolist()}")
    return bool(torch.allclose(got, want))


def tiny_llama(path: str):
    """A seeded random Llama saved with save_pretrained; returns the float64 model."""
    import transformers

    config = transformers.LlamaConfig(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                                      pad_token_id=None)
    model = transformers.LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        model.lm_head.weight.mul_(0.3)  # moderate rows: the top token holds 0.2-0.4
    model.save_pretrained(path)
    return model.double()


@torch.no_grad()
def exact_law(model) -> dict:
    """P(t1, t2) of plain sampling at temperature 1."""
    p1 = torch.softmax(model(torch.tensor([PROMPT])).logits[0, -1], -1)
    law = {}
    for a in range(V):
        p2 = torch.softmax(model(torch.tensor([PROMPT + [a]])).logits[0, -1], -1)
        law.update({(a, b): float(p1[a] * p2[b]) for b in range(V)})
    return law


def sample(path: str, spec: dict | None, n: int) -> tuple[dict, float]:
    """Counts of (t1, t2) over n seeded requests, and the seconds they took."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=path, skip_tokenizer_init=True, enforce_eager=True, dtype="float32", seed=0, max_model_len=256,
              kv_cache_memory_bytes=256 << 20, speculative_config=spec)
    params = [SamplingParams(temperature=1.0, max_tokens=2, seed=s, ignore_eos=True, detokenize=False)
              for s in range(n)]
    t = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * n, params, use_tqdm=False)
    seconds = time.perf_counter() - t
    counts = {}
    for o in outs:
        key = tuple(o.outputs[0].token_ids)
        counts[key] = counts.get(key, 0) + 1
    return counts, seconds


def top_k_crash(path: str, spec: dict) -> str:
    """The error one n-gram request with top_k = 2 raises, or "" when it runs."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=path, skip_tokenizer_init=True, enforce_eager=True, dtype="float32", seed=0, max_model_len=256,
              kv_cache_memory_bytes=256 << 20, speculative_config=spec)
    try:
        llm.generate([TokensPrompt(prompt_token_ids=PROMPT)], SamplingParams(top_k=2, max_tokens=2, seed=0,
                                                                             ignore_eos=True, detokenize=False),
                     use_tqdm=False)
    except Exception as e:  # noqa: BLE001 (what vLLM raises is the finding)
        return f"{type(e).__name__}: {str(e)[:120]}"
    return ""


def chi_square(counts: dict, law: dict, n: int) -> tuple[float, int, float, float, list]:
    """(statistic, degrees of freedom, p-value, TV, the three outcomes most over-represented)."""
    big = [t for t, p in law.items() if n * p >= 5]  # bins expected 5 times or more; the rest pooled
    observed = [counts.get(t, 0) for t in big] + [n - sum(counts.get(t, 0) for t in big)]
    expected = [n * law[t] for t in big] + [n * (1 - sum(law[t] for t in big))]
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected) if e > 0)
    df = sum(e > 0 for e in expected) - 1
    p = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2.0)))
    tv = 0.5 * sum(abs(counts.get(t, 0) / n - law.get(t, 0.0)) for t in set(law) | set(counts))
    excess = sorted(law, key=lambda t: law[t] - counts.get(t, 0) / n)[:3]
    return stat, df, p, tv, [(t, counts.get(t, 0), round(n * law[t], 1)) for t in excess]


def report(name: str, counts: dict, law: dict, n: int, seconds: float) -> bool:
    stat, df, p, tv, excess = chi_square(counts, law, n)
    ok = p >= LEVEL
    print(f"{name:>16}: chi-square {stat:8.1f} on {df} df, p = {p:.2g}, TV {tv:.3f}, {n / seconds:,.0f} requests/s: "
          f"{'pass' if ok else 'FAIL'}; most over-represented (tokens, seen, expected): {excess}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--fix", action="store_true", help="register the fixed expand first (n-gram only)")
    ap.add_argument("--top-k", action="store_true", help="one n-gram request with top_k = 2 (in its own process)")
    ap.add_argument("--dir", default=None, help="the model's folder (default: a temporary one)")
    args = ap.parse_args()
    import vllm

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2}
    with tempfile.TemporaryDirectory() as tmp:
        path = args.dir or tmp
        law = exact_law(tiny_llama(path))
        if args.fix:
            from vllm.utils import cpu_triton_utils

            cpu_triton_utils._expand_kernel_impl = expand_fixed  # read when the CPU worker registers its kernels
            counts, seconds = sample(path, spec, args.samples)
            return 0 if report("ngram + fix", counts, law, args.samples, seconds) else 1
        if args.top_k:
            crash = top_k_crash(path, spec)
            print(f"     ngram top_k: {'raises ' + crash if crash else 'runs'}")
            return 1 if crash else 0
        print(f"vllm {vllm.__version__}, torch {torch.__version__}")
        kernel_ok = kernel_check()
        counts, seconds = sample(path, None, args.samples)
        plain_ok = report("plain", counts, law, args.samples, seconds)
        counts, seconds = sample(path, spec, args.samples)
        ngram_ok = report("ngram", counts, law, args.samples, seconds)
        # each in a fresh process: the fix must be registered before the first engine starts, and a third engine in
        # one process can fail to register the CPU kernels (dispatcher._rebind_kernels)
        fixed = subprocess.run([sys.executable, __file__, "--fix", "--samples", str(args.samples), "--dir", path])
        subprocess.run([sys.executable, __file__, "--top-k", "--dir", path])
    bug = not kernel_ok or (plain_ok and not ngram_ok)
    print(f"the bug {'shows' if bug else 'does not show'}: kernel {'ok' if kernel_ok else 'WRONG'}, plain "
          f"{'pass' if plain_ok else 'FAIL'}, ngram {'pass' if ngram_ok else 'FAIL'}, ngram with the fix "
          f"{'pass' if fixed.returncode == 0 else 'FAIL'}")
    return 1 if bug else 0


if __name__ == "__main__":
    sys.exit(main())
