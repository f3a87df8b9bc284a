"""Drafts from the target itself against the clock, beside the lab's separate drafts: `make measure-self`.

One thread, the trained target (and its early-exit fine-tune for the exits), held-out stdlib prompts, greedy and at
temperature 1. Chains (measure_speedup, the token rule): early exit at layers 1-3 on both targets, Medusa's 4 heads,
the EAGLE feature draft, the 1- and 2-layer separate drafts and prompt lookup. Trees (measure_trees): Medusa's
static trees (q's top tokens under the one-hot rule; sampled i.i.d. under mss at temperature 1) and lookahead at
three settings (window, n-gram size, guesses). Prints every table and, with --json, writes what notebook 09 reads
(specdec_lib/data/self_drafts_reference.json: `make measure-self` rewrites it). About 10 minutes here.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import platform
import sys
import time

import torch
from measure_speedup import load, make_drafter
from tqdm import tqdm

import specdec_lib as sd
from specdec_lib.lab.measure import MeasurePlan
from specdec_lib.lab.recordings import SCHEMAS

CHAINS = {"target": ("exit1", "exit2", "exit3", "medusa", "eagle", "draft", "draft_deep", "lookup"),
          "target_ee": ("exit1", "exit2", "exit3")}
KS = {"medusa": [1, 2, 3, 4]}  # at most one proposal per head; every other draft: --ks
MEDUSA_TREES = [(1,), (2,), (4,), (2, 2), (4, 2), (3, 2, 1), (4, 2, 2, 1)]
LOOKAHEAD = [(4, 3, 4), (4, 4, 4), (6, 4, 6)]  # (window W, n-gram size n, guesses G)
TEMPERATURES = (0.0, 1.0)


def tree_runs(target, prompts, plan, temperature, bar):
    """Medusa's trees (one-hot rule; and mss when sampling) and lookahead's settings, as measure_trees tables."""
    decoder, heads = sd.lab.medusa_pair(target, sd.lab.load_heads("medusa", str(prompts[0].device)))
    rules = ["onehot_sequential"] + (["mss"] if temperature > 0 else [])
    out = [sd.lab.measure_trees(decoder, heads, prompts, MEDUSA_TREES, rule=rule, plan=plan,
                                temperature=temperature, on_pair=bar.update) for rule in rules]
    for W, N, G in LOOKAHEAD:
        drafter = sd.lab.LookaheadDraft(target.vocab, window=W, ngram=N, guesses=G, name=f"lookahead W{W} n{N} G{G}")
        out.append(sd.lab.measure_trees(target, drafter, prompts, [None], rule="onehot_sequential", plan=plan,
                                        temperature=temperature, on_pair=bar.update))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=6, help="held-out prompts per repeat")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--n-new", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3, help="timings of each term per pair")
    parser.add_argument("--ks", default="1,2,3,4,6", help="draft lengths of the chains, comma-separated")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write the recording as JSON")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",") if k]
    torch.set_num_threads(args.threads)
    prompts = sd.lab.corpus_prompts(args.prompts, args.prompt_len, seed=0)
    plan = MeasurePlan(n_new=args.n_new, repeats=args.repeats, reps=args.reps)
    machine = {"platform": platform.platform(), "processor": platform.processor() or "cpu",
               "threads": torch.get_num_threads(), "torch": torch.__version__, "python": sys.version.split()[0],
               "load_before": load(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"{machine['processor']}, {machine['threads']} thread(s), torch {machine['torch']}; {args.prompts} prompts x "
          f"{args.n_new} new tokens, {args.repeats} repeats; load average before: {machine['load_before']}")
    t0 = time.perf_counter()
    chains, trees = [], []
    per_table = args.repeats * args.prompts
    total = sum(per_table * len(KS.get(d, ks)) for names in CHAINS.values() for d in names) * len(TEMPERATURES)
    total += per_table * len(TEMPERATURES) * (len(MEDUSA_TREES) + len(LOOKAHEAD)) + per_table * len(MEDUSA_TREES)
    with tqdm(total=total, unit="pair", desc="timing drafts from the target: terms, then plain vs speculative") as bar:
        for temperature in TEMPERATURES:
            for name, drafts in CHAINS.items():
                target = sd.lab.load_target(name)
                for draft in drafts:
                    decoder, drafter = make_drafter(draft, "cpu", target)
                    table = sd.lab.measure_speedup(decoder, drafter, prompts, KS.get(draft, ks), plan=plan,
                                                   temperature=temperature, on_pair=bar.update)
                    table = dataclasses.replace(table, draft=draft)
                    chains.append({"target": name, "temperature": temperature, "table": dataclasses.asdict(table)})
                    tqdm.write(f"\n{draft} on {name}, temperature {temperature}\n{table}")
            for table in tree_runs(sd.lab.load_target(), prompts, plan, temperature, bar):
                trees.append({"target": "target", "temperature": temperature, "table": dataclasses.asdict(table)})
                tqdm.write(f"\ntemperature {temperature}\n{table}")
    machine.update(load_after=load(), seconds=round(time.perf_counter() - t0, 1))
    print(f"took {machine['seconds']:.0f}s; load average after: {machine['load_after']}")
    if args.json is not None:
        args.json.write_text(json.dumps({"schema": SCHEMAS["measure-self"], "chains": chains, "trees": trees,
                                         "machine": machine}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
