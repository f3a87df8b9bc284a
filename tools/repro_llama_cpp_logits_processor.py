"""Does llama-cpp-python show drafted, unaccepted tokens to logits_processor and stopping_criteria? (issue 40, 1)

    PYTHONPATH=. ~/.cache/specdec/engines/venv/bin/python tools/repro_llama_cpp_logits_processor.py [--seeds 300]

Runs in the engines venv (`make engines-env`) on the project's tiny GGUF (conformance.engine_llama_cpp.tiny_gguf,
written to a temporary folder: no download) with a prompt of repeated trigrams, so `LlamaPromptLookupDecoding`
drafts often. Each seed generates NEW tokens with `Llama.generate` (temperature 1, no truncation), once plain and
once with prompt lookup; with a sample-and-match draft both give the same tokens for the same seed, so every count
below should be equal in the two modes. Counted:
  1. logits_processor calls whose input_ids are not the text before the token being sampled (prompt + the tokens
     generated so far), and calls that see ids past it (drafted tokens);
  2. what that does to processors that read input_ids: one that bans the previous token (scores[input_ids[-1]] =
     -inf): generations with an immediate repeat; the library's own MinTokensLogitsProcessor(NEW, eos) (what
     min_tokens uses): generations with an EOS among the first NEW tokens;
  3. stopping_criteria calls whose input_ids are not the text before the token just sampled, and whose logits are
     the row that produced it, or row 0 (the logits after the prompt's first token), each within 1e-4 of the
     teacher's row (F32 rows of one text differ by at most 7e-6 between batch shapes);
  4. create_completion's final stopping_criteria call (after the loop): input_ids longer than prompt + every
     completion token (ids the completion never emitted).
Exit 1 when the lookup counts differ from plain's in 1 or 2 (the bug shows), else 0.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

PROMPT = [1, 4, 6, 5, 4, 6, 5, 4, 6]  # engine_llama_cpp.PROMPT
NEW = 4  # new tokens per generation
ROW_TOL = 1e-4  # a stopping_criteria row is "the right one" within this (same-row differences are below 7e-6)
SAMPLING = {"temp": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}


def teacher_rows(path: str):
    """row(context) -> the plain engine's logits after context (one batch, F32 cache)."""
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=path, n_ctx=64, type_k=0, type_v=0, n_threads=1, logits_all=True, verbose=False)
    cache = {}

    def row(context):
        key = tuple(context)
        if key not in cache:
            llm.reset()
            llm.eval(list(key))
            cache[key] = np.array(llm.scores[len(key) - 1], copy=True)
        return cache[key]

    return row


def count_generate(llm, seeds, row) -> Counter:
    """Counts 1-3 over seeds for one Llama (plain or with a draft model)."""
    import numpy as np
    from llama_cpp import LogitsProcessorList, MinTokensLogitsProcessor, StoppingCriteriaList

    c = Counter()
    eos = llm.token_eos()
    seen, stops = [], []  # what the processor and the stopping criterion were given, per generation

    def record(input_ids, scores):
        seen.append(tuple(int(t) for t in input_ids))
        return scores

    def stop(input_ids, logits):
        stops.append((tuple(int(t) for t in input_ids), np.array(logits, copy=True)))
        return False

    for seed in seeds:
        for run in ("record", "ban", "min_tokens"):
            processor = {"record": record, "ban": ban_previous, "min_tokens": MinTokensLogitsProcessor(NEW, eos)}[run]
            seen.clear()
            stops.clear()
            llm.set_seed(seed)
            out = []
            stream = llm.generate(PROMPT, logits_processor=LogitsProcessorList([processor]),
                                  stopping_criteria=StoppingCriteriaList([stop]), **SAMPLING)
            for token in stream:
                out.append(int(token))
                if len(out) == NEW:
                    break
            stream.close()
            text = tuple(PROMPT + out)
            c[f"generations ({run})"] += 1
            if run == "ban":
                c["ban: an immediate repeat"] += any(text[i] == text[i - 1] for i in range(len(PROMPT), len(text)))
            elif run == "min_tokens":
                c[f"min_tokens {NEW}: EOS among the first {NEW}"] += eos in out
            else:
                for i, ids in enumerate(seen[:len(out)]):  # call i sampled token i, after text[:len(PROMPT) + i]
                    before = text[:len(PROMPT) + i]
                    c["processor calls"] += 1
                    c["processor: ids not the text before"] += ids != before
                    c["processor: ids past it (drafts)"] += len(ids) > len(before)
                for i, (ids, logits) in enumerate(stops[:len(out)]):
                    before = text[:len(PROMPT) + i]
                    c["stopping calls"] += 1
                    c["stopping: ids not the text before"] += ids != before
                    c["stopping: logits the token's row"] += bool(np.abs(logits - row(before)).max() <= ROW_TOL)
                    c["stopping: logits row 0 (after BOS)"] += bool(np.abs(logits - row(PROMPT[:1])).max() <= ROW_TOL)
    return c


def ban_previous(input_ids, scores):
    """A processor that forbids repeating the previous token."""
    scores = scores.copy()
    scores[int(input_ids[-1])] = -float("inf")
    return scores


def count_final_stop(llm, seeds) -> Counter:
    """Count 4: create_completion's last stopping_criteria call, against prompt + its completion tokens."""
    from llama_cpp import StoppingCriteriaList

    c = Counter()
    calls = []  # len(input_ids) of each stopping_criteria call
    final = StoppingCriteriaList([lambda ids, logits: calls.append(len(ids)) or False])
    for seed in seeds:
        calls.clear()
        out = llm.create_completion(PROMPT, max_tokens=NEW, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                    seed=seed, stopping_criteria=final)
        emitted = len(PROMPT) + out["usage"]["completion_tokens"]
        c["completions"] += 1
        c["final call: ids past the completion"] += calls[-1] > emitted
    return c


BUG_COUNTS = ("processor: ids past it (drafts)", "ban: an immediate repeat",
              f"min_tokens {NEW}: EOS among the first {NEW}")  # the counts that differ between modes when it shows


def reproduce(seeds: int = 300) -> tuple[str, dict[str, Counter]]:
    """(llama-cpp-python's version, {"plain": counts, "prompt lookup": counts}) over seeds 0 .. seeds - 1."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    from specdec_lib.conformance.engine_llama_cpp import tiny_gguf

    with tempfile.TemporaryDirectory() as folder:
        path = str(tiny_gguf(Path(folder) / "tiny.gguf").path)
        common = {"model_path": path, "n_ctx": 64, "type_k": 0, "type_v": 0, "n_threads": 1, "logits_all": True,
                  "verbose": False}
        row = teacher_rows(path)
        engines = {"plain": llama_cpp.Llama(**common), "prompt lookup": llama_cpp.Llama(
            draft_model=LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3), **common)}
        counts = {}
        for name, llm in engines.items():  # Counter.update keeps the zero counts (+ would drop them)
            counts[name] = count_generate(llm, range(seeds), row)
            counts[name].update(count_final_stop(llm, range(seeds)))
            llm.close()
    return llama_cpp.__version__, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300)
    args = parser.parse_args(argv)
    version, counts = reproduce(args.seeds)
    print(f"llama-cpp-python {version}, prompt {PROMPT}, {NEW} new tokens, seeds 0..{args.seeds - 1}")
    keys = list(dict.fromkeys(k for c in counts.values() for k in c))
    print(f"  {'':45} {'plain':>8} {'lookup':>8}")
    for key in keys:
        print(f"  {key:45} {counts['plain'][key]:8d} {counts['prompt lookup'][key]:8d}")
    differ = [k for k in BUG_COUNTS if counts["plain"][k] != counts["prompt lookup"][k]]
    print("the bug shows: " + (", ".join(differ) if differ else "no"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
