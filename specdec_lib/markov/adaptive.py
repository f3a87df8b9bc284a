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
transformers' schedule) are evaluated in long_run.py, without the path limit. policy_speedup is the one entry
point: policy= names the rule ("fixed", "confidence", "hf_schedule", "oracle") or gives its cont tensors.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .._checks import check_choice, check_int, check_real
from ..cost import round_cost
from .long_run import (
    CostedChain,
    PolicyResult,
    costed_chain,
    local_speedup,
    long_run_result,
    schedule_speedup,
    stationary,
)

__all__ = ["POLICIES", "PolicyResult", "OptimalStop", "policy_speedup", "optimal_stopping", "fixed_rule"]

MAX_PATHS = 4_000_000  # V^(k_max + 1) paths at the deepest level: about 32 MB of float64
POLICIES = ("fixed", "confidence", "hf_schedule", "oracle")  # policy_speedup's named rules
DEFAULT_K_MAX = 8  # the path limit of "oracle" and the cap of "hf_schedule" when k_max is not given
DEFAULT_CONFIDENCE = {"confidence": 0.4, "hf_schedule": 0.0}  # transformers' starting threshold; the schedule alone


def _check_paths(V: int, k_max: int) -> int:
    k_max = check_int("k_max", k_max, minimum=0)
    if V ** (k_max + 1) > MAX_PATHS:
        raise ValueError(f"k_max = {k_max} needs {V}^{k_max + 1} paths; at most {MAX_PATHS} are allowed")
    return k_max


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


@dataclass(frozen=True)
class RuleLaw:
    """One round of a path rule from every start state s: expectations (V,) and the next start's law (V, V)."""

    n: torch.Tensor  # (V,) E[N | s]: the target's own token, plus accepted proposals
    cost: torch.Tensor  # (V,) E[C | s]
    m: torch.Tensor  # (V,) E[m | s]
    full: torch.Tensor  # (V, V) P(every proposal accepted, next start | s): the bonus token's law
    rejected_next: torch.Tensor  # (V, V) P(a rejection, next start | s): the residual token's law

    @property
    def next_start(self) -> torch.Tensor:
        """(V, V) the law of the next round's start state."""
        return self.full + self.rejected_next

    def result(self, name: str, mu: torch.Tensor) -> PolicyResult:
        """The long-run PolicyResult under the stationary law mu of round starts."""
        return long_run_result(name, mu, n=self.n, cost=self.cost, m=self.m)


def evaluate(c: CostedChain, k_max: int, cont: Sequence[torch.Tensor]) -> RuleLaw:
    """Per start state: E[N], E[C], E[m], and the next start's law split into full blocks and rejections."""
    V, ap = c.P.shape[0], _accept_paths(c, k_max)
    reach = torch.ones(V, dtype=torch.float64)  # P(the rule drafted this path)
    n = torch.ones(V, dtype=torch.float64)  # (V,) E[N | s]: the target's own token, plus accepted proposals
    cost, m = torch.zeros(V, dtype=torch.float64), torch.zeros(V, dtype=torch.float64)  # (V,) E[C | s], E[m | s]
    full, rej = torch.zeros(V, V, dtype=torch.float64), torch.zeros(V, V, dtype=torch.float64)  # (s, next s)
    for j in range(k_max + 1):
        go = cont[j] if j < k_max else torch.zeros_like(reach)
        stop = (reach * (1 - go)).reshape(V, -1).sum(1)  # (V,) P(m = j)
        cost += stop * (1.0 if j == 0 else round_cost(draft_steps=j, c_d=c.c_d, c_v=c.c_v))
        m += stop * j
        full += _ends(reach * (1 - go) * ap[j]) @ c.P  # all j accepted: the bonus from the row of y_j
        if j == k_max or not go.any():  # nobody drafts deeper: nothing more to add
            break
        reach = (reach * go).unsqueeze(-1) * _last(c.Q, j)  # drafted y_{j+1}
        n += (reach * ap[j + 1]).reshape(V, -1).sum(1)
        rejected = (reach * ap[j].unsqueeze(-1) * (1 - _last(c.A, j))).sum(-1)  # y_{j+1} rejected, from y_j
        rej += _ends(rejected) @ c.res
    return RuleLaw(n=n, cost=cost, m=m, full=full, rejected_next=rej)


def fixed_rule(V: int, k: int, k_max: int) -> list[torch.Tensor]:
    """cont for 'always draft k' over paths up to k_max: 1 at depths below k."""
    return [torch.full((V,) * (j + 1), float(j < k), dtype=torch.float64) for j in range(k_max)]


def _check_rule(cont, V: int) -> list[torch.Tensor]:
    """A path rule: cont[j] of shape (V,) * (j + 1), values 0 or 1, in float64."""
    if not isinstance(cont, Sequence) or not all(isinstance(x, torch.Tensor) for x in cont):
        raise TypeError(f"policy must be one of {', '.join(map(repr, POLICIES))} or a sequence of cont tensors, "
                        f"got {type(cont).__name__}")
    for j, x in enumerate(cont):
        if tuple(x.shape) != (V,) * (j + 1) or not ((x == 0) | (x == 1)).all():
            raise ValueError(f"policy[{j}] must be a 0/1 tensor of shape {(V,) * (j + 1)}, got shape {tuple(x.shape)}")
    return [x.double() for x in cont]


def _rule_result(c: CostedChain, cont: list[torch.Tensor], name: str) -> PolicyResult:
    k_max = _check_paths(c.P.shape[0], len(cont))
    e = evaluate(c, k_max, cont)
    return e.result(name, stationary(e.next_start))


@dataclass(frozen=True)
class _Options:
    """policy_speedup's optional settings, None where the caller gave none."""

    k: int | None
    k_max: int | None
    confidence: float | None

    def refuse(self, policy: str, *names: str) -> None:
        """Raise ValueError if any of names was given: policy does not read it."""
        for name in names:
            if getattr(self, name) is not None:
                raise ValueError(f"policy {policy!r} takes no {name}, got {name} = {getattr(self, name)!r}")

    def need_k(self, policy: str) -> int:
        if self.k is None:
            raise ValueError(f"policy {policy!r} needs k (the most proposals a round drafts)")
        k = check_int("k", self.k, minimum=0)
        if self.k_max is not None and k > check_int("k_max", self.k_max, minimum=0):
            raise ValueError(f"k must lie in [0, k_max = {self.k_max}], got {k}")
        return k


def _fixed(c: CostedChain, o: _Options) -> PolicyResult:
    o.refuse("fixed", "confidence")
    k = o.need_k("fixed")
    return local_speedup(c, k=k, name=f"fixed k = {k}")


def _confidence(c: CostedChain, o: _Options) -> PolicyResult:
    k = o.need_k("confidence")
    confidence = DEFAULT_CONFIDENCE["confidence"] if o.confidence is None else o.confidence
    confidence = check_real("confidence", confidence, low=0.0, high=1.0)
    return local_speedup(c, k=k, confidence=confidence, name=f"confidence stop < {confidence:g}")


def _hf_schedule(c: CostedChain, o: _Options) -> PolicyResult:
    o.refuse("hf_schedule", "k")
    k_max = DEFAULT_K_MAX if o.k_max is None else check_int("k_max", o.k_max, minimum=1)
    confidence = DEFAULT_CONFIDENCE["hf_schedule"] if o.confidence is None else o.confidence
    return schedule_speedup(c, k_max=k_max, confidence=check_real("confidence", confidence, low=0.0, high=1.0))


def _oracle(c: CostedChain, o: _Options) -> PolicyResult:
    o.refuse("oracle", "k", "confidence")
    return _optimal(c, DEFAULT_K_MAX if o.k_max is None else o.k_max, max_iterations=50).result


_RULES = {"fixed": _fixed, "confidence": _confidence, "hf_schedule": _hf_schedule, "oracle": _oracle}


def policy_speedup(P, Q, *, c_d: float, c_v: float, policy: str | Sequence[torch.Tensor], k: int | None = None,
                   k_max: int | None = None, confidence: float | None = None) -> PolicyResult:
    """The long-run PolicyResult (N̄, m̄, C̄, S = N̄ / C̄) of one stopping rule on the chain (P, Q).

    policy is one of POLICIES or a path rule:
      "fixed"        always draft k (k = 0 is plain decoding, S = 1); any k, no path limit
      "confidence"   transformers' confidence stop, frozen: stop after a token with q < confidence (default 0.4),
                     at most k proposals
      "hf_schedule"  transformers' heuristic: k + 2 after a fully accepted round, else k - 1, within [1, k_max]
                     (default 8), with the confidence stop when confidence > 0 (default 0: off); takes no k
      "oracle"       optimal_stopping's rule over paths up to k_max (default 8): it reads the exact acceptance
                     probabilities; takes no k or confidence
      cont tensors   any rule over the drafted path: cont[j] (V,) * (j + 1) is 1 where it drafts token j + 1
    k_max, when given with "fixed" or "confidence", bounds k. Options a policy does not read raise ValueError.
    """
    c = costed_chain(P, Q, c_d=c_d, c_v=c_v)
    options = _Options(k=k, k_max=k_max, confidence=confidence)
    if isinstance(policy, str):
        return _RULES[check_choice("policy", policy, POLICIES)](c, options)
    options.refuse("a path rule", "k", "k_max", "confidence")
    return _rule_result(c, _check_rule(policy, c.P.shape[0]), name="a path rule")


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


def _relative_values(e: RuleLaw, mu: torch.Tensor, lam: float) -> torch.Tensor:
    """h (V,): h = n - lam C + T h with mu . h = 0, by least squares."""
    T = e.next_start
    V = T.shape[0]
    lhs = torch.cat([torch.eye(V, dtype=T.dtype) - T, mu[None]])
    rhs = torch.cat([e.n - lam * e.cost, torch.zeros(1, dtype=T.dtype)])
    return torch.linalg.lstsq(lhs, rhs[:, None]).solution[:, 0]


def _optimal(c: CostedChain, k_max: int, *, max_iterations: int) -> OptimalStop:
    """Policy iteration from the best fixed k (path-evaluated) until the rule no longer changes."""
    V = c.P.shape[0]
    k_max = _check_paths(V, k_max)
    max_iterations = check_int("max_iterations", max_iterations, minimum=1)
    fixed = [_rule_result(c, fixed_rule(V, k, k_max), name="") for k in range(k_max + 1)]
    cont = fixed_rule(V, max(range(k_max + 1), key=lambda k: fixed[k].speedup), k_max)
    for iterations in range(1, max_iterations + 1):  # noqa: B007 (the count is returned)
        e = evaluate(c, k_max, cont)
        mu = stationary(e.next_start)
        lam = float(mu @ e.n) / float(mu @ e.cost)
        new = _improve(c, k_max, lam, _relative_values(e, mu, lam))
        if all(torch.equal(a, b) for a, b in zip(new, cont)):
            break
        cont = new
    return OptimalStop(result=e.result("optimal stopping, an oracle", mu), cont=cont, iterations=iterations)


def optimal_stopping(P, Q, *, c_d: float, c_v: float, k_max: int = DEFAULT_K_MAX,
                     max_iterations: int = 50) -> OptimalStop:
    """The oracle: the stopping rule of largest long-run S among all that see the start state, the drafted path
    and the exact acceptance probability of each drafted token (never the coins); policy iteration from the
    best fixed k."""
    return _optimal(costed_chain(P, Q, c_d=c_d, c_v=c_v), k_max, max_iterations=max_iterations)
