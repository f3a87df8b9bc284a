"""Act V's field bugs of tree verification, each modelled from its source and put on the exact tree engine's scale.

EAGLE-1's sampling verifier, `evaluate_posterior` in SafeAILab/EAGLE model/utils.py, walks a static tree one level
at a time over candidate rows, the root-to-leaf paths. At a02ade9 (the parent of PR #47's commit 61020ed) it drafts
as rrs does (children without replacement, child c divided by and subtracting q_c: q with the siblings drawn before
it removed and renormalised) and departs from rrs twice:
- the bonus: `adjustflag` is reset at every level and set by any rejected sibling; after the walk a set flag draws
  the next token from `gtp`, the running residual of the last level walked. That is the fallback when that level
  rejected every child, and wrong when the deepest level kept a child after rejecting a sibling: the bonus then
  comes from the parent's residual, not from P at the leaf. PR #47 (61020ed) adds `accept_length !=
  candidates.shape[1]` to the condition. A deepest level with one child per node never sees it.
- the rows: they are listed in reverse order of drafting, so siblings are tested last-drawn first, and a node is
  tested once per leaf below it; a repeat always rejects (the residual is 0 at its token) but subtracts q_c again.
  b09a256 ("fix a bug", 2024-03-09) sorts the rows and skips a token already tested: the walk is then rrs.
A level is a schedule of tests; eagle1_step_law returns what tree.tables_law needs, with the bonus kept apart.
Token id 0, which the code skips as padding (`if x == 0: continue`), is a real token on the chain and is not skipped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_int
from ..multidraft import MAX_TABLE
from ..multidraft_rules import Stages, count_outcomes, draft_outcomes, next_target, pick, without
from ..policy import policy_table
from ..sampling import accept_ratio, total_variation
from .chain import reference_chain, sequence_law
from .tree import check_tree, tables_law, tree_law

__all__ = ["EAGLE1", "PR47_PARENT", "PR47_FIX", "ROWS_FIX", "Eagle1Version", "EAGLE1_VERSIONS", "Eagle1Step",
           "eagle1_step_law", "eagle1_tree_law", "greedy_law", "TreeBug", "SGLANG_GREEDY", "tree_bugs"]

EAGLE1 = "SafeAILab/EAGLE model/utils.py evaluate_posterior"
PR47_PARENT = "a02ade9183d7f2fb212156ee6e7dad5cde5110de"  # PR #47's parent (2024-02-23): both departures
PR47_FIX = "61020ed1b9d3338468973982faabbf21075cdb14"  # PR #47's commit (2024-02-29), merged as b690dbf
ROWS_FIX = "b09a25631df11d4b376fc5a3106d08b51d4bf7a3"  # "fix a bug" (2024-03-09): rows sorted, repeats skipped


@dataclass(frozen=True)
class Eagle1Version:
    """A state of EAGLE-1's evaluate_posterior: which of the two fixes it holds, and where it comes from."""

    name: str
    bonus_fixed: bool
    rows_fixed: bool
    reference: str


EAGLE1_VERSIONS = {v.name: v for v in [
    Eagle1Version("a02ade9", False, False, f"{EAGLE1} @{PR47_PARENT} (PR #47's parent)"),
    Eagle1Version("61020ed", True, False, f"{EAGLE1} @{PR47_FIX} (PR #47's bonus fix)"),
    Eagle1Version("b09a256", True, True, f"{EAGLE1} @{ROWS_FIX} (rows sorted, repeats skipped)"),
    Eagle1Version("pr47_alone", False, True, f"{EAGLE1} @{ROWS_FIX} with PR #47's line undone: its bug alone"),
]}


@dataclass(frozen=True)
class Eagle1Step:
    """One level of EAGLE-1's walk at one node, exactly: first (V,), late (V, V), fallback (V,) (eagle1_step_law)."""

    first: torch.Tensor
    late: torch.Tensor
    fallback: torch.Tensor


def eagle1_step_law(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, repeats: int, rows_fixed: bool) -> Eagle1Step:
    """One level of EAGLE-1's walk at one node: first (V,), late (V, V), fallback (V,), exactly.

    first[x]: the level's first test keeps x; late[x, y]: a later test keeps x, y the level's residual then (gtp);
    fallback[x]: every test rejected and x drawn from the last residual. The tests run children last-drawn first,
    each `repeats` times (the leaves below it), unless rows_fixed: drawn order, once each, which is rrs.
    """
    X, weight = draft_outcomes(q, num_drafts, "without_replacement")  # (K, k) children in drawn order, (K,)
    K, V = X.shape[0], p.numel()
    q_c, q_i = [], q.repeat(K, 1)  # q_c[c]: (K, V) q without children 0..c-1, renormalised: what child c is drawn from
    for x in X.T:
        q_c.append(q_i)
        q_i = without(q_i, x)
    order = range(X.shape[1]) if rows_fixed else range(X.shape[1] - 1, -1, -1)
    schedule = [c for c in order for _ in range(1 if rows_fixed else repeats)]
    target, reach, rows = p.repeat(K, 1), torch.ones(K, dtype=torch.float64), torch.arange(K)  # gtp per draft tuple
    first, late = torch.zeros(K, V, dtype=torch.float64), torch.zeros(K, V, V, dtype=torch.float64)
    for t, c in enumerate(schedule):
        x = X[:, c]  # (K,)
        a = reach * accept_ratio(pick(target, x), pick(q_c[c], x))  # (K,) P(this test is reached and keeps x)
        if t == 0:
            first[rows, x] += a
        else:
            late[rows, x] += a[:, None] * target  # (K, V): kept after a rejection, with the residual at that moment
        target, reach = next_target(target, q_c[c]), reach - a  # gtp = norm([gtp - q_c]_+) after a rejection
    return Eagle1Step(first=weight @ first, late=torch.einsum("k,kxy->xy", weight, late),
                      fallback=weight @ (reach[:, None] * target))


def eagle1_tree_law(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, widths,
                    version: str) -> torch.Tensor:
    """The exact law (V,) * horizon of a static tree verified by EAGLE-1's evaluate_posterior as of `version`."""
    P, Q, start, widths, _ = check_tree(P, Q, start, widths, "rrs")
    horizon = check_int("horizon", horizon, minimum=1)
    if version not in EAGLE1_VERSIONS:
        raise ValueError(f"version must be one of {', '.join(map(repr, EAGLE1_VERSIONS))}, got {version!r}")
    ver, V = EAGLE1_VERSIONS[version], P.shape[0]
    tables, (first, late) = [], (None, None)
    for j, w in enumerate(widths):
        count = max(count_outcomes(Q[s], w, "without_replacement") for s in range(V))
        if count * V * V > MAX_TABLE:
            raise ValueError(f"widths holds {w}, which gives {count} draft outcomes at one node and a table of "
                             f"{count * V * V} numbers; this law holds at most {MAX_TABLE}: use smaller widths")
        rows = [eagle1_step_law(P[s], Q[s], num_drafts=w, repeats=math.prod(widths[j + 1:]), rows_fixed=ver.rows_fixed)
                for s in range(V)]
        first, late, fallback = (torch.stack([getattr(r, f) for r in rows]) for f in ("first", "late", "fallback"))
        tables.append((first + late.sum(-1), fallback))
    kept = tables[-1][0]  # the deepest level: the bonus from P at the leaf, or from the residual after a rejection
    bonus = kept[:, :, None] * P[None] if ver.bonus_fixed else first[:, :, None] * P[None] + late
    return tables_law(tables, bonus, start=start, horizon=horizon)


def greedy_law(P: torch.Tensor, *, start: int, horizon: int) -> torch.Tensor:
    """The law of a verifier that is greedy at any temperature: the chain of P's argmax rows, whatever the drafts."""
    return sequence_law(policy_table(P, temperature=0), start=start, horizon=horizon)


@dataclass(frozen=True)
class TreeBug:
    """One way tree verification goes wrong (or is feared to): its exact TV from the target chain and its source."""

    name: str
    tv: float
    reference: str


SGLANG_GREEDY = ("sgl-project/sglang python/sglang/srt/speculative/eagle_utils.py eagle_sample: argmax when "
                 "`is_all_greedy or _is_cpu or _is_npu or _is_hip or _is_xpu` (quoted in PR #31214)")


def tree_bugs(*, widths=(3, 2, 1), horizon: int = 4) -> list[TreeBug]:
    """The field bugs of tree verification on the reference chain, each with its exact TV from the target chain."""
    ch = reference_chain()
    kw = dict(start=ch.start, horizon=horizon, widths=widths)
    target = sequence_law(ch.P, start=ch.start, horizon=horizon)
    eagle = {name: eagle1_tree_law(ch.P, ch.Q, version=name, **kw) for name in EAGLE1_VERSIONS}
    laws = [
        ("EAGLE-1 after b09a256: rrs, bonus from the leaf", eagle["b09a256"], EAGLE1_VERSIONS["b09a256"].reference),
        ("EAGLE-1 at PR #47's parent", eagle["a02ade9"], EAGLE1_VERSIONS["a02ade9"].reference),
        ("PR #47's bonus bug alone", eagle["pr47_alone"], EAGLE1_VERSIONS["pr47_alone"].reference),
        ("EAGLE-1 after PR #47, rows unsorted", eagle["61020ed"], EAGLE1_VERSIONS["61020ed"].reference),
        ("greedy at any temperature", greedy_law(ch.P, start=ch.start, horizon=horizon), SGLANG_GREEDY),
        ("top-n drafts with qx = 1 (one-hot)", tree_law(ch.P, ch.Q, rule="onehot_sequential", **kw),
         "SafeAILab/EAGLE #183, #221, #283: not a bug"),
        ("top-n drafts with qx = q(x) instead",
         tree_law(ch.P, ch.Q, rule=Stages("top", ratio="q", residual="onehot"), **kw),
         "the alternative SafeAILab/EAGLE #283 implies"),
        ("SGLang's walk fed i.i.d. drafts", tree_law(ch.P, ch.Q, rule="walk_duplicate_siblings", **kw),
         "constructed (duplicate siblings)"),
    ]
    return [TreeBug(name, total_variation(law, target), ref) for name, law, ref in laws]
