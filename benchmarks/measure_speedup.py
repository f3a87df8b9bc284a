"""The cost equation against the clock, for every draft: predicted S(k) = E[N(k)] / (k c_d + c_v(k)) beside measured.

Run with `make measure` (after `make models`, whose weights are committed). Against the trained target
(specdec_lib/lab/weights/pair.pt), one thread, sampling at temperature 1 unless told otherwise, it measures
each draft in turn: the 1-layer neural draft, the 2-layer one (draft_deep.pt), a byte 4-gram table built
from the training files, and prompt lookup. For every repeat, held-out stdlib prompt and k, it times T_1,
D(k) and V(k) round-robin, then decodes the prompt plainly and speculatively back to back (a pair), and
prints, per k, c_d and c_v(k) (medians over pairs), E[N], the predicted and the measured speedup, their
relative error, O(k) and the acceptance by position. Then the batch regime: one target pass over
B x (k+1) positions for B = 1, 2, 4, ..., 32, c_v(k; B) fitted by a line, and the best k per B for the
best draft's alpha and c_d. On CUDA every clock read follows a synchronisation. It ends with five lines a
script can read (final_lines). The machine's load average is printed, as load moves every number.
Each neural draft (--block-drafts) also decodes every pair with block verification (Sun et al., ICLR 2025),
beside the token rule: its E[N] and measured speedup against the same plain runs. A one-hot draft (the table,
prompt lookup) is not run twice: with a one-hot draft block verification is the token rule (the same law).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import sys
import time

import torch
from tqdm import tqdm

import specdec_lib as sd
from specdec_lib.accounting import alpha_from_tokens
from specdec_lib.lab.batch_cost import BatchCost, batch_cost
from specdec_lib.lab.recordings import SCHEMAS

DEFAULT_DRAFTS = ("draft", "draft_deep", "table", "lookup")  # what `make measure` records
EXITS = ("exit1", "exit2", "exit3")  # early exit: the target's first 1, 2 or 3 of its 4 layers (sd.lab.early_exit_pair)
SELF = EXITS + ("medusa", "eagle")  # drafts from the target itself (medusa: 4 heads on its features, k <= 4)
DRAFTS = DEFAULT_DRAFTS + SELF
NEURAL = ("draft", "draft_deep")  # the drafts whose q is not one-hot: where block verification can differ
ONE_HOT = ("table", "lookup")  # block verification is the token rule for these


def make_drafter(name: str, device: str, target):
    """(the target to decode with, the drafter called name): the two trained networks, the corpus 4-gram table,
    prompt lookup (m = 3), an early exit (the target wrapped to share its cache with its first L layers), or
    Medusa's heads or the EAGLE draft (the target wrapped to keep its features, which both read)."""
    if name in ("draft", "draft_deep"):
        return target, sd.lab.NeuralDraft(sd.lab.load_draft(name, device), name=name)
    if name == "table":
        return target, sd.lab.TableDraft(sd.lab.corpus_table(4))
    if name == "lookup":
        return target, sd.lab.PromptLookupDraft(256, m=3)
    if name in EXITS:
        return sd.lab.early_exit_pair(target, int(name[len("exit"):]))
    if name == "medusa":
        return sd.lab.medusa_pair(target, sd.lab.load_heads("medusa", device))
    if name == "eagle":
        return sd.lab.eagle_pair(target, sd.lab.load_heads("eagle", device))
    raise ValueError(f"draft must be one of {', '.join(DRAFTS)}; got {name!r}")


def describe(drafter) -> str:
    """What a draft is made of, for its table's title."""
    if isinstance(drafter, sd.lab.NeuralDraft):
        return f"{sd.lab.n_params(drafter.model):,} parameters"
    if isinstance(drafter, sd.lab.EarlyExitDraft):
        return f"the target's first {drafter.exit_layer} layers, one shared cache"
    if isinstance(drafter, sd.lab.MedusaDraft):
        heads = drafter.heads
        return f"{sd.lab.n_params(heads):,} parameters in {heads.num_heads} heads on the target's features"
    if isinstance(drafter, sd.lab.EagleDrafter):
        return f"{sd.lab.n_params(drafter.net):,} parameters, one layer over the target's features"
    return "no network"


def constant_guess(measured: list[float]) -> tuple[float, float]:
    """(c, its max relative error): the one number c minimising max |c - m| / m over the measured speedups m.

    The worst cases are the smallest and the largest m, so c is their harmonic mean 2 lo hi / (lo + hi),
    where (c - lo) / lo = (hi - c) / hi = (hi - lo) / (hi + lo).
    """
    lo, hi = min(measured), max(measured)
    return 2 * lo * hi / (lo + hi), (hi - lo) / (hi + lo)


def final_lines(tables: list[sd.lab.SpeedupTable], batch: BatchCost) -> list[str]:
    """The five closing lines: range of measured speedups, the best one, constant guess, the equation, best k by B."""
    measured = [m for t in tables for m in t.measured]
    best_t, i = max(((t, i) for t in tables for i in range(len(t.ks))), key=lambda ti: ti[0].measured[ti[1]])
    _, c_err = constant_guess(measured)
    return [f"measured speedups from {min(measured):.3f} to {max(measured):.3f}",
            f"best measured speedup: {best_t.measured[i]:.3f} (draft {best_t.draft}, k={best_t.ks[i]})",
            f"constant guess max relative error: {c_err:.3f}",
            f"max relative error: {max(t.max_rel_error for t in tables):.3f}",
            batch.best_k_line()]


def block_lines(tables: list[sd.lab.SpeedupTable]) -> list[str]:
    """Per draft run beside block verification: E[N] and measured S, token rule -> block, at every k."""
    lines = []
    for t in tables:
        if not t.beside and t.draft in ONE_HOT:
            lines.append(f"block verification, {t.draft}: a one-hot draft, where it is the token rule (not run twice)")
        for run in t.beside:
            cells = [f"k={k}: E[N] {t.e_n[i]:.3f} -> {run.e_n[i]:.3f} ({run.e_n[i] / t.e_n[i] - 1:+.1%}), "
                     f"S {t.measured[i]:.3f} -> {run.measured[i]:.3f}" for i, k in enumerate(t.ks)]
            lines.append(f"{run.verifier} verification, {t.draft} (token rule -> {run.verifier}): " + "; ".join(cells))
    return lines


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafts", default=",".join(DEFAULT_DRAFTS),
                        help=f"comma-separated, from {', '.join(DRAFTS)} (the exits are not in the default)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="repeats (one pair per prompt and k each); medians are reported")
    parser.add_argument("--prompts", type=int, default=6, help="held-out prompts per repeat")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--n-new", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--reps", type=int, default=5, help="timings of each term per pair")
    parser.add_argument("--ks", type=_ints, default=[1, 2, 3, 4, 6, 8], help="draft lengths, comma-separated")
    parser.add_argument("--batches", type=_ints, default=[1, 2, 4, 8, 16, 32], help="batch sizes for c_v(k; B)")
    parser.add_argument("--batch-reps", type=int, default=40, help="timings of each batched pass")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write every table's fields as JSON")
    parser.add_argument("--target", default="target", choices=tuple(sd.lab.weights.TARGET_FILES),
                        help="the trained target, or its early-exit fine-tune (target_ee: the same drafts are exact "
                             "for it, and its exits draft better)")
    parser.add_argument("--block-drafts", default=",".join(NEURAL),
                        help=f"drafts also decoded with block verification, from {', '.join(NEURAL + SELF)} "
                             "('' for none)")
    args = parser.parse_args(argv)
    names = [n for n in args.drafts.split(",") if n]
    if not names or set(names) - set(DRAFTS):
        parser.error(f"--drafts must name some of {', '.join(DRAFTS)}, got {args.drafts!r}")
    block_drafts = [n for n in args.block_drafts.split(",") if n]
    if set(block_drafts) - set(NEURAL + SELF):
        parser.error(f"--block-drafts must name some of {', '.join(NEURAL + SELF)}, "
                     f"got {args.block_drafts!r}")
    torch.set_num_threads(args.threads)
    target = sd.lab.load_target(args.target, args.device)
    prompts = [p.to(args.device) for p in sd.lab.corpus_prompts(args.prompts, args.prompt_len, seed=0)]
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(f"device {args.device} ({device}), {torch.get_num_threads()} thread(s), torch {torch.__version__}; "
          f"target {args.target}, {sd.lab.n_params(target):,} parameters")
    print(f"{args.prompts} held-out prompts x {args.n_new} new tokens, k in {args.ks}, "
          f"{'greedy' if args.temperature == 0 else f'temperature {args.temperature}, top_k {args.top_k}'}; "
          f"load average before: {load()}")
    t0 = time.perf_counter()
    tables = []
    for name in names:
        decoder, drafter = make_drafter(name, args.device, target)
        size = describe(drafter)
        with tqdm(total=args.repeats * len(prompts) * len(args.ks), unit="pair",
                  desc=f"timing draft {name}: terms, then plain vs speculative") as bar:
            plan = sd.lab.measure.MeasurePlan(n_new=args.n_new, repeats=args.repeats, reps=args.reps,
                                              beside=("block",) if name in block_drafts else ())
            table = sd.lab.measure_speedup(decoder, drafter, prompts, args.ks, plan=plan, temperature=args.temperature,
                                       top_k=args.top_k, on_pair=bar.update)
        tables.append(table)
        print(f"\ndraft {name} ({size}); load average {load()}\n{table}\n")
    best = max(tables, key=lambda t: max(t.measured))
    i = best.measured.index(max(best.measured))
    alpha = alpha_from_tokens(best.e_n[i], best.ks[i])
    contexts = torch.stack(sd.lab.corpus_prompts(max(args.batches), 2 * args.prompt_len, seed=1)).to(args.device)
    with tqdm(total=len(args.batches), unit="batch size", desc="timing target passes over B x (k+1) positions") as bar:
        batch = batch_cost(target, contexts, alpha=alpha, c_d=best.c_d[i], batches=args.batches,
                           ks=range(1, max(args.ks) + 1), reps=args.batch_reps, on_batch=bar.update)
    print(f"\n{batch}\n(alpha from E[N({best.ks[i]})] of draft {best.draft}, its c_d at that k)")
    print(f"took {time.perf_counter() - t0:.0f}s; load average after: {load()}")
    if args.json is not None:
        tables_json = [dataclasses.asdict(t) for t in tables]
        args.json.write_text(json.dumps({"schema": SCHEMAS["measure"], "tables": tables_json,
                                         "batch": dataclasses.asdict(batch)}, indent=1))
    print("\n".join(block_lines(tables)))
    print("\n".join(final_lines(tables, batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
