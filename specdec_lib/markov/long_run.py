"""Act V, adaptive k in the long run: stopping rules that read the last draft's q, at any k, and why S = N̄ / C̄.

A round starts at the committed state s; the draft drafts y_1 y_2 ... from Q, and a local rule decides after
y_j whether to draft another from j and q(y_j | y_{j-1}) alone: always, up to k (fixed k), or while q(y_j) is
at least a threshold, up to k (transformers' confidence stop). The correct verifier keeps y_j with
a = min(1, p/q). round_law walks the depths once with (start state, last token) tables, so transformers'
k = 20 costs 20 small steps. Per start state it gives E[N | s] (tokens), E[C | s] (a round costs 1 when it
drafts nothing, m c_d + c_v for m proposals), E[m | s], E[N / C | s], the law of (N, next start), and the
drafted tokens that transformers records (the accepted ones and the first rejected one).

Round starts form a Markov chain with stationary law mu. Over R rounds a text holds sum_r N_r tokens and costs
sum_r C_r; divided by R, both converge (ergodic theorem) to N̄ = mu.E[N | s] and C̄ = mu.E[C | s], so the
long-run speedup is S = N̄ / C̄ (renewal reward). text_speedup checks it as the limit of H / E[cost of H
tokens]; mu.E[N / C | s], the mean of per-round ratios, is another number. transformers' heuristic schedule
carries k from round to round, so it is a chain over (k, s).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_int, check_real
from ..cost import round_cost
from ..sampling import accept_ratio, residual_weights
from .chain import check_table

__all__ = ["PolicyResult", "CostedChain", "costed_chain", "stationary", "long_run_result", "RoundLaw", "round_law",
           "local_speedup", "schedule_speedup", "mean_of_ratios", "text_speedup"]


@dataclass(frozen=True)
class PolicyResult:
    """A stopping rule's long-run tokens, proposals and cost per round, and its speedup S."""

    name: str
    tokens_per_round: float  # N̄ = mu.E[N | s]
    drafted_per_round: float  # m̄ = mu.E[m | s]
    cost_per_round: float  # C̄ = mu.E[C | s], in target decode steps
    speedup: float  # S = N̄ / C̄


@dataclass(frozen=True)
class CostedChain:
    """A target and draft chain in float64 with what every round reads from them, and the two step costs."""

    P: torch.Tensor  # (V, V) target rows
    Q: torch.Tensor  # (V, V) draft rows
    A: torch.Tensor  # (V, V) a(b, y) = min(1, p(y | b) / q(y | b))
    res: torch.Tensor  # (V, V) normalised residual rows [p - q]_+ / sum
    c_d: float
    c_v: float


def costed_chain(P, Q, *, c_d: float, c_v: float) -> CostedChain:
    """Validate (P, Q, c_d, c_v) and build the CostedChain: rows renormalised in float64."""
    P, Q = check_table("P", P).double(), check_table("Q", Q).double()
    if P.shape != Q.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    P, Q = P / P.sum(-1, keepdim=True), Q / Q.sum(-1, keepdim=True)
    c_d = check_real("c_d", c_d, low=0.0, high=math.inf, high_open=True)
    c_v = check_real("c_v", c_v, low=0.0, high=math.inf, low_open=True, high_open=True)
    res = residual_weights(P, Q)
    return CostedChain(P=P, Q=Q, A=torch.nan_to_num(accept_ratio(P, Q), nan=0.0), res=res / res.sum(-1, keepdim=True),
                       c_d=c_d, c_v=c_v)


def stationary(T: torch.Tensor) -> torch.Tensor:
    """The stationary law mu = mu T of a row-stochastic T (one closed class assumed), by least squares."""
    S = T.shape[0]
    lhs = torch.cat([(T - torch.eye(S, dtype=T.dtype)).T, torch.ones(1, S, dtype=T.dtype)])
    rhs = torch.cat([torch.zeros(S, dtype=T.dtype), torch.ones(1, dtype=T.dtype)])
    return torch.linalg.lstsq(lhs, rhs[:, None]).solution[:, 0]


def long_run_result(name: str, mu: torch.Tensor, *, n: torch.Tensor, cost: torch.Tensor,
                    m: torch.Tensor) -> PolicyResult:
    """The PolicyResult of per-state E[N], E[C], E[m] (S,) under the stationary law mu (S,) of round starts."""
    n, cost, m = (float(mu @ x) for x in (n, cost, m))
    return PolicyResult(name=name, tokens_per_round=n, drafted_per_round=m, cost_per_round=cost, speedup=n / cost)


@dataclass(frozen=True)
class RoundLaw:
    """One round of a local rule from every start state s: expectations (V,), next-start laws, records."""

    n: torch.Tensor  # (V,) E[N | s]
    cost: torch.Tensor  # (V,) E[C | s]
    m: torch.Tensor  # (V,) E[m | s]
    ratio: torch.Tensor  # (V,) E[N / C | s]
    full: torch.Tensor  # (V, V) P(every drafted proposal accepted, next start | s): the bonus token's law
    rejected_next: torch.Tensor  # (V, V) P(a rejection, next start | s): the residual token's law
    jumps: torch.Tensor  # (k + 2, V, V) P(N = n, next start | s) for n = 0 .. k + 1 (n = 0 never happens)
    accepted: torch.Tensor  # (V, V, V) expected accepted proposals y drafted after b, per start: (s, b, y)
    first_rejected: torch.Tensor  # (V, V, V) P(the first rejection is y drafted after b | s): (s, b, y)

    @property
    def next_start(self) -> torch.Tensor:
        """(V, V) the law of the next round's start state."""
        return self.full + self.rejected_next


def round_law(c: CostedChain, *, k: int, confidence: float = 0.0) -> RoundLaw:
    """Draft while q(y_j | y_{j-1}) >= confidence, at most k proposals (confidence 0: always k); verify exactly."""
    k = check_int("k", k, minimum=0)
    confidence = check_real("confidence", confidence, low=0.0, high=1.0)
    V, f64 = c.P.shape[0], torch.float64
    n, cost, m, ratio = (torch.zeros(V, dtype=f64) for _ in range(4))
    n += 1.0  # the target's own token
    jumps = torch.zeros(k + 2, V, V, dtype=f64)
    accepted, first_rejected = torch.zeros(V, V, V, dtype=f64), torch.zeros(V, V, V, dtype=f64)
    if k == 0:  # plain decoding: one target step, one token from p
        jumps[1] = c.P
        return RoundLaw(n=n, cost=cost + 1.0, m=m, ratio=ratio + 1.0, full=c.P.clone(), rejected_next=jumps[0],
                        jumps=jumps, accepted=accepted, first_rejected=first_rejected)
    sure = (c.Q >= confidence).to(f64)  # (V, V) the rule drafts on after y drafted from b
    full = torch.zeros(V, V, dtype=f64)
    # over the paths the rule is still drafting, by (start s, last drafted token): drafted, all accepted so far,
    # and drafted weighted by the number accepted so far
    reach, acc, gained = torch.eye(V, dtype=f64), torch.eye(V, dtype=f64), torch.zeros(V, V, dtype=f64)
    for j in range(1, k + 1):  # y_j drafted from the last token b
        drafted = reach.unsqueeze(-1) * c.Q  # (s, b, y)
        kept = acc.unsqueeze(-1) * c.Q * c.A  # (s, b, y) drafted, and y_1 .. y_j all accepted
        count = gained.unsqueeze(-1) * c.Q + kept  # (s, b, y) drafted, times the accepted count
        miss = acc.unsqueeze(-1) * c.Q * (1 - c.A)  # (s, b, y) y_j is the first rejection
        accepted += kept
        first_rejected += miss
        n += kept.sum((1, 2))
        jumps[j] += torch.einsum("sby,bz->sz", miss, c.res)  # N = j: j - 1 accepted, then the residual token
        go = sure if j < k else torch.zeros_like(sure)
        stop, stop_kept, stop_count = ((x * (1 - go)).sum(1) for x in (drafted, kept, count))  # (s, y)
        C = round_cost(draft_steps=j, c_d=c.c_d, c_v=c.c_v)
        cost += stop.sum(1) * C
        m += stop.sum(1) * j
        ratio += (stop.sum(1) + stop_count.sum(1)) / C  # E[N 1{m = j}] / C(j)
        full += stop_kept @ c.P  # all j accepted: the bonus token from y_j's row
        jumps[j + 1] += stop_kept @ c.P
        reach, acc, gained = ((x * go).sum(1) for x in (drafted, kept, count))
        if not reach.any():  # no path drafts deeper
            break
    return RoundLaw(n=n, cost=cost, m=m, ratio=ratio, full=full, rejected_next=jumps.sum(0) - full, jumps=jumps,
                    accepted=accepted, first_rejected=first_rejected)


def local_speedup(c: CostedChain, *, k: int, confidence: float = 0.0, name: str) -> PolicyResult:
    """The long-run PolicyResult of round_law(c, k, confidence)."""
    law = round_law(c, k=k, confidence=confidence)
    return long_run_result(name, stationary(law.next_start), n=law.n, cost=law.cost, m=law.m)


def mean_of_ratios(P, Q, *, c_d: float, c_v: float, k: int, confidence: float = 0.0) -> float:
    """mu.E[N / C | s]: the per-round speedup averaged over rounds (not the long-run S; a negative control)."""
    law = round_law(costed_chain(P, Q, c_d=c_d, c_v=c_v), k=k, confidence=confidence)
    return float(stationary(law.next_start) @ law.ratio)


def text_speedup(P, Q, *, c_d: float, c_v: float, k: int, confidence: float = 0.0, horizon: int,
                 start: int = 0) -> float:
    """H / E[C_H | start]: the speedup of a text of H tokens, by the renewal equation over rounds,
    E[C_h | s] = E[C | s] + sum_{n, s'} P(N = n, s' | s) E[C_{h - n} | s'], with C_h = 0 for h <= 0."""
    law = round_law(costed_chain(P, Q, c_d=c_d, c_v=c_v), k=k, confidence=confidence)
    horizon = check_int("horizon", horizon, minimum=1)
    K, V = law.jumps.shape[0], law.n.shape[0]
    costs = torch.zeros(horizon + K, V, dtype=torch.float64)  # costs[K - 1 + h] = E[C_h | .]; 0 for h <= 0
    for h in range(1, horizon + 1):
        i = K - 1 + h
        before = costs[i - K + 1:i].flip(0)  # (K - 1, V): E[C_{h - 1}], E[C_{h - 2}], ..., E[C_{h - K + 1}]
        costs[i] = law.cost + torch.einsum("nst,nt->s", law.jumps[1:], before)
    return horizon / float(costs[-1, start])


def schedule_speedup(c: CostedChain, *, k_min: int = 1, k_max: int, confidence: float = 0.0) -> PolicyResult:
    """transformers' heuristic: k + 2 after a round whose drafts were all accepted, else k - 1, within
    [k_min, k_max] (transformers sets no k_max), optionally with the confidence stop; in the long run."""
    k_min, k_max = check_int("k_min", k_min, minimum=0), check_int("k_max", k_max, minimum=0)
    if k_min > k_max:
        raise ValueError(f"k_min must be <= k_max = {k_max}, got {k_min}")
    ks = list(range(k_min, k_max + 1))
    V, laws = c.P.shape[0], [round_law(c, k=k, confidence=confidence) for k in ks]
    T = torch.zeros(len(ks) * V, len(ks) * V, dtype=torch.float64)  # states (k, s), k-major
    for i, (k, law) in enumerate(zip(ks, laws)):
        up, down = ks.index(min(k + 2, k_max)), ks.index(max(k - 1, k_min))
        T[i * V:(i + 1) * V, up * V:(up + 1) * V] += law.full
        T[i * V:(i + 1) * V, down * V:(down + 1) * V] += law.rejected_next
    stop = f" + confidence {confidence:g}" if confidence > 0 else ""
    return long_run_result(f"hf schedule [{k_min}, {k_max}]{stop}", stationary(T),
                           n=torch.cat([law.n for law in laws]), cost=torch.cat([law.cost for law in laws]),
                           m=torch.cat([law.m for law in laws]))
