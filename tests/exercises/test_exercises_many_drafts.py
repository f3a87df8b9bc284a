"""Act V's checkers: the notebook's solutions pass, and each known mistake fails with a message that names it."""
import pytest
import torch
from exercise_support import failing, solutions

import specdec_lib as sd
from specdec_lib import exercises as ex

NS = solutions("06_many_drafts_and_trees.ipynb")


@pytest.mark.heavy
def test_the_solutions_pass(capsys):
    for checker, fn in ((ex.grade_rrs_step, NS["rrs_step"]), (ex.grade_best_widths, NS["best_widths"])):
        assert checker(fn).ok  # verbose and raising, as the check cell runs it
        assert "all checks passed" in capsys.readouterr().out
    assert {"grade_rrs_step", "grade_best_widths"} <= set(ex.__all__)


# ---- Exercise 6.1: rrs_step ------------------------------------------------------------------------------------

def rrs_variant(*, ratio="q_i", residual="q_i", final="last", rng=True, kind=int):
    """An rrs step with one knob turned: the q a stage uses, the residual it takes, where the fallback is drawn."""
    def step(p, q, drafts, generator):
        target, q_i = p.clone(), q.clone()
        for x in drafts.tolist():
            r = q if ratio == "q" else q_i
            u = torch.rand((), dtype=torch.float64, generator=generator if rng else None)
            if u < min(1.0, (target[x] / r[x]).item()):
                return kind(x)
            q_next = q_i.clone()
            q_next[x] = 0
            q_next = q_next / q_next.sum() if q_next.sum() > 0 else q_next
            sub = {"q_i": q_i, "q": q, "q_next": q_next}.get(residual)
            if sub is not None:
                w = torch.clamp(target - sub, min=0)
                target = w / w.sum() if w.sum() > 0 else target
            q_i = q_next
        if final == "first":
            w = torch.clamp(p - q, min=0)
            target = w / w.sum()
        return kind(torch.multinomial(target, 1, generator=generator if rng else None))
    return step


@pytest.mark.heavy
def test_the_variant_machinery_is_rrs_when_no_knob_is_turned():
    # negative control for the tests below: with every knob at rrs, the variant passes
    assert ex.grade_rrs_step(rrs_variant(), raise_on_failure=False, verbose=False).ok


@pytest.mark.heavy
@pytest.mark.parametrize("variant, needles", [
    (dict(ratio="q", residual="q"), ["original q", "SafeAILab/EAGLE #74"]),
    (dict(residual="q_next"), ["removed from q_i before the residual"]),
    (dict(residual=None), ["never becomes the residual"]),
    (dict(final="first"), ["fallback comes from the first residual"]),
])
def test_known_mistakes_are_named(variant, needles):
    failing(ex.grade_rrs_step, rrs_variant(**variant), "wrong distribution", "noise bound", *needles)


def test_rrs_step_structure():
    failing(ex.grade_rrs_step, rrs_variant(rng=False), "seeded alike gave different tokens")
    failing(ex.grade_rrs_step, rrs_variant(kind=float), "must return one token id (an int), got float")
    failing(ex.grade_rrs_step, lambda p, q, drafts, g: int(drafts[-1]), "kept with min(1, p/q) = 1, every time")
    failing(ex.grade_rrs_step, lambda p, q, drafts, g: int(drafts[0]), "wrong distribution")
    failing(ex.grade_rrs_step, lambda p, q, drafts, g: 7, "token ids must lie in [0, 3)")

    def broken(p, q, drafts, generator):
        raise RuntimeError("shape mismatch")

    failing(ex.grade_rrs_step, broken, "your function raised RuntimeError: shape mismatch")

    def stub(p, q, drafts, generator):
        raise NotImplementedError("exercise: write the body of rrs_step")

    with pytest.raises(NotImplementedError):
        ex.grade_rrs_step(stub, raise_on_failure=False, verbose=False)


# ---- Exercise 6.2: best_widths ---------------------------------------------------------------------------------

def search(*, nodes=sd.markov.tree_nodes, cost=None, numerator=lambda e: e, paths_only=False, ties="fewer"):
    """A best-tree search over every widths tuple with at most budget nodes (as counted by `nodes`), one knob turned."""
    def best_widths(P, Q, *, start, rule, c_d, c_v, budget):
        def trees(prefix):
            for w in range(1, 2 if paths_only else budget + 1):
                widths = prefix + (w,)
                if nodes(widths) > budget:
                    break
                yield widths
                yield from trees(widths)

        def key(widths):
            e = sd.markov.tree_expected_tokens(P, Q, start=start, widths=widths, rule=rule)
            price = cost(widths, c_d, c_v) if cost else len(widths) * c_d + c_v(sd.markov.tree_nodes(widths))
            nodes = sd.markov.tree_nodes(widths)
            return numerator(e) / price, -nodes if ties == "fewer" else nodes
        return max(trees(()), key=key)
    return best_widths


@pytest.mark.heavy
def test_the_search_machinery_is_right_when_no_knob_is_turned():
    assert ex.grade_best_widths(search(), raise_on_failure=False, verbose=False).ok  # negative control


@pytest.mark.heavy
@pytest.mark.parametrize("variant, needle", [
    (dict(nodes=sum), "counted sum(widths)"),
    (dict(cost=lambda w, c_d, c_v: len(w) * c_d + c_v(len(w))), "c_v evaluated at the depth"),
    (dict(cost=lambda w, c_d, c_v: sd.markov.tree_nodes(w) * c_d + c_v(sd.markov.tree_nodes(w))),
     "c_d paid per draft node"),
    (dict(numerator=lambda e: e - 1), "the numerator is E[A]"),
    (dict(paths_only=True), "a search over paths only"),
    (dict(ties="more"), "ties go to the tree with fewer nodes"),
])
def test_best_widths_mistakes_are_named(variant, needle):
    failing(ex.grade_best_widths, search(**variant), needle)


@pytest.mark.heavy
def test_best_widths_structure():
    failing(ex.grade_best_widths, lambda P, Q, **kw: 3, "must return a non-empty tuple of ints")
    failing(ex.grade_best_widths, lambda P, Q, **kw: (), "must return a non-empty tuple of ints")
    failing(ex.grade_best_widths, lambda P, Q, **kw: (1,), "S = ")  # a legal tree, not the best one
    assert ex.grade_best_widths(lambda P, Q, **kw: list(NS["best_widths"](P, Q, **kw)), raise_on_failure=False,
                                verbose=False).ok  # a list is read as the same widths
