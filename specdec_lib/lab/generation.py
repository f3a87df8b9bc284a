"""Lab: plain and speculative decoding over a cached target and a drafter, with cache rollback and telemetry.

Cache invariant (both decoders): the target's cache holds every committed token but the last, so each
round feeds it exactly k+1 tokens (the last committed one and the k proposals) and reads k+1 rows:
row j is p(. | committed, proposals[:j]). After verification both caches are cropped to the accepted
prefix; a neural draft's may lag one token behind (after a full block), and its next round feeds both
(lab/drafters.py: the neural, table and prompt-lookup drafts).

Both decoders are built from three phases, decode_step (plain), a drafter's propose and verify_round (a
round), and sd.lab.time_terms times those same functions on their own: the clock measures the code that runs.
"""
from __future__ import annotations

import torch

from .._checks import check_int, check_token_ids
from ..policy import apply_policy
from ..telemetry import SpecDecodeLog
from .accept import verify_block_logits
from .drafters import as_drafter, draft_block, start_states
from .steps import GREEDY, Decoding, check_policy, clock, prefill, sample_token

__all__ = ["Decoding", "GREEDY", "check_policy", "check_prompt", "check_log", "check_decoding", "decode_step",
           "draft_block", "exact_continuations", "generate_plain", "generate_speculative", "prefill",
           "verify_round"]  # draft_block, prefill: as before the move


def check_prompt(prompt, model, n_new: int, extra: int = 0) -> torch.Tensor:
    """A non-empty 1-D LongTensor of ids in the model's vocabulary that leaves room for n_new (+ extra) tokens."""
    prompt = check_token_ids("prompt", prompt, model.vocab, dims=1, allow_empty=False, long_only=True)
    if model.max_len is not None and prompt.numel() + n_new + extra > model.max_len:
        raise ValueError(f"prompt + n_new is too long: {prompt.numel()} + {n_new} (+ {extra} for the last block) "
                         f"exceeds max_len = {model.max_len}")
    return prompt


def decode_step(model, cache, last: torch.Tensor, *, temperature: float, top_k, generator) -> torch.Tensor:
    """One plain decode step (T_1): feed the last token (1,), return the next one (1,) under the policy."""
    return sample_token(model(last[None], cache)[0, -1], temperature, top_k, generator)[0]


def verify_round(target, t_cache, d_state, block: torch.Tensor, q_rows, *, n: int, decoding: Decoding,
                 drafter=None) -> tuple[int, torch.Tensor]:
    """One verification (V(k)): a target pass over block (k+1,), the acceptance test, the rollback.

    block is the last committed token, then the k proposals; q_rows (k, V) the draft's rows (None when greedy).
    n is the number of committed tokens (the target's cache holds all but the last). Returns (A, the token
    after the A accepted proposals, 0-d). The target's cache is cropped to the n + A committed tokens (for
    correctness), and the draft's state too (drafter.rollback; d_state a draft's KVCache when drafter is None),
    so that its next proposals start from them. The test is sd.lab.verify_block_logits with decoding.verifier as its
    method: verify_batch's draws (the token rule) or verify_batch_block's (block verification), one block.
    """
    p_logits = target(block[None], t_cache)[0]  # (k+1, V); row j conditions on proposals[:j]
    test = verify_block_logits(p_logits, block[1:], q_rows, **decoding.kwargs(),
                               one_hot=getattr(drafter, "one_hot", False), method=decoding.verifier)
    a, nxt = test.accepted, test.next_token
    t_cache.crop(n + a)
    if drafter is None:
        d_state.crop(min(d_state.length, n + a))
    else:
        drafter.rollback(d_state, n + a)
    return a, nxt


def check_log(log, k: int) -> None:
    """None, or a SpecDecodeLog made for this k."""
    if log is not None:
        if not isinstance(log, SpecDecodeLog):
            raise TypeError(f"log must be a SpecDecodeLog or None, got {type(log).__name__}")
        if log.k != k:
            raise ValueError(f"log was made for k = {log.k}, but k = {k}")


def check_decoding(decoding) -> Decoding:
    """decoding, if it is a Decoding."""
    if not isinstance(decoding, Decoding):
        raise TypeError(f"decoding must be a Decoding, got {type(decoding).__name__}")
    return decoding


@torch.inference_mode()
def generate_plain(model, prompt: torch.Tensor, n_new: int, *, decoding: Decoding = GREEDY,
                   log: SpecDecodeLog | None = None) -> torch.Tensor:
    """n_new tokens (LongTensor (n_new,)) from model alone, one cached decode step per token, under decoding.

    A log made with k = 0 records each step as a round (no draft, one target call, one token).
    """
    n_new = check_int("n_new", n_new, minimum=1)
    prompt = check_prompt(prompt, model, n_new)
    policy = check_decoding(decoding).kwargs()
    check_log(log, 0)
    cache = prefill(model, prompt)
    out = prompt.new_empty(n_new)
    last = prompt[-1:]  # (1,)
    for i in range(n_new):
        t0 = clock()
        last = decode_step(model, cache, last, **policy)  # (1,)
        out[i] = last[0]
        if log is not None:
            log.record_round(0, 1, verify_time=clock(out) - t0)
    return out


@torch.inference_mode()
def generate_speculative(target, draft, prompt: torch.Tensor, n_new: int, k: int, *, decoding: Decoding = GREEDY,
                         log: SpecDecodeLog | None = None) -> torch.Tensor:
    """n_new tokens from target, k draft proposals per round verified in one cached target pass.

    draft is a drafter (sd.lab.NeuralDraft, sd.lab.TableDraft, sd.lab.PromptLookupDraft) or a draft model
    (a NeuralDraft).
    Temperature 0 is greedy (keep proposals while they equal the target's argmax); otherwise both sides
    follow the same policy (temperature, top-k) and the acceptance test keeps or resamples (decoding.verifier:
    verify_batch's token rule, or block verification), so the output is distributed exactly as the target's
    under that policy. Each round is logged in `log`.
    """
    n_new = check_int("n_new", n_new, minimum=1)
    k = check_int("k", k, minimum=1)
    drafter = as_drafter(draft)
    prompt = check_prompt(prompt, target, n_new, extra=k)
    check_prompt(prompt, drafter, n_new, extra=k)
    if drafter.vocab != target.vocab:
        raise ValueError(f"draft and target must share a vocabulary, got {drafter.vocab} and {target.vocab}")
    decoding = check_decoding(decoding)
    check_log(log, k)
    L = prompt.numel()
    seq = prompt.new_empty(L + n_new + k + 1)  # committed tokens (and room for one overshooting block)
    seq[:L] = prompt
    t_cache, d_state = start_states(target, drafter, prompt)
    n, policy = L, decoding.kwargs()  # committed so far; the policy's keywords, read once
    while n < L + n_new:
        t0 = clock()
        # draft: catch up on committed tokens it has not read (1, or 2 after a full block), then k proposals
        proposals, q_rows = drafter.propose(d_state, seq, n, k, **policy)
        t1 = clock(proposals if log is not None else None)  # a read that counts waits for the draft; no log, no wait
        block = torch.cat([seq[n - 1:n], proposals])  # (k+1,): the last committed token, then the proposals
        a, nxt = verify_round(target, t_cache, d_state, block, q_rows, n=n, decoding=decoding, drafter=drafter)
        seq[n:n + a] = proposals[:a]
        seq[n + a] = nxt
        emitted = min(a + 1, L + n_new - n)
        n += a + 1
        if log is not None:
            log.record_round(a, emitted, draft_time=t1 - t0, verify_time=clock(seq) - t1)
    return seq[L:L + n_new].clone()


@torch.no_grad()
def exact_continuations(model, prompt: torch.Tensor, horizon: int, *, temperature: float = 1.0,
                        top_k: int | None = None) -> torch.Tensor:
    """P(every continuation of length horizon) by teacher forcing: float64 (V**horizon,), index in base V.

    One full (uncached) pass over all V**horizon sequences; the probability of each is the product of
    the policy's conditionals at its own tokens. Meant for tiny vocabularies and horizons.
    """
    horizon = check_int("horizon", horizon, minimum=1)
    prompt = check_prompt(prompt, model, horizon)
    temperature, top_k = check_policy(temperature, top_k)
    V, L = model.vocab, prompt.numel()
    if V ** horizon > 1 << 16:
        raise ValueError(f"V**horizon = {V ** horizon} continuations is too many to enumerate (max 65536)")
    conts = torch.cartesian_prod(*[torch.arange(V, device=prompt.device)] * horizon).reshape(-1, horizon)  # (V^h, h)
    seqs = torch.cat([prompt.expand(len(conts), L), conts], dim=1)  # (V^h, L + h)
    probs = apply_policy(model(seqs).double(), temperature=temperature, top_k=top_k)  # (V^h, L + h, V)
    rows = probs[:, L - 1:L - 1 + horizon]  # (V^h, h, V): row j predicts continuation token j
    return rows.gather(-1, conts[..., None]).squeeze(-1).prod(-1)  # (V^h,)
