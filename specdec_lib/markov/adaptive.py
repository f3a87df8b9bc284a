"""Act V, adaptive k: any stopping rule over the whole drafted path, and the oracle rule by policy iteration.

A round starts at the committed state s; the draft drafts y_1 y_2 ... from Q and a stopping rule decides,
after each token, whether to draft another (it sees s and the drafted path, never the acceptance coins);
the correct verifier then accepts each y_j with a(y_{j-1}, y_j) = min(1, p/q). Every rule here is a tensor
cont[j] over paths (V,) * (j + 1): 1 where it drafts token j + 1, so any function of the path can be written,
up to k_max (V^(k_max + 1) paths). Evaluating one gives, per start state, E[N] (tokens), E[C] (cost: 1 for a
round that drafts nothing, m c_d + c_v for m proposals) and the law of the next round's start; the long-run
speedup is S = N̄ / C̄ (long_run.py derives it). The best rule is an oracle: it reads the exact acceptance
probability a of every drafted token, which no deployed drafter knows. Policy iteration finds it: evaluate
the current rule (its S and the relative value h of each start state), then improve it at every path at
once by backward induction (draft on where that is worth more than stopping, at the price S), and repeat
until the rule no longer changes. Rules that read only the last q (fixed k at any k, the confidence stop,
transformers' schedule) are evaluated in long_run.py, without the path limit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_int
from .long_run import (
    CostedChain,
    PolicyResult,
    confidence_speedup,
    costed_chain,
    hf_schedule_speedup,
    long_run_result,
    stationary,
)

__all__ = ["PolicyResult", "OptimalStop", "policy_speedup", "fixed_k_speedups", "confidence_speedup",
           "hf_schedule_speedup", "optimal_stopping"]

MAX_PATHS = 4_000_000  # V^(k_max + 1) paths at the deepest level: about 32 MB of float64


def _chain(P, Q, c_d, c_v, k_max) -> tuple[CostedChain, int]:
    c = costed_chain(P, Q, c_d=c_d, c_v=c_v)
    k_max = check_int("k_max", k_max, minimum=0)
    if c.P.shape[0] ** (k_max + 1) > MAX_PATHS:
        raise ValueError(f"k_max = {k_max} needs {c.P.shape[0]}^{k_max + 1} paths; at most {MAX_PATHS} are allowed")
    return c, k_max


def _ends(x: torch.Tensor) -> torch.Tensor:
    """A path tensor (V,) * (j + 1) summed onto (start state, last token): (V, V)."""
    V = x.shape[0]
    return torch.diag(x) if x.dim() == 1 else x.reshape(V, -1, V).sum(1)


def _last(table: torch.Tensor, depth: int) -> torch.Tensor:
    """table (V, V) broadcast on the last two axes of a depth-(depth + 1) path tensor, extended by one axis."""
    return table.reshape((1,) * depth + tuple(table.shape))


def _accept_paths(c: CostedChain, k_max: int) -> list[torch.Tensor]:
    """ap[j]: P(y_1 .. y_j all accepted | the drafted path), shape (V,) * (j + 1)."""
    ap = [torch.ones(c.P.shape[0], dtype=torch.float64)]
    for j in range(k_max):
        ap.append(ap[-1].unsqueeze(-1) * _last(c.A, j))
    return ap


def evaluate(c: CostedChain, k_max: int, cont: list[torch.Tensor]) -> dict:
    """Per start state: E[N], E[C], E[m], and the next start's law split into full blocks and rejections."""
    V, ap = c.P.shape[0], _accept_paths(c, k_max)
    reach = torch.ones(V, dtype=torch.float64)  # P(the rule drafted this path)
    n = torch.ones(V, dtype=torch.float64)  # (V,) E[N | s]: the target's own token, plus accepted proposals
    cost, m = torch.zeros(V, dtype=torch.float64), torch.zeros(V, dtype=torch.float64)  # (V,) E[C | s], E[m | s]
    full, rej = torch.zeros(V, V, dtype=torch.float64), torch.zeros(V, V, dtype=torch.float64)  # (s, next s)
    for j in range(k_max + 1):
        go = cont[j] if j < k_max else torch.zeros_like(reach)
        stop = (reach * (1 - go)).reshape(V, -1).sum(1)  # (V,) P(m = j)
        cost += stop * (1.0 if j == 0 else j * c.c_d + c.c_v)
        m += stop * j
        full += _ends(reach * (1 - go) * ap[j]) @ c.P  # all j accepted: the bonus from the row of y_j
        if j == k_max or not go.any():  # nobody drafts deeper: nothing more to add
            break
        reach = (reach * go).unsqueeze(-1) * _last(c.Q, j)  # drafted y_{j+1}
        n += (reach * ap[j + 1]).reshape(V, -1).sum(1)
        rejected = (reach * ap[j].unsqueeze(-1) * (1 - _last(c.A, j))).sum(-1)  # y_{j+1} rejected, from y_j
        rej += _ends(rejected) @ c.res
    return {"n": n, "cost": cost, "m": m, "full": full, "rej": rej}


def _result(name: str, mu, e) -> PolicyResult:
    return long_run_result(name, mu, n=e["n"], cost=e["cost"], m=e["m"])


def fixed_rule(c: CostedChain, k_max: int, k: int) -> list[torch.Tensor]:
    """cont for 'always draft k': 1 at depths below k."""
    V = c.P.shape[0]
    return [torch.full((V,) * (j + 1), float(j < k), dtype=torch.float64) for j in range(k_max)]


def policy_speedup(P, Q, *, c_d: float, c_v: float, cont: list[torch.Tensor] | None = None, k: int = 0,
                   k_max: int = 8, name: str = "") -> PolicyResult:
    """The long-run PolicyResult of a stopping rule cont over paths up to k_max (default: always draft k)."""
    c, k_max = _chain(P, Q, c_d, c_v, k_max)
    e = evaluate(c, k_max, fixed_rule(c, k_max, check_int("k", k, minimum=0)) if cont is None else cont)
    return _result(name or f"fixed k = {k}", stationary(e["full"] + e["rej"]), e)


def fixed_k_speedups(P, Q, *, c_d: float, c_v: float, k_max: int = 8) -> list[PolicyResult]:
    """PolicyResult of every fixed k = 0 .. k_max (k = 0 is plain decoding, S = 1)."""
    return [policy_speedup(P, Q, c_d=c_d, c_v=c_v, k=k, k_max=k_max) for k in range(k_max + 1)]


@dataclass(frozen=True)
class OptimalStop:
    """The oracle stopping rule: its PolicyResult, its cont tensors, and the rounds of policy iteration."""

    result: PolicyResult
    cont: list[torch.Tensor]
    iterations: int


def _improve(c: CostedChain, k_max: int, lam: float, h: torch.Tensor) -> list[torch.Tensor]:
    """Backward induction over every path: draft on where E[N - lam C + h(next start)] is larger than stopping."""
    ap = _accept_paths(c, k_max)
    bonus, fix = 1 + c.P @ h, 1 + c.res @ h  # (V,) a token, then the value of the next start it leads to

    def at_last(v, j):  # a (V,) vector on the last axis of a depth-j path tensor
        return v.reshape((1,) * j + (v.shape[0],))

    G, cont = ap[k_max] * at_last(bonus, k_max), [None] * k_max  # at k_max the rule must stop
    for j in range(k_max - 1, -1, -1):
        stop = ap[j] * at_last(bonus, j)
        step = c.c_d + (c.c_v - 1.0 if j == 0 else 0.0)  # the cost of drafting token j + 1
        A_j = _last(c.A, j)
        inner = ap[j].unsqueeze(-1) * ((1 - A_j) * at_last(fix, j).unsqueeze(-1) + A_j) + G  # (V,) * (j + 2)
        go = -lam * step + (_last(c.Q, j) * inner).sum(-1)
        better = go > stop + 1e-12 * (1 + stop.abs())  # ties stop: the cheaper rule
        cont[j] = better.double()
        G = torch.where(better, go, stop)
    return cont


def optimal_stopping(P, Q, *, c_d: float, c_v: float, k_max: int = 8, max_iterations: int = 50) -> OptimalStop:
    """The oracle: the stopping rule of largest long-run S among all that see the start state, the drafted path
    and the exact acceptance probability of each drafted token (never the coins); policy iteration from the
    best fixed k."""
    c, k_max = _chain(P, Q, c_d, c_v, k_max)
    max_iterations = check_int("max_iterations", max_iterations, minimum=1)
    fixed = [policy_speedup(P, Q, c_d=c_d, c_v=c_v, k=k, k_max=k_max) for k in range(k_max + 1)]
    cont = fixed_rule(c, k_max, max(range(k_max + 1), key=lambda k: fixed[k].speedup))
    for iterations in range(1, max_iterations + 1):  # noqa: B007 (the count is returned)
        e = evaluate(c, k_max, cont)
        T = e["full"] + e["rej"]
        mu = stationary(T)
        lam = float(mu @ e["n"]) / float(mu @ e["cost"])
        V = T.shape[0]  # relative values h: h = n - lam C + T h, with mu . h = 0
        lhs = torch.cat([torch.eye(V, dtype=T.dtype) - T, mu[None]])
        rhs = torch.cat([e["n"] - lam * e["cost"], torch.zeros(1, dtype=T.dtype)])
        h = torch.linalg.lstsq(lhs, rhs[:, None]).solution[:, 0]
        new = _improve(c, k_max, lam, h)
        if all(torch.equal(a, b) for a, b in zip(new, cont)):
            break
        cont = new
    return OptimalStop(result=_result("optimal stopping, an oracle", mu, e), cont=cont, iterations=iterations)
