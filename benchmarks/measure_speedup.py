"""The cost equation against the clock: predicted S(k) = E[N(k)] / (k c_d + c_v(k)) beside measured speedup.

Run with `make measure` (after `make models`, whose weights are committed). On the trained target/draft
pair (specdec_lib/weights/pair.pt), one thread: times T_1, D(k) and V(k) on their own, decodes held-out
stdlib prompts plainly and speculatively for k = 1..8 (greedy unless --temperature), and prints, per k,
the fitted c_d and c_v(k), the measured tokens per round E[N], the predicted and the measured speedup
and their relative error. The column O(k)/T_1 shows what the equation leaves out: the time a real round
spends beyond D(k) + V(k) timed alone (acceptance test, cache rollback, Python bookkeeping, and forward
passes slowed down by alternating two models in the CPU caches). Sampling (temperature 1) by default.
Timings are medians of --repeats; the machine's load average is printed, as it moves the numbers.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import torch

import specdec_lib as sd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="interleaved repeats; medians are reported")
    parser.add_argument("--prompts", type=int, default=4, help="held-out prompts per repeat")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--n-new", type=int, default=128, help="new tokens per prompt")
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, draft = sd.load_pair(args.device)
    prompts = [p.to(args.device) for p in sd.corpus_prompts(args.prompts, args.prompt_len, seed=0)]
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(f"device {args.device} ({name}), {torch.get_num_threads()} thread(s), torch {torch.__version__}; "
          f"target {sd.models.n_params(target):,} parameters, draft {sd.models.n_params(draft):,}")
    print(f"{args.prompts} held-out prompts x {args.n_new} new tokens, "
          f"{'greedy' if args.temperature == 0 else f'temperature {args.temperature}, top_k {args.top_k}'}; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t0 = time.perf_counter()
    table = sd.measure_speedup(target, draft, prompts, range(1, args.k_max + 1), n_new=args.n_new,
                               repeats=args.repeats, temperature=args.temperature, top_k=args.top_k)
    print(table)
    print(f"took {time.perf_counter() - t0:.0f}s; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"max relative error: {table.max_rel_error:.3f}")


if __name__ == "__main__":
    main()
