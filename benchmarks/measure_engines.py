"""`make measure-engines`: the CPU anchor for speed. The real pair through llama.cpp's llama-server on the three tasks
of `make measure-real`, the same prompts (token ids), 64 greedy tokens, one thread: plain, the 0.5B draft
(draft-simple, k = 4 every round) and n-gram lookup (ngram-simple, the last 3 tokens, k = 6), as measure-real runs the
lab's model draft and prompt lookup. Each weights file runs twice: as shipped (Q4_K_M, what a CPU user runs) and
dequantised to F32 by llama.cpp's own llama-quantize (the weights the lab's float32 loop runs), which separates the
engine from the quantisation. The terms of the cost equation come from the server (lab/engine_speed.py).

Runs in the engines' environment (`make engines-env`), the repository on PYTHONPATH, with the real pair located by
`make real-pair`; prompts are tokenised there with the pair's tokenizer (transformers). Repeats are whole passes over
every mode, so a slow spell hits all of them. Writes the "measure-engines" recording (default
specdec_lib/data/engine_speed_reference.json) and reads it back through the lab's one reader.

    python benchmarks/measure_engines.py [--weights Q4_K_M F32] [--repeats 3] [--json FILE]
    python benchmarks/measure_engines.py --tiny --json /tmp/x.json   # tiny GGUFs written here: the code path, seconds
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

from tqdm import tqdm

from specdec_lib.conformance.engine_llama_server import LlamaServerEngine, server_command
from specdec_lib.conformance.gguf_model import hf_name
from specdec_lib.lab.engine_speed import ServerPass, SpeedTerms, speed_run
from specdec_lib.lab.recordings import REFERENCE_PATHS, SCHEMAS, load_recording

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
from real_files import file_record  # noqa: E402  (make real-pair's file records: name, size, sha256)
from real_tasks import TASKS, task_prompt, tiny_task_prompt  # noqa: E402  (beside this script)

MODES = {"plain": (0, 1), "draft": (4, 1), "ngram": (6, 3)}  # mode: (k, ngram_n): measure_real's KS, lookup m = 3
CURVE = range(1, 8)  # c_v(k) for these k (a (k+1)-token pass); k-bar of every mode lies within
CTX = 1024  # context per slot: the longest prompt (324) + 64 new tokens + a draft, with room
ENGINES = pathlib.Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser() / "engines"


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", nargs="+", default=["Q4_K_M", "F32"], choices=["Q4_K_M", "F32"])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--repeats", type=int, default=3, help="whole passes over every mode (default 3)")
    ap.add_argument("--reps", type=int, default=3, help="timings per c_v(k) point, the median kept (default 3)")
    ap.add_argument("--n-new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tiny", action="store_true", help="tiny GGUFs written here instead of the real pair")
    ap.add_argument("--json", type=pathlib.Path, default=REFERENCE_PATHS["measure-engines"])
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.reps < 1 or a.n_new < 8:
        ap.error("--repeats and --reps must be >= 1 and --n-new >= 8")
    return a


def _f32(gguf: pathlib.Path) -> pathlib.Path:
    """gguf dequantised to F32 by llama-quantize (built beside llama-server once), cached in the engines' models."""
    out = ENGINES / "models" / "real-pair-f32" / gguf.name.replace(".gguf", "-f32.gguf")
    if not out.exists():
        build = ENGINES / "llama-server-build"
        quantize = build / "bin" / "llama-quantize"
        if not quantize.exists():
            subprocess.run(["cmake", "--build", str(build), "--target", "llama-quantize", "-j", "2"], check=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(quantize), "--allow-requantize", str(gguf), str(out), "F32", "1"], check=True,
                       capture_output=True)
    return out


def same_weights(gguf: pathlib.Path, folder: pathlib.Path) -> str:
    """Whether an F32 GGUF holds the lab's float32 weights bit for bit: every tensor against the safetensors of
    `make real-pair` (transformers' dequantisation of the same Q4_K_M), matched by name (gguf_model.hf_name)."""
    import numpy as np
    from gguf import GGUFReader
    from safetensors import safe_open

    equal = total = 0
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        keys = set(f.keys())
        for t in GGUFReader(str(gguf)).tensors:
            name = hf_name(t.name)
            if name == "lm_head.weight" and name not in keys:  # tied to the embedding
                name = "model.embed_tokens.weight"
            y = f.get_tensor(name)
            total += 1
            equal += bool(np.array_equal(np.asarray(t.data).reshape(y.shape), y))
    return f"{equal} of {total} tensors bit-equal to the lab's float32 weights"


def real_pair(weights: str):
    """(target GGUF, draft GGUF, their manifests as dicts) for weights, from `make real-pair`'s cache."""
    from specdec_lib.lab.real_pair import PAIR, locate, read_manifest

    files, manifests = {}, []
    for role in ("target", "draft"):
        spec = PAIR[role]
        folder = locate(spec)[1]
        gguf, m = folder / spec.gguf_file, read_manifest(folder)
        if not gguf.exists() or m is None:
            raise FileNotFoundError(f"{role}: no {spec.gguf_file} and manifest in {folder}: `make real-pair`")
        if weights == "F32":
            gguf = _f32(gguf)
            same = same_weights(gguf, locate(spec)[0])
            m = dict(m, source=f"{m['source']}; dequantised to F32 by llama-quantize --allow-requantize: {same}",
                     files=[file_record(gguf, progress=False)])
        else:
            m = dict(m, files=[f for f in m["files"] if f["path"].endswith(".gguf")])
        files[role] = gguf
        manifests.append(dict(m, role=role, name=f"{m['name']} {weights}"))
    return files["target"], files["draft"], manifests


def tiny_pair(root: pathlib.Path):
    """Two tiny llamas written as GGUFs (the code path of the real run, in seconds)."""
    from specdec_lib.conformance.gguf_model import tiny_llama_gguf

    target, draft = (tiny_llama_gguf(root / f"{r}.gguf", vocab=64, seed=s, max_positions=CTX)
                     for r, s in (("target", 0), ("draft", 1)))
    manifests = [{"role": role, "name": f"tiny llama {role}", "source": "conformance.gguf_model.tiny_llama_gguf",
                  "licence": "the project's", "header": {}, "params": 0,
                  "files": [file_record(g.path, progress=False)]}
                 for role, g in (("target", target), ("draft", draft))]
    return target.path, draft.path, manifests


def _body(prompt: list[int], n: int) -> dict:
    """A greedy /completion of exactly n tokens (EOS ignored), the prompt's cache kept between requests."""
    return {"prompt": prompt, "n_predict": n, "temperature": 0.0, "top_k": 1, "seed": 0, "cache_prompt": True,
            "ignore_eos": True, "return_tokens": True, "response_fields": ["tokens", "timings"]}


def generate(server, prompt: list[int], n: int) -> tuple[ServerPass, list[int]]:
    """One timed generation after a one-token request that leaves the prompt cached (its pass is not timed)."""
    server.post("/completion", _body(prompt, 1))
    before = server.metrics()
    answer = server.post("/completion", _body(prompt, n))
    after = server.metrics()
    t = answer["timings"]
    verified = after.get("spec_decode_num_drafts_total", 0) - before.get("spec_decode_num_drafts_total", 0)
    return ServerPass(ms=t["predicted_ms"], n=t["predicted_n"], drafted=t.get("draft_n", 0),
                      accepted=t.get("draft_n_accepted", 0), verified=int(verified)), answer["tokens"]


def divergence(plain: list[int], repeats: list[list[int]]) -> int | None:
    """The first position where any repeat's tokens leave plain's (None: every repeat equals plain's)."""
    found = [next((i for i, (a, b) in enumerate(zip(plain, r)) if a != b), None if len(r) == len(plain)
                  else min(len(r), len(plain))) for r in repeats]
    return min((i for i in found if i is not None), default=None)


def prefill_ms(server, prompt: list[int], extra: list[int], reps: int) -> float:
    """Median milliseconds of a pass over extra on top of the cached prompt (the server's prompt timing)."""
    times = []
    for _ in range(reps):
        server.post("/completion", _body(prompt, 1))  # the cache back to the prompt
        t = server.post("/completion", _body(prompt + extra, 1))["timings"]
        if t["prompt_n"] != len(extra):
            raise RuntimeError(f"the server scored {t['prompt_n']} new prompt tokens, not {len(extra)}")
        times.append(t["prompt_ms"])
    return statistics.median(times)


def measure(weights, target, draft, prompts, a, bar) -> tuple[list, list, str]:
    """The terms and runs of one weights, every mode on every task in a.repeats whole passes; the server's version."""
    vocab = 64 if a.tiny else 151936  # vocab and eos only matter to the kit's audit (unsupported, logits), not here
    engine = LlamaServerEngine(target, vocab=vocab, eos=2, draft=draft, slots=1, threads=a.threads, ctx=CTX,
                               ngram_n=MODES["ngram"][1])
    drafter = LlamaServerEngine(draft, vocab=vocab, eos=2, slots=1, threads=a.threads, ctx=CTX)
    passes, tokens = {}, {}
    try:
        for rep in range(a.repeats):
            for task in a.tasks:
                for mode, (k, _) in MODES.items():
                    p, toks = generate(engine.server(mode, k=max(k, 1)), prompts[task], a.n_new)
                    passes.setdefault((task, mode), []).append(p)
                    tokens.setdefault((task, mode), []).append(toks)
                    bar.update()
                    bar.set_postfix_str(f"{weights} pass {rep + 1} {task} {mode}: {p.ms / p.steps:.0f} ms/token")
        terms, runs = [], []
        for task in a.tasks:
            plain = passes[task, "plain"]
            T_1 = statistics.median(p.ms / p.steps for p in plain)
            draft_ms = statistics.median(generate(drafter.server("plain"), prompts[task], a.n_new)[0].ms / (a.n_new - 1)
                                         for _ in range(a.repeats))
            cont = tokens[task, "plain"][0]
            c_v, c_v_d = ([prefill_ms(e.server("plain"), prompts[task], cont[:k + 1], a.reps) / step for k in CURVE]
                          for e, step in ((engine, T_1), (drafter, draft_ms)))
            bar.update()
            t = SpeedTerms(weights=weights, task=task, T_1_ms=T_1, draft_ms=draft_ms, c_d=draft_ms / T_1, c_v=c_v,
                           c_v_d=c_v_d)
            terms.append(t)
            for mode, (k, _) in MODES.items():
                runs.append(speed_run(weights=weights, task=task, mode=mode, k=k, passes=passes[task, mode],
                                      plain=plain, terms=t,
                                      first_divergence=divergence(tokens[task, "plain"][0], tokens[task, mode])))
    finally:
        engine.close()
        drafter.close()
    return terms, runs, engine.version


def main(argv=None) -> int:
    a = _args(argv)
    t0, load0 = time.time(), os.getloadavg()
    if a.tiny:
        import tempfile

        root = pathlib.Path(tempfile.mkdtemp(prefix="measure-engines-"))
        pairs = {"F32": tiny_pair(root)}  # the tiny GGUFs hold F32 weights
        prompts = {t: tiny_task_prompt(t, 64, length=48).tolist() for t in a.tasks}
    else:
        from transformers import AutoTokenizer

        from specdec_lib.lab.real_pair import PAIR, locate

        pairs = {w: real_pair(w) for w in a.weights}
        tokenizer = AutoTokenizer.from_pretrained(locate(PAIR["target"])[1])
        prompts = {t: task_prompt(t, tokenizer).tolist() for t in a.tasks}
    terms, runs, models = [], [], []
    total = len(pairs) * len(a.tasks) * (a.repeats * len(MODES) + 1)
    with tqdm(total=total, desc="llama-server", unit="run") as bar:
        for weights, (target, draft, manifests) in pairs.items():
            t, r, version = measure(weights, target, draft, prompts, a, bar)
            terms += t
            runs += r
            models += manifests
    command = server_command("llama-server", "TARGET.gguf", "plain", port=8080, threads=a.threads, ctx=CTX)[1:]
    machine = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "threads": a.threads, "loadavg_before": list(load0),
               "loadavg_after": list(os.getloadavg()), "date": datetime.datetime.now(datetime.UTC)
               .strftime("%Y-%m-%d %H:%M UTC"), "seconds": round(time.time() - t0, 1)}
    recording = {"schema": SCHEMAS["measure-engines"], "source": "benchmarks/measure_engines.py"
                 + (" --tiny" if a.tiny else ""), "machine": machine,
                 "engine": {"name": "llama-server", "version": version, "command": " ".join(command)},
                 "models": models, "prompts": {t: len(p) for t, p in prompts.items()}, "n_new": a.n_new,
                 "terms": [dataclasses.asdict(t) for t in terms], "runs": [dataclasses.asdict(r) for r in runs],
                 "notes": {"modes": "plain; draft: -md DRAFT --spec-type draft-simple --spec-draft-n-max 4 "
                                    "--spec-draft-p-min 0 (4 drafted every round); ngram: --spec-type ngram-simple "
                                    "--spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 6",
                           "c_v": "a (k+1)-token pass over the cached prompt, the server's prompt_ms: one row of "
                                  "logits where a verification scores k + 1 (a floor on the verifier); c_v_d the "
                                  "same on the draft model over its own step",
                           "overhead": "draft-simple re-evaluates each verified batch on the draft "
                                       "(tools/server/server-context.cpp L4069-4076): O = c_d c_v_d(k) per round"}}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(recording, indent=1) + "\n")
    rec = load_recording("measure-engines", a.json)  # the lab's one reader: the file must pass its checks
    for r in rec.runs:
        t = rec.terms_of(r.weights, r.task)
        print(f"{r.weights:7} {r.task:6} {r.mode:6} {r.ms_per_token:8.1f} ms/token  speedup {r.speedup:5.2f} "
              f"[{r.speedup_range[0]:.2f}, {r.speedup_range[1]:.2f}]  predicted {r.predicted:5.2f}  E[N] {r.e_n:4.2f}"
              f"  c_d {r.c_d:.3f}  c_v(4) {t.c_v[3]:.2f}  O {r.overhead:.2f}  first divergence {r.first_divergence}")
    print(f"wrote {a.json} in {machine['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
