"""The audit of Hugging Face transformers (the pinned `audit` extra), through the conformance kit.

Verdicts in the pinned version (recorded here as assertions, whatever they are):
  _speculative_sampling (the verifier generate() calls): passes the kit;
  generate(assistant_model=..., do_sample=True) on tiny random Llamas (V = 4): within the noise bound of the target's
  exact law over three new tokens (teacher forcing), and far from the draft's (the negative control);
  prompt lookup decoding and greedy assisted decoding: token for token equal to plain greedy.
transformers draws from torch's global generator; every sampling call here runs inside torch.random.fork_rng,
seeded from an explicit torch.Generator, so the test leaves the global state as it found it.
"""
from __future__ import annotations

import itertools
import os

import pytest
import torch

import specdec_lib as sd
from specdec_lib.conformance import check_verifier

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the models are built from a config
# the lock installs transformers (the audit extra): a missing one must fail here, never skip
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation.utils import _speculative_sampling  # noqa: E402

V, HORIZON, N_SAMPLES = 4, 3, 1000  # 4^3 = 64 outcomes; 1000 generate() calls, one thread
PROMPT = torch.tensor([[1, 2]])


def tiny_llama(seed: int, layers: int, head_scale: float = 40.0) -> LlamaForCausalLM:
    """A randomly initialised Llama over V tokens, its head scaled so next-token laws are peaked (not near uniform)."""
    cfg = LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32, bos_token_id=None,
                      eos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    return model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Models this small run several times faster on one thread (2-core CI); the setting is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pair():
    """The target, and a draft that is the same network at temperature 2.5 (head x 0.4): TV 0.45 over three tokens,
    so proposals are often kept and often rejected (a draft from another seed is 0.98 off and almost never kept)."""
    return tiny_llama(1, layers=2), tiny_llama(1, layers=2, head_scale=16.0)


def exact_law(model, prompt: torch.Tensor, horizon: int) -> torch.Tensor:
    """The model's law over its next `horizon` tokens, (V,) * horizon, by teacher forcing: one batched forward."""
    heads = torch.tensor(list(itertools.product(range(V), repeat=horizon - 1)), dtype=torch.long)  # (V^(h-1), h-1)
    ids = torch.cat([prompt.expand(heads.shape[0], -1), heads], dim=1)  # (V^(h-1), len + h - 1)
    with torch.no_grad():
        logits = model(ids).logits[:, prompt.shape[1] - 1:]  # (V^(h-1), h, V) the law of each next token
    rows = logits.double().softmax(-1)
    law = torch.zeros((V,) * horizon, dtype=torch.float64)
    for b, head in enumerate(heads.tolist()):
        for z in range(V):
            seq = (*head, z)
            law[seq] = torch.prod(torch.stack([rows[b, i, t] for i, t in enumerate(seq)])).item()
    return law


def sample_config(**kw) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=HORIZON, top_k=None, top_p=None, temperature=1.0, pad_token_id=0, **kw)


def test_speculative_sampling_passes_the_kit():
    report = check_verifier(_speculative_sampling, convention="transformers",
                            subject="transformers _speculative_sampling")
    assert report.passed, str(report)


@pytest.fixture(scope="module")
def assisted_samples(pair):
    target, draft = pair
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros((V,) * HORIZON, dtype=torch.float64)
    cfg = sample_config(do_sample=True)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.default_generator.manual_seed(int(torch.randint(2**62, (1,), generator=g)))
        for _ in range(N_SAMPLES):
            out = target.generate(PROMPT, assistant_model=draft, generation_config=cfg)
            counts[tuple(out[0, PROMPT.shape[1]:].tolist())] += 1
    return counts / N_SAMPLES


def test_assisted_sampling_matches_the_target_law(pair, assisted_samples):
    target, draft = pair
    p, q = exact_law(target, PROMPT, HORIZON), exact_law(draft, PROMPT, HORIZON)
    bound = sd.tv_noise_bound(p, N_SAMPLES)  # a correct sampler exceeds it with probability < 1e-6
    assert sd.total_variation(assisted_samples, p) <= bound
    # negative control: the draft's own law is far off, and the same bound rejects it
    assert sd.total_variation(p, q) > 2 * bound and sd.total_variation(assisted_samples, q) > bound


def greedy_prompts(n: int = 12, length: int = 6) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(V, (1, length), generator=g) for _ in range(n)]


@pytest.mark.parametrize("how", ["prompt_lookup", "assistant"])
def test_greedy_speculation_equals_plain_greedy(pair, how):
    target, draft = pair
    extra = {"prompt_lookup_num_tokens": 2} if how == "prompt_lookup" else {"assistant_model": draft}
    cfg = GenerationConfig(max_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        for ids in greedy_prompts():
            plain = target.generate(ids, generation_config=cfg)
            fast = target.generate(ids, generation_config=cfg, **extra)
            assert torch.equal(plain, fast), (how, ids.tolist(), plain.tolist(), fast.tolist())
