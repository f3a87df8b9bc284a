"""Adapters and broken reference implementations for the randomness tier (randomness.py runs the probes).

`library_verifier` feeds sd.verify_blocks / sd.verify_block explicit coins: torch.rand, called with the
adapter's own generator, returns the kit's tape in the order the library draws (the tests (n, k), then the final
draw (n,); a block at a time: (k,), then ()); any other order raises, so a change in the library's draws cannot go
unseen. `keyed_by_step` keys a uniforms verifier as a per-request generator would (fresh coins every round),
`keyed_by_position` as vLLM Model Runner V2 does (u(seed, position)), `batch_stream` as vLLM did before PR #6034
(one stream for the whole batch).
Each broken reference models one source (randomness.py's citations say which) with explicit coins.
"""
from __future__ import annotations

from unittest import mock

import torch

from .._checks import check_choice
from ..sampling import residual_weights
from ..verification import accepted_prefix, commit_tokens, verify_block, verify_blocks

__all__ = ["library_verifier", "keyed_by_step", "keyed_by_position", "batch_stream", "BROKEN", "broken_verifier"]


def _tape(generator: torch.Generator, draws: list[torch.Tensor]):
    real = torch.rand

    def rand(*size, **kw):
        gen = kw.pop("generator", None)
        if gen is not generator:
            return real(*size, generator=gen, **kw)
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
        if not draws or tuple(draws[0].shape) != shape:
            raise RuntimeError(f"the library drew torch.rand{shape}; the tape holds "
                               f"{[tuple(d.shape) for d in draws]}: its draw order changed")
        return draws.pop(0).to(kw.get("dtype") or torch.float32)

    return mock.patch.object(torch, "rand", rand)


def library_verifier(method: str = "token", *, one_block: bool = False):
    """sd.verify_blocks (one_block: sd.verify_block, a call per row) under the uniforms convention."""
    check_choice("method", method, ("token", "block"))

    def verify(p, q, proposals, coins, final):
        g, n = torch.Generator(), proposals.shape[0]
        if not one_block:
            draws = [coins.double(), final.double()]
            with _tape(g, draws):
                v = verify_blocks(p, q, proposals, g, method=method)
            accepted, tokens = v.accepted, v.tokens
        else:
            draws = [d for i in range(n) for d in (coins[i].double(), final[i].double())]  # one block: (k,), ()
            with _tape(g, draws):
                out = [verify_block(p[i], q[i], proposals[i], g, method=method) for i in range(n)]
            accepted = torch.tensor([v.accepted for v in out], dtype=torch.long)
            tokens = commit_tokens(proposals, accepted, torch.stack([v.tokens[-1] for v in out]))
        if draws:
            raise RuntimeError("the library drew fewer uniforms than the tape holds: its draw order changed")
        return accepted, tokens

    return verify


def keyed_by_step(fn):
    """A uniforms verifier keyed as a per-request generator is: (seed, round, slot), fresh every round."""
    def verify(p, q, proposals, source, keys):
        k = proposals.shape[1]
        u = source(keys.seed, keys.step[:, None] * (k + 1) + torch.arange(k + 1), 0)
        return fn(p, q, proposals, u[:, :k], u[:, k])
    return verify


def keyed_by_position(fn):
    """vLLM Model Runner V2's keying: the coin of the proposal at absolute position pos is u(seed, pos), in every
    round that judges pos; the final draw keyed at the block's start, on its own stream."""
    def verify(p, q, proposals, source, keys):
        k = proposals.shape[1]
        tests = source(keys.seed, keys.position[:, None] + torch.arange(k), 0)
        return fn(p, q, proposals, tests, source(keys.seed, keys.position[:, None], 1)[:, 0])
    return verify


def batch_stream(fn):
    """vLLM before PR #6034: the batch's coins are one draw from one stream, row by row, whatever each seed says."""
    def verify(p, q, proposals, source, keys):
        n, k = proposals.shape
        counter = (keys.step[:, None] * n + torch.arange(n)[:, None]) * (k + 1) + torch.arange(k + 1)
        u = source(torch.zeros_like(keys.seed), counter, 3)
        return fn(p, q, proposals, u[:, :k], u[:, k])
    return verify


def _token_rule(p, q, y, coins, final, bug: str = ""):
    """The token rule with explicit coins; `bug` names one randomness bug of BROKEN to commit (each models a source)."""
    n, k = y.shape
    V = p.shape[-1]
    if bug == "float32_coins":  # coins stored in float32 (1 - 2^-53 -> 1.0)
        coins, final = coins.float().double(), final.float().double()
    p, q = p.double(), q.double()
    ratio = (p[:, :k].gather(-1, y[..., None]) / q.gather(-1, y[..., None])).squeeze(-1).clamp(max=1.0)
    a = accepted_prefix(coins <= ratio if bug == "accept_le" else coins < ratio)
    rows = torch.arange(n)
    q_at = torch.cat([q, torch.zeros_like(p[:, :1])], 1)[rows, a]
    if bug == "empty_scratch":  # the draft's nonzero probabilities put in an uninitialised buffer (sglang #12561)
        buf = torch.empty_like(q_at)
        q_at = torch.where((q_at > 0) | (a == k)[:, None], q_at, buf)
    w = residual_weights(p[rows, a], q_at)
    u = torch.where(a < k, coins[rows, a.clamp(max=k - 1)], final) if bug == "reused_coin" else final
    cdf = w.cumsum(-1)
    z = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=bug != "cdf_left").squeeze(-1).clamp(max=V - 1)
    return a, commit_tokens(y, a, z)


def _switch(bug: str):
    def verify(p, q, proposals, coins, final):
        return _token_rule(p, q, proposals, coins, final, bug)
    return verify


BROKEN = {  # name -> (the probe that catches it, convention, method, what it does)
    "accept_le": ("coin_zero", "uniforms", "token", "keeps a proposal when coin <= min(1, p/q)"),
    "cdf_left": ("coin_zero", "uniforms", "token", "draws the last token by the first bucket with C >= u * total"),
    "float32_coins": ("coin_top", "uniforms", "token", "narrows its coins to float32"),
    "reused_coin": ("grid_law", "uniforms", "token", "the residual draw reads the rejected test's coin"),
    "position_keyed_block": ("rounds", "keyed", "block", "block verification with vLLM MRV2's u(seed, pos) coins"),
    "batch_stream": ("batch", "keyed", "token", "the batch's coins from one shared stream, row by row"),
    "empty_scratch": ("poison", "uniforms", "token", "q read through an uninitialised scratch buffer"),
}


def broken_verifier(name: str):
    """(fn, convention, method) of a broken reference implementation, by name (BROKEN lists them)."""
    check_choice("name", name, tuple(BROKEN))
    _, convention, method, _ = BROKEN[name]
    if name == "position_keyed_block":
        return keyed_by_position(library_verifier("block")), convention, method
    if name == "batch_stream":
        return batch_stream(library_verifier("token")), convention, method
    return _switch(name), convention, method
