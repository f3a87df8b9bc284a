"""Many drafts at one position, the mechanics: how every kind of verifier tests its drafts, exactly and by sampling.

A rule is a way of drawing num_drafts drafts from q (`draws`, multidraft_draws) and a verifier. A `Stages` verifier
tests the drafts one at a time: draft i is kept with min(1, p_i(x)/r(x)) for the stage's draft distribution r, and
after a rejection the target becomes the residual p_{i+1} = norm([p_i - r']_+); if every draft is rejected, the token
comes from the last target. A `Walk` verifier draws one uniform u and walks it along the children's cumulative target
mass. `KSeq` and `Hub` (coupled) flip coins fixed by p, q and the whole draft tuple, in a fixed order, then draw from
one residual when every coin fails (the target never changes between tests, unlike a `Stages` verifier):

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

The exact law enumerates every draft tuple with positive probability and replaces each coin by its probability;
the sampler flips the coins. Both keep a kept draft and the fallback apart (`node_outcomes`, `step_law`,
`step_sample`): one position adds them, a tree node descends into the first and ends the round on the second.
Everything is float64; p and q arrive validated and normalised.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._checks import check_choice, check_pair, check_real, check_token_ids
from .multidraft_draws import DRAWS, count_outcomes, draft_outcomes, draw_drafts, top_order
from .sampling import accept_ratio, residual_weights, sample_rows

__all__ = ["DRAWS", "STAGE_Q", "FINALS", "Stages", "Walk", "KSeq", "Hub", "Verifier", "top_order", "count_outcomes",
           "draft_outcomes", "without", "remove_tokens", "stage_q", "next_target", "pick", "stage", "final_target",
           "kseq_rho", "Coins", "coupled_coins", "coupled_outcomes", "coupled_draw", "NodeOutcomes", "node_outcomes",
           "StepLaw", "step_law", "named_law", "draw_drafts", "distinct", "StepDraw", "step_sample", "step_verify"]

STAGE_Q = ("q", "q_i", "q_next", "onehot")  # q itself | q without the earlier drafts | q_i without x_i too | e_{x_i}
FINALS = ("current", "first_residual")  # all rejected: the last target | norm([p - q]_+), whatever happened


@dataclass(frozen=True)
class Stages:
    """Test drafts in turn: divide by `ratio`, after a rejection subtract `residual` ('none': the target stays p)."""

    draws: str
    ratio: str
    residual: str
    final: str = "current"

    def __post_init__(self) -> None:
        check_choice("draws", self.draws, DRAWS)
        check_choice("ratio", self.ratio, STAGE_Q)
        check_choice("residual", self.residual, STAGE_Q + ("none",))
        check_choice("final", self.final, FINALS)


@dataclass(frozen=True)
class Walk:
    """One uniform walked along the children's cumulative target mass; beyond it, p without the children."""

    draws: str

    def __post_init__(self) -> None:
        check_choice("draws", self.draws, DRAWS)


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


def without(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Rows w (K, V) with token x (K,) removed and renormalised; a row left with no mass stays all zero."""
    w = w.scatter(1, x[:, None], 0.0)
    total = w.sum(-1, keepdim=True)  # (K, 1)
    return w / torch.where(total > 0, total, torch.ones_like(total))


def remove_tokens(p_rows: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """p_rows (K, V) with the tokens of X (K, k) removed, unnormalised: [p - 1_X]_+, or p itself if nothing is left."""
    return residual_weights(p_rows, torch.zeros_like(p_rows).scatter(1, X, 1.0))


def stage_q(kind: str, q: torch.Tensor, q_i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The draft distribution (K, V) a stage divides by or subtracts, for drafts x (K,) drawn from rows q_i (K, V)."""
    if kind == "q":
        return q.expand_as(q_i)
    if kind == "q_i":
        return q_i
    if kind == "q_next":
        return without(q_i, x)
    return torch.zeros_like(q_i).scatter(1, x[:, None], 1.0)  # onehot: a deterministic draft is a point mass


def next_target(target: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """norm([p_i - r]_+) row by row (K, V); p_i itself where nothing is left (that stage then never rejects)."""
    w = residual_weights(target, r)
    return w / w.sum(-1, keepdim=True)


def pick(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """w[row, x[row]] (K,) for rows w (K, V) and tokens x (K,)."""
    return w.gather(1, x[:, None]).squeeze(1)


def stage(v: Stages, q: torch.Tensor, target: torch.Tensor, q_i: torch.Tensor, x: torch.Tensor):
    """One test on rows of state (K, V) with drafts x (K,): (P(keep x) (K,), the next target, the next q_i)."""
    a = accept_ratio(pick(target, x), pick(stage_q(v.ratio, q, q_i, x), x))  # min(1, p_i(x) / r(x))
    if v.residual != "none":
        target = next_target(target, stage_q(v.residual, q, q_i, x))
    return a, target, without(q_i, x)


def final_target(v: Stages, p: torch.Tensor, q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """What the token is drawn from when every draft is rejected (K, V)."""
    return target if v.final == "current" else next_target(p[None], q[None]).expand_as(target)


Verifier = Stages | Walk | KSeq | Hub  # every kind of multi-draft verifier


# --- the coupled verifiers' coins: K-SEQ and SpecHub (see the module docstring) -----------------------------------

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
    order = torch.arange(n, device=X.device).expand_as(X)
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
    reach = torch.ones(X.shape[0], dtype=torch.float64, device=p.device)
    chance = torch.zeros(X.shape, dtype=torch.float64, device=p.device)
    for slot, coin in zip(t.order.T, t.coin.T):  # (K,) the slot each row tests now, and its coin
        chance.scatter_(1, slot[:, None], (reach * coin)[:, None])
        reach = reach * (1 - coin)
    total = t.residual.sum()
    rest = t.residual / total if total > 0 else p  # no mass left: every test keeps (reach is 0)
    return chance, reach[:, None] * rest


def coupled_draw(p: torch.Tensor, q: torch.Tensor, X: torch.Tensor, v: KSeq | Hub, generator):
    """(token (size,), kept (size,)): the coins flipped in test order for drafts X (size, k), else a residual draw."""
    t = coupled_coins(p, q, X, v)
    u = torch.rand(X.shape, dtype=torch.float64, generator=generator, device=p.device)  # (size, k) one a test
    out = torch.full((X.shape[0],), -1, dtype=torch.long, device=X.device)
    for slot, coin, u_j in zip(t.order.T, t.coin.T, u.T):
        keep = (out < 0) & (u_j < coin)
        out = torch.where(keep, X.gather(1, slot[:, None]).squeeze(1), out)
    kept = out >= 0
    rest = t.residual if t.residual.sum() > 0 else p  # no mass left: no row gets here
    out[~kept] = sample_rows(rest.expand(int((~kept).sum()), -1), generator)
    return out, kept


@dataclass(frozen=True)
class NodeOutcomes:
    """Every draft tuple of one step and, given it, what the verifier does: the one definition of a rule's test.

    drafts (K, k) token ids; weight (K,) each tuple's probability; chance (K, k) P(stage i keeps draft i, every
    earlier stage rejected | the drafts); fallback (K, V) P(every draft rejected and x emitted | the drafts).
    """

    drafts: torch.Tensor
    weight: torch.Tensor
    chance: torch.Tensor
    fallback: torch.Tensor


def _stages_outcomes(p, q, X, v: Stages) -> tuple[torch.Tensor, torch.Tensor]:
    """(chance (K, k), fallback (K, V)): one coin per stage, the residual updated after each rejection."""
    target, q_i = p.repeat(X.shape[0], 1), q.repeat(X.shape[0], 1)  # (K, V) this stage's target p_i and q_i
    reach, cols = torch.ones(X.shape[0], dtype=torch.float64, device=p.device), []  # P(all drafts before rejected)
    for x in X.T:  # (K,) draft i of every tuple
        a, target, q_i = stage(v, q, target, q_i, x)
        cols.append(reach * a)
        reach = reach * (1 - a)
    return torch.stack(cols, dim=1), reach[:, None] * final_target(v, p, q, target)


def _walk_outcomes(p, X) -> tuple[torch.Tensor, torch.Tensor]:
    """(chance (K, k), fallback (K, V)): one uniform walked along the children's target mass, else p without them."""
    hi = p[X].cumsum(-1).clamp(max=1.0)  # (K, k) where each child's slice of [0, 1) ends (a repeat adds a slice)
    lo = torch.cat([torch.zeros_like(hi[:, :1]), hi[:, :-1]], dim=1)  # (K, k) where it starts
    rest = remove_tokens(p.repeat(X.shape[0], 1), X)  # (K, V) p without the children
    return hi - lo, (1 - hi[:, -1:]) * rest / rest.sum(-1, keepdim=True)


def node_outcomes(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, verifier: Verifier) -> NodeOutcomes:
    """Every draft tuple with positive probability and, for each, the chance each stage keeps its draft and the
    fallback: what a single position (multidraft_law) and a tree node (markov.tree, markov.tree_search) both read."""
    X, weight = draft_outcomes(q, num_drafts, verifier.draws)  # (K, k), (K,)
    if isinstance(verifier, (KSeq, Hub)):
        chance, fallback = coupled_outcomes(p, q, X, verifier)
    elif isinstance(verifier, Walk):
        chance, fallback = _walk_outcomes(p, X)
    else:
        chance, fallback = _stages_outcomes(p, q, X, verifier)
    return NodeOutcomes(drafts=X, weight=weight, chance=chance, fallback=fallback)


@dataclass(frozen=True)
class StepLaw:
    """One step's exact law, split: kept[x] = P(a draft x is kept), fallback[x] = P(all rejected, then x drawn)."""

    kept: torch.Tensor
    fallback: torch.Tensor

    @property
    def law(self) -> torch.Tensor:
        """The emitted token's law (V,): kept + fallback."""
        return self.kept + self.fallback

    @property
    def accept(self) -> float:
        """P(some draft is kept)."""
        return float(self.kept.sum())


def step_law(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, verifier: Verifier) -> StepLaw:
    """The exact law of one step, its kept child and its fallback apart, summed over every draft tuple."""
    o = node_outcomes(p, q, num_drafts=num_drafts, verifier=verifier)
    kept = torch.zeros(o.drafts.shape[0], p.numel(), dtype=torch.float64, device=p.device).scatter_add_(
        1, o.drafts, o.chance)
    return StepLaw(kept=o.weight @ kept, fallback=o.weight @ o.fallback)


def named_law(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, verifier: Verifier) -> StepLaw:
    """The exact law of one step whose drafts are named outright (distinct tokens (k,)) and tested in the order
    given; q is what a Stages verifier divides by. step_law's "top" scheme is the case drafts = q's top tokens, in
    q's order with ties by token id; here any order can be asked for."""
    p, q = check_pair(p, q)
    X = check_token_ids("drafts", drafts, p.numel(), dims=1, allow_empty=False)[None]  # (1, k)
    if X.unique().numel() != X.numel():
        raise ValueError(f"drafts must be distinct tokens, got {X[0].tolist()}")
    if isinstance(verifier, (KSeq, Hub)):
        raise TypeError(f"verifier must be a Stages or Walk verifier (a coupled one draws its own drafts), got "
                        f"{type(verifier).__name__}")
    p, q = p.double(), q.double()
    chance, fallback = _walk_outcomes(p, X) if isinstance(verifier, Walk) else _stages_outcomes(p, q, X, verifier)
    kept = torch.zeros(1, p.numel(), dtype=torch.float64, device=p.device).scatter_add_(1, X, chance)  # (1, V)
    return StepLaw(kept=kept[0], fallback=fallback[0])


def distinct(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values (D,) of non-negative integer keys (size,), sorted, and each key's index among them."""
    present = torch.zeros(int(keys.max()) + 1, dtype=torch.bool, device=keys.device).index_fill_(0, keys, True)
    return present.nonzero().squeeze(1), (present.cumsum(0) - 1)[keys]


@dataclass(frozen=True)
class StepDraw:
    """size independent steps: the emitted tokens (size,), and kept (size,) True where a draft was kept."""

    token: torch.Tensor
    kept: torch.Tensor


def _stages_draw(p, q, X, v: Stages, generator) -> StepDraw:
    """One coin per stage until one is kept, else a draw from the last target.

    The stage state (target, q_i) depends only on the drafts so far, so it is kept once per distinct draft history.
    """
    size, V = X.shape[0], p.numel()
    h = torch.zeros(size, dtype=torch.long, device=X.device)  # each step's draft history, a row of the state tables
    target, q_i = p[None], q[None]  # (H, V) one row per distinct history
    out = torch.full((size,), -1, dtype=torch.long, device=X.device)
    for x in X.T:  # (size,) draft i of every step
        pairs, h = distinct(h * V + x)  # the (history, draft) pairs that occur, and each step's pair
        a, target, q_i = stage(v, q, target[pairs // V], q_i[pairs // V], pairs % V)
        keep = (out < 0) & (torch.rand(size, dtype=torch.float64, generator=generator, device=p.device) < a[h])
        out = torch.where(keep, x, out)
    kept = out >= 0
    out[~kept] = sample_rows(final_target(v, p, q, target)[h[~kept]], generator)
    return StepDraw(token=out, kept=kept)


def _walk_draw(p, X, generator) -> StepDraw:
    """One uniform per step walked along the children's target mass, else a draw from p without them."""
    u = torch.rand(X.shape[0], 1, dtype=torch.float64, generator=generator, device=p.device)
    slot = (p[X].cumsum(-1) <= u).sum(-1)  # (size,) first child whose slice holds u; k when u is past them all
    out = X.gather(1, slot.clamp(max=X.shape[1] - 1)[:, None]).squeeze(1)
    kept = slot < X.shape[1]
    out[~kept] = sample_rows(remove_tokens(p.repeat(int((~kept).sum()), 1), X[~kept]), generator)
    return StepDraw(token=out, kept=kept)


def step_sample(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, verifier: Verifier, size: int,
                generator) -> StepDraw:
    """size independent steps: draw the drafts as the rule draws them, test them; tokens and kept flags apart."""
    X = draw_drafts(q, num_drafts, verifier.draws, size, generator)  # (size, k)
    return step_verify(p, q, X, verifier=verifier, generator=generator)


def step_verify(p: torch.Tensor, q: torch.Tensor, X: torch.Tensor, *, verifier: Verifier, generator) -> StepDraw:
    """Test drafts X (size, k), drawn from q as verifier.draws says, against p: a tree node's test of its children."""
    if isinstance(verifier, (KSeq, Hub)):
        return StepDraw(*coupled_draw(p, q, X, verifier, generator))
    if isinstance(verifier, Walk):
        return _walk_draw(p, X, generator)
    return _stages_draw(p, q, X, verifier, generator)
