"""The battery: a few small blocks chosen so that each verification bug moves the committed law, and its power.

Sample size per case comes from a power calculation. A case's exact completed law pi has M = V^(k+1) outcomes;
the empirical one from n blocks lands within tau(n) = sd.tv_noise_bound(pi, n, delta / cases) of pi unless an
event of probability delta / cases happens (a union bound keeps a correct verifier's false-failure rate for the
whole report below delta). A wrong verifier with completed law pi_b, TV(pi_b, pi) >= epsilon, is caught unless
its own estimate lands more than its noise away: E TV <= 1/2 sum sqrt(pi_b (1 - pi_b) / n) <= 1/2 sqrt((M - 1) / n)
(Cauchy-Schwarz; pi_b unknown), plus the McDiarmid term sqrt(ln(1/beta) / (2 n)) with probability 1 - beta.
Every term scales as 1/sqrt(n), so n = ((c_tau + sqrt(M - 1) / 2 + sqrt(ln(1/beta) / 2)) / epsilon)^2,
with c_tau = tau(1). law_power does this for any law vector pi (audit_generation's output laws among them);
power reads it for a battery case.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_int, check_real
from ..noise import tv_noise_bound
from ..sampling import post_pair
from .laws import target_law

__all__ = ["EPSILON", "BETA", "DELTA", "Promise", "PROMISE", "Case", "battery", "Power", "power", "law_power"]

EPSILON = 0.15  # the smallest TV (per case, on the completed law) the kit promises to catch
BETA = 1e-3  # the chance, per case, of missing a verifier that far off
DELTA = 1e-3  # the chance that a correct verifier fails the whole report


@dataclass(frozen=True)
class Promise:
    """What a report promises: a case epsilon TV off is caught with probability 1 - beta; a correct verifier
    fails the whole report with probability at most delta. Validated on construction."""

    epsilon: float = EPSILON
    beta: float = BETA
    delta: float = DELTA

    def __post_init__(self) -> None:
        check_real("epsilon", self.epsilon, low=0.0, high=1.0, low_open=True)
        check_real("beta", self.beta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_real("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)


PROMISE = Promise()  # the kit's default: EPSILON, BETA, DELTA


@dataclass(frozen=True)
class Case:
    """One block: target rows p_rows (k+1, V), draft rows q_rows (k, V), and what it is there to catch."""

    name: str
    p_rows: torch.Tensor  # (k+1, V)
    q_rows: torch.Tensor  # (k, V)
    purpose: str

    @property
    def k(self) -> int:
        return self.q_rows.shape[0]

    @property
    def V(self) -> int:
        return self.q_rows.shape[1]


def _rows(*rows) -> torch.Tensor:
    t = torch.tensor(rows, dtype=torch.float64)
    return (t / t.sum(-1, keepdim=True)).float()


def battery() -> list[Case]:
    """The kit's cases, k = 1..4 and V <= 5."""
    p, q = post_pair()
    return [
        Case("post_pair", torch.stack([p, p]), q[None], "the post's five-token pair: overlap 0.16, mostly rejected"),
        Case("reused_uniform", _rows([0.25, 0.5, 0.25], [0.8, 0.1, 0.1]), _rows([0.005, 0.99, 0.005]),
             "a rejection of an often-accepted y: a reused uniform lands past the residual's first token"),
        Case("likely_proposal", _rows([0.5, 0.5], [0.5, 0.5]), _rows([0.95, 0.05]),
             "q sure of a token p finds only likely: keeping likely proposals over-emits it"),
        Case("wide_residual", _rows([0.4, 0.2, 0.2, 0.2, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]),
             _rows([0.0005, 0.333, 0.333, 0.333, 0.0005]),
             "the residual sits on one token while p spreads: removing only the rejected token shows"),
        Case("forbidden", _rows([0.5, 0.5, 0.0], [0.0, 0.3, 0.7], [0.6, 0.0, 0.4]),
             _rows([0.2, 0.2, 0.6], [0.5, 0.3, 0.2]),
             "the target gives zero mass to a token the draft likes (a top-k target): it must never appear"),
        Case("positions_differ", _rows([0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1]),
             _rows([0.6, 0.2, 0.2], [0.2, 0.2, 0.6]), "every row different: a verifier reading the wrong row shows"),
        Case("block_gain", _rows([1, 2], [1, 2], [1, 2]), _rows([2, 1], [2, 1]),
             "the block paper's toy: the token rule keeps 10/9 proposals a block, block verification 11/9"),
        Case("binary_k3", _rows([0.9, 0.1], [0.2, 0.8], [0.7, 0.3], [0.4, 0.6]),
             _rows([0.6, 0.4], [0.5, 0.5], [0.3, 0.7]), "two tokens, three proposals"),
        Case("binary_k4", _rows([0.3, 0.7], [0.8, 0.2], [0.4, 0.6], [0.9, 0.1], [0.1, 0.9]),
             _rows([0.5, 0.5], [0.7, 0.3], [0.6, 0.4], [0.8, 0.2]), "two tokens, four proposals, rows alternating"),
    ]


@dataclass(frozen=True)
class Power:
    """A case's sample size n = num_blocks, its false-failure threshold and the smallest TV caught with probability
    1 - beta."""

    num_blocks: int
    threshold: float  # tau(n) = sd.tv_noise_bound(pi, n, delta / cases)
    floor: float  # 1/2 sum sqrt(pi (1 - pi) / n): the expected TV of a correct verifier is below it
    detectable: float  # epsilon(n): any verifier at least this far off is caught with probability >= 1 - beta

    def catch_probability(self, tv: float, beta: float) -> float:
        """The guaranteed chance of failing a verifier tv off: 1 - exp(-2 n (tv - m)^2) above m, else 0.

        m = tau(n) + sqrt(M - 1) / (2 sqrt n), the detectable TV less its beta term; at tv = detectable it is 1 - beta.
        """
        margin = self.detectable - math.sqrt(math.log(1 / beta) / (2 * self.num_blocks))
        return 1.0 - math.exp(-2 * self.num_blocks * (tv - margin) ** 2) if tv > margin else 0.0


def law_power(pi: torch.Tensor, *, num_samples: int | None = None, cases: int, promise: Promise = PROMISE) -> Power:
    """Sample size (num_samples, unless given) and threshold for comparing n draws with the law vector pi (M,), from
    the calculation in this module's docstring: M = pi.numel() outcomes (zero entries count: a bin that collects
    whatever the exact law never emits is one of them); `cases` is the number of cases the report's delta is shared
    among. The returned Power's num_blocks is that n (one draw per block, sample or call)."""
    if not isinstance(pi, torch.Tensor):
        raise TypeError(f"pi must be a torch.Tensor (a law over M outcomes), got {type(pi).__name__}")
    if not isinstance(promise, Promise):
        raise TypeError(f"promise must be a Promise, got {type(promise).__name__}")
    cases = check_int("cases", cases, minimum=1)
    n = None if num_samples is None else check_int("num_samples", num_samples, minimum=1)
    eps, beta, delta = promise.epsilon, promise.beta, promise.delta
    pi = pi.reshape(-1).double()
    M = pi.numel()
    c = tv_noise_bound(pi, 1, delta / cases) + 0.5 * math.sqrt(M - 1) + math.sqrt(math.log(1 / beta) / 2)
    n = math.ceil((c / eps) ** 2) if n is None else n
    floor = 0.5 * torch.sqrt(pi * (1 - pi) / n).sum().item()
    return Power(num_blocks=n, threshold=tv_noise_bound(pi, n, delta / cases), floor=floor, detectable=c / math.sqrt(n))


def power(case: Case, *, num_blocks: int | None = None, cases: int, promise: Promise = PROMISE) -> Power:
    """Sample size (num_blocks, unless given) and threshold of one case: law_power of its target law, M = V^(k+1)
    outcomes; `cases` is the number of cases the report's delta is shared among."""
    if not isinstance(case, Case):
        raise TypeError(f"case must be a Case, got {type(case).__name__}")
    n = None if num_blocks is None else check_int("num_blocks", num_blocks, minimum=1)
    return law_power(target_law(case.p_rows), num_samples=n, cases=cases, promise=promise)
