"""Many drafts at one position, how the drafts are drawn: every draft tuple with its probability, and a sampler.

Four schemes (`DRAWS`): num_drafts independent draws from q ("iid"); draws without replacement, each from q with
the earlier drafts removed and renormalised ("without_replacement"); q's top num_drafts tokens, in order ("top");
and SpecHub's hub pair around the hub token a = argmax q ("hub", Sun et al., EMNLP 2024): the first draft x ~ q,
the second a if x != a, else a draw from q without a; so the pair (i, a) has probability q(i) and (a, i) has
q(a) q(i) / (1 - q(a)), for every i != a. Everything is float64; q arrives validated and normalised.
"""
from __future__ import annotations

import itertools
import math

import torch

from ._checks import check_choice
from .sampling import inverse_cdf

__all__ = ["DRAWS", "MAX_DRAFTS", "check_draws", "top_order", "count_outcomes", "draft_outcomes", "hub_pair",
           "draw_drafts"]

DRAWS = ("iid", "without_replacement", "top", "hub")  # i.i.d. | without replacement | q's top n | SpecHub's pair
MAX_DRAFTS = {"hub": 2}  # the schemes that draw at most this many drafts


def check_draws(draws: str, num_drafts: int) -> str:
    """A valid draft scheme for num_drafts drafts: one of DRAWS, and "hub" draws at most two (SpecHub's pair)."""
    check_choice("draws", draws, DRAWS)
    if num_drafts > MAX_DRAFTS.get(draws, num_drafts):
        raise ValueError(f"draws {draws!r} draws at most {MAX_DRAFTS[draws]} drafts (SpecHub's hub pair), "
                         f"got num_drafts = {num_drafts}")
    return draws


def top_order(q: torch.Tensor) -> torch.Tensor:
    """The tokens q gives mass to, most likely first, ties by token id (m,)."""
    order = torch.sort(-q, stable=True).indices  # (V,)
    return order[q[order] > 0]


def count_outcomes(q: torch.Tensor, num_drafts: int, draws: str) -> int:
    """How many draft tuples have positive probability: m^n, m!/(m-n)!, one, or 2(m - 1) pairs (m = q's support)."""
    m = int((q > 0).sum())
    check_draws(draws, num_drafts)
    if draws == "iid" or (draws == "hub" and num_drafts == 1):
        return m ** num_drafts
    if draws == "without_replacement":
        return math.perm(m, min(num_drafts, m))
    if draws == "hub":
        return max(1, 2 * (m - 1))
    return 1


def hub_pair(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SpecHub's pairs (K, 2), (i, a) then (a, i) for each i != a in q's support, and their probabilities (K,)."""
    order = top_order(q)  # (m,) the hub a = order[0]
    a, others = order[0], order[1:]
    if others.numel() == 0:  # q is a point mass on a: one draft exists
        return a.view(1, 1), torch.ones(1, dtype=torch.float64, device=q.device)
    hub = a.expand_as(others)
    X = torch.cat([torch.stack([others, hub], 1), torch.stack([hub, others], 1)])  # (2(m-1), 2)
    rest = q[others].sum()  # q without a: a sum of the others, never 1 - q(a)
    return X, torch.cat([q[others], q[a] * q[others] / rest])


def draft_outcomes(q: torch.Tensor, num_drafts: int, draws: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every draft tuple with positive probability, rows (K, k) of token ids, and its probability (K,).

    k = num_drafts, except without replacement, top-n or hub when q's support m is smaller: then only m drafts exist.
    """
    check_draws(draws, num_drafts)
    support = top_order(q).tolist()
    if draws == "top":
        X = torch.tensor([support[:num_drafts]], device=q.device)  # (1, k): the children are fixed
        return X, torch.ones(1, dtype=torch.float64, device=q.device)
    if draws == "hub" and num_drafts == 2:
        return hub_pair(q)
    k = min(num_drafts, len(support))
    without = draws == "without_replacement"
    rows = itertools.permutations(support, k) if without else itertools.product(support, repeat=num_drafts)
    X = torch.tensor(list(rows), dtype=torch.long, device=q.device)  # (K, k)
    q_x = q[X]  # (K, k) q of each draft
    if not without:
        return X, q_x.prod(-1)
    undrawn = q.repeat(X.shape[0], 1).scatter(1, X, 0.0).sum(-1, keepdim=True)  # (K, 1) mass never drawn
    left = q_x.flip(-1).cumsum(-1).flip(-1) + undrawn  # (K, k) mass still in q at stage i: sums, never 1 - sum
    return X, (q_x / left).prod(-1)  # draft i comes from q with drafts 1..i-1 removed, renormalised


def _draw_hub(q: torch.Tensor, num_drafts: int, size: int, generator) -> torch.Tensor:
    """SpecHub's drafts (size, k): x ~ q, then a if x != a, else one from q without a (k = 1: q a point mass)."""
    u = torch.rand(size, 2, dtype=torch.float64, generator=generator, device=q.device)
    first = inverse_cdf(q, u[:, 0])  # (size,)
    a = top_order(q)[0]
    if num_drafts == 1 or int((q > 0).sum()) == 1:
        return first[:, None]
    rest = q.clone()
    rest[a] = 0.0
    other = inverse_cdf(rest, u[:, 1])  # (size,) from q without a
    return torch.stack([first, torch.where(first == a, other, a)], 1)


def draw_drafts(q: torch.Tensor, num_drafts: int, draws: str, size: int, generator) -> torch.Tensor:
    """Drafts (size, k) for each of size steps; k < num_drafts only when drawing without replacement exhausts q."""
    check_draws(draws, num_drafts)
    if draws == "top":
        return top_order(q)[:num_drafts].expand(size, -1)
    if draws == "hub":
        return _draw_hub(q, num_drafts, size, generator)
    if draws == "iid":  # num_drafts uniforms a step, all read against q's one cumulative sum
        u = torch.rand(size, num_drafts, dtype=torch.float64, generator=generator, device=q.device)  # (size, k)
        return inverse_cdf(q, u)
    k = min(num_drafts, int((q > 0).sum()))
    return torch.multinomial(q.expand(size, -1), k, replacement=False, generator=generator)  # as EAGLE-1 drafts
