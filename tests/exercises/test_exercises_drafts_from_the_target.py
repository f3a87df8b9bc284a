"""Notebook 09's checkers: the solutions pass, and each known mistake fails with its reason."""
import pytest
from exercise_support import failing, solutions

import specdec_lib as sd
from specdec_lib import exercises as ex
from specdec_lib.exercises import drafts_from_the_target as dft

NS = solutions("09_drafts_from_the_target.ipynb")


@pytest.mark.heavy
def test_the_solutions_pass(capsys):
    for checker, fn in ((ex.grade_choose_exit, NS["choose_exit"]), (ex.grade_tree_rule, NS["tree_rule"])):
        assert checker(fn).ok  # verbose and raising, as the check cell runs it
        assert "all checks passed" in capsys.readouterr().out
    assert {"grade_choose_exit", "grade_tree_rule"} <= set(ex.__all__)


# ---- Exercise 9.1: choose_exit -------------------------------------------------------------------------------------

def test_the_expected_answer_and_the_recorded_cases():
    layers = {1: (0.2, 0.5), 2: (0.4, 0.7), 3: (0.6, 0.9)}
    assert NS["choose_exit"](layers, 1.8) == (None, 0)  # the notebook's line: the best pair, (3, 5), predicts < 1
    assert sd.speedup(0.9, c_d=0.6, k=5, c_v=1.8) == pytest.approx(0.976, abs=5e-4)
    assert NS["choose_exit"](layers, 1.2) == (3, 3)  # a cheaper pass: speculate
    cases = dft.exit_cases()
    assert len(cases) == 7 and all(set(layers) == {1, 2, 3} for _, layers, _ in cases[:4])
    picks = [NS["choose_exit"](layers, c_v) for _, layers, c_v in cases]
    assert len({L for L, _ in picks}) >= 3  # plain decoding and at least two exits: a constant answer cannot pass
    assert sum(pick == dft.PLAIN for pick in picks) == 3  # the trained target's exits (both policies), the 1.8 pass


def _speculate_anyway(layers, c_v):
    """The best (L, k) over k >= 1 only: the exercise as first posed, which never says 'do not speculate'."""
    grid = {(L, k): sd.best_k(a, c_d=c_d, c_v=c_v, k_max=8).speedups[k] for L, (c_d, a) in layers.items()
            for k in range(1, 9)}
    return max(grid, key=grid.get)


def _deepest(layers, c_v):
    L = max(layers, key=lambda L: layers[L][1])
    return L, max(1, sd.best_k(layers[L][1], c_d=layers[L][0], c_v=c_v, k_max=8).k)


def _cheapest(layers, c_v):
    L = min(layers, key=lambda L: layers[L][0])
    return L, max(1, sd.best_k(layers[L][1], c_d=layers[L][0], c_v=c_v, k_max=8).k)


def _no_c_v(layers, c_v):
    return NS["choose_exit"](layers, 1e-9)


@pytest.mark.parametrize("wrong, needle", [
    (_deepest, "the highest α, whatever its draft costs"),
    (_cheapest, "the cheapest exit, whatever it accepts"),
    (_no_c_v, "leaves out c_v(k)"),
    (_speculate_anyway, "though no exit beats plain decoding"),
])
def test_each_known_mistake_is_named(wrong, needle):
    failing(ex.grade_choose_exit, wrong, needle)


def test_bad_answers_are_read_in_words():
    failing(ex.grade_choose_exit, lambda layers, c_v: [3, 1], "must return a tuple (L, k) of two ints")
    failing(ex.grade_choose_exit, lambda layers, c_v: (9, 1), "is not a choice")
    failing(ex.grade_choose_exit, lambda layers, c_v: (min(layers), 9), "is not a choice")
    failing(ex.grade_choose_exit, lambda layers, c_v: (min(layers), 0), "k = 0 is plain decoding")
    failing(ex.grade_choose_exit, lambda layers, c_v: (None, 0), "predicts S = 1.0000, but")  # never speculating


# ---- Exercise 9.2: tree_rule ------------------------------------------------------------------------------------

def test_the_cases_and_the_exact_laws_say_what_the_notebook_says():
    assert [t.draws for t in dft.TREE_CASES] == ["top", "iid", "without_replacement", "top"]
    assert dft.TREE_RULES == sd.lab.TREE_RULES
    assert dft.tree_fit("top", "mss")[0] > 0.5 and dft.tree_fit("top", "onehot_sequential")[0] < 1e-12
    assert dft.tree_fit("iid", "mss")[1] > dft.tree_fit("iid", "onehot_sequential")[1]  # exact both; mss keeps more


@pytest.mark.parametrize("answer, needle", [
    ({"iid": "mss", "without_replacement": "rrs", "top": "mss"}, "is not exact for children drawn 'top'"),
    ({"iid": "rrs", "without_replacement": "rrs", "top": "onehot_sequential"}, "is not exact for children drawn 'iid'"),
    ({"iid": "mss", "without_replacement": "mss", "top": "onehot_sequential"}, "drawn 'without_replacement'"),
    ({"iid": "onehot_sequential", "without_replacement": "rrs", "top": "onehot_sequential"},
     "is exact here but keeps a child less often"),
    ({"iid": "onehot_walk", "without_replacement": "rrs", "top": "onehot_sequential"},
     "not exact for children drawn 'iid'"),
])
def test_each_wrong_rule_is_told_why(answer, needle):
    failing(ex.grade_tree_rule, lambda tree: answer[tree.draws], needle)
    walk = {"iid": "mss", "without_replacement": "rrs", "top": "onehot_walk"}
    assert ex.grade_tree_rule(lambda tree: walk[tree.draws], raise_on_failure=False,
                              verbose=False).ok  # negative control: both one-hot rules fit a top-k tree


def test_a_name_outside_the_tree_rules_is_refused():
    failing(ex.grade_tree_rule, lambda tree: "kseq", "tree_rule must return one of")
