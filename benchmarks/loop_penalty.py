"""Where the lab's O(k) comes from: the same phase costs more inside a real loop than timed on its own.

Two measurements on the trained pair, one thread, sampling at temperature 1 (greedy with --temperature 0):

1. A plain decode step (T_1) timed three ways, alternating so that drift hits each alike: in a row (as
   time_terms times it), right after a draft phase (as a step would be if timed round-robin with the
   draft), and inside generate_plain's own loop.
2. A speculative decoding loop, written out here phase by phase, where every draft phase and every
   verification is run twice: once as the loop runs it, then again at once from the same state (cache
   cropped back). The second call finds the CPU caches warm with its own data; the ratio of the medians
   is the loop's penalty, which the equation's terms (timed alone) do not see.

usage: python benchmarks/loop_penalty.py [--k 4] [--temperature 1.0] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding, decode_step, draft_block, generate_plain, prefill, verify_round

med = statistics.median


@torch.inference_mode()
def step_after(target, draft, prompts, policy, cycles: int = 60) -> dict[str, float]:
    """Median over cycles of (plain loop's step) / (T_1 in a row) and / (T_1 right after a draft phase)."""
    context = torch.cat([prompts[0], generate_plain(target, prompts[0], 32)])
    L, last = context.numel(), context[-1:]
    t_cache, d_cache = prefill(target, context), prefill(draft, context)
    in_row, after_draft = [], []
    for c in range(cycles):
        row, after = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            decode_step(target, t_cache, last, **policy)
            row.append(time.perf_counter() - t0)
            t_cache.crop(L - 1)
        for _ in range(5):
            draft_block(draft, d_cache, last, 4, **policy)
            d_cache.crop(L - 1)
            t0 = time.perf_counter()
            decode_step(target, t_cache, last, **policy)
            after.append(time.perf_counter() - t0)
            t_cache.crop(L - 1)
        log = sd.SpecDecodeLog(k=0)
        generate_plain(target, prompts[c % len(prompts)], 64, log=log, decoding=Decoding(**policy))
        s = log.summary()
        plain = s.verify_time / s.tokens
        in_row.append(plain / med(row))
        after_draft.append(plain / med(after))
    return {"plain loop / in a row": med(in_row), "plain loop / after a draft phase": med(after_draft)}


@torch.inference_mode()
def first_and_again(target, draft, prompts, k: int, policy, n_new: int = 64, repeats: int = 3):
    """Medians of (draft phase, verification) as the loop runs them and when repeated at once, in seconds."""
    first_d, again_d, first_v, again_v = [], [], [], []
    for _ in range(repeats):
        for prompt in prompts:
            L = prompt.numel()
            seq = prompt.new_empty(L + n_new + k + 1)
            seq[:L] = prompt
            t_cache, d_cache = prefill(target, prompt), prefill(draft, prompt)
            n = L
            while n < L + n_new:
                d_len = d_cache.length
                t0 = time.perf_counter()
                proposals, q_rows = draft_block(draft, d_cache, seq[d_len:n], k, **policy)
                first_d.append(time.perf_counter() - t0)
                d_cache.crop(d_len)
                t0 = time.perf_counter()
                proposals, q_rows = draft_block(draft, d_cache, seq[d_len:n], k, **policy)  # the draws we keep
                again_d.append(time.perf_counter() - t0)
                t_len, d_len = t_cache.length, d_cache.length
                t0 = time.perf_counter()
                verify_round(target, t_cache, d_cache, torch.cat([seq[n - 1:n], proposals]), q_rows, n=n,
                             decoding=Decoding(**policy))
                first_v.append(time.perf_counter() - t0)
                t_cache.crop(t_len)
                d_cache.length = d_len  # undo the draft's crop: the buffers still hold the proposals
                t0 = time.perf_counter()
                a, nxt = verify_round(target, t_cache, d_cache, torch.cat([seq[n - 1:n], proposals]), q_rows, n=n,
                                      decoding=Decoding(**policy))
                again_v.append(time.perf_counter() - t0)
                seq[n:n + a] = proposals[:a]
                seq[n + a] = nxt
                n += a + 1
    return med(first_d), med(again_d), med(first_v), med(again_v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, draft = sd.lab.load_pair()
    prompts = sd.lab.corpus_prompts(6, 32, seed=0)
    policy = {"temperature": args.temperature, "top_k": None, "generator": torch.Generator().manual_seed(0)}
    for name, ratio in step_after(target, draft, prompts, policy).items():
        print(f"T_1: {name} = {ratio:.3f}")
    fd, ad, fv, av = first_and_again(target, draft, prompts, args.k, policy, repeats=args.repeats)
    print(f"k = {args.k}: draft phase in the loop {fd * 1e3:.3f} ms, repeated at once {ad * 1e3:.3f} ms "
          f"(loop penalty {fd / ad - 1:+.1%})")
    print(f"k = {args.k}: verification in the loop {fv * 1e3:.3f} ms, repeated at once {av * 1e3:.3f} ms "
          f"(loop penalty {fv / av - 1:+.1%})")


if __name__ == "__main__":
    main()
