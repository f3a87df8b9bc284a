"""Lab: plain and speculative decoding over two cached transformers, with cache rollback and telemetry.

Cache invariant (both decoders): the target's cache holds every committed token but the last, so each
round feeds it exactly k+1 tokens (the last committed one and the k proposals) and reads k+1 rows:
row j is p(. | committed, proposals[:j]). After verification both caches are cropped to the accepted
prefix; the draft's may lag one token behind (after a full block), and its next round feeds both.

Both decoders are built from three phases, decode_step (plain), draft_block and verify_round (a round),
and sd.time_terms times those same functions on their own: the clock measures the code that runs.
"""
from __future__ import annotations

import time

import torch

from .._checks import check_generator, check_int, check_real, check_token_ids
from ..policy import apply_policy
from ..telemetry import SpecDecodeLog
from ..verification import greedy_batch, verify_batch


def _check_prompt(prompt, model, n_new: int, extra: int = 0) -> torch.Tensor:
    """A non-empty 1-D LongTensor of ids in the model's vocabulary that leaves room for n_new (+ extra) tokens."""
    prompt = check_token_ids("prompt", prompt, model.vocab, dims=1, allow_empty=False, long_only=True)
    if prompt.numel() + n_new + extra > model.max_len:
        raise ValueError(f"prompt + n_new is too long: {prompt.numel()} + {n_new} (+ {extra} for the last block) "
                         f"exceeds max_len = {model.max_len}")
    return prompt


def check_policy(temperature, top_k) -> tuple[float, int | None]:
    """(temperature >= 0, top_k >= 1 or None), validated: the sampling policy both decoders share."""
    temperature = check_real("temperature", temperature, low=0.0)
    if top_k is not None:
        top_k = check_int("top_k", top_k, minimum=1)
    return temperature, top_k


def _probs(logits: torch.Tensor, temperature: float, top_k) -> torch.Tensor:
    """sd.apply_policy(logits, temperature > 0, top_k) without its argument checks (the decode loops' hot path)."""
    z = (logits - logits.amax(-1, keepdim=True)) / temperature  # (..., V)
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[..., -1:], float("-inf"))
    return torch.softmax(z, dim=-1)  # (..., V)


def _pick(logits: torch.Tensor, temperature: float, top_k, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(token (1,), its distribution (V,) or None when greedy) from one row of logits (V,)."""
    if temperature == 0.0:
        return logits.argmax(-1, keepdim=True), None
    probs = _probs(logits, temperature, top_k)  # (V,)
    return torch.multinomial(probs, 1, generator=generator), probs


def decode_step(model, cache, last: torch.Tensor, *, temperature: float, top_k, generator) -> torch.Tensor:
    """One plain decode step (T_1): feed the last token (1,), return the next one (1,) under the policy."""
    return _pick(model(last[None], cache)[0, -1], temperature, top_k, generator)[0]


def draft_block(draft, cache, x: torch.Tensor, k: int, *, temperature: float, top_k, generator):
    """k sequential draft steps (D(k)) after feeding x (the 1 or 2 committed tokens the cache lacks).

    Returns the proposals (k,) and the rows q that drew them ((k, V), or None when greedy).
    """
    proposals, q_rows = [], []
    for _ in range(k):
        x, q = _pick(draft(x[None], cache)[0, -1], temperature, top_k, generator)  # (1,), (V,) or None
        proposals.append(x)
        q_rows.append(q)
    return torch.cat(proposals), (None if temperature == 0.0 else torch.stack(q_rows))


def verify_round(target, t_cache, d_cache, last: torch.Tensor, proposals: torch.Tensor, q_rows, *, n: int,
                 temperature: float, top_k, generator) -> tuple[int, torch.Tensor]:
    """One verification (V(k)): a target pass over last (1,) + proposals (k,), the acceptance test, the rollback.

    n is the number of committed tokens (the target's cache holds all but the last). Returns (A, the token
    after the A accepted proposals, 0-d). Both caches are cropped to the n + A committed tokens: the
    target's for correctness, the draft's so that its next proposals start from them.
    """
    block = torch.cat([last, proposals])  # (k+1,)
    p_logits = target(block[None], t_cache)[0]  # (k+1, V); row j conditions on proposals[:j]
    if temperature == 0.0:
        accepted, nxt = greedy_batch(p_logits[None], proposals[None])
    else:
        p_rows = _probs(p_logits, temperature, top_k)  # (k+1, V)
        accepted, nxt = verify_batch(p_rows[None], q_rows[None], proposals[None], generator)
    a = int(accepted[0])
    t_cache.crop(n + a)
    d_cache.crop(min(d_cache.length, n + a))
    return a, nxt[0]


def prefill(model, prompt: torch.Tensor):
    """A cache holding every prompt token but the last."""
    cache = model.new_cache()
    if prompt.numel() > 1:
        model(prompt[None, :-1], cache)
    return cache


def sync(x: torch.Tensor) -> None:
    """Wait for queued GPU work, so that a clock read after it measures it (no-op on the CPU)."""
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


def _check_log(log, k: int) -> None:
    if log is not None:
        if not isinstance(log, SpecDecodeLog):
            raise TypeError(f"log must be a SpecDecodeLog or None, got {type(log).__name__}")
        if log.k != k:
            raise ValueError(f"log was made for k = {log.k}, but k = {k}")


@torch.inference_mode()
def generate_plain(model, prompt: torch.Tensor, n_new: int, *, temperature: float = 0.0, top_k: int | None = None,
                   generator: torch.Generator | None = None, log: SpecDecodeLog | None = None) -> torch.Tensor:
    """n_new tokens (LongTensor (n_new,)) from model alone, one cached decode step per token.

    A log made with k = 0 records each step as a round (no draft, one target call, one token).
    """
    n_new = check_int("n_new", n_new, minimum=1)
    prompt = _check_prompt(prompt, model, n_new)
    temperature, top_k = check_policy(temperature, top_k)
    generator = check_generator(generator)
    _check_log(log, 0)
    cache = prefill(model, prompt)
    out = prompt.new_empty(n_new)
    last = prompt[-1:]  # (1,)
    for i in range(n_new):
        t0 = time.perf_counter()
        last = decode_step(model, cache, last, temperature=temperature, top_k=top_k, generator=generator)  # (1,)
        out[i] = last[0]
        if log is not None:
            sync(out)
            log.record_round(0, 1, verify_time=time.perf_counter() - t0)
    return out


@torch.inference_mode()
def generate_speculative(target, draft, prompt: torch.Tensor, n_new: int, k: int, *, temperature: float = 0.0,
                         top_k: int | None = None, generator: torch.Generator | None = None,
                         log: SpecDecodeLog | None = None) -> torch.Tensor:
    """n_new tokens from target, k draft proposals per round verified in one cached target pass.

    Temperature 0 is greedy (keep proposals while they equal the target's argmax); otherwise both models
    sample under the same policy (temperature, top-k) and sd's verify_batch accepts or resamples, so the
    output is distributed exactly as the target's under that policy. Each round is logged in `log`.
    """
    n_new = check_int("n_new", n_new, minimum=1)
    k = check_int("k", k, minimum=1)
    prompt = _check_prompt(prompt, target, n_new, extra=k)
    _check_prompt(prompt, draft, n_new, extra=k)
    if draft.vocab != target.vocab:
        raise ValueError(f"draft and target must share a vocabulary, got {draft.vocab} and {target.vocab}")
    temperature, top_k = check_policy(temperature, top_k)
    generator = check_generator(generator)
    _check_log(log, k)
    L = prompt.numel()
    seq = prompt.new_empty(L + n_new + k + 1)  # committed tokens (and room for one overshooting block)
    seq[:L] = prompt
    t_cache, d_cache = prefill(target, prompt), prefill(draft, prompt)
    n = L  # committed so far
    while n < L + n_new:
        t0 = time.perf_counter()
        # draft: catch up on committed tokens it has not read (1, or 2 after a full block), then k steps
        proposals, q_rows = draft_block(draft, d_cache, seq[d_cache.length:n], k, temperature=temperature, top_k=top_k,
                                        generator=generator)
        sync(proposals)
        t1 = time.perf_counter()
        a, nxt = verify_round(target, t_cache, d_cache, seq[n - 1:n], proposals, q_rows, n=n,
                              temperature=temperature, top_k=top_k, generator=generator)
        seq[n:n + a] = proposals[:a]
        seq[n + a] = nxt
        emitted = min(a + 1, L + n_new - n)
        n += a + 1
        t2 = time.perf_counter()
        if log is not None:
            log.record_round(a, emitted, draft_time=t1 - t0, verify_time=t2 - t1)
    return seq[L:L + n_new].clone()


@torch.no_grad()
def exact_continuations(model, prompt: torch.Tensor, horizon: int, *, temperature: float = 1.0,
                        top_k: int | None = None) -> torch.Tensor:
    """P(every continuation of length horizon) by teacher forcing: float64 (V**horizon,), index in base V.

    One full (uncached) pass over all V**horizon sequences; the probability of each is the product of
    the policy's conditionals at its own tokens. Meant for tiny vocabularies and horizons.
    """
    horizon = check_int("horizon", horizon, minimum=1)
    prompt = _check_prompt(prompt, model, horizon)
    temperature, top_k = check_policy(temperature, top_k)
    V, L = model.vocab, prompt.numel()
    if V ** horizon > 1 << 16:
        raise ValueError(f"V**horizon = {V ** horizon} continuations is too many to enumerate (max 65536)")
    conts = torch.cartesian_prod(*[torch.arange(V)] * horizon).reshape(-1, horizon)  # (V^h, h), first token major
    seqs = torch.cat([prompt.expand(len(conts), L), conts], dim=1)  # (V^h, L + h)
    probs = apply_policy(model(seqs).double(), temperature, top_k)  # (V^h, L + h, V)
    rows = probs[:, L - 1:L - 1 + horizon]  # (V^h, h, V): row j predicts continuation token j
    return rows.gather(-1, conts[..., None]).squeeze(-1).prod(-1)  # (V^h,)
