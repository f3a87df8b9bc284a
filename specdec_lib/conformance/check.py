"""audit_verifier and audit_drafter: drive a function on the battery and compare what it commits with exact laws."""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable

import torch

from .._checks import check_generator, check_int
from ..markov.q_contract import audit_q_contract
from ..sampling import sample_rows
from ..verification import BlockVerdicts
from .adapters import PAD, adapt
from .battery import PROMISE, Case, Promise, battery, power
from .bugs import EXACT, known_verifiers
from .laws import committed_block_law, complete, mean_accepted, target_law
from .report import CaseResult, DrafterReport, VerifierReport

__all__ = ["audit_verifier", "audit_drafter", "committed_law", "DRAFT_LOGITS"]


@functools.lru_cache(maxsize=1)
def _laws() -> tuple[tuple[Case, torch.Tensor, dict[str, torch.Tensor], tuple[float, float]], ...]:
    """Per case: the case, its target law, every known verifier's exact completed law, and the exact E[accepted]
    of the token rule and of block verification (the optimum of an exact verifier of one block), computed once."""
    out = []
    for c in battery():
        laws = {kv.name: committed_block_law(kv.spec, c.p_rows, c.q_rows) for kv in known_verifiers()}
        kept = (mean_accepted(laws["correct"]), mean_accepted(laws["block_verification"]))
        out.append((c, target_law(c.p_rows), {name: complete(law, c.p_rows) for name, law in laws.items()}, kept))
    return tuple(out)


def _tv(a: torch.Tensor, b: torch.Tensor, outside: float = 0.0) -> float:
    """TV of two laws of the same shape, plus mass `outside` that a has off the table (sub-probability a)."""
    return 0.5 * ((a - b).abs().sum().item() + outside)


def committed_law(case: Case, accepted: torch.Tensor, tokens: torch.Tensor, proposals: torch.Tensor):
    """(empirical completed law, mass off the vocabulary, contract violations) of n verified blocks."""
    n, counts, outside, violations = proposals.shape[0], Counter(), 0, 0
    k = proposals.shape[1]
    columns = torch.cat([accepted[:, None], proposals, tokens], 1).T.tolist()  # by column: a few long lists
    blocks = Counter(zip(*columns))
    for block, m in blocks.items():  # each distinct (accepted, proposals, tokens), seen m times
        a, y, row = block[0], list(block[1:k + 1]), block[k + 1:]
        t = tuple(x for x in row if x != PAD)
        if len(t) != sum(1 for x in row[:len(t)] if x != PAD) or not t or any(x < 0 or x >= case.V for x in t):
            outside += m  # padding inside the tokens, nothing committed, or an id off the vocabulary
            violations += m
            continue
        violations += m * (a != len(t) - 1 or list(t[:a]) != y[:a] or len(t) > case.k + 1)
        counts[t] += m
    return complete({t: c / n for t, c in counts.items()}, case.p_rows), outside / n, violations


def _run(verify: Callable, case: Case, n: int, generator: torch.Generator):
    """Draw n proposal rows y_j ~ q_j and verify them; (accepted (n,), tokens (n, w), proposals (n, k))."""
    p = case.p_rows.expand(n, *case.p_rows.shape)  # (n, k+1, V)
    q = case.q_rows.expand(n, *case.q_rows.shape)  # (n, k, V)
    proposals = sample_rows(q, generator)  # (n, k)
    out = verify(p, q, proposals, generator)
    if isinstance(out, BlockVerdicts):  # sd.verify_blocks' result: the same pair, by name
        out = (out.accepted, out.tokens)
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, torch.Tensor) for x in out)):
        raise TypeError("a batched verifier must return (accepted (n,), tokens (n, k+1)) tensors or a BlockVerdicts")
    accepted, tokens = out
    if accepted.shape != (n,) or tokens.dim() != 2 or tokens.shape[0] != n:
        raise ValueError(f"a batched verifier must return accepted (n,) and tokens (n, k+1) for n = {n}, "
                         f"got {tuple(accepted.shape)} and {tuple(tokens.shape)}")
    return accepted.long(), tokens.long(), proposals


def _subject(fn: Callable, subject: str | None) -> str:
    return subject or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _kept(accepted: torch.Tensor) -> tuple[float, float]:
    """The mean of the accepted counts (n,) and its standard error (sample sd / sqrt(n); 0 for n = 1)."""
    a = accepted.double()
    return a.mean().item(), (a.std().item() / a.numel() ** 0.5) if a.numel() > 1 else 0.0


def _nearest(dist: dict[str, float]) -> str:
    """The inexact known verifier nearest to a law (ties, equal exact laws, go to the first)."""
    return min((name for name in dist if name not in EXACT), key=lambda name: round(dist[name], 9))


def audit_verifier(fn: Callable, *, convention: str = "probs", seed: int = 0, num_blocks: int | None = None,
                   promise: Promise = PROMISE, subject: str | None = None,
                   generator: torch.Generator | None = None) -> VerifierReport:
    """Audit a block verifier on the battery: each case's committed law against a correct verifier's exact one.

    num_blocks (per case) defaults to the power calculation's size for promise.epsilon and promise.beta;
    promise.delta bounds the chance that a correct verifier fails. Randomness comes from `generator`, or a fresh
    one seeded with `seed`. Returns the report; assert_conformant raises on a failure.
    """
    verify = adapt(fn, convention)
    seed = check_int("seed", seed, minimum=0)
    num_blocks = None if num_blocks is None else check_int("num_blocks", num_blocks, minimum=1)
    if not isinstance(promise, Promise):
        raise TypeError(f"promise must be a Promise (epsilon, beta, delta), got {type(promise).__name__}")
    generator = check_generator(generator) or torch.Generator().manual_seed(seed)
    laws, results = _laws(), []
    totals = dict.fromkeys(laws[0][2], 0.0)  # known verifier -> summed TV to the empirical laws
    for case, exact, known, (token, optimal) in laws:
        pw = power(case, num_blocks=num_blocks, cases=len(laws), promise=promise)
        accepted, tokens, proposals = _run(verify, case, pw.num_blocks, generator)
        emp, outside, violations = committed_law(case, accepted, tokens, proposals)
        dist = {name: _tv(emp, law, outside) for name, law in known.items()}
        for name, d in dist.items():
            totals[name] += d
        nearest = _nearest(dist)
        results.append(CaseResult(case.name, case.k, case.V, pw.num_blocks, _tv(emp, exact, outside), pw.threshold,
                                  pw.floor, pw.detectable, violations, nearest, dist[nearest], *_kept(accepted),
                                  token, optimal))
    wrong = {kv.name: kv for kv in known_verifiers() if not kv.exact}
    best = _nearest(totals)
    diagnosis = "" if all(c.passed for c in results) else f"{best}: {wrong[best].description} ({wrong[best].reference})"
    return VerifierReport(_subject(fn, subject), tuple(results), promise, diagnosis, sized=num_blocks is None)


DRAFT_LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0],
                             [3.0, 2.9, -2.0, -2.0], [-1.0, 0.5, 1.0, 0.2]])  # (V, V): one logits row per draft state


def audit_drafter(fn: Callable, *, num_samples: int = 4000, seed: int = 0, subject: str | None = None,
                  generator: torch.Generator | None = None) -> DrafterReport:
    """The q contract: fn(logits (V,), n, generator) -> (tokens (n,), q (V,)) must sample tokens from the q it reports;
    num_samples draws per draft row.

    Runs sd.markov.audit_q_contract over the kit's draft rows (peaked, flat, a near tie); its bound keeps a correct
    drafter's failure rate below 1e-6.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    n = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator) or torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    reported = []
    for row in DRAFT_LOGITS:
        _, q = fn(row, 1, generator)
        reported.append(torch.as_tensor(q, dtype=torch.float64).reshape(-1))
    reported_q = torch.stack(reported)  # (V, V)

    def sample(states: torch.Tensor, g):
        tokens, _ = fn(DRAFT_LOGITS[int(states[0])], states.shape[0], g)
        return torch.as_tensor(tokens, dtype=torch.long).reshape(-1)

    result = audit_q_contract(sample, reported_q, num_samples=n, generator=generator)
    return DrafterReport(_subject(fn, subject), n, result.tv, result.bound, result.state)
