"""`make measure-real`: the real pair (Qwen2.5-Coder-1.5B target, -0.5B draft) through the lab's own loop, timed.

For the model draft, prompt lookup and the token n-gram table, on three tasks (code, prose, edit), greedy and at
temperature 1, in float32 on the chosen matrix-multiply path: the cost terms, E[N], alpha by position, the predicted
and the measured speedup, and greedy equality with plain decoding; c_v(k) on every path; transformers' own generate
on the same prompts (assistant_model=, prompt_lookup_num_tokens=) for the side-by-side ratio; bfloat16 greedy runs
and the block-versus-incremental numerics. Writes the recording (specdec_lib/data/real_pair_reference.json) that
notebook 05b reads. One thread, as the course's clock runs everywhere; the machine should be quiet.
--repeats R (default 3) runs every greedy float32 configuration R times, in R whole passes (a slow spell of the
machine lands on different configurations in different passes); each run records every repeat's terms, E[N] and
speedups, the medians and the [min, max] ranges (lab/recorded_terms.py). With the defaults (3 repeats of 48 tokens)
the whole recording is estimated at about 85 minutes on the 2-core VM, from the phases of the 2 December 2026
recording (one run of 64 tokens per configuration: 69 minutes).
--tiny runs the same code on tiny random Qwen2 models (seconds; the schema, not the numbers, is what it shows).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import pathlib
import platform
import sys
import time

import torch
from hf_generate import hf_generate  # beside this script
from real_tasks import TASKS, task_prompt, tiny_task_prompt, token_table  # beside this script
from tqdm.auto import tqdm

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding
from specdec_lib.lab.hf_causal_lm import set_matmul, tiny_hf_model
from specdec_lib.lab.numerics import block_vs_incremental
from specdec_lib.lab.real_measure import combine_repeats, decode_plain, measure_run
from specdec_lib.lab.recorded_terms import repeats_table
from specdec_lib.lab.recordings import SCHEMAS, load_recording

OUT = pathlib.Path(__file__).resolve().parents[1] / "specdec_lib" / "data" / "real_pair_reference.json"
KS = {"model": 4, "lookup": 6, "table": 4}  # the k each draft runs at (the issue's probe: draft 4, lookup 6)
CURVE_KS = (1, 2, 4, 6, 8)  # c_v(k) on every matrix-multiply path
FP32_PATH = "onednn"  # the float32 path of the full runs, chosen on purpose (c_v(k) curves: both paths)


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=pathlib.Path, default=OUT, help=f"where to write the recording (default {OUT})")
    ap.add_argument("--tiny", action="store_true", help="tiny random models: the code path in seconds, no weights")
    ap.add_argument("--n-new", type=int, default=48, help="tokens per greedy float32 decode (default 48)")
    ap.add_argument("--n-short", type=int, default=48, help="tokens per sampled and bfloat16 decode (default 48)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="passes over the greedy float32 configurations: medians and ranges (default 3)")
    ap.add_argument("--n-numerics", type=int, default=32, help="tokens scored both ways per numerics row (32)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls of each cost term (default 3)")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' generate side by side")
    ap.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 runs")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    return a


class Lab:
    """The pair, its prompts and drafters, loaded per dtype; real weights through lab.real_pair, or tiny ones."""

    def __init__(self, tiny: bool):
        self.tiny, self.manifests = tiny, []

    def load(self, dtype):
        if self.tiny:
            target = tiny_hf_model("qwen2", vocab=512, seed=0, dtype=dtype)
            draft = tiny_hf_model("qwen2", vocab=512, seed=1, dtype=dtype)
            prompts = {t: tiny_task_prompt(t, 512, length=48) for t in TASKS}
            table = sd.lab.build_sparse_ngram(torch.randint(0, 512, (4000,), generator=torch.Generator()
                                                            .manual_seed(0)), 512, 3)
        else:
            from specdec_lib.lab.real_pair import load_real_pair

            pair = load_real_pair(dtype=dtype)
            target, draft = pair.target, pair.draft
            self.manifests = [dict(m, role=role) for role, m in pair.manifests.items()]
            prompts = {t: task_prompt(t, pair.tokenizer) for t in TASKS}
            table = token_table(pair.tokenizer, target.vocab)
        target.remember_prefills(), draft.remember_prefills()  # a prompt's prefill, computed once per model
        drafters = {"model": sd.lab.NeuralDraft(draft, "model"), "lookup": sd.lab.PromptLookupDraft(target.vocab, m=3),
                    "table": sd.lab.TableDraft(table, "table")}
        return target, draft, prompts, drafters


def c_v_curve(target, lookup, prompt, reps, *, dtype: str, matmul: str) -> list[dict]:
    """c_v(k) = V(k) / T_1 for CURVE_KS on one path, proposals from prompt lookup (greedy)."""
    T_1, _, V = sd.lab.time_terms(target, lookup, prompt, CURVE_KS, reps)
    return [{"dtype": dtype, "matmul": matmul, "k": k, "c_v": v / T_1} for k, v in zip(CURVE_KS, V)]


def runs(target, drafters, prompts, tasks, cfg: dict, bar):
    """Every (task, draft) at its k against one plain run per task, in cfg["repeats"] whole passes (default 1);
    returns (RealRun dicts, {(task, kind): result}), repeats combined (medians, ranges, each repeat's terms).

    cfg: n_new, temperature, dtype, matmul (what the runs record), reps (of each timed term), kinds (the drafts).
    """
    n_new, temperature, dtype, matmul = cfg["n_new"], cfg["temperature"], cfg["dtype"], cfg["matmul"]
    passes, results = [], {}
    for rep in range(cfg.get("repeats", 1)):  # a whole pass at a time: a slow spell hits other configurations
        passes.append({})
        for i, task in enumerate(tasks):
            decoding = Decoding(temperature=temperature, generator=torch.Generator().manual_seed(i))
            plain = decode_plain(target, prompts[task], n_new, decoding=decoding)
            results.setdefault((task, "plain"), plain)
            for kind in cfg["kinds"]:
                timed = cfg.get("terms_from", {}).get((task, kind))  # the greedy run's terms, for a sampled run
                r = measure_run(target, drafters[kind], prompts[task], KS[kind], plain=plain, decoding=decoding,
                                reps=cfg["reps"], terms=None if timed is None else timed.terms(KS[kind]))
                passes[-1][task, kind] = r
                bar.update()
                bar.set_postfix_str(f"{dtype} T={temperature} pass {rep + 1} {task} {kind}: S {r.measured:.2f} "
                                    f"(pred {r.predicted:.2f})")
    out = []
    for key in passes[0]:
        repeats = [p[key] for p in passes]
        results[key] = r = repeats[0] if len(repeats) == 1 else combine_repeats(repeats, KS[key[1]])
        out.append({"task": key[0], "draft": key[1], "k": KS[key[1]], "temperature": temperature, "dtype": dtype,
                    "matmul": matmul, "n_new": n_new, **r.fields(), **r.repeat_fields()})
    return out, results


def hf_side_by_side(target, draft, prompts, tasks, greedy, n_new, bar) -> list[dict]:
    """transformers' generate (plain, assistant_model=, prompt lookup) against our greedy runs, seconds per token."""
    rows = []
    for task in tasks:
        p = prompts[task]
        plain_tokens, _, hf_plain = hf_generate(target, p, n_new)
        ours_plain = greedy[task, "plain"]
        for mode, kind in (("assistant", "model"), ("lookup", "lookup")):
            tokens, _, hf_spec = hf_generate(target, p, n_new, mode=mode, k=KS[kind], draft=draft)
            ours = greedy[task, kind]
            rows.append({"task": task, "mode": mode, "k": KS[kind], "hf_speedup": hf_plain / hf_spec,
                         "ours_speedup": ours.measured, "ours_over_hf": hf_spec / ours.spec.per_token,
                         "equal_to_plain": bool(torch.equal(tokens, ours_plain.tokens)
                                                and torch.equal(plain_tokens, ours_plain.tokens))})
            bar.update()
            bar.set_postfix_str(f"HF {task} {mode}: {hf_plain / hf_spec:.2f}x, ours {ours.measured:.2f}x")
    return rows


def numerics(target, prompts, tasks, n, bar) -> list[dict]:
    rows = []
    for task in tasks:
        rows.append({"task": task, **vars(block_vs_incremental(target, prompts[task], n, k=KS["model"]))})
        bar.update()
    return rows


def _write(path: pathlib.Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv=None) -> int:
    a = _args(argv)
    torch.set_num_threads(1)
    t0, load0 = time.time(), os.getloadavg()
    lab, tasks = Lab(a.tiny), a.tasks
    n_configs = len(tasks) * (3 * a.repeats + 3 + 1 + (0 if a.no_hf else 2) + (0 if a.no_bf16 else 3))
    bar = tqdm(total=n_configs, desc="measure-real", unit="run", file=sys.stdout)
    target, draft, prompts, drafters = lab.load(torch.float32)
    curve = c_v_curve(target, drafters["lookup"], prompts["edit"], a.reps, dtype="float32", matmul="default")
    set_matmul(target, FP32_PATH)  # the target's (k+1)-row passes; the draft's one-row steps keep the default kernels
    curve += c_v_curve(target, drafters["lookup"], prompts["edit"], a.reps, dtype="float32", matmul=FP32_PATH)
    cfg = {"dtype": "float32", "matmul": FP32_PATH, "reps": a.reps, "kinds": list(KS), "n_new": a.n_new,
           "temperature": 0.0, "repeats": a.repeats}
    rows, greedy = runs(target, drafters, prompts, tasks, cfg, bar)
    partial = {"runs": rows, "c_v_curve": curve}
    _write(a.json.with_suffix(".partial.json"), partial)
    partial["hf"] = hf = [] if a.no_hf else hf_side_by_side(target, draft, prompts, tasks, greedy, a.n_new, bar)
    _write(a.json.with_suffix(".partial.json"), partial)
    rows += runs(target, drafters, prompts, tasks, dict(cfg, n_new=a.n_short, temperature=1.0, terms_from=greedy,
                                                         repeats=1), bar)[0]
    partial["numerics"] = nums = numerics(target, prompts, tasks, a.n_numerics, bar)
    _write(a.json.with_suffix(".partial.json"), partial)
    lengths = {t: prompts[t].numel() for t in tasks}
    if not a.no_bf16:
        del target, draft, drafters, greedy
        gc.collect()
        target, draft, prompts, drafters = lab.load(torch.bfloat16)
        curve += c_v_curve(target, drafters["lookup"], prompts["edit"], a.reps, dtype="bfloat16", matmul="default")
        cfg.update(dtype="bfloat16", matmul="default", kinds=["model", "lookup"], n_new=a.n_short, repeats=1)
        rows += runs(target, drafters, prompts, tasks, cfg, bar)[0]
        nums += numerics(target, prompts, tasks, a.n_numerics, bar)
    bar.close()
    import transformers

    machine = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
               "threads": torch.get_num_threads(), "draft_matmul": "default", "repeats": a.repeats,
               "loadavg_before": list(load0),
               "loadavg_after": list(os.getloadavg()),
               "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "seconds": round(time.time() - t0, 1)}
    recording = {"schema": SCHEMAS["measure-real"], "machine": machine, "models": lab.manifests, "prompts": lengths,
                 "runs": rows, "c_v_curve": curve, "hf": hf, "numerics": nums, "tiny": a.tiny}
    _write(a.json, recording)
    a.json.with_suffix(".partial.json").unlink(missing_ok=True)
    for r in rows:
        print(f"{r['dtype']:>8} {r['matmul']:>7} T={r['temperature']:.0f} {r['task']:>5} {r['draft']:>6} k={r['k']} "
              f"c_d {r['c_d']:.3f} c_v {r['c_v']:.2f} E[N] {r['e_n']:.2f} pred {r['predicted']:.2f} "
              f"meas {r['measured']:.2f} exact {r['equal_to_plain']} div {r['first_divergence']}")
    if a.repeats > 1:  # read back through the recording's reader, which checks every median and range
        print(repeats_table(load_recording("measure-real", a.json).runs))
    for h in hf:
        print(f"HF {h['task']:>5} {h['mode']:>9} k={h['k']}: HF {h['hf_speedup']:.2f}x, ours {h['ours_speedup']:.2f}x, "
              f"ours/HF {h['ours_over_hf']:.2f}, equal {h['equal_to_plain']}")
    for c in curve:
        print(f"c_v {c['dtype']} {c['matmul']} k={c['k']}: {c['c_v']:.3f}")
    for n in nums:
        print(n)
    print(f"wrote {a.json} in {machine['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
