"""Exact laws of one verified block: what a verifier commits, enumerated over every proposal and every outcome.

A verifier gets target rows p_1..p_{k+1}, draft rows q_1..q_k and proposals y_j ~ q_j, and commits a string
t = (y_1..y_a, z). The battery's targets are history-free (row i is the target at position i, whatever came
before), so a correct decoder's output over the block's k+1 positions is p_1 x ... x p_{k+1}: t, completed
by the target rows after it (what the next blocks would draw), must have that law. This completed law is what
the kit compares; any exact rule passes (match acceptance too), any inexact one moves it.

Each verifier the kit knows is a `Rule` (the correct one and the field guide's verification bugs); `block_law`
walks a rule's branches exactly as markov/exact.py walks a decoder's:

  propose y from q_j:                 q_j(y)
  accept it:                          a = min(1, p(y) / q(y))   (p(y) for the rules that keep a likely y)
  reject it, then emit z:             (1 - a) fix(z)             fix = the rule's residual law
  after k acceptances, the bonus z:   p_{k+1}(z)                 (q_k(z) for bonus_from_draft)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import torch

from ..markov.reference import residual_weights

Law = dict[tuple[int, ...], float]  # committed tokens -> probability


@dataclass(frozen=True)
class Rule:
    """How a verifier keeps, replaces and completes a block: the correct rule is the default."""

    accept: Literal["ratio", "target_prob", "always_first"] = "ratio"  # min(1, p/q) | p(y) | first kept unverified
    residual: Literal["normalised", "softmax", "target", "single_token"] = "normalised"  # what a rejection samples
    uniform: Literal["fresh", "reused"] = "fresh"  # reused: the rejection's draw reuses u ~ U(a, 1)
    judge: Literal["aligned", "off_by_one"] = "aligned"  # target row for proposal j: p_j | p_{j+1}
    q_row: Literal["aligned", "rolled"] = "aligned"  # draft row in p/q and [p - q]_+: q_j | q_{j-1} (wrong slot)
    bonus: Literal["target", "draft"] = "target"  # after k acceptances: p_{k+1} | q_k
    keep_rejected: bool = False  # the rejected proposal stays in the output before the correction


def _normalise(w: list[float]) -> list[float]:
    total = sum(w)
    return [x / total for x in w]


def accept_probability(rule: Rule, p: list[float], q: list[float], y: int, *, first: bool) -> float:
    """The chance the rule keeps proposal y (p/0 counts as inf, 0/0 as 0, as sd.acceptance_probability does)."""
    if rule.accept == "always_first" and first:
        return 1.0
    if rule.accept == "target_prob":
        return p[y]
    return min(1.0, p[y] / q[y]) if q[y] > 0 else float(p[y] > 0)


def fix_law(rule: Rule, p: list[float], q: list[float], y: int, a: float) -> list[float]:
    """Law of the token a rejection of y emits, given the rejection (acceptance probability a)."""
    w = residual_weights(rule, p, q, y)  # reads rule.residual, as it reads a DecoderSpec's
    if rule.uniform == "fresh":
        return _normalise(w)
    # reused: token z owns [cdf_{z-1}, cdf_z) of the inverse CDF, and the uniform is U(a, 1) after a rejection
    cdf = list(itertools.accumulate(_normalise(w)))
    last = max(z for z, x in enumerate(w) if x > 0)
    lo, law = 0.0, []
    for z in range(len(w)):
        hi = 1.0 if z == last else min(cdf[z], 1.0)
        law.append(max(0.0, hi - max(lo, a)) / (1.0 - a) if z <= last else 0.0)
        lo = hi
    return law


def block_law(rule: Rule, p_rows: torch.Tensor, q_rows: torch.Tensor) -> Law:
    """Exact law of the committed tokens of one block, proposals y_j ~ q_j (rows taken in float64, renormalised)."""
    P = (p_rows.double() / p_rows.double().sum(-1, keepdim=True)).tolist()
    Q = (q_rows.double() / q_rows.double().sum(-1, keepdim=True)).tolist()
    k, law = len(Q), {}

    def add(t: tuple, mass: float) -> None:
        law[t] = law.get(t, 0.0) + mass

    def walk(j: int, prefix: tuple, mass: float) -> None:
        if j == k:  # a full block: the bonus token
            for z, w in enumerate(P[k] if rule.bonus == "target" else Q[k - 1]):
                if w > 0:
                    add(prefix + (z,), mass * w)
            return
        p = P[j + 1] if rule.judge == "off_by_one" else P[j]
        q = Q[(j - 1) % k] if rule.q_row == "rolled" else Q[j]
        for y, d in enumerate(Q[j]):  # the proposal is drawn from the true q_j
            if d <= 0:
                continue
            a = accept_probability(rule, p, q, y, first=j == 0)
            if a > 0:
                walk(j + 1, prefix + (y,), mass * d * a)
            if a < 1:
                base = prefix + (y,) if rule.keep_rejected else prefix
                for z, w in enumerate(fix_law(rule, p, q, y, a)):
                    if w > 0:
                        add(base + (z,), mass * d * (1 - a) * w)

    walk(0, (), 1.0)
    return law


def complete(law: Law, p_rows: torch.Tensor) -> torch.Tensor:
    """The law (V,) * (k+1) of t followed by target draws at the positions after it (t cut at k + 1 tokens)."""
    k1, V = p_rows.shape
    P = (p_rows.double() / p_rows.double().sum(-1, keepdim=True))  # (k+1, V)
    out = torch.zeros((V,) * k1, dtype=torch.float64)
    for t, mass in law.items():
        t = t[:k1]
        tail = torch.ones((), dtype=torch.float64)
        for row in P[len(t):]:
            tail = torch.tensordot(tail, row, dims=0)  # (V,) * (k+1 - len(t)) product of the remaining rows
        out[t] += mass * tail
    return out


def target_law(p_rows: torch.Tensor) -> torch.Tensor:
    """p_1 x ... x p_{k+1}: what an exact decoder emits over the block's positions, shape (V,) * (k+1)."""
    return complete({(): 1.0}, p_rows)
