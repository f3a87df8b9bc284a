"""surface.tiny_model: the one tiny transformers causal LM behind the kit's tiny Llamas (conformance.hf.tiny_llama)
and the lab's tiny models (lab.tiny_hf_model). Each is checked against the recipe it replaced, kept below verbatim as
it stood in conformance/hf.py and lab/hf_causal_lm.py at 5d77f4d: the same class, the same weights bit for bit (dtype
included), the same config and generation config, for several seeds and shapes; swapping the two initialisations
fails these checks and the one that reads init="normal" off its generator."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from specdec_lib.conformance import hf
from specdec_lib.lab.hf_causal_lm import tiny_hf_model
from specdec_lib.surface import TinyConfig, tiny_causal_lm
from specdec_lib.surface.tiny_model import NORMAL_STD

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the models are built from a config
import transformers as tf  # noqa: E402  (the lock installs it: a missing one must fail here, never skip)


def old_tiny_llama(seed, *, layers=2, head_scale=40.0, vocab=4):
    """conformance.hf.tiny_llama before surface.tiny_model."""
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32, bos_token_id=None,
                         eos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = tf.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    return model


def old_tiny_hf_model(arch="qwen2", *, vocab=64, seed=0, layers=2, dtype=torch.float32):
    """lab.tiny_hf_model before surface.tiny_model (the transformers model inside its HFCausalLM, put in eval mode)."""
    kind = {"qwen2": tf.Qwen2Config, "llama": tf.LlamaConfig}[arch]
    config = kind(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        model = tf.AutoModelForCausalLM.from_config(config, dtype=dtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 or not torch.all(p == 1):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model.eval()


def assert_same_model(new, old, *, config_dtype: bool = True):
    """The same class and mode, state_dict bit for bit (names, order, dtypes), config and generation config.
    config_dtype=False: the old kit recipe built its model without a dtype, so its config's `dtype` is None where
    the new one records the weights' dtype; nothing reads it (the weights and every other field agree)."""
    assert type(new) is type(old) and new.training == old.training
    a, b = new.state_dict(), old.state_dict()
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
    ca, cb = new.config.to_dict(), old.config.to_dict()
    if not config_dtype:
        assert (ca.pop("dtype"), cb.pop("dtype")) == ("float32", None)
    assert ca == cb
    assert new.generation_config.to_dict() == old.generation_config.to_dict()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_kits_tiny_llama_is_the_recipe_it_replaced(seed):
    for kw in ({}, {"head_scale": 16.0}, {"head_scale": 8.0, "layers": 1}, {"head_scale": 3.0, "vocab": 6}):
        assert_same_model(hf.tiny_llama(seed, **kw), old_tiny_llama(seed, **kw), config_dtype=False)
    target, draft = hf.tiny_pair()
    assert_same_model(target, old_tiny_llama(1), config_dtype=False)
    assert_same_model(draft, old_tiny_llama(1, head_scale=16.0), config_dtype=False)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_the_labs_tiny_model_is_the_recipe_it_replaced(arch):
    for seed, kw in ((0, {}), (1, {"vocab": 16, "layers": 3}), (3, {"vocab": 512}), (4, {"dtype": torch.bfloat16})):
        lm = tiny_hf_model(arch, seed=seed, **kw)
        assert lm.name == f"tiny-{arch}"
        assert_same_model(lm.model, old_tiny_hf_model(arch, seed=seed, **kw))


def test_the_two_initialisations_are_what_they_say():
    config = TinyConfig("llama", vocab=8)
    normal, default = (tiny_causal_lm(config, seed=5, init=init) for init in ("normal", "transformers"))
    emb = normal.model.embed_tokens.weight  # the first weight drawn: g's first V x hidden normals, times NORMAL_STD
    assert torch.equal(emb, torch.randn(emb.shape, generator=torch.Generator().manual_seed(5)) * NORMAL_STD)
    assert not torch.equal(default.model.embed_tokens.weight, emb)
    assert torch.equal(normal.model.norm.weight, torch.ones(32))  # the norm scales are left at 1
    # transformers' own init is narrower (std 0.02): the two styles are far apart, whatever the seed
    assert default.lm_head.weight.std() < 0.05 < 0.25 < normal.lm_head.weight.std()
    scaled = tiny_causal_lm(config, seed=5, init="transformers", head_scale=40.0)
    assert torch.equal(scaled.lm_head.weight, default.lm_head.weight * 40.0)
    assert torch.equal(scaled.model.embed_tokens.weight, default.model.embed_tokens.weight)


def test_seeded_without_touching_the_global_generator():
    state = torch.random.get_rng_state()
    for init in ("normal", "transformers"):
        a, b = (tiny_causal_lm(TinyConfig(vocab=8), seed=2, init=init) for _ in range(2))
        assert torch.equal(torch.random.get_rng_state(), state)
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
        c = tiny_causal_lm(TinyConfig(vocab=8), seed=3, init=init)
        assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


@pytest.mark.parametrize("kw, error, match", [
    ({"arch": "gpt2"}, ValueError, "qwen2"),
    ({"vocab": 1}, ValueError, "vocab must be >= 2"),
    ({"layers": 0}, ValueError, "layers must be >= 1"),
    ({"hidden": 30}, ValueError, "hidden must be a multiple of heads"),
    ({"heads": 4, "kv_heads": 3}, ValueError, "heads must be a multiple of kv_heads"),
    ({"tokens": (("eos", 0),)}, ValueError, "eos_token_id"),
    ({"tokens": (("pad_token_id", 64),)}, ValueError, "pad_token_id must be None or a token id below vocab"),
    ({"tokens": ["pad_token_id", 0]}, TypeError, "tokens must be a tuple"),
])
def test_the_config_names_a_bad_field(kw, error, match):
    with pytest.raises(error, match=match):
        TinyConfig(**kw)


@pytest.mark.parametrize("kw, error, match", [
    ({"config": "llama"}, TypeError, "config must be a TinyConfig"),
    ({"seed": -1}, ValueError, "seed must be >= 0"),
    ({"init": "xavier"}, ValueError, "transformers"),
    ({"head_scale": 0.0}, ValueError, "head_scale must lie in"),
    ({"dtype": torch.int64}, TypeError, "dtype must be a floating-point"),
])
def test_the_builder_names_a_bad_argument(kw, error, match):
    with pytest.raises(error, match=match):
        tiny_causal_lm(**kw)


def test_tiny_llama_keeps_its_checks():
    with pytest.raises(ValueError, match="layers must be >= 1"):
        hf.tiny_llama(0, layers=0)
    with pytest.raises(ValueError, match="head_scale"):
        hf.tiny_llama(0, head_scale=-1.0)
    assert dataclasses.is_dataclass(TinyConfig) and TinyConfig.__dataclass_params__.frozen


@pytest.mark.heavy
def test_the_package_imports_without_transformers():
    code = ("import sys; sys.modules['transformers'] = None\n"  # import transformers now raises ImportError
            "import specdec_lib, specdec_lib.surface, specdec_lib.conformance.hf, specdec_lib.lab.hf_causal_lm\n"
            "from specdec_lib.surface import tiny_causal_lm\n"
            "try:\n    tiny_causal_lm()\nexcept ImportError:\n    print('needs transformers')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "needs transformers"
