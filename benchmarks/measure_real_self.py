"""Drafts from the target itself on the real pretrained target: early exit (no fine-tune) and lookahead, timed.

Qwen2.5-Coder-1.5B-Instruct (`make real-pair`), float32 on oneDNN linear layers, greedy, one thread, on the code and
edit tasks of `make measure-real`. Early exit after L of the target's 28 layers (sd.lab early_exit_lm: the first L
layers, the final norm and the head, with a cache of its own) drafts k = 4 as a NeuralDraft: measure_run gives c_d,
c_v, E[N], the predicted and the measured speedup and greedy equality with plain decoding. Lookahead at (W, N, G) =
(4, 3, 4) goes through measure_trees. Prints each run and, with --json, writes them with the model's manifest (every
file's size, sha256, source and licence). --tiny runs the same code on a tiny random Qwen2 model (no download).
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

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding
from specdec_lib.lab.hf_causal_lm import early_exit_lm, set_matmul, tiny_hf_model
from specdec_lib.lab.measure import MeasurePlan
from specdec_lib.lab.real_measure import decode_plain, measure_run
from specdec_lib.lab.real_tasks import task_prompt, tiny_task_prompt

TASKS = ("code", "edit")
EXITS = (7, 14)  # of 28 layers
K = 4
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
    greedy, rows = Decoding(), []
    print(f"{target.name}: {n_params:,} parameters, {layers} layers; {platform.processor() or 'cpu'}, "
          f"1 thread; tasks {', '.join(TASKS)}, {args.n_new} new tokens, greedy", flush=True)
    for task, prompt in prompts.items():
        plain = decode_plain(target, prompt, args.n_new, decoding=greedy)
        for L in exits:
            drafter = sd.lab.NeuralDraft(early_exit_lm(target, L), name=f"exit{L}")
            drafter.model.remember_prefills(True)
            r = measure_run(target, drafter, prompt, K, plain=plain, decoding=greedy, reps=args.reps)
            row = {"task": task, "draft": f"exit after layer {L} of {layers}", "k": K, **r.fields()}
            rows.append(row)
            print(f"{task:<5} exit {L:>2}/{layers}  k {K}  c_d {r.c_d:.3f}  c_v {r.c_v:.3f}  E[N] {r.e_n:.2f}  "
                  f"pred {r.predicted:.2f}  meas {r.measured:.2f}  equal to plain: {r.equal_to_plain}", flush=True)
        W, N, G = LOOKAHEAD
        drafter = sd.lab.LookaheadDraft(target.vocab, window=W, ngram=N, guesses=G)
        t = sd.lab.measure_trees(target, drafter, [prompt], [None], rule="onehot_sequential",
                                 plan=MeasurePlan(n_new=args.n_new, repeats=1, reps=max(1, args.reps - 1)))
        rows.append({**dataclasses.asdict(t), "task": task, "draft": f"lookahead W{W} N{N} G{G}"})
        print(f"{task:<5} lookahead W{W} N{N} G{G}  up to {t.nodes[0]} nodes  c_d {t.c_d[0]:.3f}  c_v {t.c_v[0]:.3f}  "
              f"E[N] {t.e_n[0]:.2f}  pred {t.predicted[0]:.2f}  meas {t.measured[0]:.2f}", flush=True)
    seconds = round(time.perf_counter() - t0, 1)
    print(f"took {seconds:.0f}s")
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": {"processor": platform.processor(), "threads": 1,
                                                     "torch": torch.__version__, "seconds": seconds,
                                                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
                                         "models": manifests, "runs": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
