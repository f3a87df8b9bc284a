"""Many drafts at one position, the mechanics: how a verifier tests its drafts, exactly and by sampling.

A rule is a way of drawing num_drafts drafts from q (`draws`, multidraft_draws) and a verifier. A `Stages` verifier
tests the drafts one at a time: draft i is kept with min(1, p_i(x)/r(x)) for the stage's draft distribution r, and
after a rejection the target becomes the residual p_{i+1} = norm([p_i - r']_+); if every draft is rejected, the token
comes from the last target. A `Walk` verifier draws one uniform u and walks it along the children's cumulative target
mass. `KSeq` and `Hub` (multidraft_coupled) flip coins fixed by the whole draft tuple, then draw one residual.
The exact law enumerates every draft tuple with positive probability and replaces each coin by its probability;
the sampler flips the coins. Both keep a kept draft and the fallback apart (`node_outcomes`, `step_law`,
`step_sample`): one position adds them, a tree node descends into the first and ends the round on the second.
Everything is float64; p and q arrive validated and normalised.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_choice, check_pair, check_token_ids
from .multidraft_coupled import Hub, KSeq, coupled_draw, coupled_outcomes
from .multidraft_draws import DRAWS, count_outcomes, draft_outcomes, draw_drafts, top_order
from .sampling import accept_ratio, residual_weights, sample_rows

__all__ = ["DRAWS", "STAGE_Q", "FINALS", "Stages", "Walk", "KSeq", "Hub", "Verifier", "top_order", "count_outcomes",
           "draft_outcomes", "without", "remove_tokens", "stage_q", "next_target", "pick", "stage", "final_target",
           "NodeOutcomes", "node_outcomes", "StepLaw", "step_law", "named_law", "draw_drafts", "distinct", "StepDraw",
           "step_sample", "step_verify"]

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
    reach, cols = torch.ones(X.shape[0], dtype=torch.float64), []  # P(the drafts before this one all rejected)
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
    kept = torch.zeros(o.drafts.shape[0], p.numel(), dtype=torch.float64).scatter_add_(1, o.drafts, o.chance)
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
    kept = torch.zeros(1, p.numel(), dtype=torch.float64).scatter_add_(1, X, chance)  # (1, V)
    return StepLaw(kept=kept[0], fallback=fallback[0])


def distinct(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values (D,) of non-negative integer keys (size,), sorted, and each key's index among them."""
    present = torch.zeros(int(keys.max()) + 1, dtype=torch.bool).index_fill_(0, keys, True)
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
    h = torch.zeros(size, dtype=torch.long)  # each step's draft history, a row of the state tables
    target, q_i = p[None], q[None]  # (H, V) one row per distinct history
    out = torch.full((size,), -1, dtype=torch.long)
    for x in X.T:  # (size,) draft i of every step
        pairs, h = distinct(h * V + x)  # the (history, draft) pairs that occur, and each step's pair
        a, target, q_i = stage(v, q, target[pairs // V], q_i[pairs // V], pairs % V)
        keep = (out < 0) & (torch.rand(size, dtype=torch.float64, generator=generator) < a[h])
        out = torch.where(keep, x, out)
    kept = out >= 0
    out[~kept] = sample_rows(final_target(v, p, q, target)[h[~kept]], generator)
    return StepDraw(token=out, kept=kept)


def _walk_draw(p, X, generator) -> StepDraw:
    """One uniform per step walked along the children's target mass, else a draw from p without them."""
    u = torch.rand(X.shape[0], 1, dtype=torch.float64, generator=generator)
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
