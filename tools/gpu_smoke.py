"""make gpu-smoke: every lab decoder on this machine's accelerator (CUDA when torch sees one, else the CPU).

Each check builds its models on the device and decodes there: greedy output must equal plain greedy decoding (tiny
random transformers models, tiny lab models and the lab's trained byte pair), and a sampled decoder's law must sit
within sd.tv_noise_bound of the exact law by teacher forcing (sd.lab.exact_continuations). One line per check (name,
device, result, seconds); the exit status is 1 if any check fails. A smoke test, not a clock: it passes in well under
a minute on the 2-core CPU, so CI runs it there, and a session lent a GPU runs the same checks on CUDA.

    .venv/bin/python tools/gpu_smoke.py [--device auto|cpu|cuda] [--samples N] [--only SUBSTRING]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

import specdec_lib as sd
from specdec_lib.lab.corpus import corpus
from specdec_lib.lab.eagle import EagleDraft, eagle_config, eagle_pair
from specdec_lib.lab.generation import Decoding, exact_continuations, generate_plain, generate_speculative
from specdec_lib.lab.hf_causal_lm import early_exit_lm, tiny_hf_model
from specdec_lib.lab.lookahead import LookaheadDraft
from specdec_lib.lab.medusa import MedusaHeads, medusa_pair
from specdec_lib.lab.ngram import build_ngram
from specdec_lib.lab.static_lm import StaticLM
from specdec_lib.lab.transformer import TinyCausalLM
from specdec_lib.lab.tree_decoding import generate_tree
from specdec_lib.markov.chain import sequence_tv

DEVICES = ("auto", "cpu", "cuda")
SAMPLES = 1000  # decodes per law check (--samples)
V, HORIZON = 4, 2  # a law check's vocabulary and horizon: V**HORIZON = 16 continuations
LAW_PROMPT = (1, 2, 3, 1)
GREEDY_PROMPT, GREEDY_NEW = (1, 2, 3, 1, 2, 3, 1, 2, 5, 6), 20
BYTE_NEW = 24  # tokens per greedy decode of the byte pair


@dataclass(frozen=True)
class Check:
    """One smoke check: its name, the decoder it runs (DECODERS), and run(device, samples) -> a short detail."""

    name: str
    decoder: str
    run: Callable[[torch.device, int], str]


# --- the models, built on the device ----------------------------------------------------------------------------------
def _lab(device, *, vocab=16, layers=2, seed=5):
    return TinyCausalLM(vocab=vocab, n_layer=layers, seed=seed).to(device)


def _hf(device, arch, *, vocab=16, layers=3, seed=1):
    lm = tiny_hf_model(arch, vocab=vocab, seed=seed, layers=layers)
    lm.model.to(device)
    return lm


def _static(device, *, vocab=16):
    """A qwen2 target and a llama draft, each a StaticLM (graphs "auto": captured on CUDA, eager on the CPU)."""
    return (StaticLM(_hf(device, "qwen2", vocab=vocab), max_len=96),
            StaticLM(_hf(device, "llama", vocab=vocab, layers=1, seed=2), max_len=96))


def _heads(model, *, seed=0, scale=0.5):
    """Medusa heads (on the CPU, as model) moved off their init by seeded noise: each head's law is not the target's."""
    heads = MedusaHeads(model, 3)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return heads


def _medusa(device, *, vocab=16):
    model = _lab("cpu", vocab=vocab)
    heads = _heads(model)
    return medusa_pair(model.to(device), heads.to(device))


def _eagle(device, *, vocab=16):
    model = _lab(device, vocab=vocab)
    return eagle_pair(model, EagleDraft(eagle_config(model.config), seed=3, init_std=0.1).to(device))


def _plain_model(target):
    """The model a pair's target scores with (a FeatureTarget's or an EarlyExitTarget's own)."""
    return target.model if isinstance(target, (sd.lab.FeatureTarget, sd.lab.EarlyExitTarget)) else target


# --- greedy: output equal to plain greedy decoding -------------------------------------------------------------------
def _same_as_plain(target, drafter, prompt, n_new, *, k=None, widths=None, tree=False, rule="onehot_sequential"):
    plain = generate_plain(_plain_model(target), prompt, n_new)
    if tree:
        out = generate_tree(target, drafter, prompt, n_new, widths, rule=rule)
    else:
        out = generate_speculative(target, drafter, prompt, n_new, k)
    if not torch.equal(out, plain):
        raise AssertionError(f"greedy output differs from plain greedy decoding at token "
                             f"{int((out != plain).nonzero()[0])} of {n_new}")
    return f"{n_new} tokens equal to plain greedy"


def _tiny_greedy(build, *, k=3, widths=None, tree=False):
    def run(device, samples):
        target, drafter = build(device)
        prompt = torch.tensor(GREEDY_PROMPT, device=device)
        return _same_as_plain(target, drafter, prompt, GREEDY_NEW, k=k, widths=widths, tree=tree)
    return run


def _byte_greedy(build, *, k=4, widths=None, tree=False):
    def run(device, samples):
        target, drafter = build(device)
        prompts = sd.lab.corpus_prompts(2, 24, seed=3)
        for p in prompts:
            _same_as_plain(target, drafter, p.to(device), BYTE_NEW, k=k, widths=widths, tree=tree)
        return f"{len(prompts)} prompts x {BYTE_NEW} tokens equal to plain greedy"
    return run


def _byte_pair(device):
    return sd.lab.load_pair(device)


def _byte_medusa(device):
    return medusa_pair(sd.lab.load_target(device=device), sd.lab.load_heads("medusa", device=device))


def _byte_eagle(device):
    return eagle_pair(sd.lab.load_target(device=device), sd.lab.load_heads("eagle", device=device))


# --- sampled: the empirical law against the exact one ----------------------------------------------------------------
def _law(build, decode):
    """A law check: samples seeded decodes of HORIZON tokens against exact_continuations of the plain model."""
    def run(device, samples):
        target, drafter = build(device)
        prompt = torch.tensor(LAW_PROMPT, device=device)
        exact = exact_continuations(_plain_model(target), prompt, HORIZON).cpu()  # (V**HORIZON,)
        g = torch.Generator(device=device).manual_seed(0)
        decoding = Decoding(1.0, None, g)
        runs = torch.stack([decode(target, drafter, prompt, decoding).cpu() for _ in range(samples)])  # (n, h)
        tv = sequence_tv(runs, exact.reshape((V,) * HORIZON))
        # an exact decoder's empirical TV exceeds tv_noise_bound with probability below 1e-6 (McDiarmid, n = samples)
        bound = sd.tv_noise_bound(exact, samples)
        if tv >= bound:
            raise AssertionError(f"TV {tv:.3f} to the exact law >= {bound:.3f} ({samples} decodes)")
        return f"TV {tv:.3f} < {bound:.3f} ({samples} decodes)"
    return run


def _chain(k, verifier="token"):
    def decode(target, drafter, prompt, decoding):
        decoding = Decoding(decoding.temperature, decoding.top_k, decoding.generator, verifier)
        return generate_speculative(target, drafter, prompt, HORIZON, k, decoding=decoding)
    return decode


def _tree(widths, rule):
    def decode(target, drafter, prompt, decoding):
        return generate_tree(target, drafter, prompt, HORIZON, widths, rule=rule, decoding=decoding)
    return decode


def _table(device, *, vocab=16):
    data = torch.tensor(GREEDY_PROMPT * 3 + (4, 4, 7), device=device) % vocab
    return _lab(device, vocab=vocab), sd.lab.TableDraft(build_ngram(data, vocab, 3))


def _byte_table(device):
    target, _ = sd.lab.load_pair(device)
    return target, sd.lab.TableDraft(build_ngram(corpus("train")[:20_000].to(device), 256, 4))


DECODERS = ("model draft", "prompt lookup", "n-gram table", "token rule", "block verification", "draft tree",
            "lookahead", "early exit, shared cache", "early exit, own cache", "medusa", "eagle", "static cache")

CHECKS = (
    # tiny random models: greedy
    Check("model draft, lab", "model draft", _tiny_greedy(lambda d: (_lab(d), _lab(d, layers=1, seed=6)))),
    Check("model draft, qwen2 <- llama", "model draft",
          _tiny_greedy(lambda d: (_hf(d, "qwen2"), _hf(d, "llama", layers=1, seed=2)))),
    Check("prompt lookup, qwen2", "prompt lookup",
          _tiny_greedy(lambda d: (_hf(d, "qwen2"), sd.lab.PromptLookupDraft(16)))),
    Check("n-gram table, lab", "n-gram table", _tiny_greedy(_table)),
    Check("early exit, shared cache, lab", "early exit, shared cache",
          _tiny_greedy(lambda d: sd.lab.early_exit_pair(_lab(d), 1))),
    Check("early exit, shared cache, llama", "early exit, shared cache",
          _tiny_greedy(lambda d: sd.lab.early_exit_pair(_hf(d, "llama"), 2))),
    Check("early exit, own cache, qwen2", "early exit, own cache",
          _tiny_greedy(lambda d: (lambda lm: (lm, early_exit_lm(lm, 1)))(_hf(d, "qwen2")))),
    Check("medusa, lab", "medusa", _tiny_greedy(_medusa)),
    Check("medusa draft tree, lab", "draft tree", _tiny_greedy(_medusa, widths=(2, 2, 1), tree=True)),
    Check("eagle, lab", "eagle", _tiny_greedy(_eagle)),
    Check("lookahead, lab", "lookahead",
          _tiny_greedy(lambda d: (_lab(d), LookaheadDraft(16, window=3, ngram=3, guesses=2)), tree=True)),
    Check("lookahead, qwen2", "lookahead",
          _tiny_greedy(lambda d: (_hf(d, "qwen2"), LookaheadDraft(16, window=3, ngram=3, guesses=2)), tree=True)),
    Check("static cache: model draft, qwen2 <- llama", "static cache", _tiny_greedy(_static)),
    Check("static cache: the target's first layer, qwen2", "static cache",
          _tiny_greedy(lambda d: (lambda lm: (StaticLM(lm, max_len=96), StaticLM(lm, max_len=96, layers=1)))(
              _hf(d, "qwen2")))),
    Check("static cache: lookahead, qwen2", "static cache",
          _tiny_greedy(lambda d: (StaticLM(_hf(d, "qwen2"), max_len=96), LookaheadDraft(16, window=3, ngram=3,
                                                                                          guesses=2)), tree=True)),
    # the byte pair (committed weights): greedy
    Check("byte pair: model draft", "model draft", _byte_greedy(_byte_pair)),
    Check("byte pair: prompt lookup", "prompt lookup",
          _byte_greedy(lambda d: (sd.lab.load_target(device=d), sd.lab.PromptLookupDraft(256, m=3)))),
    Check("byte pair: n-gram table", "n-gram table", _byte_greedy(_byte_table)),
    Check("byte pair: early exit, shared cache", "early exit, shared cache",
          _byte_greedy(lambda d: sd.lab.early_exit_pair(sd.lab.load_target("target_ee", device=d), 2))),
    Check("byte pair: medusa", "medusa", _byte_greedy(_byte_medusa, k=3)),
    Check("byte pair: medusa draft tree", "draft tree", _byte_greedy(_byte_medusa, widths=(3, 2, 1), tree=True)),
    Check("byte pair: eagle", "eagle", _byte_greedy(_byte_eagle)),
    Check("byte pair: static cache, model draft", "static cache",
          _byte_greedy(lambda d: tuple(StaticLM(m, max_len=m.max_len) for m in sd.lab.load_pair(d)))),
    Check("byte pair: lookahead", "lookahead",
          _byte_greedy(lambda d: (sd.lab.load_target(device=d), LookaheadDraft(256)), tree=True)),
    # sampled laws by teacher forcing (tiny models, V = 4)
    Check("law: token rule, model draft, lab", "token rule",
          _law(lambda d: (_lab(d, vocab=V), _lab(d, vocab=V, layers=1, seed=6)), _chain(2))),
    Check("law: block verification, model draft, lab", "block verification",
          _law(lambda d: (_lab(d, vocab=V), _lab(d, vocab=V, layers=1, seed=6)), _chain(2, "block"))),
    Check("law: prompt lookup, qwen2", "prompt lookup",
          _law(lambda d: (_hf(d, "qwen2", vocab=V), sd.lab.PromptLookupDraft(V)), _chain(2))),
    Check("law: early exit, shared cache, llama, block", "early exit, shared cache",
          _law(lambda d: sd.lab.early_exit_pair(_hf(d, "llama", vocab=V), 2), _chain(2, "block"))),
    Check("law: static cache, model draft, qwen2 <- llama, block", "static cache",
          _law(lambda d: _static(d, vocab=V), _chain(2, "block"))),
    Check("law: medusa draft tree (mss), lab", "draft tree", _law(lambda d: _medusa(d, vocab=V), _tree((2, 2), "mss"))),
    Check("law: eagle, lab", "eagle", _law(lambda d: _eagle(d, vocab=V), _chain(2))),
    Check("law: lookahead (one-hot), qwen2", "lookahead",
          _law(lambda d: (_hf(d, "qwen2", vocab=V), LookaheadDraft(V, window=2, ngram=3, guesses=2)),
               _tree(None, "onehot_sequential"))),
)


def pick_device(name: str) -> torch.device:
    """The device to run on: "auto" is CUDA when torch sees one, else the CPU."""
    if name not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but torch sees no CUDA device")
    return torch.device(name)


def run_checks(checks, device: torch.device, samples: int) -> int:
    """Run each check, one line each (name, device, result, seconds); the number that failed."""
    failed = 0
    width = max(len(c.name) for c in checks)
    for check in checks:
        t0 = time.perf_counter()
        try:
            detail, result = check.run(device, samples), "ok"
        except Exception as e:  # a smoke test reports every failure and goes on
            detail, result = f"{type(e).__name__}: {e}".splitlines()[0][:200], "FAIL"
            failed += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        print(f"{check.name:<{width}}  {device.type:<4}  {result:<4}  {time.perf_counter() - t0:6.2f} s  {detail}",
              flush=True)
    return failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=DEVICES, help="auto: CUDA when torch sees one, else cpu")
    parser.add_argument("--samples", type=int, default=SAMPLES, help=f"decodes per law check (default {SAMPLES})")
    parser.add_argument("--only", default="", help="run only the checks whose name holds this substring")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error(f"--samples must be >= 1, got {args.samples}")
    checks = [c for c in CHECKS if args.only in c.name]
    if not checks:
        parser.error(f"--only {args.only!r} matches no check")
    device = pick_device(args.device)
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and steady on a shared CPU
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    print(f"gpu-smoke on {device.type} ({name}), torch {torch.__version__}, {len(checks)} checks", flush=True)
    t0 = time.perf_counter()
    failed = run_checks(checks, device, args.samples)
    print(f"gpu-smoke: {len(checks) - failed} of {len(checks)} checks pass on {device.type} "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
