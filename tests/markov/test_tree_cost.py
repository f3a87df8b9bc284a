"""The cost model of a draft tree: S(T) = E[N_T] / (depth c_d + c_v(|T|)), and the best tree under a node budget."""
import itertools

import pytest

import specdec_lib as sd
from specdec_lib.markov.tree_cost import TreeSearch, all_trees

CH = sd.reference_chain()


def memory_bound(n):
    return 1 + 0.05 * n  # c_v of a pass over n draft nodes, in units of T_1


def test_tree_nodes():
    nodes = sd.markov.tree_nodes
    assert nodes((3, 2, 1)) == 3 + 6 + 6 and nodes((1,) * 5) == 5 and nodes((4,)) == 4
    with pytest.raises(ValueError, match="widths"):
        sd.markov.tree_nodes(())


@pytest.mark.parametrize("k", [1, 2, 4])
def test_a_path_tree_on_an_iid_chain_is_act_iv_equation(k):
    # every state has the same p and q, so acceptance is alpha = overlap(p, q) at every position: Act IV's setting
    p, q = (x.double() / x.double().sum() for x in sd.post_pair())  # float64, as the tree engine computes
    P, Q = p.expand(5, 5).contiguous(), q.expand(5, 5).contiguous()
    alpha, c_d = sd.overlap(p, q), 0.15
    for rule in ("mss", "rrs"):
        s = sd.markov.tree_speedup(P, Q, start=0, widths=(1,) * k, rule=rule, c_d=c_d, c_v=memory_bound)
        assert abs(s - sd.speedup(alpha, c_d=c_d, k=k, c_v=memory_bound)) < 1e-12
    wider = sd.markov.tree_speedup(P, Q, start=0, widths=(2,) + (1,) * (k - 1), rule="rrs", c_d=c_d, c_v=memory_bound)
    assert abs(wider - sd.speedup(alpha, c_d=c_d, k=k,
                                  c_v=memory_bound)) > 1e-6  # negative control: another tree, another S


def test_all_trees_is_every_tree_in_the_budget_once():
    trees = all_trees(budget=7, max_depth=3, max_width=3)
    brute = [w for d in (1, 2, 3) for w in itertools.product(range(1, 4), repeat=d) if sd.markov.tree_nodes(w) <= 7]
    assert sorted(trees) == sorted(brute) and len(set(trees)) == len(trees)


@pytest.mark.heavy
def test_best_tree_is_the_argmax_and_prefers_fewer_nodes():
    kw = dict(start=0, rule="rrs", c_d=0.15, c_v=memory_bound)
    best = sd.markov.best_tree(CH.P, CH.Q, budget=6, search=TreeSearch(max_depth=4, max_width=3), **kw)
    scores = {w: sd.markov.tree_speedup(CH.P, CH.Q, widths=w, **kw) for w in all_trees(6, 4, 3)}
    top = max(scores.values())
    assert best.speedup == top and scores[best.widths] == top and best.searched == len(scores)
    assert best.nodes == min(sd.markov.tree_nodes(w) for w, s in scores.items() if s == top)
    assert abs(best.expected_tokens - sd.markov.tree_expected_tokens(CH.P, CH.Q, start=0, widths=best.widths,
                                                              rule="rrs")) < 1e-12
    # a draft step as dear as a target step: no tree beats plain decoding, and the winner drafts one level only
    dear = sd.markov.best_tree(CH.P, CH.Q, budget=6, search=TreeSearch(max_depth=4, max_width=3), start=0, rule="rrs",
                        c_d=1.0, c_v=memory_bound)
    assert dear.speedup < 1 and len(dear.widths) == 1 and best.speedup > 1


def test_bad_arguments():
    kw = dict(start=0, rule="rrs", c_d=0.15, c_v=1.2)
    with pytest.raises(ValueError, match="budget"):
        sd.markov.best_tree(CH.P, CH.Q, budget=0, **kw)
    with pytest.raises(ValueError, match="c_d"):
        sd.markov.tree_speedup(CH.P, CH.Q, widths=(2,), **{**kw, "c_d": -1.0})
    with pytest.raises(ValueError, match="c_v"):
        sd.markov.tree_speedup(CH.P, CH.Q, widths=(2,), **{**kw, "c_v": 0.0})
    with pytest.raises(ValueError, match="rule must be one of"):
        sd.markov.tree_speedup(CH.P, CH.Q, widths=(2,), **{**kw, "rule": "nope"})
