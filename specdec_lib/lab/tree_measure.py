"""Lab: a tree's cost equation against the clock: S = E[N] / (c_d + c_v(tree)), predicted beside measured.

The terms are generate_tree's own phases, timed on a cache filled to a real context, as measure.time_terms
times a chain's: T_1 one plain decode step; D(tree) the draft phase (propose_tree, one call however many nodes);
V(tree) the verification (tree_round: one target pass over the root and every node, the walk, the path kept).
So c_d = D / T_1 (no k: a tree is drafted at once) and c_v(tree) = V / T_1, a pass over 1 + nodes positions.
E[N] is tokens per round of real tree decodes, and the measured speedup their tokens per second over plain
decoding's on the same prompts, each pair back to back (median over repeats, as measure_speedup does).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._checks import check_widths
from ..cost import cost_equation, tree_nodes
from ..telemetry import SpecDecodeLog
from .generation import GREEDY, Decoding, check_decoding, decode_step, generate_plain
from .measure import MeasurePlan, median_times
from .steps import check_policy, prefill
from .tree_decoding import generate_tree, tree_round, tree_rule

__all__ = ["WARM_ROUNDS", "TreeTable", "time_tree_terms", "measure_trees"]

WARM_ROUNDS = 8  # untimed rounds before a learning drafter's terms are timed


@dataclass(frozen=True)
class TreeTable:
    """Measured cost terms, predicted and measured speedups for each tree (its widths by depth)."""

    trees: list[tuple[int, ...] | None]  # None: the drafter's own tree (lookahead)
    nodes: list[int]  # the most nodes a pass scores
    T_1: float  # seconds, median over pairs
    c_d: list[float]  # D(tree) / T_1, median over pairs
    c_v: list[float]  # V(tree) / T_1, median over pairs
    e_n: list[float]  # tokens per round of the tree decodes
    predicted: list[float]  # E[N] / (c_d + c_v)
    measured: list[float]  # median over repeats of (tokens/s tree) / (tokens/s plain)
    repeats: int
    draft: str
    rule: str

    def __str__(self) -> str:
        lines = [f"tree decoding, draft {self.draft}, rule {self.rule}; T_1 = {self.T_1 * 1e3:.3f} ms",
                 f"{'widths':>12}{'nodes':>6}{'c_d':>7}{'c_v':>7}{'E[N]':>7}{'pred S':>8}{'meas S':>8}"]
        for i, w in enumerate(self.trees):
            name = "own" if w is None else ",".join(map(str, w))
            lines.append(f"{name:>12}{self.nodes[i]:>6}{self.c_d[i]:>7.3f}{self.c_v[i]:>7.3f}"
                         f"{self.e_n[i]:>7.3f}{self.predicted[i]:>8.3f}{self.measured[i]:>8.3f}")
        lines.append(f"meas S: median over {self.repeats} repeats; pred S = E[N] / (c_d + c_v(tree))")
        return "\n".join(lines)


def _check_trees(trees) -> list[tuple[int, ...] | None]:
    trees = [None if w is None else tuple(check_widths(w)) for w in trees]
    if not trees:
        raise ValueError("trees must hold at least one tree (its widths by depth, or None for the drafter's own)")
    return trees


@torch.inference_mode()
def time_tree_terms(target, drafter, context: torch.Tensor, trees, reps: int = 20, *, rule: str = "onehot_sequential",
                    decoding: Decoding = GREEDY) -> tuple[float, list[float], list[float]]:
    """(T_1, [D(tree)], [V(tree)]) in seconds: medians of reps round-robin timings at context (1-D ids).

    A tree is its widths, or None for the drafter's own. A drafter that learns from each pass (observe: lookahead)
    first runs WARM_ROUNDS rounds at context, untimed, so that its window is full and its pool holds guesses."""
    trees = _check_trees(trees)
    verifier = tree_rule(rule).verifier
    decoding = check_decoding(decoding)
    L, last = context.numel(), context[-1:]
    cache = prefill(target, context)  # holds context[:-1]
    state = drafter.start(context, cache)
    policy = decoding.kwargs()
    drafts = {}  # widths: the last draft phase's tree
    observe = getattr(drafter, "observe", None)
    for _ in range(WARM_ROUNDS if observe is not None else 0):
        draft = drafter.propose_tree(state, context, L, None, draws=verifier.draws, **policy)
        observe(state, draft, tree_round(target, cache, draft, last, n=L, decoding=decoding, verifier=verifier)[2])
        cache.crop(L - 1)

    def step():
        decode_step(target, cache, last, **policy)
        cache.crop(L - 1)

    def drafting(w):
        drafts[w] = drafter.propose_tree(state, context, L, w, draws=verifier.draws, **policy)

    def verifying(w):
        tree_round(target, cache, drafts[w], last, n=L, decoding=decoding, verifier=verifier)
        cache.crop(L - 1)  # a learning drafter (lookahead) is not told: each call sees the same state

    (T_1,) = median_times([step], reps, context)
    fns = []
    for w in trees:
        fns += [lambda w=w: drafting(w), lambda w=w: verifying(w)]
    times = median_times(fns, reps, context)
    return T_1, times[0::2], times[1::2]


def measure_trees(target, drafter, prompts, trees, *, rule: str = "onehot_sequential",
                  plan: MeasurePlan = MeasurePlan(), temperature: float = 0.0,  # noqa: B008
                  on_pair: Callable[[], object] | None = None) -> TreeTable:
    """Per repeat, prompt and tree: time the terms, decode plainly and by tree back to back; S against the clock.

    A tree is its widths, or None for the drafter's own (lookahead's, timed after WARM_ROUNDS rounds). No top-k:
    the policy is the temperature alone."""
    trees = _check_trees(trees)
    if not isinstance(plan, MeasurePlan):
        raise TypeError(f"plan must be a MeasurePlan, got {type(plan).__name__}")
    tree_rule(rule)
    temperature, _ = check_policy(temperature, None)
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    context = torch.cat([prompts[0], generate_plain(target, prompts[0], max(1, plan.n_new // 2))])  # a real context
    policy = "greedy" if temperature == 0 else "sample"
    decoding = Decoding(temperature, None, torch.Generator(device=prompts[0].device).manual_seed(plan.seed))
    c_d, c_v = [[] for _ in trees], [[] for _ in trees]
    tokens, rounds = [0] * len(trees), [0] * len(trees)
    speed = [[0.0, 0.0] for _ in range(plan.repeats * len(trees))]  # per (repeat, tree): tokens, plain-step units
    T_1s = []
    for r in range(plan.repeats):
        for i, p in enumerate(prompts):
            for j, w in enumerate(trees):
                seed = torch.Generator(device=context.device).manual_seed(plan.seed + r * len(prompts) + i)
                T_1, (D,), (V,) = time_tree_terms(target, drafter, context, [w], plan.reps, rule=rule,
                                                  decoding=Decoding(temperature, None, seed))
                T_1s.append(T_1)
                c_d[j].append(D / T_1)
                c_v[j].append(V / T_1)
                plain = SpecDecodeLog(k=0, policy=policy, temperature=temperature)
                generate_plain(target, p, plan.n_new, decoding=decoding, log=plain)
                depth = drafter.tree_bounds()[1] if w is None else len(w)
                spec = SpecDecodeLog(k=depth, policy=policy, temperature=temperature)
                generate_tree(target, drafter, p, plan.n_new, w, rule=rule, decoding=decoding, log=spec)
                s, ps = spec.summary(), plain.summary()
                tokens[j] += s.tokens
                rounds[j] += s.rounds
                acc = speed[r * len(trees) + j]
                acc[0] += s.tokens
                acc[1] += (s.draft_time + s.verify_time) / ((ps.draft_time + ps.verify_time) / ps.tokens)
                if on_pair is not None:
                    on_pair()
    e_n = [t / n for t, n in zip(tokens, rounds)]
    cd, cv = [statistics.median(x) for x in c_d], [statistics.median(x) for x in c_v]
    measured = [statistics.median(speed[r * len(trees) + j][0] / speed[r * len(trees) + j][1]
                                  for r in range(plan.repeats)) for j in range(len(trees))]
    nodes = [drafter.tree_bounds()[0] if w is None else tree_nodes(w) for w in trees]
    return TreeTable(trees=trees, nodes=nodes, T_1=statistics.median(T_1s), c_d=cd, c_v=cv,
                     e_n=e_n, predicted=[cost_equation(e, draft_steps=1, c_d=d, c_v=v) for e, d, v in zip(e_n, cd, cv)],
                     measured=measured,
                     repeats=plan.repeats, draft=getattr(drafter, "name", "draft"), rule=rule)
