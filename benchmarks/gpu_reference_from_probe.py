"""specdec_lib/data/gpu_reference.json from the outside H200 probe's raw figures (../shared/data/...): every term
kept, laid out as the "measure-gpu" recording (specdec_lib/lab/gpu_recording.py), predictions from the CPU recording.

    .venv/bin/python benchmarks/gpu_reference_from_probe.py PROBE.json [--json OUT]

The probe (method: ../shared/notes/gpu-regime.md) ran outside the project on one NVIDIA H200 with random weights in
the real pair's shapes; benchmarks/measure_gpu.py did not re-measure it. Rules for a prediction a column cannot
answer directly: c_v(k) at a k between two timed ones is interpolated linearly; a draft timed at one k (a captured
draft's step, which does not grow with k) keeps that c_d at every k; prompt lookup's host work D(k) in ms is the eager
run's, so in a column with another T_1 its c_d is that D over k T_1. The one-layer and exit drafts have no acceptance
of their own: their predictions use the 0.5B draft's E[N] (a what-if at the same acceptance).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

import numpy as np

import specdec_lib as sd
from specdec_lib.lab.gpu_recording import CostColumn, DepthDraft, ModelShape, TaskPrediction

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "specdec_lib" / "data" / "gpu_reference.json"
SOURCE = ("Measured by an outside probe on one NVIDIA H200 (torch 2.11 + CUDA 13, transformers 5.24, bf16), "
          "2026-12-04, with the method of ../shared/notes/gpu-regime.md; random weights in the real pair's exact "
          "shapes (a dense pass's time does not depend on the weights' values); E[N] from the CPU recording "
          "(measure-real, real weights, greedy). Not re-measured by this repo's benchmarks/measure_gpu.py: converted "
          "by benchmarks/gpu_reference_from_probe.py from ../shared/data/h200-cost-terms-2026-12-04.json.")
SHAPES = [  # as the probe built them: Qwen2Config by hand, each with its own (untied) 151,936-row head
    ModelShape(role="target", name="Qwen2.5-Coder-1.5B-Instruct", layers=28, hidden=1536, intermediate=8960, heads=12,
               kv_heads=2, vocab=151936, tied=False, params=1_777_088_000),
    ModelShape(role="draft", name="Qwen2.5-Coder-0.5B-Instruct", layers=24, hidden=896, intermediate=4864, heads=14,
               kv_heads=2, vocab=151936, tied=False, params=630_167_424),
]
DEPTHS = {"0.5B": (24, 896), "exit7_of_1.5B": (7, 1536), "exit14_of_1.5B": (14, 1536),
          "one_layer_1.5B_width": (1, 1536), "one_layer_0.5B_width": (1, 896)}
NAMES = {"0.5B": "0.5B", "exit7_of_1.5B": "exit7", "exit14_of_1.5B": "exit14", "one_layer_1.5B_width": "one_layer",
         "one_layer_0.5B_width": "one_layer_0.5B_width"}
CAPTURED_NOTE = ("c_v under graphs follows the kernels cuBLAS picks for each shape and changed between machines "
                 "(run 1 against run 2): treat it as 1.25-1.65 for k = 1..8 at batch 1.")


def _draft(name, *, ks, c_d, depth=None, **terms) -> DepthDraft:
    """A DepthDraft of the probe's draft called name; terms: c_v, T_1_ms, pass_ms, step_over_target, weight_GB."""
    layers, hidden = depth or DEPTHS[name]
    terms = {"c_v": [], "T_1_ms": None, "pass_ms": {}, "step_over_target": None, "weight_GB": None, **terms}
    return DepthDraft(draft=NAMES.get(name, name), layers=layers, hidden=hidden, ks=list(ks), c_d=list(c_d), **terms)


def eager_column(run1: dict) -> CostColumn:
    """sd.lab.HFCausalLM through time_terms: the 0.5B draft's and prompt lookup's terms, one pass of T new tokens."""
    hf = run1["hf_eager_through_HFCausalLM_time_terms"]
    model, lookup = hf["model_draft"], hf["lookup_draft"]
    drafts = [_draft("0.5B", ks=model["ks"], c_d=model["c_d"], c_v=model["c_v"],
                     step_over_target=hf["draft_step_over_target_step"]),
              _draft("lookup", ks=model["ks"], c_d=lookup["c_d"], c_v=lookup["c_v"], T_1_ms=lookup["T_1_ms"],
                     depth=(0, 0))]
    return CostColumn(path="eager", run="run1", decoder="transformers Qwen2ForCausalLM (sdpa, DynamicCache) through "
                      "sd.lab.HFCausalLM; sd.lab.time_terms", measured=True, context=324, T_1_ms=model["T_1_ms"],
                      ks=model["ks"], c_v=model["c_v"], pass_ms={"1": hf["hf_pass_ms"]}, drafts=drafts,
                      note="every pass is bound by Python and kernel launches; pass_ms after 323 cached positions")


def minimal_columns(run1: dict, run2: dict) -> list[CostColumn]:
    """The minimal static-cache decoder uncaptured (run 1) and as CUDA graphs (runs 1 and 2)."""
    g = run1["cuda_graph_minimal_decoder_context_512"]
    target, draft = g["target_1.5B"], g["draft_0.5B"]
    Ts = [T for T in target if T != "weight_GB"]
    out = []
    for path, key in (("minimal-eager", "eager_ms"), ("captured", "graph_ms")):
        pass_ms = {T: target[T][key] for T in Ts}
        T_1 = pass_ms["1"]
        ks = [int(T) - 1 for T in Ts if int(T) in range(2, 10)]
        d_ms = {T: draft[T][key] for T in ("1", "2")}
        drafts = [_draft("0.5B", ks=[1], c_d=[d_ms["1"] / T_1], pass_ms=d_ms, step_over_target=d_ms["1"] / T_1,
                         weight_GB=draft["weight_GB"])]
        out.append(CostColumn(path=path, run="run1", decoder="a minimal Qwen2 decoder with a static KV cache"
                              + (" captured as CUDA graphs" if path == "captured" else ", uncaptured"), measured=True,
                              context=512, T_1_ms=T_1, ks=ks, c_v=[pass_ms[str(k + 1)] / T_1 for k in ks],
                              pass_ms={"1": pass_ms}, drafts=drafts,
                              note=(f"target weights {target['weight_GB']} GB. " + (CAPTURED_NOTE if path == "captured"
                                                                                   else "")).strip()))
    grid = run2["cuda_graph_minimal_decoder_batch_grid_and_drafts_by_depth"]
    pass_ms = grid["target_grid_ms"]
    T_1 = pass_ms["1"]["1"]
    ks = [int(T) - 1 for T in pass_ms["1"] if int(T) in range(2, 10)]
    drafts = [_draft(name, ks=[1], c_d=[d["T1_ms"] / T_1], pass_ms={"1": d["T1_ms"], "2": d["T2_ms"]},
                     step_over_target=d["T1_ms"] / T_1, weight_GB=d["weight_GB"])
              for name, d in grid["drafts_ms"].items()]
    out.append(CostColumn(path="captured", run="run2", decoder="the same minimal decoder as CUDA graphs, another "
                          "machine; batched passes (B, T)", measured=True, context=512, T_1_ms=T_1, ks=ks,
                          c_v=[pass_ms["1"][str(k + 1)] / T_1 for k in ks], pass_ms=pass_ms, drafts=drafts,
                          note=CAPTURED_NOTE + " Drafts by depth each have their own 151,936-row head."))
    return out


def _c_v(column: CostColumn, draft: DepthDraft, k: int) -> float:
    """c_v(k): the timing with this draft where the column has one, else the column's, interpolated between ks."""
    ks, c_v = (draft.ks, draft.c_v) if draft.c_v and draft in column.drafts else (column.ks, column.c_v)
    return float(np.interp(k, ks, c_v))


def _c_d(column: CostColumn, draft: DepthDraft, k: int, lookup: DepthDraft, eager_T_1: float) -> float:
    """c_d(k) as the module's docstring says."""
    if draft.draft == "lookup" and column.path != "eager":
        return lookup.at(k) * eager_T_1 / column.T_1_ms  # the same host work over this column's T_1
    return draft.at(k) if k in draft.ks else draft.c_d[-1]


def predictions(columns: list[CostColumn], cpu, *, model: str = "0.5B") -> list[TaskPrediction]:
    """Per task: the model draft (called model) and lookup at the CPU recording's k (4 and 6) in the eager and
    captured columns; the other drafts at the model draft's E[N]."""
    eager = columns[0]
    lookup = eager.draft("lookup")
    out = []
    for column in (c for c in columns if c.path != "minimal-eager"):
        names = [d.draft for d in column.drafts if d.draft not in ("lookup", "one_layer_0.5B_width")] + ["lookup"]
        for task in cpu.tasks:
            for name in names:
                run = cpu.run(task, "lookup" if name == "lookup" else "model")
                k = run.k
                draft = lookup if name == "lookup" else column.draft(name)
                c_d, c_v = _c_d(column, draft, k, lookup, lookup.T_1_ms), _c_v(column, draft, k)
                own = name in (model, "lookup")
                out.append(TaskPrediction(task=task, draft=name, path=column.path, run=column.run, k=k, e_n=run.e_n,
                                          c_d=c_d, c_v=c_v, predicted=sd.cost.cost_equation(run.e_n, draft_steps=k,
                                                                                            c_d=c_d, c_v=c_v),
                                          cpu_measured=run.measured if own else None, measured=None,
                                          equal_to_plain=None))
    return out


def from_probe(probe: dict) -> dict:
    """The recording's JSON object (schema 1) from the probe's."""
    run1, run2 = probe["run1"], probe["run2_fresh_machine"]
    columns = [eager_column(run1), *minimal_columns(run1, run2)]
    byte = probe["lab_byte_pair_make_measure_on_cuda_temperature_1"]
    rec = {"schema": 1, "source": SOURCE, "measured_by": "an outside probe",
           "machine": {**probe["machine"], "date": "2026-12-04"},
           "method": {**probe["method"], "predictions": " ".join(__doc__.split("Rules for", 1)[1].split())},
           "weights": "random", "models": [vars(m) for m in SHAPES], "columns": [], "predictions": [],
           "byte_pair": byte["tables"], "byte_pair_batch": byte["batch"],
           "zero_coin": run1["zero_coin_and_sampling_edges"], "smoke": run1["project_lab_on_cuda_smoke"],
           "notes": {"what": probe["what"], "run_to_run": probe["run_to_run"],
                     "captured": "the captured columns are the outside probe's minimal decoder, not the lab's: "
                                 "the lab's captured decode path (sd.lab.StaticLM) has not run on a GPU yet: "
                                 "`make measure-gpu` on one records it"},
           "tiny": False}
    rec["columns"] = [dataclasses.asdict(c) for c in columns]
    rec["predictions"] = [dataclasses.asdict(p) for p in predictions(columns, sd.lab.recorded("measure-real"))]
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe", type=pathlib.Path)
    ap.add_argument("--json", type=pathlib.Path, default=OUT)
    args = ap.parse_args(argv)
    rec = from_probe(json.loads(args.probe.read_text()))
    args.json.write_text(json.dumps(rec, indent=1) + "\n")
    sd.lab.load_recording("measure-gpu", args.json)  # what was written reads back
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
