"""Act V (bending the rules) checkers: the notebook's solutions pass, and each known mistake fails with its name."""
import pytest
import torch
from exercise_support import failing, solutions

import specdec_lib as sd
from specdec_lib import exercises as ex
from specdec_lib.exercises import bending_the_rules as bend

NS = solutions("07_bending_the_rules.ipynb")


@pytest.mark.heavy
def test_the_solutions_pass(capsys):
    for checker, fn in ((ex.grade_is_exact, NS["is_exact"]), (ex.grade_best_setting, NS["best_setting"])):
        assert checker(fn).ok  # verbose and raising, as the check cell runs it
        assert "all checks passed" in capsys.readouterr().out
    assert {"grade_is_exact", "grade_best_setting"} <= set(ex.__all__)


@pytest.mark.heavy
def test_the_cases_have_the_answers_the_notebook_states():
    verdicts = [bend._verdict(pair, mode, tuple(sorted((o or {}).items())))[0] for pair, mode, o, _ in bend.EXACT_CASES]
    assert verdicts == [True, True, True, False, False, False, True, False, True, False]
    # the argmax bonus with a perfect draft is exact at k = 4 over 3 tokens and wrong where the bonus lands inside
    assert bend._verdict("draft = target", "typical_acceptance", (("epsilon", 0.0),))[2] == ((1, 3), (2, 3))
    answers = [bend._pick(*bend._budget_table(pair, delta, eps), tv_max=tv_max)
               for pair, delta, eps, tv_max in bend.BUDGET_CASES]
    assert answers == [None, 0.05, 0.02, None, 0.06, 0.02]


# ---- Exercise 7.1: is_exact ------------------------------------------------------------------------------------

def verdict(settings=((1, 3), (2, 3), (4, 3)), *, target="P", tol=1e-12, sample=False, kind=bool):
    """An is_exact with one knob turned: the settings, the chain compared against, the tolerance, sampling."""
    def is_exact(P, Q, *, mode, options=None):
        for k, h in settings:
            if sample:
                g = torch.Generator().manual_seed(0)
                seqs = sd.decode_markov(P, Q, start=0, horizon=h, k=k, num_samples=2000, mode=mode, generator=g,
                                        options=options)
                tv = sd.sequence_tv(seqs, sd.sequence_law(P, start=0, horizon=h))
            else:
                law = sd.decoder_law(P, Q, start=0, horizon=h, k=k, mode=mode, options=options)
                tv = sd.total_variation(law, sd.sequence_law(P if target == "P" else Q, start=0, horizon=h))
            if tv >= tol:
                return kind(False)
        return kind(True)
    return is_exact


def test_the_verdict_machinery_is_right_when_no_knob_is_turned():
    assert ex.grade_is_exact(verdict(), raise_on_failure=False, verbose=False).ok  # negative control


@pytest.mark.heavy
@pytest.mark.parametrize("variant, needles", [
    (dict(settings=((4, 3),)), ["is not exact", "argmax bonus after a full block", "k + 1 <= horizon"]),
    (dict(target="Q"), ["hf_schedule on the reference chain is exact", "the target's chain, not the draft's"]),
    (dict(sample=True), ["is exact", "with no sampling"]),
    (dict(tol=0.5), ["coin_peeking on the reference chain is not exact", "reaches 0.0798"]),
])
def test_known_mistakes_are_named(variant, needles):
    failing(ex.grade_is_exact, verdict(**variant), *needles)


def test_is_exact_structure():
    failing(ex.grade_is_exact, verdict(kind=str), "must return True or False, got str")
    failing(ex.grade_is_exact, lambda P, Q, **kw: True, "coin_peeking on the reference chain is not exact")

    def broken(P, Q, *, mode, options=None):
        raise KeyError(mode)

    failing(ex.grade_is_exact, broken, "your function raised KeyError")

    def stub(P, Q, *, mode, options=None):
        raise NotImplementedError("exercise: write the body of is_exact")

    with pytest.raises(NotImplementedError):
        ex.grade_is_exact(stub, raise_on_failure=False, verbose=False)


# ---- Exercise 7.2: best_setting --------------------------------------------------------------------------------

def search(*, exact=True, budget="within", pick="tokens", ties="smaller"):
    """A best_setting with one knob turned."""
    def best_setting(P, Q, *, delta, epsilons, tv_max):
        points = sd.markov.typical_sweep(P, Q, start=0, horizon=3, k=4, epsilons=epsilons, delta=delta)
        keep = {"within": lambda p: p.tv <= tv_max, "none": lambda p: True, "above": lambda p: p.tv > tv_max}[budget]
        within = [p for p in points if keep(p)]
        if not within:
            return None
        if pick == "tv":
            return min(within, key=lambda p: p.tv).epsilon
        top = max(p.tokens_per_call for p in within)
        if exact and top <= sd.decoder_stats(P, Q, start=0, horizon=3, k=4).tokens_per_call:
            return None
        best = [p.epsilon for p in within if p.tokens_per_call == top]
        return best[0] if ties == "smaller" else best[-1]
    return best_setting


@pytest.mark.heavy
def test_the_search_machinery_is_right_when_no_knob_is_turned():
    assert ex.grade_best_setting(search(), raise_on_failure=False, verbose=False).ok  # negative control


@pytest.mark.heavy
@pytest.mark.parametrize("variant, needle", [
    (dict(exact=False), "the exact decoder (mode 'correct', TV 0) is a candidate too"),
    (dict(budget="none"), "the budget was not applied"),
    (dict(budget="above"), "the budget was applied the wrong way round"),
    (dict(pick="tv"), "the setting of least TV was picked"),
    (dict(ties="larger"), "on a tie in tokens per call the smaller epsilon wins"),
])
def test_best_setting_mistakes_are_named(variant, needle):
    failing(ex.grade_best_setting, search(**variant), needle)


@pytest.mark.heavy
def test_best_setting_structure():
    failing(ex.grade_best_setting, lambda P, Q, **kw: "0.02", "must return an epsilon (a float) or None, got str")
    failing(ex.grade_best_setting, lambda P, Q, **kw: 0.5, "answer one of the epsilons you were given, or None")
    failing(ex.grade_best_setting, lambda P, Q, **kw: None, "expected 0.05")  # None is not always the answer
    def as_tensor(P, Q, **kw):
        answer = NS["best_setting"](P, Q, **kw)
        return None if answer is None else torch.tensor(answer)

    assert ex.grade_best_setting(as_tensor, raise_on_failure=False, verbose=False).ok  # a 0-d tensor reads as a number
