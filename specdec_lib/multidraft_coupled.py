"""Many drafts at one position, verifiers whose coins are fixed by the whole draft tuple: SpecTr's K-SEQ and SpecHub.

Each tests its drafts in a fixed order with coins whose probabilities depend on p, q and the tuple only, and draws
from one residual when every coin fails (so the target never changes between tests, unlike a `Stages` verifier).

K-SEQ (Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal Transport", NeurIPS 2023,
arXiv 2310.15141): n i.i.d. drafts, draft x_i kept with min(1, p(x_i) / (rho q(x_i))). With
beta(rho) = sum_x min(q(x), p(x) / rho), one test keeps x with probability min(q(x), p(x) / rho), so the n tests keep
x with c min(q(x), p(x) / rho), c = (1 - (1 - beta)^n) / beta, and the residual p - c min(q, p / rho) (mass
(1 - beta)^n) is a distribution when c <= rho. The acceptance 1 - (1 - beta)^n falls with rho, so rho is the smallest
value in [1, n] with 1 - (1 - beta(rho))^n <= rho beta(rho) (the paper's equation; rho = 1 at n = 1), found by bisection
that keeps the feasible end. (Only the paper's abstract could be opened here: the rule follows the course's notes on
it, and the exact engine checks its law, its acceptance 1 - (1 - beta)^n and the paper's (1 - 1/e) guarantee.)

SpecHub (Sun, Zhou, Chen, Sun, EMNLP 2024): the hub pair (i, a) or (a, i) around a = argmax q (multidraft_draws).
Modelled on MasterGodzilla/Speculative_decoding_OT EAGLE/eagle/model/utils.py evaluate_posterior (mode 'spechub') @
7d592b70e954bb1fb48516a5628f9c3439645464 (unchanged since cceb978d6dbc61485a3291ec813dd0567b08c022): with
Q(i, a) = q(i), Q(a, i) = q(a) q(i) / (1 - q(a)): (i, a) keeps i with min(1, p(i) / Q(i, a)); p1 = [p - Q(., a)]_+
off a; (a, i) keeps i with min(1, p1(i) / Q(a, i)); p2 = [p1 - Q(a, .)]_+ off a; then a is kept by (a, i) with
min(1, p(a) / S_ai), S_ai = sum_i [Q(a, i) - p1(i)]_+, and by (i, a) with min(1, [p(a) - S_ai]_+ / S_ia),
S_ia = sum_i [q(i) - p(i)]_+; the residual is p2 off a and [p(a) - S_ai - S_ia]_+ at a. Its docstring says the same;
the code adds one line the docstring does not have: when p(a) > 1 - 1e-3 it keeps a outright (`shortcut`).
Everything is float64; p and q arrive validated and normalised.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._checks import check_real
from .multidraft_draws import top_order
from .sampling import accept_ratio, residual_weights, sample_rows

__all__ = ["KSeq", "Hub", "kseq_rho", "Coins", "coupled_coins", "coupled_outcomes", "coupled_draw"]


@dataclass(frozen=True)
class KSeq:
    """SpecTr's K-SEQ: n i.i.d. drafts, each kept with min(1, p / (rho q)); one residual when all are rejected.

    rho None: the paper's smallest feasible rho (kseq_rho); a number fixes it (a rho below that leaves a residual
    with negative entries, clamped here: the law is then not p)."""

    rho: float | None = None
    draws: str = field(default="iid", init=False)

    def __post_init__(self) -> None:
        if self.rho is not None:
            check_real("rho", self.rho, low=1.0)


@dataclass(frozen=True)
class Hub:
    """SpecHub's verifier of its hub pair; shortcut > 0 keeps the hub outright when p(a) > 1 - shortcut (its code)."""

    shortcut: float = 0.0
    draws: str = field(default="hub", init=False)

    def __post_init__(self) -> None:
        check_real("shortcut", self.shortcut, low=0.0, high=1.0)


def _beta(p: torch.Tensor, q: torch.Tensor, rho: float) -> float:
    """beta(rho) = sum_x min(q(x), p(x) / rho)."""
    return float(torch.minimum(q, p / rho).sum())


def _reach(beta: float, num_drafts: int) -> float:
    """(1 - beta)^n, the probability that all n tests fail (beta <= 1)."""
    return math.exp(num_drafts * math.log1p(-beta)) if beta < 1 else 0.0


def kseq_rho(p: torch.Tensor, q: torch.Tensor, num_drafts: int) -> float:
    """The smallest rho in [1, n] with 1 - (1 - beta(rho))^n <= rho beta(rho), by bisection (the feasible end)."""
    def feasible(rho: float) -> bool:
        beta = _beta(p, q, rho)
        return 1 - _reach(beta, num_drafts) <= rho * beta
    lo, hi = 1.0, float(num_drafts)
    if feasible(lo):
        return lo
    for _ in range(200):  # 1 - (1 - b)^n <= n b, so rho = n is feasible; the gap halves each step
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
        if hi - lo <= 4e-16 * hi:
            break
    return hi


@dataclass(frozen=True)
class Coins:
    """A coupled verifier on draft tuples X (K, k): order (K, k) the slots it tests, first to last; coin (K, k) each
    test's probability of keeping its draft, given it is reached; residual (V,) unnormalised, drawn when all fail."""

    order: torch.Tensor
    coin: torch.Tensor
    residual: torch.Tensor


def _kseq_coins(p, q, X, v: KSeq) -> Coins:
    """K-SEQ's tests: draft order, coins min(1, p / (rho q)), residual p - c min(q, p / rho)."""
    n = X.shape[1]
    rho = kseq_rho(p, q, n) if v.rho is None else v.rho
    m = torch.minimum(q, p / rho)  # (V,) what one test keeps of each token
    beta = float(m.sum())
    c = n if beta == 0 else (1 - _reach(beta, n)) / beta  # (1 - (1 - beta)^n) / beta, n in the limit beta -> 0
    order = torch.arange(n).expand_as(X)
    return Coins(order=order, coin=accept_ratio(p[X], rho * q[X]), residual=torch.clamp(p - c * m, min=0.0))


def _hub_coins(p, q, X, shortcut: float) -> Coins:
    """SpecHub's tests on pairs (i, a) and (a, i) (single drafts: the one-draft rule); see the module docstring."""
    if X.shape[1] == 1:  # one draft (num_drafts = 1, or q a point mass): ordinary speculative sampling
        return Coins(order=torch.zeros_like(X), coin=accept_ratio(p[X], q[X]), residual=residual_weights(p, q))
    a = top_order(q)[0]
    off = torch.ones_like(q, dtype=torch.bool).index_fill_(0, a, False)  # (V,) every token but the hub
    q_ia = torch.where(off, q, 0.0)  # Q(i, a) = q(i)
    q_ai = q[a] * q_ia / q_ia.sum()  # Q(a, i) = q(a) q(i) / (1 - q(a)), 1 - q(a) as the sum of the others
    p1 = torch.where(off, torch.clamp(p - q_ia, min=0.0), p)
    p2 = torch.where(off, torch.clamp(p1 - q_ai, min=0.0), p)
    s_ai, s_ia = torch.clamp(q_ai - p1, min=0.0).sum(), torch.clamp(q_ia - p, min=0.0).sum()
    left = torch.clamp(p[a] - s_ai, min=0.0)  # p(a) after the (a, i) pairs keep theirs
    keep_a_ai = torch.where(s_ai > 0, torch.clamp(p[a] / s_ai, max=1.0), 1.0)
    keep_a_ia = torch.where(s_ia > 0, torch.clamp(left / s_ia, max=1.0), 1.0)
    hub_second = X[:, 1] == a  # (K,) the pair (i, a); else (a, i)
    i = torch.where(hub_second, X[:, 0], X[:, 1])  # (K,) the non-hub draft
    first = torch.where(hub_second, accept_ratio(p[i], q_ia[i]), accept_ratio(p1[i], q_ai[i]))
    coin = torch.stack([first, torch.where(hub_second, keep_a_ia, keep_a_ai)], 1)  # (K, 2) i is tested first
    order = torch.stack([torch.where(hub_second, 0, 1), torch.where(hub_second, 1, 0)], 1)
    if p[a] > 1 - shortcut:  # the code's shortcut: keep a outright
        coin = torch.stack([torch.zeros_like(first), torch.ones_like(first)], 1)
    return Coins(order=order, coin=coin, residual=torch.where(off, p2, torch.clamp(left - s_ia, min=0.0)))


def coupled_coins(p: torch.Tensor, q: torch.Tensor, X: torch.Tensor, v: KSeq | Hub) -> Coins:
    """The tests a K-SEQ or SpecHub verifier runs on draft tuples X (K, k)."""
    return _kseq_coins(p, q, X, v) if isinstance(v, KSeq) else _hub_coins(p, q, X, v.shortcut)


def coupled_outcomes(p: torch.Tensor, q: torch.Tensor, X: torch.Tensor, v: KSeq | Hub):
    """(chance (K, k), fallback (K, V)): P(draft j is kept | X), P(all fail and x drawn | X)."""
    t = coupled_coins(p, q, X, v)
    reach = torch.ones(X.shape[0], dtype=torch.float64)
    chance = torch.zeros(X.shape, dtype=torch.float64)
    for slot, coin in zip(t.order.T, t.coin.T):  # (K,) the slot each row tests now, and its coin
        chance.scatter_(1, slot[:, None], (reach * coin)[:, None])
        reach = reach * (1 - coin)
    total = t.residual.sum()
    rest = t.residual / total if total > 0 else p  # no mass left: every test keeps (reach is 0)
    return chance, reach[:, None] * rest


def coupled_draw(p: torch.Tensor, q: torch.Tensor, X: torch.Tensor, v: KSeq | Hub, generator):
    """(token (size,), kept (size,)): the coins flipped in test order for drafts X (size, k), else a residual draw."""
    t = coupled_coins(p, q, X, v)
    u = torch.rand(X.shape, dtype=torch.float64, generator=generator)  # (size, k) one uniform a test
    out = torch.full((X.shape[0],), -1, dtype=torch.long)
    for slot, coin, u_j in zip(t.order.T, t.coin.T, u.T):
        keep = (out < 0) & (u_j < coin)
        out = torch.where(keep, X.gather(1, slot[:, None]).squeeze(1), out)
    kept = out >= 0
    rest = t.residual if t.residual.sum() > 0 else p  # no mass left: no row gets here
    out[~kept] = sample_rows(rest.expand(int((~kept).sum()), -1), generator)
    return out, kept
