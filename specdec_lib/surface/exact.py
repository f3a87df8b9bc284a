"""The exact laws of the reference loop: plain decoding by enumeration, speculative decoding by dynamic programming.

plain_law: every text the plain loop can produce, with the product of its next_probs (only tokens with
probability > 0 are followed). speculative_law: a DP over committed prefixes. From each prefix the round is
enumerated analytically, from the same pieces the sampler runs (loop.block_size, loop.draft_view,
loop.drafting_stops, loop.target_rows, loop.commit, loop.reported_logprobs, loop.next_lasts): every drafted
block with its draft probability, then the verifier's exact law of (accepted, next token) given the rows:

  token rule   alpha_i = min(1, p_i(x_i) / q_i(x_i)) (sampling.accept_ratio), P(a) = alpha_1 .. alpha_a (1 - alpha_a+1),
               the next token from [p_a+1 - q_a+1]_+ normalised (sampling.residual_weights), or p_n+1 after all n
  block        P(tau = a) = block_verification.tau_law(block_weights(...).h), next from block_residual normalised

next_probs is cached by (model, text, view) within one computation: it is the cost.
"""
from __future__ import annotations

import math
from collections import defaultdict

import torch

from .._checks import check_int
from ..block_verification import block_residual, block_weights, tau_law
from ..sampling import accept_ratio, residual_weights
from .loop import (
    CORRECT,
    RAW,
    LoopSpec,
    block_size,
    check_prompt_ids,
    commit,
    draft_row,
    drafting_stops,
    next_lasts,
    reported_logprobs,
    round_block,
    target_rows,
)
from .processors import View, next_probs
from .settings import Settings

__all__ = ["plain_law", "speculative_law", "logprob_error", "law_tv", "verify_law", "plain_logprob", "LOGPROB_TOL"]

LOGPROB_TOL = 1e-6  # a reported logprob further than this from plain's value is wrong (the kit's too)


class _Probs:
    """next_probs, cached by (model, generated, view) for one prompt and one Settings."""

    def __init__(self) -> None:
        self.cache: dict = {}

    def __call__(self, model, prompt, generated, settings, *, view: View | None = None, strict: bool = True):
        key = (id(model), tuple(generated), view or View())
        if key not in self.cache:
            self.cache[key] = next_probs(model, prompt, generated, settings, view=view, strict=False)
        row = self.cache[key]
        if row is None and strict:
            next_probs(model, prompt, generated, settings, view=view)  # raises: every token is banned
        return row


def _check(prompt, settings) -> tuple[int, ...]:
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    return check_prompt_ids(prompt)


def plain_law(model, prompt, settings: Settings, *, with_stop: bool = False) -> dict:
    """P(text) for every text plain decoding (loop.generate) can produce: products of next_probs over the support.

    with_stop: key by (text, stop) instead ("eos" when the text ends in EOS, else "length")."""
    prompt = _check(prompt, settings)
    law: dict = defaultdict(float)
    stack = [((), 1.0)]
    while stack:
        tokens, mass = stack.pop()
        for x, px in enumerate(next_probs(model, prompt, tokens, settings).tolist()):
            if px <= 0:
                continue
            text = tokens + (x,)
            if x == settings.eos:
                law[(text, "eos") if with_stop else text] += mass * px
            elif len(text) >= settings.max_new_tokens:
                law[(text, "length") if with_stop else text] += mass * px
            else:
                stack.append((text, mass * px))
    return dict(law)


def verify_law(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor, method: str) -> torch.Tensor:
    """P(accepted = a, next token = y) (m, n+1, V) for m blocks of n drafts: p_rows (m, n+1, V), q_rows (m, n, V),
    proposals (m, n); method "token" or "block" (the law of verify_batch or verify_batch_block)."""
    m, n = proposals.shape
    idx = proposals[..., None]
    if method == "token":
        alpha = accept_ratio(p_rows[:, :n].gather(-1, idx).squeeze(-1), q_rows.gather(-1, idx).squeeze(-1))  # (m, n)
        reach = torch.cat([torch.ones(m, 1, dtype=torch.float64), alpha.cumprod(-1)], -1)  # (m, n+1)
        stop = torch.cat([1 - alpha, torch.ones(m, 1, dtype=torch.float64)], -1)  # (m, n+1)
        q_pad = torch.cat([q_rows, torch.zeros_like(p_rows[:, :1])], 1)  # no draft at the bonus slot
        nxt = residual_weights(p_rows, q_pad)  # (m, n+1, V)
        return (reach * stop)[..., None] * nxt / nxt.sum(-1, keepdim=True)
    weights = block_weights(p_rows, q_rows, proposals)
    law = tau_law(weights.h)  # (m, n+1)
    nxt = torch.stack([block_residual(p_rows, q_rows, weights, torch.full((m,), a)) for a in range(n + 1)], 1)
    return law[..., None] * nxt / nxt.sum(-1, keepdim=True)


def _blocks(draft, prompt, generated, settings, n, spec, probs) -> list[tuple[tuple[int, ...], list, float]]:
    """Every block the draft can propose from generated: (drafts, q rows, probability)."""
    out, stack = [], [((), [], 1.0)]
    while stack:
        drafts, rows, mass = stack.pop()
        q = None if len(drafts) == n or (drafts and drafting_stops(drafts[-1], settings, spec)) else \
            draft_row(draft, prompt, generated, drafts, settings, spec, probs=probs)
        if q is None:  # the block ends: full, after an EOS, or where the draft's row bans every token
            out.append((drafts, rows, mass))
            continue
        for x, qx in enumerate(q.tolist()):
            if qx > 0:
                stack.append((drafts + (x,), rows + [q], mass * qx))
    return out


def plain_logprob(model, prompt, text: tuple[int, ...], j: int, settings: Settings, *, probs=next_probs) -> float:
    """Plain decoding's log probability of token text[j] after text[:j]: log next_probs(...)[text[j]], and -inf
    where plain decoding never goes (after an EOS, past max_new_tokens): the value a correct loop reports."""
    if settings.eos in text[:j] or j >= settings.max_new_tokens:
        return float("-inf")
    p = float(probs(model, prompt, text[:j], settings)[text[j]])
    return math.log(p) if p > 0 else float("-inf")


class _Round:
    """One round's exact outcomes from a committed prefix, and whether each reports plain's logprobs."""

    def __init__(self, target, draft, prompt, settings, k, spec) -> None:
        self.target, self.draft, self.prompt = target, draft, prompt
        self.settings, self.k, self.spec = settings, k, spec
        self.probs = _Probs()
        self.plain_lp: dict[tuple[int, ...], float] = {}

    def plain_logprob(self, text: tuple[int, ...], j: int) -> float:
        """plain_logprob, cached: every outcome asks."""
        key = text[:j + 1]
        if key not in self.plain_lp:
            self.plain_lp[key] = plain_logprob(self.target, self.prompt, text, j, self.settings, probs=self.probs)
        return self.plain_lp[key]

    def wrong(self, text, start, logprobs) -> bool:
        for j, lp in enumerate(logprobs):
            ref = self.plain_logprob(text, start + j)
            if lp != ref and not abs(lp - ref) <= LOGPROB_TOL:
                return True
        return False

    def first_step(self) -> dict:
        """The plain first step of first_token="plain": one token from the target's processed row."""
        out: dict = defaultdict(float)
        for x, px in enumerate(self.probs(self.target, self.prompt, (), self.settings).tolist()):
            if px > 0:
                text, stop = commit((), (x,), self.settings, self.spec)
                out[(text, next_lasts((), text, self.spec), stop, False)] += px
        return out

    def outcomes(self, generated, lasts) -> dict:
        """P(text, lasts, stop, some logprob wrong) after one round from (generated, lasts)."""
        s, spec = self.settings, self.spec
        if not generated and spec.first_token == "plain":
            return self.first_step()
        groups = defaultdict(list)
        for block in _blocks(self.draft, self.prompt, generated, s, block_size(generated, s, self.k), spec,
                             self.probs):
            groups[len(block[0])].append(block)
        out: dict = defaultdict(float)
        for blocks in groups.values():
            p_rows = [torch.stack(target_rows(self.target, self.prompt, generated, d, s, spec, lasts=lasts,
                                              probs=self.probs)) for d, _, _ in blocks]
            V = p_rows[0].shape[-1]
            q_rows = torch.stack([torch.stack(rows) if rows else torch.zeros(0, V, dtype=torch.float64)
                                  for _, rows, _ in blocks])  # (m, n, V)
            law = verify_law(torch.stack(p_rows), q_rows, torch.tensor([d for d, _, _ in blocks], dtype=torch.long),
                             spec.verifier)  # (m, n+1, V)
            rows = [r.tolist() for r in p_rows]  # reported_logprobs reads single entries: lists are faster
            kept = law > 0
            for (b, a, y), mass in zip(kept.nonzero().tolist(), law[kept].tolist()):
                drafts, _, q_mass = blocks[b]
                block = round_block(drafts, a, y, s, spec)
                text, stop = commit(generated, block, s, spec)
                raw = self.probs(self.target, self.prompt, generated + drafts, s, view=RAW) \
                    if spec.logprobs == "raw_bonus" and a == len(drafts) else None
                lps = reported_logprobs(rows[b], block, a, len(text) - len(generated), spec, raw_bonus=raw)
                out[(text, next_lasts(lasts, text, spec), stop, self.wrong(text, len(generated), lps))] += q_mass * mass
        return out


def _outcomes(target, draft, prompt, settings, k, spec) -> dict[tuple[tuple[int, ...], str, bool], float]:
    """P(text, stop, a reported logprob wrong) of speculate's output: the DP over committed prefixes, shortest first."""
    prompt = _check(prompt, settings)
    k = check_int("k", k, minimum=1)
    if not isinstance(spec, LoopSpec):
        raise TypeError(f"spec must be a LoopSpec, got {type(spec).__name__}")
    rnd = _Round(target, draft, prompt, settings, k, spec)
    frontier: dict = {((), (), False): 1.0}  # (generated, lasts, a logprob already wrong) -> probability
    done: dict = defaultdict(float)
    while frontier:
        shortest = min(len(key[0]) for key in frontier)
        for key in [key for key in frontier if len(key[0]) == shortest]:
            (generated, lasts, bad), mass = key, frontier.pop(key)
            for (text, after, stop, wrong), p in rnd.outcomes(generated, lasts).items():
                if stop is not None:
                    done[(text, stop, bad or wrong)] += mass * p
                else:
                    frontier[(text, after, bad or wrong)] = frontier.get((text, after, bad or wrong), 0.0) + mass * p
    return dict(done)


def speculative_law(target, draft, prompt, settings: Settings, *, k: int, spec: LoopSpec = CORRECT,
                    with_stop: bool = False) -> dict:
    """P(text) for every text loop.speculate can produce under spec (exact; LoopSpec() gives plain_law).

    with_stop: key by (text, stop) instead, as plain_law(..., with_stop=True)."""
    law: dict = defaultdict(float)
    for (text, stop, _), mass in _outcomes(target, draft, prompt, settings, k, spec).items():
        law[(text, stop) if with_stop else text] += mass
    return dict(law)


def logprob_error(target, draft, prompt, settings: Settings, *, k: int, spec: LoopSpec = CORRECT) -> float:
    """The exact chance that speculate reports some logprob further than LOGPROB_TOL from plain's value."""
    return sum(mass for (_, _, bad), mass in _outcomes(target, draft, prompt, settings, k, spec).items() if bad)


def law_tv(a: dict, b: dict) -> float:
    """Total variation 1/2 sum |a(x) - b(x)| between two laws given as dicts (missing keys have probability 0)."""
    return 0.5 * sum(abs(a.get(x, 0.0) - b.get(x, 0.0)) for x in set(a) | set(b))
