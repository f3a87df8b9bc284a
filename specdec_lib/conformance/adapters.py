"""Adapters: other verifier conventions turned into the kit's batched one (p (n, k+1, V), q (n, k, V), y (n, k)).

A convention names what the user's function takes and returns:
  probs         fn(p_rows (k+1, V), q_rows (k, V), proposals (k,), generator) -> (accepted, tokens) or a Verdict
  logits        the same with log-probabilities (-inf where a probability is zero) in place of p_rows and q_rows
  batched       fn(p (n, k+1, V), q (n, k, V), proposals (n, k), generator) -> (accepted (n,), tokens (n, k+1))
                with tokens padded by -1 after the committed ones, or a BlockVerdicts (sd.verify_blocks' result)
  transformers  fn(candidate_input_ids (1, 1+k), candidate_logits (1, k, V), candidate_length, new_logits
                (1, k+1, V)) -> (valid_tokens (1, a+1), n_matches), as transformers' _speculative_sampling; it
                draws from torch's global generator, so each call runs in torch.random.fork_rng seeded from ours
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .._checks import check_choice

__all__ = ["CONVENTIONS", "PAD", "adapt", "parse_block", "log_probs", "per_block", "from_transformers"]

CONVENTIONS = ("probs", "logits", "batched", "transformers")
PAD = -1


def _pad(rows: list[list[int]], width: int) -> torch.Tensor:
    """Token lists -> (n, w) padded with PAD, w the longest list or width, whichever is larger."""
    width = max([width] + [len(r) for r in rows])
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.long).reshape(len(rows), width)


def parse_block(out, where: str) -> tuple[int, list[int]]:
    """(accepted, tokens) from what a one-block verifier returned: a Verdict or a pair; TypeError otherwise."""
    if hasattr(out, "accepted") and hasattr(out, "tokens"):
        out = (out.accepted, out.tokens)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{where} must return (accepted, tokens) or a Verdict, got {type(out).__name__}")
    accepted, tokens = out
    if isinstance(accepted, torch.Tensor) and accepted.numel() == 1:
        accepted = accepted.item()
    if not isinstance(accepted, int) or isinstance(accepted, bool):
        raise TypeError(f"{where}: accepted must be an int, got {type(accepted).__name__}")
    tokens = tokens.reshape(-1).tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
    return accepted, [int(t) for t in tokens]


def log_probs(x: torch.Tensor) -> torch.Tensor:
    """log x with -inf at zeros: logits whose softmax is x."""
    return torch.log(x)


def per_block(fn: Callable, *, logits: bool = False) -> Callable:
    """A one-block verifier (probabilities or logits) driven block by block under the batched convention."""

    def verify(p, q, proposals, generator=None):
        acc, rows = [], []
        if logits:
            p, q = log_probs(p), log_probs(q)
        for i in range(proposals.shape[0]):
            a, t = parse_block(fn(p[i], q[i], proposals[i], generator), "fn")
            acc.append(a)
            rows.append(t)
        return torch.tensor(acc, dtype=torch.long), _pad(rows, proposals.shape[1] + 1)

    return verify


def from_transformers(fn: Callable) -> Callable:
    """transformers' (valid_tokens, n_matches) convention, one block per call, global RNG forked and seeded."""

    def verify(p, q, proposals, generator=None):
        acc, rows = [], []
        seeds = torch.randint(2**62, (proposals.shape[0],), generator=generator)  # (n,) one seed per block
        with torch.random.fork_rng(devices=[]):
            for i in range(proposals.shape[0]):
                torch.default_generator.manual_seed(int(seeds[i]))  # CPU global generator; fork_rng restores it
                ids = torch.cat([proposals.new_zeros(1), proposals[i]])[None]  # (1, 1+k) a one-token prompt
                k = proposals.shape[1]
                valid, n_matches = fn(ids, log_probs(q[i])[None], k, log_probs(p[i])[None])
                acc.append(int(n_matches))
                rows.append(valid.reshape(-1).tolist())
        return torch.tensor(acc, dtype=torch.long), _pad(rows, proposals.shape[1] + 1)

    return verify


def adapt(fn: Callable, convention: str) -> Callable:
    """The user's fn under the kit's batched convention."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    check_choice("convention", convention, CONVENTIONS)
    if convention == "batched":
        return fn
    if convention == "transformers":
        return from_transformers(fn)
    return per_block(fn, logits=convention == "logits")
