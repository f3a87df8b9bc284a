"""Act III: how many tokens a block retires, and why acceptance by position is a survivor statistic.

alpha_i is the probability of accepting proposal i given that proposals 1 .. i-1 were accepted, so
P(A >= j) = prod_{i<=j} alpha_i, E[A] = sum_j P(A >= j) and E[N] = 1 + E[A].
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from ._checks import SUM_TOL, check_alpha, check_generator, check_int, check_numbers, check_real
from .verification import accepted_prefix

__all__ = ["reach_probabilities", "expected_accepted", "expected_tokens", "full_block_probability", "alpha_from_tokens",
           "RoundTokens", "tokens_per_round", "simulate_blocks", "simulate_mixture", "SurvivorStats",
           "survivor_statistics", "BayesCurve", "bayes_conditional_acceptance"]

_ROW_LABEL = 34  # width of the row labels in the printed tables
_CELL = 9  # width of one position's column


# ---- exact accounting ---------------------------------------------------------------------------

def reach_probabilities(alpha, k: int) -> list[float]:
    """P(A >= j) = prod_{i<=j} alpha_i for j = 1..k."""
    k = check_int("k", k, minimum=0)
    rates = check_alpha(alpha, k)
    reach, p = [], 1.0
    for a in rates:
        p *= a  # survive position j: every earlier proposal survived and this one passes
        reach.append(p)
    return reach


def expected_accepted(alpha, k: int) -> float:
    """E[A] = sum_{j=1..k} prod_{i<=j} alpha_i (k * alpha is the wrong model)."""
    return float(sum(reach_probabilities(alpha, k)))


def expected_tokens(alpha, k: int) -> float:
    """E[N] = 1 + E[A]: every round also emits one target token (correction or bonus)."""
    return 1.0 + expected_accepted(alpha, k)


def full_block_probability(alpha, k: int) -> float:
    """P(A = k) = prod_i alpha_i; 1 for k = 0 (plain decoding: the empty block is always full)."""
    reach = reach_probabilities(alpha, k)
    return reach[-1] if reach else 1.0


def alpha_from_tokens(e_n: float, k: int) -> float:
    """The constant alpha with E[N(k)] = (1 - alpha^(k+1)) / (1 - alpha) = e_n (bisection; e_n in [1, k + 1])."""
    k = check_int("k", k, minimum=1)
    e_n = check_real("e_n", e_n, low=1.0, high=k + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):  # E[N(k)] rises with alpha: keep the half that holds e_n
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < e_n else (lo, mid)
    return (lo + hi) / 2


# ---- simulation -----------------------------------------------------------------------------------

def simulate_blocks(alpha, k: int, *, num_samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Accepted counts A (LongTensor (num_samples,)) of num_samples independent blocks with per-position rates alpha."""
    k = check_int("k", k, minimum=0)
    rates = torch.tensor(check_alpha(alpha, k), dtype=torch.float64)  # (k,)
    n = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator)
    u = torch.rand(n, k, generator=generator, dtype=torch.float64)  # (n, k)
    accept = u < rates  # (n, k) flag of proposal j, drawn as if reached
    return accepted_prefix(accept)  # (n,)


def _check_mixture(betas, weights) -> tuple[list[float], list[float]]:
    """Validate a difficulty mixture: betas in [0, 1], weights >= 0 summing to 1, same length."""
    betas = [check_real(f"betas[{i}]", b, low=0.0, high=1.0) for i, b in enumerate(check_numbers("betas", betas))]
    weights = [check_real(f"weights[{i}]", w, low=0.0, high=math.inf, high_open=True)
               for i, w in enumerate(check_numbers("weights", weights))]
    if len(betas) != len(weights):
        raise ValueError(f"betas and weights must have the same length, got {len(betas)} and {len(weights)}")
    if abs(sum(weights) - 1.0) > SUM_TOL:
        raise ValueError(f"weights must sum to 1 (within {SUM_TOL}), got {sum(weights):.6g}")
    return betas, weights


def simulate_mixture(betas, weights, k: int, *, num_samples: int,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Accept flags (bool (num_samples, k)) of num_samples requests, each of one class drawn with prob weights."""
    betas, weights = _check_mixture(betas, weights)
    k = check_int("k", k, minimum=1)
    n = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator)
    w = torch.tensor(weights, dtype=torch.float64)  # (C,)
    cls = torch.multinomial(w, n, replacement=True, generator=generator)  # (n,) class of each request
    beta = torch.tensor(betas, dtype=torch.float64)[cls]  # (n,) constant within a request
    u = torch.rand(n, k, generator=generator, dtype=torch.float64)  # (n, k)
    return u < beta[:, None]  # (n, k) every flag drawn, even after a rejection


@dataclass(frozen=True)
class RoundTokens:
    """Tokens per round N = A + 1 measured from a log: its mean over the rounds, the mean's standard error."""

    mean: float
    stderr: float
    rounds: int


def tokens_per_round(log) -> RoundTokens:
    """The mean of N = A + 1 over a SpecDecodeLog's rounds and its standard error, from the log's counts of A >= a."""
    summary = getattr(log, "summary", None)
    if not callable(summary):
        raise TypeError(f"log must be a SpecDecodeLog, got {type(log).__name__}")
    s = summary()
    if s.rounds < 1:
        raise ValueError("log must hold at least one round")
    at_least = torch.tensor(s.accepted_at, dtype=torch.float64) / s.rounds  # (k,) P(A >= a), a = 1..k
    a = torch.arange(1, s.k + 1, dtype=torch.float64)
    mean, square = at_least.sum().item(), ((2 * a - 1) * at_least).sum().item()  # E[A], E[A^2]
    return RoundTokens(mean=1 + mean, stderr=math.sqrt((square - mean ** 2) / s.rounds), rounds=s.rounds)


# ---- survivor statistics ---------------------------------------------------------------------------

def _fmt_row(label: str, values, suffix: str = "") -> str:
    """One fixed-width table row: a label, then one right-aligned cell per position."""
    cells = "".join(f"{v:>{_CELL}.3f}" if isinstance(v, float) else f"{v:>{_CELL}}" for v in values)
    return f"{label:<{_ROW_LABEL}}{cells}{suffix}"


@dataclass(frozen=True)
class SurvivorStats:
    """Acceptance by position measured two ways; only the conditional rates may be multiplied."""

    population_rate: list[float]
    conditional_rate: list[float]
    reach: list[float]
    blocks_reaching: list[int]
    product_of_population: list[float]
    product_of_conditional: list[float]

    def table(self) -> str:
        """The post's survivor table, with the denominator (blocks reaching) beside the rates."""
        k = len(self.reach)
        return "\n".join([
            _fmt_row("position", range(1, k + 1)),
            _fmt_row("blocks reaching position", self.blocks_reaching),
            _fmt_row("population average (all rounds)", self.population_rate),
            _fmt_row("conditional among survivors", self.conditional_rate),
            _fmt_row("measured P(A >= j)", self.reach),
            _fmt_row("product of population averages", self.product_of_population, "   wrong"),
            _fmt_row("product of conditionals", self.product_of_conditional, "   right"),
        ])


def survivor_statistics(accepts: torch.Tensor) -> SurvivorStats:
    """Population vs conditional acceptance by position from bool flags (n, k); unreached positions report 0.0."""
    if not isinstance(accepts, torch.Tensor) or accepts.dtype != torch.bool:
        raise TypeError("accepts must be a bool torch.Tensor of shape (n, k)")
    if accepts.dim() != 2 or accepts.shape[0] == 0:
        raise ValueError(f"accepts must have shape (n, k) with n >= 1, got {tuple(accepts.shape)}")
    n, k = accepts.shape
    alive = accepts.long().cumprod(dim=1)  # (n, k) 1 while flags 1..j are all true
    passed = alive.sum(dim=0).tolist()  # (k,) rows with A >= j
    reaching = ([n] + passed)[:k]  # rows with flags 1..j-1 true: the denominator
    population = [c / n for c in accepts.sum(dim=0).tolist()]
    # exact rational arithmetic: the product of conditionals telescopes to passed_j / n, so it equals reach
    conditional = [Fraction(p, r) if r else Fraction(0) for p, r in zip(passed, reaching)]
    prod_cond, running = [], Fraction(1)
    for c in conditional:
        running *= c
        prod_cond.append(float(running))
    return SurvivorStats(
        population_rate=population,
        conditional_rate=[float(c) for c in conditional],
        reach=[p / n for p in passed],
        blocks_reaching=reaching,
        product_of_population=[math.prod(population[:j + 1]) for j in range(len(population))],
        product_of_conditional=prod_cond,
    )


# ---- Bayes: why the conditional curve rises ----------------------------------------------------------

@dataclass(frozen=True)
class BayesCurve:
    """Exact conditional acceptance by position under a difficulty mixture, with class posteriors."""

    alpha: list[float]
    posterior: list[list[float]]

    def table(self, class_index: int = 0) -> str:
        """Position, P(class | survived to it) and the predicted conditional acceptance."""
        c = check_int("class_index", class_index, minimum=0)
        if self.posterior and c >= len(self.posterior[0]):
            raise ValueError(f"class_index must be < {len(self.posterior[0])}, got {c}")
        head = f"P(class {c} | survived)"
        lines = [f"{'position':>9}{head:>25}{'alpha predicted':>17}"]
        for j, (a, post) in enumerate(zip(self.alpha, self.posterior)):
            lines.append(f"{j + 1:>9}{post[c]:>25.3f}{a:>17.3f}")
        return "\n".join(lines)


def bayes_conditional_acceptance(betas, weights, k: int) -> BayesCurve:
    """alpha_j = sum_i posterior_j(i) betas[i] with posterior_j(i) ∝ weights[i] betas[i]**(j-1)."""
    # A position no class can reach (every class with positive weight has beta 0) reports alpha 0.0
    # and repeats the last defined posterior: never NaN, and the products P(A >= j) stay right (0).
    betas, weights = _check_mixture(betas, weights)
    k = check_int("k", k, minimum=1)
    alpha, posterior = [], []
    for j in range(k):  # j = number of proposals already survived
        # log weight of class i among survivors; log space so long blocks do not underflow to 0/0
        logs = [math.log(w) + (j * math.log(b) if j else 0.0) if w > 0 and (b > 0 or j == 0) else -math.inf
                for b, w in zip(betas, weights)]
        top = max(logs)
        if top == -math.inf:  # nobody reaches position j + 1
            alpha.append(0.0)
            posterior.append(list(posterior[-1]))
            continue
        unnorm = [math.exp(x - top) for x in logs]
        z = sum(unnorm)
        post = [u / z for u in unnorm]
        posterior.append(post)
        alpha.append(sum(p * b for p, b in zip(post, betas)))
    return BayesCurve(alpha=alpha, posterior=posterior)
