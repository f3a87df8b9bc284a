"""check_verifier and check_drafter: drive a function on the battery and compare what it commits with exact laws."""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable

import torch

from .._checks import check_generator, check_int, check_real
from ..markov.q_contract import check_q_contract
from ..sampling import sample_rows
from .adapters import PAD, adapt
from .battery import BETA, DELTA, EPSILON, Case, battery, power
from .bugs import EXACT, known_verifiers
from .laws import block_law, complete, target_law
from .report import CaseResult, DrafterReport, Report


@functools.lru_cache(maxsize=1)
def _laws() -> tuple[tuple[Case, torch.Tensor, dict[str, torch.Tensor]], ...]:
    """Per case: the case, its target law, and every known verifier's exact completed law (computed once)."""
    return tuple((c, target_law(c.p_rows), {kv.name: complete(block_law(kv.rule, c.p_rows, c.q_rows), c.p_rows)
                                            for kv in known_verifiers()}) for c in battery())


def _tv(a: torch.Tensor, b: torch.Tensor, outside: float = 0.0) -> float:
    """TV of two laws of the same shape, plus mass `outside` that a has off the table (sub-probability a)."""
    return 0.5 * ((a - b).abs().sum().item() + outside)


def committed_law(case: Case, accepted: torch.Tensor, tokens: torch.Tensor, proposals: torch.Tensor):
    """(empirical completed law, mass off the vocabulary, contract violations) of n verified blocks."""
    n, counts, outside, violations = proposals.shape[0], Counter(), 0, 0
    for a, row, y in zip(accepted.tolist(), tokens.tolist(), proposals.tolist()):
        t = tuple(x for x in row if x != PAD)
        if len(t) != sum(1 for x in row[:len(t)] if x != PAD) or not t or any(x < 0 or x >= case.V for x in t):
            outside += 1  # padding inside the tokens, nothing committed, or an id off the vocabulary
            violations += 1
            continue
        violations += a != len(t) - 1 or list(t[:a]) != y[:a] or len(t) > case.k + 1
        counts[t] += 1
    return complete({t: c / n for t, c in counts.items()}, case.p_rows), outside / n, violations


def _run(verify: Callable, case: Case, n: int, generator: torch.Generator):
    """Draw n proposal rows y_j ~ q_j and verify them; (accepted (n,), tokens (n, w), proposals (n, k))."""
    p = case.p_rows.expand(n, *case.p_rows.shape)  # (n, k+1, V)
    q = case.q_rows.expand(n, *case.q_rows.shape)  # (n, k, V)
    proposals = sample_rows(q, generator)  # (n, k)
    out = verify(p, q, proposals, generator)
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, torch.Tensor) for x in out)):
        raise TypeError("a batched verifier must return (accepted (n,), tokens (n, k+1)) tensors")
    accepted, tokens = out
    if accepted.shape != (n,) or tokens.dim() != 2 or tokens.shape[0] != n:
        raise ValueError(f"a batched verifier must return accepted (n,) and tokens (n, k+1) for n = {n}, "
                         f"got {tuple(accepted.shape)} and {tuple(tokens.shape)}")
    return accepted.long(), tokens.long(), proposals


def check_verifier(fn: Callable, *, convention: str = "probs", seed: int = 0, n: int | None = None,
                   epsilon: float = EPSILON, beta: float = BETA, delta: float = DELTA, subject: str | None = None,
                   generator: torch.Generator | None = None) -> Report:
    """Check a block verifier on the battery: each case's committed law against a correct verifier's exact one.

    n (blocks per case) defaults to the power calculation's size for epsilon and beta; delta bounds the chance
    that a correct verifier fails. Randomness comes from `generator`, or a fresh one seeded with `seed`.
    """
    verify = adapt(fn, convention)
    seed = check_int("seed", seed, minimum=0)
    n = None if n is None else check_int("n", n, minimum=1)
    epsilon = check_real("epsilon", epsilon, low=0.0, high=1.0, low_open=True)
    beta = check_real("beta", beta, low=0.0, high=1.0, low_open=True, high_open=True)
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    generator = check_generator(generator) or torch.Generator().manual_seed(seed)
    laws, results = _laws(), []
    totals = dict.fromkeys(laws[0][2], 0.0)  # known verifier -> summed TV to the empirical laws
    for case, exact, known in laws:
        pw = power(case, n=n, cases=len(laws), epsilon=epsilon, beta=beta, delta=delta)
        emp, outside, violations = committed_law(case, *_run(verify, case, pw.n, generator))
        dist = {name: _tv(emp, law, outside) for name, law in known.items()}
        for name, d in dist.items():
            totals[name] += d
        wrong = [name for name in dist if name not in EXACT]
        nearest = min(wrong, key=lambda name: round(dist[name], 9))  # ties (equal exact laws) go to the first
        results.append(CaseResult(case.name, case.k, case.V, pw.n, _tv(emp, exact, outside), pw.threshold, pw.floor,
                                  pw.detectable, violations, nearest, dist[nearest]))
    wrong = {kv.name: kv for kv in known_verifiers() if not kv.exact}
    best = min(wrong, key=lambda name: round(totals[name], 9))
    diagnosis = "" if all(c.passed for c in results) else f"{best}: {wrong[best].description} ({wrong[best].reference})"
    name = subject or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return Report(name, tuple(results), epsilon, beta, delta, diagnosis, sized=n is None)


DRAFT_LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0],
                             [3.0, 2.9, -2.0, -2.0], [-1.0, 0.5, 1.0, 0.2]])  # (V, V): one logits row per draft state


def check_drafter(fn: Callable, *, n: int = 4000, seed: int = 0, subject: str | None = None,
                  generator: torch.Generator | None = None) -> DrafterReport:
    """The q contract: fn(logits (V,), n, generator) -> (tokens (n,), q (V,)) must sample tokens from the q it reports.

    Runs sd.check_q_contract over the kit's draft rows (peaked, flat, a near tie); its bound keeps a correct
    drafter's failure rate below 1e-6.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    n = check_int("n", n, minimum=1)
    generator = check_generator(generator) or torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    reported = []
    for row in DRAFT_LOGITS:
        _, q = fn(row, 1, generator)
        reported.append(torch.as_tensor(q, dtype=torch.float64).reshape(-1))
    reported_q = torch.stack(reported)  # (V, V)

    def sample(states: torch.Tensor, g):
        tokens, _ = fn(DRAFT_LOGITS[int(states[0])], states.shape[0], g)
        return torch.as_tensor(tokens, dtype=torch.long).reshape(-1)

    result = check_q_contract(sample, reported_q, n, generator)
    name = subject or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return DrafterReport(name, n, result.tv, result.bound, result.state)
