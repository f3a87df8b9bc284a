"""Drafts from the target: choose the exit layer from measured costs; say which verifier a Medusa tree needs."""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from ..accounting import alpha_from_tokens
from ..cost import best_k, c_v_at
from ..lab.recordings import recorded
from ..multidraft import RULES
from ..multidraft_rules import step_law
from ._report import Grade, Stop, call, run

__all__ = ["grade_choose_exit", "grade_tree_rule", "exit_cases", "recorded_exits", "TreeDraft", "TREE_CASES",
           "TREE_RULES", "tree_fit", "K_MAX", "PLAIN"]

K_MAX = 8  # the draft lengths choose_exit may pick from: 1 .. K_MAX, or k = 0 (plain decoding, S = 1)
PLAIN = (None, 0)  # choose_exit's answer when no exit beats plain decoding
TOL = 1e-9
TREE_RULES = tuple(name for name, r in RULES.items() if r.nested)  # sd.lab.TREE_RULES: rules a tree node can use


def recorded_exits() -> dict:
    """{(target, temperature, L): the exit's SpeedupTable} of the recorded `make measure-self` run (notebook 09's)."""
    return {(c.target, c.temperature, int(c.table.draft[len("exit"):])): c.table
            for c in recorded("measure-self").chains if c.table.draft.startswith("exit")}


def _line(c0: float, slope: float):
    return lambda k: c0 + slope * k


@functools.cache
def exit_cases() -> tuple:
    """(what it is, {L: (c_d, alpha)}, c_v): the recorded exits on both targets and policies, and made-up ones."""
    out = []
    exits = recorded_exits()
    for target in ("target", "target_ee"):
        for temperature in (0.0, 1.0):
            layers, c_vs = {}, []
            for L in (1, 2, 3):
                t = exits[(target, temperature, L)]
                i = max(range(len(t.ks)), key=lambda j: t.measured[j])  # its best measured k
                layers[L] = (round(t.c_d_fit, 3), round(alpha_from_tokens(t.e_n[i], t.ks[i]), 3))
                c_vs += list(zip(t.ks, t.c_v))
            mean_k = sum(k for k, _ in c_vs) / len(c_vs)
            mean_c = sum(c for _, c in c_vs) / len(c_vs)
            slope = (sum((k - mean_k) * (c - mean_c) for k, c in c_vs) / sum((k - mean_k) ** 2 for k, _ in c_vs))
            slope = max(0.0, slope)
            policy = "greedy" if temperature == 0 else "temperature 1"
            out.append((f"the recorded exits, {target}, {policy}", layers,
                        _line(round(mean_c - slope * mean_k, 3), round(slope, 3))))
    out.append(("a deep model where a shallow exit is cheap but weak", {2: (0.08, 0.45), 8: (0.3, 0.75),
                                                                        16: (0.55, 0.9)}, _line(1.0, 0.02)))
    out.append(("a memory-bound GPU: verification costs almost nothing more per token",
                {4: (0.12, 0.6), 12: (0.35, 0.85), 20: (0.6, 0.95)}, _line(1.0, 0.0)))
    out.append(("an expensive verification pass", {1: (0.2, 0.5), 2: (0.4, 0.7), 3: (0.6, 0.9)}, 1.8))
    return tuple(out)


def _grid(layers: dict, c_v) -> dict:
    """{(L, k): predicted S} over layers and k = 1 .. K_MAX."""
    return {(L, k): best_k(a, c_d=c_d, c_v=c_v, k_max=K_MAX).speedups[k]
            for L, (c_d, a) in layers.items() for k in range(1, K_MAX + 1)}


def _best(layers: dict, c_v) -> tuple[float, list]:
    """The largest predicted S over plain decoding (S = 1) and every (L, k), and every choice within TOL of it."""
    grid = {PLAIN: 1.0, **_grid(layers, c_v)}
    top = max(grid.values())
    return top, [lk for lk, s in grid.items() if s >= top - TOL]


def _mistakes(layers: dict, c_v) -> dict[str, tuple[int, int]]:
    """What recognised mistakes pick: (L, k) for each."""
    deepest = max(layers, key=lambda L: layers[L][1])
    cheapest = min(layers, key=lambda L: layers[L][0])
    no_c_v = max(((L, k) for L in layers for k in range(1, K_MAX + 1)),
                 key=lambda lk: best_k(layers[lk[0]][1], c_d=layers[lk[0]][0], c_v=1e-9, k_max=K_MAX).speedups[lk[1]])
    grid = _grid(layers, c_v)
    return {"the exit with the highest α, whatever its draft costs": (deepest, best_k(layers[deepest][1],
            c_d=layers[deepest][0], c_v=c_v, k_max=K_MAX).k or 1),
            "the cheapest exit, whatever it accepts": (cheapest, best_k(layers[cheapest][1], c_d=layers[cheapest][0],
                                                                          c_v=c_v, k_max=K_MAX).k or 1),
            "a choice that leaves out c_v(k), the verification pass": no_c_v,
            "the best (L, k) with k >= 1, though no exit beats plain decoding (S(0) = 1: return (None, 0))":
                max(grid, key=grid.get)}


def _speedup(got, layers: dict, c_v) -> float:
    """The predicted S of a valid choice: 1 for plain decoding."""
    if got == PLAIN:
        return 1.0
    c_d, a = layers[got[0]]
    return best_k(a, c_d=c_d, c_v=c_v, k_max=K_MAX).speedups[got[1]]


def _check_choice(got, layers: dict, what: str) -> None:
    """Stop unless got is (L, k) with L an exit and k in 1 .. K_MAX, or (None, 0)."""
    if not (isinstance(got, tuple) and len(got) == 2 and (got == PLAIN or all(isinstance(x, int) for x in got))):
        raise Stop(f"choose_exit must return a tuple (L, k) of two ints, or (None, 0) for plain decoding, got {got!r} "
                   f"(on {what})")
    if got != PLAIN and got[1] == 0:
        raise Stop(f"(L, k) = {got}: k = 0 is plain decoding, where no exit runs; return (None, 0) (on {what})")
    if got != PLAIN and (got[0] not in layers or not 1 <= got[1] <= K_MAX):
        raise Stop(f"(L, k) = {got} is not a choice: L must be one of {sorted(layers)} and k in 1 .. {K_MAX}, or "
                   f"(None, 0) for plain decoding (on {what})")


def grade_choose_exit(choose_exit, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 9.1: choose_exit(layers {L: (c_d, alpha)}, c_v) -> (L, k), k in 1 .. K_MAX, with the largest
    predicted speedup E[N] / (k c_d + c_v(k)), or (None, 0) when none beats plain decoding (S = 1)."""
    def body(fn, report):
        plain = 0
        for what, layers, c_v in exit_cases():
            got = call(fn, dict(layers), c_v, on=what)
            _check_choice(got, layers, what)
            top, best = _best(layers, c_v)
            plain += best == [PLAIN]
            s = _speedup(got, layers, c_v)
            if s < top - TOL:
                hits = [name for name, lk in _mistakes(layers, c_v).items() if lk == got and lk not in best]
                why = f": {'; or '.join(hits)}" if hits else ""
                named = "plain decoding (None, 0)" if best[0] == PLAIN else str(best[0])
                raise Stop(f"on {what}: (L, k) = {got} predicts S = {s:.4f}, but {named} predicts {top:.4f}{why}. "
                           f"Each exit's S(k) = (1 - α^(k+1)) / (1 - α) / (k c_d + c_v(k)), and plain decoding's is 1; "
                           f"the best choice is the best (L, k) pair, or none, not the best α or the smallest c_d "
                           f"(c_v(k) = {c_v_at(c_v, max(1, got[1])):.3f} here)")
        report.note(f"the best (L, k) on {len(exit_cases())} cases: the recorded exits of notebook 09 (both targets, "
                    f"greedy and sampled) and three made-up models; on {plain} of them plain decoding, (None, 0)")
    return run("choose_exit", body, choose_exit, raise_on_failure=raise_on_failure, verbose=verbose)


# ---- Exercise 9.2: which verifier does a tree need? ---------------------------------------------------------------

@dataclass(frozen=True)
class TreeDraft:
    """A draft tree, by how each node's children are drawn: 'iid' from the head's q, 'without_replacement' from
    it, or 'top' (q's top tokens, or guesses named outright with no q at all)."""

    name: str
    draws: str


TREE_CASES = (
    TreeDraft("Medusa's own tree: each head's top-w tokens under every node of its depth", "top"),
    TreeDraft("a sampled Medusa tree: w i.i.d. draws from the head's q under each node", "iid"),
    TreeDraft("a sampled tree without replacement (EAGLE-1): w distinct draws from q", "without_replacement"),
    TreeDraft("lookahead's guesses: n-grams from the target's own Jacobi iterates, named outright", "top"),
)


def _pairs() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(9)
    out = []
    for scale in (0.7, 1.5, 2.5):
        p = torch.softmax(scale * torch.randn(6, generator=g, dtype=torch.float64), 0)
        q = torch.softmax(scale * torch.randn(6, generator=g, dtype=torch.float64), 0)
        out.append((p, q))
    return out


@functools.cache
def tree_fit(draws: str, rule: str) -> tuple[float, float]:
    """(largest TV from p, mean P(a child is kept)) of one node under rule with children drawn as draws, over the
    checker's (p, q) pairs and 2 or 3 children (exact laws); TV is inf where the rule's arithmetic breaks."""
    tv, kept = 0.0, []
    verifier = dataclasses.replace(RULES[rule].verifier, draws=draws)
    for p, q in _pairs():
        for n in (2, 3):
            law = step_law(p, q, num_drafts=n, verifier=verifier)
            d = float(0.5 * (law.law - p).abs().sum())
            tv = max(tv, d if d == d else float("inf"))  # NaN: the rule divided by a q the children were not drawn from
            kept.append(law.accept)
    return tv, sum(kept) / len(kept)


def grade_tree_rule(tree_rule, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 9.2: tree_rule(tree: TreeDraft) -> the name of the rule (sd.lab.TREE_RULES) each node should use:
    exact for how its children were drawn, and of those the one that keeps the most."""
    def body(fn, report):
        for tree in TREE_CASES:
            got = call(fn, tree, on=tree.name)
            if got not in TREE_RULES:
                raise Stop(f"tree_rule must return one of {', '.join(TREE_RULES)}, got {got!r} (on {tree.name})")
            tv, kept = tree_fit(tree.draws, got)
            exact = {r: tree_fit(tree.draws, r)[1] for r in TREE_RULES if RULES[r].exact and
                     tree_fit(tree.draws, r)[0] < TOL}
            best = max(exact.values())
            if tv >= TOL:
                raise Stop(f"on {tree.name}: {got} is not exact for children drawn '{tree.draws}' (TV up to "
                           f"{tv:.4f} from the target at one node). A rule's ratio divides by the law the children "
                           f"were drawn from: " + ("there is none for named guesses, so use a one-hot rule"
                                                    if tree.draws == "top" else f"here that is q's '{tree.draws}' law"))
            if kept < best - TOL:
                top = max(exact, key=exact.get)
                raise Stop(f"on {tree.name}: {got} is exact here but keeps a child less often ({kept:.4f} on average) "
                           f"than {top} ({best:.4f} on average): it ignores what q says about the children")
        report.note(f"each of {len(TREE_CASES)} trees gets an exact rule for how its children were drawn, and the "
                    "one that keeps the most (exact laws of one node, 2 and 3 children, three (p, q) pairs)")
    return run("tree_rule", body, tree_rule, raise_on_failure=raise_on_failure, verbose=verbose)
