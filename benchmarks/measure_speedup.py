"""The cost equation against the clock: predicted S(k) = E[N(k)] / (k c_d + c_v(k)) beside measured speedup.

Run with `make measure` (after `make models`, whose weights are committed). On the trained target/draft
pair (specdec_lib/lab/weights/pair.pt), one thread, sampling at temperature 1 unless told otherwise: for every
repeat, held-out stdlib prompt and k = 1..8, it times T_1, D(k) and V(k) round-robin, then decodes the
prompt plainly and speculatively back to back (a pair). It prints, per k, c_d and c_v(k) (medians over
pairs), the measured tokens per round E[N], the predicted speedup, the measured one (median and quartiles
of the pairs' tokens/s ratios), their relative error, and O(k), what a real round costs beyond the terms.
The machine's load average is printed, as load moves every number.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import time

import torch
from tqdm import tqdm

import specdec_lib as sd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7,
                        help="repeats (one pair per prompt and k each); medians are reported")
    parser.add_argument("--prompts", type=int, default=6, help="held-out prompts per repeat")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--n-new", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--reps", type=int, default=5, help="timings of each term per pair")
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write the table's fields as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, draft = sd.load_pair(args.device)
    prompts = [p.to(args.device) for p in sd.corpus_prompts(args.prompts, args.prompt_len, seed=0)]
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(f"device {args.device} ({name}), {torch.get_num_threads()} thread(s), torch {torch.__version__}; "
          f"target {sd.n_params(target):,} parameters, draft {sd.n_params(draft):,}")
    print(f"{args.prompts} held-out prompts x {args.n_new} new tokens, "
          f"{'greedy' if args.temperature == 0 else f'temperature {args.temperature}, top_k {args.top_k}'}; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t0 = time.perf_counter()
    ks = range(1, args.k_max + 1)
    with tqdm(total=args.repeats * len(prompts) * len(ks), desc="pairs", unit="pair") as bar:
        table = sd.measure_speedup(target, draft, prompts, ks, n_new=args.n_new, repeats=args.repeats,
                                   reps=args.reps, temperature=args.temperature, top_k=args.top_k,
                                   on_pair=bar.update)
    print(table)
    print(f"took {time.perf_counter() - t0:.0f}s; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json is not None:
        args.json.write_text(json.dumps(dataclasses.asdict(table), indent=1))
    print(f"max relative error: {table.max_rel_error:.3f}")


if __name__ == "__main__":
    main()
