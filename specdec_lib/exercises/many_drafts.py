"""Act V exercises: one step of recursive rejection sampling; the best uniform-width tree under a node budget."""
from __future__ import annotations

import functools

import torch

from ..markov.chain import reference_chain
from ..markov.tree import tree_expected_tokens
from ..markov.tree_cost import TreeSearch, all_trees, best_tree, tree_nodes, tree_speedup
from ..multidraft import multidraft_law
from ..multidraft_rules import Stages, step_law
from ._report import DELTA, Grade, Stop, call, law_verdict, run

__all__ = ["grade_rrs_step", "grade_best_widths"]


def _f64(x) -> torch.Tensor:
    x = torch.as_tensor(x, dtype=torch.float64)
    return x / x.sum()


# (label, p, q, n, steps). Case 1: each known mistake's law lies at least 0.206 from rrs's, more than twice the noise
# bound of 6,000 steps (0.043 at delta 5e-7), so a mistake fails and is named. Case 2 exhausts q's support (two drafts
# for n = 3); its nearest caught mistake lies 0.161 away, twice the bound of 4,000 steps (0.055) and more.
RRS_CASES = [("p = [0.05, 0.45, 0.5], q = [0.9, 0.1, 0], n = 2",
              _f64([0.05, 0.45, 0.5]), _f64([0.9, 0.1, 0.0]), 2, 6000),
             ("p = [0.4, 0.3, 0.2, 0.1], q = [0, 0.5, 0.5, 0], n = 3 (q has two tokens: two drafts)",
              _f64([0.4, 0.3, 0.2, 0.1]), _f64([0.0, 0.5, 0.5, 0.0]), 3, 4000)]
RRS_MISTAKES = {  # name: (the verifier that makes the mistake, what it is in words)
    "original_q": (Stages("without_replacement", ratio="q", residual="q"),
                   "every stage divides by and subtracts the original q; "
                   "a draft drawn without replacement comes from q with the earlier drafts removed and renormalised, "
                   "so stage i must use that q_i (the question of SafeAILab/EAGLE #74)"),
    "next_q": (Stages("without_replacement", ratio="q_i", residual="q_next"),
               "the rejected draft is removed from q_i before the "
               "residual is taken; subtract the q_i the draft came from, then remove the draft"),
    "no_residual": (Stages("without_replacement", ratio="q_i", residual="none"),
                    "the target never becomes the residual: after a "
                    "rejection the next draft is still tested against p, and the fallback is drawn from p"),
    "first_residual": (Stages("without_replacement", ratio="q_i", residual="q_i", final="first_residual"),
                       "the fallback comes "
                       "from the first residual norm([p - q]_+), not from the last stage's target"),
}


def _token(out, vocab: int, on: str) -> int:
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = int(out.item())
    if isinstance(out, bool) or not isinstance(out, int):
        raise Stop(f"rrs_step must return one token id (an int), got {type(out).__name__} (on {on})")
    if not 0 <= out < vocab:
        raise Stop(f"token ids must lie in [0, {vocab}), got {out} (on {on})")
    return out


def grade_rrs_step(rrs_step, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 6.1: rrs_step(p, q, drafts, generator) -> the token one rrs step emits for drafts drawn without
    replacement from q."""
    def body(fn, report):
        p, q = _f64([0.6, 0.3, 0.1]), _f64([0.2, 0.3, 0.5])
        on = "p = [0.6, 0.3, 0.1], q = [0.2, 0.3, 0.5], drafts [0, 2]"
        got = [_token(call(fn, p, q, torch.tensor([0, 2]), torch.Generator().manual_seed(s), on=on), 3, on)
               for s in range(20)]
        if set(got) != {0}:
            raise Stop(f"the first draft, token 0, has p = 0.6 >= q = 0.2, so it is kept with min(1, p/q) = 1, every "
                       f"time; you returned {sorted(set(got))} in 20 steps ({on})")
        _, p, q, _, _ = RRS_CASES[0]
        runs = [[_token(call(fn, p, q, torch.tensor([0, 1]), g, on="a rerun"), p.numel(), "a rerun") for _ in range(30)]
                for g in (torch.Generator().manual_seed(5), torch.Generator().manual_seed(5))]
        if runs[0] != runs[1]:
            raise Stop("two generators seeded alike gave different tokens: pass `generator` to every random draw "
                       "(torch.rand, torch.multinomial), never use the global random state")
        for label, p, q, n, steps in RRS_CASES:
            g = torch.Generator().manual_seed(len(label))
            k = min(n, int((q > 0).sum()))  # drafts without replacement stop when q's support is used up
            drafts = torch.multinomial(q.expand(steps, -1), k, replacement=False, generator=g)  # (steps, k)
            tokens = [_token(call(fn, p.clone(), q.clone(), d, g, on=label), p.numel(), label) for d in drafts]
            freq = torch.bincount(torch.tensor(tokens), minlength=p.numel()).double() / steps
            mistakes = {name: (step_law(p, q, num_drafts=n, verifier=v).law, text)
                        for name, (v, text) in RRS_MISTAKES.items()}
            if not law_verdict(report, label, freq, multidraft_law(p, q, num_drafts=n, rule="rrs"), steps, mistakes,
                               DELTA / len(RRS_CASES)):
                raise Stop("the distribution test failed")
        report.note(f"keeps a draft with p >= q every time; {len(RRS_CASES)} cases ("
                    f"{', '.join(f'{c[-1]:,}' for c in RRS_CASES)} steps) within the noise bound of the exact rrs law, "
                    "q's support used up included")
    return run("rrs_step", body, rrs_step, raise_on_failure=raise_on_failure, verbose=verbose)


class NodeCost:
    """c_v(n) = base + slope * n for a pass over n draft nodes; prints as the formula."""

    def __init__(self, base: float, slope: float):
        self.base, self.slope = base, slope

    def __call__(self, n: int) -> float:
        return self.base + self.slope * n

    def __str__(self) -> str:
        return f"c_v(|T|) = {self.base:g} + {self.slope:g} |T|"


TREE_CASES = [("rrs", 0.15, NodeCost(1.0, 0.05), 8), ("onehot_sequential", 0.15, NodeCost(1.0, 0.05), 8),
              ("onehot_sequential", 1.0, NodeCost(1.6, 0.0), 6)]  # (5,) and (6,) tie here, and no tree beats plain


@functools.cache
def _expected_tokens(rule: str, budget: int) -> dict[tuple[int, ...], float]:
    """E[N_T] of every tree in the budget on the reference chain, for naming a wrong cost model."""
    ch = reference_chain()
    return {w: tree_expected_tokens(ch.P, ch.Q, start=ch.start, widths=w, rule=rule)
            for w in all_trees(budget, budget, budget)}


def _winner(rule: str, budget: int, score) -> tuple[int, ...]:
    """The tree of largest score(widths, E[N]) in the budget, ties to fewer nodes, then lexicographic order."""
    table = _expected_tokens(rule, budget)
    return max(table, key=lambda w: (score(w, table[w]), -tree_nodes(w)))


def _known_mistakes(got: tuple[int, ...], rule: str, budget: int, c_d: float, c_v) -> list[str]:
    """Every known mistake, in words, whose best tree is got (a search over paths only, or a wrong cost model)."""
    wrong = {"c_v evaluated at the depth, not at the node count |T|":
             lambda w, e: e / (len(w) * c_d + c_v(len(w))),
             "c_d paid per draft node; a tree is drafted level by level, one draft step per depth":
             lambda w, e: e / (tree_nodes(w) * c_d + c_v(tree_nodes(w))),
             "the numerator is E[A]; a round retires E[N] = E[A] + 1 tokens":
             lambda w, e: (e - 1) / (len(w) * c_d + c_v(tree_nodes(w))),
             "a search over paths only; search trees with more than one child per node too":
             lambda w, e: e / (len(w) * c_d + c_v(tree_nodes(w))) if set(w) == {1} else -1.0}
    return [text for text, score in wrong.items() if got == _winner(rule, budget, score)]


def grade_best_widths(best_widths, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 6.2: best_widths(P, Q, *, start, rule, c_d, c_v, budget) -> the widths of the uniform-width tree of
    largest S(T) with |T| <= budget.

    S(T) = E[N_T] / (depth(T) c_d + c_v(|T|)); ties go to the tree with fewer nodes.
    """
    def body(fn, report):
        ch = reference_chain()
        for rule, c_d, c_v, budget in TREE_CASES:
            on = f"rule = {rule!r}, c_d = {c_d}, {c_v}, budget = {budget}"
            got = call(fn, ch.P, ch.Q, start=ch.start, rule=rule, c_d=c_d, c_v=c_v, budget=budget, on=on)
            if isinstance(got, list):
                got = tuple(got)
            if not (isinstance(got, tuple) and got and all(isinstance(w, int) and w >= 1 for w in got)):
                raise Stop(f"best_widths must return a non-empty tuple of ints >= 1, got {got!r} ({on})")
            ref = best_tree(ch.P, ch.Q, start=ch.start, rule=rule, c_d=c_d, c_v=c_v, budget=budget,
                            search=TreeSearch(max_depth=budget, max_width=budget))
            if got == ref.widths:
                continue
            where = f"{on}: got {got}, expected {ref.widths}"
            if tree_nodes(got) > budget:
                hint = (f"; you may have counted sum(widths) = {sum(got)}" if sum(got) <= budget else "")
                raise Stop(f"{got} has {tree_nodes(got)} draft nodes, over the budget: every node at depth j has "
                           f"w_(j+1) children, so |T| = w_1 + w_1 w_2 + ...{hint} ({where})")
            s = tree_speedup(ch.P, ch.Q, start=ch.start, widths=got, rule=rule, c_d=c_d, c_v=c_v)
            if abs(s - ref.speedup) <= 1e-12:
                if tree_nodes(got) > ref.nodes:
                    raise Stop(f"{got} ties with {ref.widths} (S = {s:.4f}); ties go to the tree with fewer nodes, "
                               f"the cheaper pass ({where})")
                continue  # the same S and the same size: an equal answer
            known = _known_mistakes(got, rule, budget, c_d, c_v)
            if known:
                raise Stop(f"your tree is the best one under a known mistake: {'; or '.join(known)} ({where})")
            raise Stop(f"{where}: S = {s:.4f} at yours, {ref.speedup:.4f} at the best; search every widths tuple "
                       f"with |T| <= {budget}, of any depth")
        report.note(f"the best uniform-width tree on {len(TREE_CASES)} settings (sd.markov.best_tree over every "
                    "widths tuple in the budget), a tie that goes to the smaller tree included")
    return run("best_widths", body, best_widths, raise_on_failure=raise_on_failure, verbose=verbose)
