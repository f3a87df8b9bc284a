"""Drafts from the target itself on the real pretrained target: early exit (no fine-tune) and lookahead, timed.

Qwen2.5-Coder-1.5B-Instruct (`make real-pair`), float32 on oneDNN linear layers, greedy, one thread, on the code and
edit tasks of `make measure-real`. Early exit after L of the target's 28 layers drafts two ways: with one cache
shared with the target (sd.lab.early_exit_pair: verification runs the lower layers on the last proposal only), and as
a separate NeuralDraft with a cache of its own (early_exit_lm: verification runs every layer on every position);
measure_run gives c_d, c_v, E[N], alpha, the predicted and the measured speedup and greedy equality with plain
decoding. Lookahead at (W, N, G) = (4, 3, 4) goes through measure_trees, and one more greedy decode is compared
with plain. --json writes the run as sd.lab.load_recording("measure-real-self", path) reads it (with the model's
manifest: every file's size, sha256, source and licence); `make measure-real-self` writes the committed one. --tiny
runs the same code on a tiny random Qwen2 model (no download).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time

import torch
from real_tasks import task_prompt, tiny_task_prompt  # beside this script

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding
from specdec_lib.lab.hf_causal_lm import early_exit_lm, set_matmul, tiny_hf_model
from specdec_lib.lab.measure import MeasurePlan
from specdec_lib.lab.real_measure import decode_plain, measure_run
from specdec_lib.lab.recordings import SCHEMAS

TASKS = ("code", "edit")
EXITS = (7, 14)  # of 28 layers
DRAFTS = (("own", 4), ("shared", 1), ("shared", 4))  # (cache, k) of each exit
LOOKAHEAD = (4, 3, 4)  # (window W, n-gram size N, guesses G)


def load(tiny: bool):
    """(target, its parameter count, {task: prompt}, manifests): the real target, or a tiny random Qwen2 model."""
    if tiny:
        target = tiny_hf_model("qwen2", vocab=64, seed=0)
        return target, target.n_params(), {t: tiny_task_prompt(t, 64, seed=i) for i, t in enumerate(TASKS)}, []
    from specdec_lib.lab.real_pair import load_real_pair

    pair = load_real_pair(small=False)
    n = pair.target.n_params()  # before oneDNN repacks the linear layers (no longer nn.Parameters)
    target = set_matmul(pair.target, "onednn")
    prompts = {t: task_prompt(t, pair.tokenizer) for t in TASKS}
    return target, n, prompts, [dict(pair.manifests["target"], role="target")]


def exit_pair(target, L: int, cache: str):
    """(target, drafter) of an exit after layer L: one shared cache, or the exit as a separate draft."""
    if cache == "shared":
        return sd.lab.early_exit_pair(target, L)
    drafter = sd.lab.NeuralDraft(early_exit_lm(target, L), name=f"exit{L}")
    drafter.model.remember_prefills(True)
    return target, drafter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny random Qwen2 model: the code path in seconds")
    parser.add_argument("--n-new", type=int, default=48)
    parser.add_argument("--reps", type=int, default=3, help="timings of each cost term")
    parser.add_argument("--json", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    target, n_params, prompts, manifests = load(args.tiny)
    target.remember_prefills(True)
    layers = target.config.num_hidden_layers
    exits = (1,) if args.tiny else EXITS
    greedy, exit_rows, lookahead_rows = Decoding(), [], []
    print(f"{target.name}: {n_params:,} parameters, {layers} layers; {platform.processor() or platform.machine()}, "
          f"1 thread; tasks {', '.join(TASKS)}, {args.n_new} new tokens, greedy", flush=True)
    for task, prompt in prompts.items():
        plain = decode_plain(target, prompt, args.n_new, decoding=greedy)
        for L in exits:
            for cache, k in DRAFTS:
                r = measure_run(*exit_pair(target, L, cache), prompt, k, plain=plain, decoding=greedy, reps=args.reps)
                exit_rows.append({"task": task, "exit_layer": L, "layers": layers, "cache": cache, "k": k,
                                  **r.fields()})
                print(f"{task:<5} exit {L:>2}/{layers} {cache:<6} k {k}  c_d {r.c_d:.3f}  c_v {r.c_v:.3f}  "
                      f"E[N] {r.e_n:.2f}  pred {r.predicted:.2f}  meas {r.measured:.2f}  "
                      f"equal to plain: {r.equal_to_plain}", flush=True)
        W, N, G = LOOKAHEAD
        drafter = sd.lab.LookaheadDraft(target.vocab, window=W, ngram=N, guesses=G)
        t = sd.lab.measure_trees(target, drafter, [prompt], [None], rule="onehot_sequential",
                                 plan=MeasurePlan(n_new=args.n_new, repeats=1, reps=max(1, args.reps - 1)))
        out = sd.lab.generate_tree(target, drafter, prompt, args.n_new, rule="onehot_sequential", decoding=greedy)
        equal = bool(torch.equal(out, plain.tokens))
        lookahead_rows.append({"task": task, "window": W, "ngram": N, "guesses": G, "nodes": t.nodes[0],
                               "T_1": t.T_1, "c_d": t.c_d[0], "c_v": t.c_v[0], "e_n": t.e_n[0],
                               "predicted": t.predicted[0], "measured": t.measured[0], "equal_to_plain": equal})
        print(f"{task:<5} lookahead W{W} n{N} G{G}  up to {t.nodes[0]} nodes  c_d {t.c_d[0]:.3f}  c_v {t.c_v[0]:.3f}  "
              f"E[N] {t.e_n[0]:.2f}  pred {t.predicted[0]:.2f}  meas {t.measured[0]:.2f}  equal to plain: {equal}",
              flush=True)
    seconds = round(time.perf_counter() - t0, 1)
    print(f"took {seconds:.0f}s")
    if args.json is not None:
        machine = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                   "threads": 1, "torch": torch.__version__, "transformers": __import__("transformers").__version__,
                   "matmul": "default" if args.tiny else "onednn", "seconds": seconds,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        args.json.write_text(json.dumps({
            "schema": SCHEMAS["measure-real-self"], "machine": machine, "models": manifests,
            "prompts": {t: int(p.numel()) for t, p in prompts.items()}, "n_new": args.n_new,
            "exits": exit_rows, "lookahead": lookahead_rows, "tiny": args.tiny}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
