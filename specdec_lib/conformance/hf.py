"""The transformers audit's helpers: tiny random Llamas built from a config, their exact law by teacher forcing,
generate() sampled from an explicit generator, and greedy speculation against plain greedy.

transformers (the `audit` extra) is imported inside each function, with HF_HUB_OFFLINE=1 set first, so the kit
never requires it and nothing is downloaded. transformers draws from torch's global generator: every sampling call
here runs inside torch.random.fork_rng seeded from the caller's torch.Generator, leaving the global state as it was.
"""
from __future__ import annotations

import contextlib
import itertools
import os

import torch

from .._checks import check_generator, check_int, check_real

__all__ = ["V", "HORIZON", "PROMPT", "quiet", "tiny_llama", "audit_pair", "exact_law", "sample_config", "sampled_law",
           "greedy_prompts", "greedy_mismatches"]

V, HORIZON = 4, 3  # the audit's vocabulary and horizon: 4^3 = 64 outcomes
PROMPT = (1, 2)


def _transformers():
    """The transformers module, imported offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    return transformers


@contextlib.contextmanager
def quiet():
    """transformers' own logging at error level while inside (its assisted path warns about its internal calls)."""
    logging = _transformers().utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def tiny_llama(seed: int, *, layers: int = 2, head_scale: float = 40.0, vocab: int = V):
    """A randomly initialised Llama over `vocab` tokens, its head scaled so next-token laws are peaked."""
    seed = check_int("seed", seed, minimum=0)
    layers = check_int("layers", layers, minimum=1)
    head_scale = check_real("head_scale", head_scale, low=0.0, low_open=True)
    vocab = check_int("vocab", vocab, minimum=2)
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32, bos_token_id=None,
                         eos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = tf.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    return model


def audit_pair():
    """The target, and a draft that is the same network at temperature 2.5 (head x 0.4): often kept, often not."""
    return tiny_llama(1), tiny_llama(1, head_scale=16.0)


def _prompt(prompt) -> torch.Tensor:
    return torch.tensor([list(prompt)], dtype=torch.long)  # (1, len)


def exact_law(model, *, prompt=PROMPT, horizon: int = HORIZON) -> torch.Tensor:
    """The model's law over its next `horizon` tokens, (V,) * horizon, by teacher forcing: one batched forward."""
    horizon = check_int("horizon", horizon, minimum=1)
    vocab, ids0 = model.config.vocab_size, _prompt(prompt)
    heads = torch.tensor(list(itertools.product(range(vocab), repeat=horizon - 1)),
                         dtype=torch.long).reshape(-1, horizon - 1)  # (V^(h-1), h-1) every head of the sequence
    ids = torch.cat([ids0.expand(heads.shape[0], -1), heads], dim=1)  # (V^(h-1), len + h - 1)
    with torch.no_grad():
        rows = model(ids).logits[:, ids0.shape[1] - 1:].double().softmax(-1)  # (V^(h-1), h, V) each next token
    law = torch.zeros((vocab,) * horizon, dtype=torch.float64)
    for b, head in enumerate(heads.tolist()):
        for z in range(vocab):
            seq = (*head, z)
            law[seq] = torch.prod(torch.stack([rows[b, i, t] for i, t in enumerate(seq)])).item()
    return law


def sample_config(**kw):
    """A GenerationConfig that samples the raw softmax (no top-k, no top-p) for HORIZON new tokens."""
    return _transformers().GenerationConfig(max_new_tokens=HORIZON, top_k=None, top_p=None, temperature=1.0,
                                            pad_token_id=0, **kw)


def sampled_law(target, num_samples: int, generator: torch.Generator, *, prompt=PROMPT,
                **generate_kw) -> torch.Tensor:
    """Frequencies (V,) * HORIZON of the new tokens of num_samples calls target.generate(..., do_sample=True, ...)."""
    n = check_int("num_samples", num_samples, minimum=1)
    if check_generator(generator) is None:
        raise TypeError("generator must be a torch.Generator (transformers' draws are seeded from it)")
    ids0, cfg = _prompt(prompt), sample_config(do_sample=True)
    counts = torch.zeros((target.config.vocab_size,) * HORIZON, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet():
        torch.default_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        for _ in range(n):
            out = target.generate(ids0, generation_config=cfg, **generate_kw)  # (1, len + HORIZON)
            counts[tuple(out[0, ids0.shape[1]:].tolist())] += 1
    return counts / n


def greedy_prompts(num_prompts: int = 12, *, length: int = 6, vocab: int = V, seed: int = 1) -> list[torch.Tensor]:
    """num_prompts random prompts (1, length) over the vocabulary, from a generator seeded with `seed`."""
    n, length = check_int("num_prompts", num_prompts, minimum=1), check_int("length", length, minimum=1)
    g = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    return [torch.randint(check_int("vocab", vocab, minimum=2), (1, length), generator=g) for _ in range(n)]


def greedy_mismatches(target, prompts: list[torch.Tensor], *, new_tokens: int = 10, **speculation) -> list[int]:
    """Indices of the prompts where greedy generate(**speculation) differs from plain greedy, token for token."""
    tf = _transformers()
    plain = tf.GenerationConfig(max_new_tokens=check_int("new_tokens", new_tokens, minimum=1), do_sample=False,
                                pad_token_id=0)
    fast = tf.GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                               prompt_lookup_num_tokens=speculation.pop("prompt_lookup_num_tokens", None))
    bad = []
    with torch.no_grad(), quiet():
        for i, ids in enumerate(prompts):
            if not torch.equal(target.generate(ids, generation_config=plain),
                               target.generate(ids, generation_config=fast, **speculation)):
                bad.append(i)
    return bad
