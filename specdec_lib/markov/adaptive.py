"""Act V, adaptive k on the chain: the long-run speedup of a stopping rule, and the best rule, exactly.

A round starts at the committed state s; the draft drafts y_1 y_2 ... from Q and a stopping rule decides,
after each token, whether to draft another (it sees s and the drafted path, never the acceptance coins);
the correct verifier then accepts each y_j with a(y_{j-1}, y_j) = min(1, p/q). Every rule is a tensor
cont[j] over paths (V,) * (j + 1): 1 where it drafts token j + 1. Evaluating one gives, per start state,
E[N] (tokens), E[C] (cost: 1 for a round that drafts nothing, m c_d + c_v for m proposals) and the law of
the next round's start; the long-run speedup is S = mu.E[N] / mu.E[C], mu the stationary law of round starts.
The optimal rule comes from policy iteration: for the current (S, h) it is backward induction over every
path of length <= k_max, stopping where stopping is worth more than drafting on. transformers' heuristic
schedule carries k from round to round, so it is a chain over (k, s).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_int, check_real
from ..sampling import accept_ratio, residual_weights
from .chain import check_table

MAX_PATHS = 4_000_000  # V^(k_max + 1) paths at the deepest level: about 32 MB of float64


@dataclass(frozen=True)
class PolicyResult:
    """A stopping rule's long-run tokens, proposals and cost per round, and its speedup S."""

    name: str
    tokens_per_round: float  # E[N]
    drafted_per_round: float  # E[m]
    cost_per_round: float  # E[C], in target decode steps
    speedup: float  # E[N] / E[C]


def _chain(P, Q, c_d, c_v, k_max):
    P, Q = check_table("P", P).double(), check_table("Q", Q).double()
    if P.shape != Q.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    P, Q = P / P.sum(-1, keepdim=True), Q / Q.sum(-1, keepdim=True)
    c_d = check_real("c_d", c_d, low=0.0, high=math.inf, high_open=True)
    c_v = check_real("c_v", c_v, low=0.0, high=math.inf, low_open=True, high_open=True)
    k_max = check_int("k_max", k_max, minimum=0)
    if P.shape[0] ** (k_max + 1) > MAX_PATHS:
        raise ValueError(f"k_max = {k_max} needs {P.shape[0]}^{k_max + 1} paths; at most {MAX_PATHS} are allowed")
    A = torch.nan_to_num(accept_ratio(P, Q), nan=0.0)  # (V, V) a(d, y)
    res = residual_weights(P, Q)
    return {"P": P, "Q": Q, "A": A, "res": res / res.sum(-1, keepdim=True), "c_d": c_d, "c_v": c_v, "k_max": k_max}


def _ends(x: torch.Tensor) -> torch.Tensor:
    """A path tensor (V,) * (j + 1) summed onto (start state, last token): (V, V)."""
    V = x.shape[0]
    return torch.diag(x) if x.dim() == 1 else x.reshape(V, -1, V).sum(1)


def _last(table: torch.Tensor, depth: int) -> torch.Tensor:
    """table (V, V) broadcast on the last two axes of a depth-(depth + 1) path tensor, extended by one axis."""
    return table.reshape((1,) * depth + tuple(table.shape))


def _accept_paths(c) -> list[torch.Tensor]:
    """ap[j]: P(y_1 .. y_j all accepted | the drafted path), shape (V,) * (j + 1)."""
    V = c["P"].shape[0]
    ap = [torch.ones(V, dtype=torch.float64)]
    for j in range(c["k_max"]):
        ap.append(ap[-1].unsqueeze(-1) * _last(c["A"], j))
    return ap


def evaluate(c, cont: list[torch.Tensor]) -> dict:
    """Per start state: E[N], E[C], E[m], and the next start's law split into full blocks and rejections."""
    P, Q, A, res = c["P"], c["Q"], c["A"], c["res"]
    V, ap = P.shape[0], _accept_paths(c)
    reach = torch.ones(V, dtype=torch.float64)  # P(the rule drafted this path)
    n = torch.ones(V, dtype=torch.float64)  # (V,) E[N | s]: the target's own token, plus accepted proposals
    cost, m = torch.zeros(V, dtype=torch.float64), torch.zeros(V, dtype=torch.float64)  # (V,) E[C | s], E[m | s]
    full, rej = torch.zeros(V, V, dtype=torch.float64), torch.zeros(V, V, dtype=torch.float64)  # (s, next s)
    for j in range(c["k_max"] + 1):
        go = cont[j] if j < c["k_max"] else torch.zeros_like(reach)
        stop = (reach * (1 - go)).reshape(V, -1).sum(1)  # (V,) P(m = j)
        cost += stop * (1.0 if j == 0 else j * c["c_d"] + c["c_v"])
        m += stop * j
        full += _ends(reach * (1 - go) * ap[j]) @ P  # all j accepted: the bonus from the row of y_j
        if j == c["k_max"] or not go.any():  # nobody drafts deeper: nothing more to add
            break
        reach = (reach * go).unsqueeze(-1) * _last(Q, j)  # drafted y_{j+1}
        n += (reach * ap[j + 1]).reshape(V, -1).sum(1)
        rejected = (reach * ap[j].unsqueeze(-1) * (1 - _last(A, j))).sum(-1)  # y_{j+1} rejected, from y_j
        rej += _ends(rejected) @ res
    return {"n": n, "cost": cost, "m": m, "full": full, "rej": rej}


def _stationary(T: torch.Tensor) -> torch.Tensor:
    """The stationary law mu = mu T of a row-stochastic T (one closed class assumed), by least squares."""
    S = T.shape[0]
    lhs = torch.cat([(T - torch.eye(S, dtype=T.dtype)).T, torch.ones(1, S, dtype=T.dtype)])
    rhs = torch.cat([torch.zeros(S, dtype=T.dtype), torch.ones(1, dtype=T.dtype)])
    return torch.linalg.lstsq(lhs, rhs[:, None]).solution[:, 0]


def _result(name: str, mu, e) -> PolicyResult:
    n, cost, m = (float(mu @ e[key]) for key in ("n", "cost", "m"))
    return PolicyResult(name=name, tokens_per_round=n, drafted_per_round=m, cost_per_round=cost, speedup=n / cost)


def fixed_rule(c, k: int) -> list[torch.Tensor]:
    """cont for 'always draft k': 1 at depths below k."""
    V = c["P"].shape[0]
    return [torch.full((V,) * (j + 1), float(j < k), dtype=torch.float64) for j in range(c["k_max"])]


def confidence_rule(c, confidence: float, k: int) -> list[torch.Tensor]:
    """cont for transformers' confidence stop: draft on while q(y_j) >= confidence, at most k tokens."""
    V, cont = c["P"].shape[0], []
    for j in range(c["k_max"]):
        if j == 0:
            cont.append(torch.full((V,), float(k > 0), dtype=torch.float64))
        else:
            sure = (_last(c["Q"], j - 1) >= confidence).double().expand((V,) * (j + 1))
            cont.append(sure * float(j < k))
    return cont


def policy_speedup(P, Q, *, c_d: float, c_v: float, cont: list[torch.Tensor] | None = None, k: int = 0,
                   k_max: int = 8, name: str = "") -> PolicyResult:
    """The long-run PolicyResult of a stopping rule cont (default: always draft k)."""
    c = _chain(P, Q, c_d, c_v, k_max)
    e = evaluate(c, fixed_rule(c, check_int("k", k, minimum=0)) if cont is None else cont)
    return _result(name or f"fixed k = {k}", _stationary(e["full"] + e["rej"]), e)


def fixed_k_speedups(P, Q, *, c_d: float, c_v: float, k_max: int = 8) -> list[PolicyResult]:
    """PolicyResult of every fixed k = 0 .. k_max (k = 0 is plain decoding, S = 1)."""
    return [policy_speedup(P, Q, c_d=c_d, c_v=c_v, k=k, k_max=k_max) for k in range(k_max + 1)]


def confidence_speedup(P, Q, *, c_d: float, c_v: float, confidence: float = 0.4, k: int = 8,
                       k_max: int = 8) -> PolicyResult:
    """transformers' assistant_confidence_threshold: stop after a token with q < confidence, at most k."""
    c = _chain(P, Q, c_d, c_v, k_max)
    confidence = check_real("confidence", confidence, low=0.0, high=1.0)
    if not 0 <= check_int("k", k, minimum=0) <= k_max:
        raise ValueError(f"k must lie in [0, k_max = {k_max}], got {k}")
    e = evaluate(c, confidence_rule(c, confidence, k))
    return _result(f"confidence stop < {confidence:g}", _stationary(e["full"] + e["rej"]), e)


def hf_schedule_speedup(P, Q, *, c_d: float, c_v: float, k_min: int = 1, k_max: int = 8) -> PolicyResult:
    """transformers' heuristic: k + 2 after a full block, k - 1 otherwise, within [k_min, k_max], in the long run."""
    c = _chain(P, Q, c_d, c_v, k_max)
    k_min = check_int("k_min", k_min, minimum=0)
    if k_min > k_max:
        raise ValueError(f"k_min must be <= k_max = {k_max}, got {k_min}")
    ks = list(range(k_min, k_max + 1))
    V, evals = P.shape[0], [evaluate(c, fixed_rule(c, k)) for k in ks]
    T = torch.zeros(len(ks) * V, len(ks) * V, dtype=torch.float64)  # states (k, s), k-major
    for i, (k, e) in enumerate(zip(ks, evals)):
        up, down = ks.index(min(k + 2, k_max)), ks.index(max(k - 1, k_min))
        T[i * V:(i + 1) * V, up * V:(up + 1) * V] += e["full"]
        T[i * V:(i + 1) * V, down * V:(down + 1) * V] += e["rej"]
    joint = {key: torch.cat([e[key] for e in evals]) for key in ("n", "cost", "m")}
    return _result(f"hf schedule [{k_min}, {k_max}]", _stationary(T), joint)


@dataclass(frozen=True)
class OptimalStop:
    """The best draft-side stopping rule: its PolicyResult, its cont tensors, and policy-iteration rounds."""

    result: PolicyResult
    cont: list[torch.Tensor]
    iterations: int


def _improve(c, lam: float, h: torch.Tensor) -> list[torch.Tensor]:
    """Backward induction over every path: draft on where E[N - lam C + h(next start)] is larger than stopping."""
    P, Q, A, res, k_max = c["P"], c["Q"], c["A"], c["res"], c["k_max"]
    ap = _accept_paths(c)
    bonus, fix = 1 + P @ h, 1 + res @ h  # (V,) a token, then the value of the next start it leads to

    def at_last(v, j):  # a (V,) vector on the last axis of a depth-j path tensor
        return v.reshape((1,) * j + (v.shape[0],))

    G, cont = ap[k_max] * at_last(bonus, k_max), [None] * k_max  # at k_max the rule must stop
    for j in range(k_max - 1, -1, -1):
        stop = ap[j] * at_last(bonus, j)
        step = c["c_d"] + (c["c_v"] - 1.0 if j == 0 else 0.0)  # the cost of drafting token j + 1
        A_j = _last(A, j)
        inner = ap[j].unsqueeze(-1) * ((1 - A_j) * at_last(fix, j).unsqueeze(-1) + A_j) + G  # (V,) * (j + 2)
        go = -lam * step + (_last(Q, j) * inner).sum(-1)
        better = go > stop + 1e-12 * (1 + stop.abs())  # ties stop: the cheaper rule
        cont[j] = better.double()
        G = torch.where(better, go, stop)
    return cont


def optimal_stopping(P, Q, *, c_d: float, c_v: float, k_max: int = 8, max_iterations: int = 50) -> OptimalStop:
    """The stopping rule with the largest long-run S among all rules that see the start state and the drafted
    path (and the exact acceptance probabilities of it), never the coins: policy iteration from the best fixed k."""
    c = _chain(P, Q, c_d, c_v, k_max)
    max_iterations = check_int("max_iterations", max_iterations, minimum=1)
    fixed = [policy_speedup(P, Q, c_d=c_d, c_v=c_v, k=k, k_max=k_max) for k in range(k_max + 1)]
    cont = fixed_rule(c, max(range(k_max + 1), key=lambda k: fixed[k].speedup))
    for iterations in range(1, max_iterations + 1):  # noqa: B007 (the count is returned)
        e = evaluate(c, cont)
        T = e["full"] + e["rej"]
        mu = _stationary(T)
        lam = float(mu @ e["n"]) / float(mu @ e["cost"])
        V = T.shape[0]  # relative values h: h = n - lam C + T h, with mu . h = 0
        lhs = torch.cat([torch.eye(V, dtype=T.dtype) - T, mu[None]])
        rhs = torch.cat([e["n"] - lam * e["cost"], torch.zeros(1, dtype=T.dtype)])
        h = torch.linalg.lstsq(lhs, rhs[:, None]).solution[:, 0]
        new = _improve(c, lam, h)
        if all(torch.equal(a, b) for a, b in zip(new, cont)):
            break
        cont = new
    return OptimalStop(result=_result("optimal stopping", mu, e), cont=cont, iterations=iterations)
