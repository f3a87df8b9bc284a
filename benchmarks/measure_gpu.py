"""`make measure-gpu`: the real pair's cost terms on a GPU, eager transformers and the lab's captured decode path.

With the real pair's weights where present (`make real-pair`), else random weights of their shapes (Qwen2.5-Coder
1.5B target, 0.5B draft, each with its own head: a dense pass's time does not depend on the weights' values), two
columns over the same weights: "eager" (transformers through sd.lab.HFCausalLM) and "captured" (sd.lab.StaticLM, one
CUDA graph per pass shape; off a GPU it runs uncaptured and the column is "minimal-eager"). Each holds T_1 and c_d(k),
c_v(k) for k = 1..8 (sd.lab.time_terms), one target pass of T new tokens at batch B for B in {1, 4, 16, 64} and
T = 1..9 (so c_v(k; B)), single passes up to 2,048 new tokens at batch 1, drafts by depth (the target's first L/4 and
L/2 layers + head, one layer + head, the 0.5B), prompt lookup, and the predictions S = E[N] / (k c_d + c_v) from the
CPU recording's E[N] (measure-real). With real weights also the measured speedup and greedy equality per task and
column (sd.lab.real_measure.measure_run on benchmarks/real_tasks.py).
Writes the "measure-gpu" recording (specdec_lib/lab/gpu_recording.py); without --json, on a GPU, the committed
specdec_lib/data/gpu_reference.json. --tiny: small random shapes on the CPU in seconds (the code path, not the
numbers), and it never writes the committed reference.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import sys
import time

import torch
from gpu_reference_from_probe import SHAPES, predictions  # beside this script
from real_tasks import TASKS, task_prompt  # beside this script
from tqdm.auto import tqdm

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding
from specdec_lib.lab.gpu_recording import CostColumn, DepthDraft, ModelShape
from specdec_lib.lab.hf_causal_lm import HFCausalLM, early_exit_lm
from specdec_lib.lab.real_measure import decode_plain, measure_run
from specdec_lib.lab.recordings import REFERENCE_PATHS, SCHEMAS, load_recording
from specdec_lib.lab.static_lm import StaticLM

OUT = REFERENCE_PATHS["measure-gpu"]
KS = range(1, 9)
TINY = [ModelShape(role="target", name="tiny-qwen2-target", layers=4, hidden=64, intermediate=128, heads=4,
                   kv_heads=2, vocab=512, tied=False, params=0),
        ModelShape(role="draft", name="tiny-qwen2-draft", layers=2, hidden=32, intermediate=64, heads=2, kv_heads=1,
                   vocab=512, tied=False, params=0)]


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="where the models run (default: cuda if available, else cpu; "
                    "--tiny: cpu)")
    ap.add_argument("--tiny", action="store_true", help="small random shapes on the CPU in seconds (needs --json)")
    ap.add_argument("--json", type=pathlib.Path, default=None,
                    help=f"where to write the recording (default on a GPU: {OUT})")
    ap.add_argument("--random", action="store_true", help="random weights of the real shapes even if real ones exist")
    ap.add_argument("--reps", type=int, default=None, help="timed calls of each term (default 20; --tiny 3)")
    ap.add_argument("--context", type=int, default=324, help="cached positions before a timed pass (random weights)")
    ap.add_argument("--max-new", type=int, default=2048, help="longest single pass at batch 1 (default 2048)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64], help="B of c_v(k; B)")
    ap.add_argument("--n-new", type=int, default=64, help="tokens per decode of a measured speedup (real weights)")
    a = ap.parse_args(argv)
    a.device = a.device or ("cuda" if torch.cuda.is_available() and not a.tiny else "cpu")
    if a.json is None and (a.tiny or not a.device.startswith("cuda")):
        ap.error("--json FILE is needed with --tiny or off a GPU: only a GPU run rewrites the committed reference")
    if a.tiny and a.json is not None and a.json.resolve() == OUT.resolve():
        ap.error(f"--tiny never overwrites the committed reference {OUT}")
    if min(a.batches) < 1 or a.context < 2 or a.max_new < 1:
        ap.error("--batches must be >= 1, --context >= 2 and --max-new >= 1")
    if a.tiny:
        a.context, a.max_new, a.reps = min(a.context, 48), min(a.max_new, 64), a.reps or 3
    a.reps = a.reps or 20
    return a


def random_lm(shape: ModelShape, *, device: str, dtype: torch.dtype, seed: int) -> HFCausalLM:
    """A transformers Qwen2 causal LM of shape with random weights, built on device, as an HFCausalLM."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, tie_word_embeddings=shape.tied, rope_theta=1e6,
                         max_position_embeddings=32768)
    torch.manual_seed(seed)  # the benchmark's own draw of its random weights
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return HFCausalLM(model, name=shape.name)


def load(a):
    """(target, draft, prompts, weights, shapes): real weights moved to the device, else random ones of the shapes."""
    dtype = torch.bfloat16 if a.device.startswith("cuda") else torch.float32
    if not (a.tiny or a.random):
        try:
            from specdec_lib.lab.real_pair import load_real_pair

            pair = load_real_pair(dtype=dtype)
            pair.target.model.to(a.device), pair.draft.model.to(a.device)
            prompts = {t: task_prompt(t, pair.tokenizer).to(a.device) for t in TASKS}
            shapes = [dataclasses.replace(s, params=m.n_params()) for s, m in zip(SHAPES, (pair.target, pair.draft))]
            return pair.target, pair.draft, prompts, "real", shapes
        except FileNotFoundError as e:
            print(f"real weights not found ({str(e).splitlines()[0]}): random weights of their shapes")
    shapes = TINY if a.tiny else SHAPES
    target, draft = (random_lm(s, device=a.device, dtype=dtype, seed=i) for i, s in enumerate(shapes))
    shapes = [dataclasses.replace(s, params=m.n_params()) for s, m in zip(shapes, (target, draft))]
    return target, draft, None, "tiny" if a.tiny else "random", shapes


def drafts_by_depth(target, draft, *, name: str) -> dict:
    """name -> (drafter, layers, hidden): the draft model, one layer + head, the target's first L/4 and L/2 layers;
    through transformers' forward (early_exit_lm) for an HFCausalLM, as StaticLMs over its weights for a StaticLM."""
    static = isinstance(target, StaticLM)
    config, d_config = (target.model.config, draft.model.config) if static else (target.config, draft.config)
    L, C = config.num_hidden_layers, config.hidden_size
    out = {name: (sd.lab.NeuralDraft(draft, name), d_config.num_hidden_layers, d_config.hidden_size)}
    for exit_layer in dict.fromkeys(e for e in (1, L // 4, L // 2) if 1 <= e < L):
        label = "one_layer" if exit_layer == 1 else f"exit{exit_layer}"
        cut = static_like(target, target.model, layers=exit_layer) if static else early_exit_lm(target, exit_layer)
        out[label] = (sd.lab.NeuralDraft(cut, label), exit_layer, C)
    out["lookup"] = (sd.lab.PromptLookupDraft(target.vocab, m=3), 0, 0)
    return out


def static_like(static: StaticLM | None, lm: HFCausalLM, *, max_len: int | None = None,
                layers: int | None = None) -> StaticLM:
    """lm as a StaticLM with static's settings (or max_len's and graphs "auto" when static is None)."""
    if static is None:
        return StaticLM(lm, max_len=max_len, max_captured=max_len)
    return StaticLM(lm, max_len=static.max_len, layers=layers, graphs=static.graphs, max_captured=static.max_captured)


def draft_costs(target, drafts: dict, context, *, reps: int, bar) -> list[DepthDraft]:
    """time_terms for every draft at k = 1..8: c_d(k), the target's c_v(k) beside it, the T_1 it timed."""
    out = []
    for label, (drafter, layers, hidden) in drafts.items():
        T_1, D, V = sd.lab.time_terms(target, drafter, context, KS, reps)
        out.append(DepthDraft(draft=label, layers=layers, hidden=hidden, ks=list(KS),
                             c_d=[d / (k * T_1) for k, d in zip(KS, D)], c_v=[v / T_1 for v in V], T_1_ms=T_1 * 1e3,
                             pass_ms={}, step_over_target=None, weight_GB=None))
        bar.update()
        d = out[-1]
        bar.set_postfix_str(f"{label}: T_1 {T_1 * 1e3:.2f} ms, c_d(4) {d.c_d[3]:.3f}, c_v(4) {d.c_v[3]:.2f}")
    return out


@torch.inference_mode()
def pass_times(target, context: torch.Tensor, *, B: int, Ts, reps: int) -> dict[str, float]:
    """T (as str) -> ms of one target pass over B x T new tokens after context[:-1] cached (medians, round-robin)."""
    rows = context[None].expand(B, -1).contiguous()  # (B, L)
    L = rows.shape[1]
    cache = target.new_cache(B)
    target(rows[:, :-1], cache)
    blocks = {T: rows[:, -1:].expand(B, T).contiguous() for T in Ts}

    def passing(T):
        target(blocks[T], cache)
        cache.crop(L - 1)

    times = sd.lab.measure.median_times([lambda T=T: passing(T) for T in Ts], reps, context)
    return {str(T): t * 1e3 for T, t in zip(Ts, times)}


def real_runs(target, draft, prompts, recs, *, n_new: int, reps: int, bar) -> dict:
    """(task, draft label) -> measure_run's RunResult, greedy, for the 0.5B draft (k = 4) and prompt lookup (k = 6)."""
    out = {}
    for task in TASKS:
        decoding = Decoding(temperature=0.0)
        plain = decode_plain(target, prompts[task], n_new, decoding=decoding)
        for label, drafter, kind in (("0.5B", sd.lab.NeuralDraft(draft, "0.5B"), "model"),
                                     ("lookup", sd.lab.PromptLookupDraft(target.vocab, m=3), "lookup")):
            k = recs.run(task, kind).k
            out[task, label] = r = measure_run(target, drafter, prompts[task], k, plain=plain, decoding=decoding,
                                               reps=reps)
            bar.update()
            bar.set_postfix_str(f"{task} {label}: S {r.measured:.2f} (pred {r.predicted:.2f}), equal "
                                f"{r.equal_to_plain}")
    return out


def measure_column(target, draft, context, a, *, name: str, bar) -> CostColumn:
    """One column: every draft's terms, the passes at each B and the long passes, on target and draft as given."""
    static = isinstance(target, StaticLM)
    costs = draft_costs(target, drafts_by_depth(target, draft, name=name), context, reps=a.reps, bar=bar)
    pass_ms = {}
    for B in a.batches:
        pass_ms[str(B)] = pass_times(target, context, B=B, Ts=range(1, 10), reps=a.reps)
        bar.update()
        bar.set_postfix_str(f"B={B}: c_v(4; B) {pass_ms[str(B)]['5'] / pass_ms[str(B)]['1']:.2f}")
    long_Ts = [T for T in (16, 32, 64, 128, 256, 512, 1024, 2048) if T <= a.max_new]
    if long_Ts:
        pass_ms.setdefault("1", {}).update(pass_times(target, context, B=1, Ts=long_Ts, reps=max(1, a.reps // 4)))
    bar.update()
    first = costs[0]
    if static:
        path = "captured" if target.graphs == "cuda" else "minimal-eager"
        decoder = (f"sd.lab.StaticLM over {type(target.model.model).__name__}'s weights ({target.dtype}), graphs "
                   f"{target.graphs!r}, max_len {target.max_len}; sd.lab.time_terms")
    else:
        path = "eager"
        decoder = f"transformers {type(target.model).__name__} through sd.lab.HFCausalLM ({target.dtype}); " \
                  "sd.lab.time_terms"
    return CostColumn(path=path, run="measure_gpu", decoder=decoder, measured=True, context=context.numel(),
                      T_1_ms=first.T_1_ms, ks=first.ks, c_v=first.c_v, pass_ms=pass_ms, drafts=costs,
                      note=f"c_v and T_1 timed with the {name} draft; each draft's own c_v and T_1 beside it")


def machine(a, t0: float, load0) -> dict:
    import transformers

    on_gpu = a.device.startswith("cuda")
    return {"gpu": torch.cuda.get_device_name(a.device) if on_gpu else None, "device": a.device,
            "processor": platform.processor() or platform.machine(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cuda": torch.version.cuda, "loadavg_before": list(load0),
            "loadavg_after": list(os.getloadavg()),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": round(time.time() - t0, 1)}


def main(argv=None) -> int:
    a = _args(argv)
    if not a.device.startswith("cuda"):
        torch.set_num_threads(1)  # as the course's CPU clock runs everywhere
    t0, load0 = time.time(), os.getloadavg()
    target, draft, prompts, weights, shapes = load(a)
    cpu = sd.lab.recorded("measure-real")
    name = "0.5B" if weights != "tiny" else "draft"
    context = prompts["edit"] if prompts else torch.randint(0, target.vocab, (a.context,), device=a.device,
                                                            generator=torch.Generator(a.device).manual_seed(0))
    max_len = context.numel() + max(a.max_new, 9) + 16  # the longest pass after the context, and a margin
    pairs = {"eager": (target, draft), "static": (static_like(None, target, max_len=max_len),
                                                  static_like(None, draft, max_len=max_len))}
    per_column = len(drafts_by_depth(target, draft, name=name)) + len(a.batches) + 1
    bar = tqdm(total=2 * per_column + (4 * len(TASKS) if weights == "real" else 0), desc="measure-gpu", unit="part",
               file=sys.stdout)
    columns = [measure_column(t, d, context, a, name=name, bar=bar) for t, d in pairs.values()]
    preds = predictions(columns, cpu, model=name)
    if weights == "real":
        for column, (t, d) in zip(columns, pairs.values()):
            runs = real_runs(t, d, prompts, cpu, n_new=a.n_new, reps=max(1, a.reps // 4), bar=bar)
            preds = [dataclasses.replace(p, measured=runs[p.task, p.draft].measured,
                                         equal_to_plain=runs[p.task, p.draft].equal_to_plain)
                     if p.path == column.path and (p.task, p.draft) in runs else p for p in preds]
    bar.close()
    where = torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else f"the CPU ({a.device})"
    source = (f"Measured by benchmarks/measure_gpu.py on {where}, {weights} weights"
              + (" in the real pair's exact shapes" if weights == "random" else "")
              + "; E[N] of the predictions from the CPU recording (measure-real, real weights, greedy).")
    recording = {"schema": SCHEMAS["measure-gpu"], "source": source, "measured_by": "benchmarks/measure_gpu.py",
                 "machine": machine(a, t0, load0),
                 "method": {"terms": f"sd.lab.time_terms(target, drafter, context of {context.numel()} tokens, "
                                     f"ks=1..8, reps={a.reps}) per draft",
                            "pass_ms": f"one target pass over B x T new tokens after {context.numel() - 1} cached "
                                       f"positions, cache cropped back, median of {a.reps} round-robin calls",
                            "predictions": "S = E[N] / (k c_d(k) + c_v(k)) with E[N] of the CPU recording; one_layer "
                                           "and exit drafts at the model draft's E[N] (a what-if)"},
                 "weights": weights, "models": [dataclasses.asdict(s) for s in shapes],
                 "columns": [dataclasses.asdict(c) for c in columns],
                 "predictions": [dataclasses.asdict(p) for p in preds], "byte_pair": [], "byte_pair_batch": None,
                 "zero_coin": {}, "smoke": {}, "notes": {}, "tiny": a.tiny}
    path = a.json or OUT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recording, indent=1) + "\n")
    R = load_recording("measure-gpu", path)  # what was written reads back
    for column in R.columns:
        print(f"{column.path}: T_1 {column.T_1_ms:.3f} ms on {a.device} ({weights} weights; {column.decoder})")
        for d in column.drafts:
            print(f"{d.draft:>10} ({d.layers:>2} layers x {d.hidden:>4}): c_d(k) "
                  + " ".join(f"{c:.3f}" for c in d.c_d) + " | c_v(k) " + " ".join(f"{c:.2f}" for c in d.c_v))
        for B in column.batches:
            print(f"c_v(k; B={B:>2}) " + " ".join(f"{column.c_v_batch(k=k, B=B):.2f}" for k in KS))
        print("one pass of T new tokens, ms: " + ", ".join(f"{T}: {ms:.2f}" for T, ms in column.pass_ms["1"].items()))
    for p in R.predictions:
        print(f"{p.path:>13} {p.task:>5} {p.draft:>10} k={p.k}: E[N] {p.e_n:.2f} c_d {p.c_d:.3f} c_v {p.c_v:.2f} "
              f"-> S {p.predicted:.2f}"
              + (f" (CPU measured {p.cpu_measured:.2f})" if p.cpu_measured is not None else "")
              + (f", GPU measured {p.measured:.2f}, equal {p.equal_to_plain}" if p.measured is not None else ""))
    print(f"wrote {path} in {R.machine['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
