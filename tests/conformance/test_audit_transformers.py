"""The audit of Hugging Face transformers (the pinned `audit` extra), through the conformance kit.

Verdicts in the pinned version (recorded here as assertions, whatever they are):
  _speculative_sampling (the verifier generate() calls): passes the kit;
  generate(assistant_model=..., do_sample=True) on tiny random Llamas (V = 4): within the noise bound of the target's
  exact law over three new tokens (teacher forcing), and far from the draft's (the negative control);
  prompt lookup decoding and greedy assisted decoding: token for token equal to plain greedy.
The helpers (models, exact laws, seeded sampling) live in specdec_lib.conformance.hf, shared with notebook 02c.
"""
from __future__ import annotations

import os

import pytest
import torch

import specdec_lib as sd
from specdec_lib.conformance import audit_verifier, hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the models are built from a config
# the lock installs transformers (the audit extra): a missing one must fail here, never skip
from transformers.generation.utils import _speculative_sampling  # noqa: E402

N_SAMPLES = 1000  # generate() calls over 4^3 = 64 outcomes, one thread


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
    return hf.tiny_pair()


@pytest.mark.stat
def test_speculative_sampling_passes_the_kit():
    report = audit_verifier(_speculative_sampling, convention="transformers",
                            subject="transformers _speculative_sampling")
    assert report.passed, str(report)


@pytest.fixture(scope="module")
def assisted_samples(pair):
    target, draft = pair
    return hf.sampled_law(target, N_SAMPLES, torch.Generator().manual_seed(0), assistant_model=draft)


@pytest.mark.stat
def test_assisted_sampling_matches_the_target_law(pair, assisted_samples):
    target, draft = pair
    p, q = hf.exact_law(target), hf.exact_law(draft)
    bound = sd.tv_noise_bound(p, N_SAMPLES)  # a correct sampler exceeds it with probability < 1e-6
    assert sd.total_variation(assisted_samples, p) <= bound
    # negative control: the draft's own law is far off, and the same bound rejects it
    assert sd.total_variation(p, q) > 2 * bound and sd.total_variation(assisted_samples, q) > bound


@pytest.mark.heavy
def test_sampling_leaves_the_global_generator_alone(pair):
    state = torch.get_rng_state()
    a = hf.sampled_law(pair[0], 20, torch.Generator().manual_seed(3))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, hf.sampled_law(pair[0], 20, torch.Generator().manual_seed(3)))  # seeded: the same draws


@pytest.mark.heavy
@pytest.mark.parametrize("how", ["prompt_lookup", "assistant"])
def test_greedy_speculation_equals_plain_greedy(pair, how):
    target, draft = pair
    extra = {"prompt_lookup_num_tokens": 2} if how == "prompt_lookup" else {"assistant_model": draft}
    assert hf.greedy_mismatches(target, hf.greedy_prompts(), **extra) == []


@pytest.mark.heavy
def test_greedy_mismatches_sees_a_changed_decoder(pair):
    # negative control: a decoder that is not plain greedy (a repetition penalty) differs on some prompts, and the
    # helper names them
    assert hf.greedy_mismatches(pair[0], hf.greedy_prompts(), repetition_penalty=5.0) != []


@pytest.mark.heavy
def test_helpers_validate_input():
    with pytest.raises(ValueError, match="layers must be >= 1"):
        hf.tiny_llama(0, layers=0)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        hf.sampled_law(hf.tiny_llama(0), 10, None)
    with pytest.raises(ValueError, match="num_prompts must be >= 1"):
        hf.greedy_prompts(0)
