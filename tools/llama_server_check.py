"""llama-server against the kit: its teacher-forced logits against a float64 forward, audit_engine per mode, same_seed.

    ~/.cache/specdec/engines/venv/bin/python tools/llama_server_check.py            # after `make engines-env`
    ~/.cache/specdec/engines/venv/bin/python tools/llama_server_check.py --modes plain synthetic --samples 2000
    .venv/bin/python tools/llama_server_check.py --reference DIR                      # the first half alone

Two interpreters, two halves (as tools/engine_logits_check.py). The reference half runs in the locked `.venv`: it
writes DIR/target.gguf (gguf_model.tiny_llama_gguf, vocab 16, seed 0), DIR/draft.gguf (seed 1, head scaled by 0.5:
a flatter, different model) and DIR/reference.json (the target's float64 teacher-forced logits at every position of
a few contexts). The engine half (the engines venv, PYTHONPATH the repository) starts LlamaServerEngine, compares
its logits(context) (raw logits: the offset from the penalty probes included) with the reference, then runs
audit_engine on engines.engine_cases for each mode and same_seed for the sample-and-match ones, printing every time.
DIR is ${SPECDEC_CACHE:-~/.cache/specdec}/engines/check/llama-server unless --dir says otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = (1, 5, 6, 7, 5, 6, 7, 5, 6)  # BOS, then a repeated trigram: the n-gram lookup has something to draft
EOS, VOCAB = 2, 16
# float32 against float64 (tools/engine_logits_check.py: an F32 KV cache is within 2.6e-5); the offset comes from two
# probes through float32 log probabilities, so allow the same 2e-4
TOLERANCE = 2e-4
LONG = ("greedy", "top_k", "min_p", "top_p")  # few outcomes per token: 5 new tokens stay within the kit's power
SAME_SEED = ("eos", "length", "top_k x5", "top_p x5", "min_p x5")  # the cases in which the server drafts


def check_dir() -> Path:
    """${SPECDEC_CACHE:-~/.cache/specdec}/engines/check/llama-server."""
    return Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser() / "engines" / "check" / "llama-server"


def write_reference(folder: Path) -> None:
    """The locked env's half: target.gguf, draft.gguf and reference.json in folder."""
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))
    from specdec_lib.conformance.gguf_model import tiny_llama_gguf, write_gguf
    from specdec_lib.surface.tiny_model import TinyConfig, tiny_causal_lm

    folder.mkdir(parents=True, exist_ok=True)
    target = tiny_llama_gguf(folder / "target.gguf", vocab=VOCAB, seed=0)
    config = TinyConfig("llama", vocab=VOCAB, hidden=32, intermediate=64, heads=2, kv_heads=2, layers=2,
                        max_positions=256, tokens=(("bos_token_id", 1), ("eos_token_id", EOS)))
    write_gguf(tiny_causal_lm(config, seed=1, init="normal", head_scale=0.5), folder / "draft.gguf", bos_id=1,
               eos_id=EOS)
    g = torch.Generator().manual_seed(7)
    contexts = [list(PROMPT), [1] + torch.randint(0, VOCAB, (23,), generator=g).tolist(), [1, 2, 2, 3, 0, 15]]
    with torch.no_grad():
        rows = [target.model.double()(torch.tensor([c])).logits[0].tolist() for c in contexts]
    record = {"contexts": contexts, "logits": rows, "torch": torch.__version__,
              "transformers": transformers.__version__, "python": platform.python_version()}
    (folder / "reference.json").write_text(json.dumps(record))


def logits_check(engine, reference: dict) -> float:
    """The largest |engine.logits - float64 logits| over every prefix of the reference's contexts."""
    import torch

    worst = 0.0
    for context, rows in zip(reference["contexts"], reference["logits"]):
        for i in range(len(context)):
            got = engine.logits(tuple(context[:i + 1]))
            worst = max(worst, float((got - torch.tensor(rows[i], dtype=torch.float64)).abs().max()))
    return worst


def long_cases(cases, new_tokens: int) -> list:
    """The battery's few-outcome cases at new_tokens tokens: the server drafts at most n_predict - generated - 1 tokens
    (server-context.cpp L517-536), so two new tokens never speculate and three draft one; these let k drafts run."""
    from dataclasses import replace

    return [replace(c, name=f"{c.name} x{new_tokens}", settings=replace(c.settings, max_new_tokens=new_tokens))
            for c in cases if c.name in LONG]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", metavar="DIR", help="write the models and reference.json to DIR, then stop")
    parser.add_argument("--dir", default=None, help="the folder of the files (default: the cache's check folder)")
    parser.add_argument("--modes", nargs="*", default=None, help="the modes to audit (default: all)")
    parser.add_argument("--cases", nargs="*", default=None, help="the battery's cases to run (default: all)")
    parser.add_argument("--samples", type=int, default=None, help="samples per case (default: the kit's power)")
    parser.add_argument("--long", type=int, default=5, help="new tokens of the long cases (0: none)")
    parser.add_argument("--same-seed", type=int, default=300, help="seeds for the same-seed count (0: skip)")
    parser.add_argument("--slots", type=int, default=2, help="llama-server's -np and the client's threads")
    parser.add_argument("--threads", type=int, default=1, help="llama-server's -t")
    parser.add_argument("--draft-is-target", action="store_true", help="draft with the target's own GGUF (more "
                        "drafts accepted: the acceptance paths run often)")
    parser.add_argument("--logprobs", action="store_true", help="ask for the sampled token's probability too")
    args = parser.parse_args(argv)
    if args.reference:
        write_reference(Path(args.reference))
        return 0
    folder = Path(args.dir) if args.dir else check_dir()
    if not (folder / "reference.json").exists():
        subprocess.run([str(ROOT / ".venv" / "bin" / "python"), __file__, "--reference", str(folder)], check=True)
    sys.path.insert(0, str(ROOT))
    from specdec_lib.conformance.engine_llama_server import LlamaServerEngine
    from specdec_lib.conformance.engines import EngineChain, audit_engine, engine_cases, same_seed

    reference = json.loads((folder / "reference.json").read_text())
    draft = folder / ("target.gguf" if args.draft_is_target else "draft.gguf")
    with LlamaServerEngine(folder / "target.gguf", vocab=VOCAB, eos=EOS, draft=draft,
                           slots=args.slots, threads=args.threads, logprobs=args.logprobs) as engine:
        began = time.perf_counter()
        worst = logits_check(engine, reference)
        print(f"{engine.name} {engine.version}: plain server up in {engine.start_seconds['plain']:.2f} s; logits "
              f"against float64 ({reference['transformers']}): largest difference {worst:.2e} (tolerance "
              f"{TOLERANCE:g}), {time.perf_counter() - began:.1f} s", flush=True)
        cases = engine_cases(EngineChain("llama-server target", engine), prompt=PROMPT, eos=EOS)
        if args.long:
            cases += long_cases(cases, args.long)
        cases = [c for c in cases if args.cases is None or c.name in args.cases]
        failed = worst > TOLERANCE
        for mode in args.modes or engine.modes:
            began, requests, seconds = time.perf_counter(), engine.requests, engine.request_seconds
            report, left = audit_engine(engine, mode, cases=cases, num_samples=args.samples)
            rate = (engine.requests - requests) / max(engine.request_seconds - seconds, 1e-9)
            print(report, flush=True)
            print(f"-- {mode}: {'PASS' if report.passed else 'FAIL'} in {time.perf_counter() - began:.1f} s (server "
                  f"start {engine.start_seconds.get(mode, 0):.2f} s), {rate:.0f} generations/s; left out: {left}",
                  flush=True)
            for case in report.cases:
                print(f"   {mode} | {case.name} | TV {case.tv:.4f} | threshold {case.threshold:.4f} | n "
                      f"{case.num_samples} | mismatches {case.mismatches} | {'pass' if case.passed else 'FAIL'}",
                      flush=True)
            failed |= (mode == "synthetic") == report.passed
            if mode in ("draft", "ngram") and args.same_seed:
                for case in [c for c in cases if c.name in SAME_SEED]:
                    same = same_seed(engine, mode, case, n=args.same_seed)
                    print(f"   same seed {mode} | {case.name}: {same.equal} of {same.n} equal; first difference "
                          f"{same.first_difference}")
                    failed |= not same.all_equal
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
