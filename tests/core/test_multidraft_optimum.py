"""Act VI: the multi-draft optimum. The min-cut over token sets against an explicit max-flow; every rule below it."""
import functools

import networkx as nx
import pytest
import torch
from pairs import f64, random_pairs

import specdec_lib as sd
from specdec_lib.multidraft import (
    MAX_VOCAB,
    RULES,
    OptimumRow,
    all_drafts_in,
    multidraft_accept_probability,
    multidraft_optimum,
    optimum_table,
)
from specdec_lib.multidraft import token_sets as subsets
from specdec_lib.multidraft_draws import DRAWS
from specdec_lib.multidraft_rules import draft_outcomes

SCHEMES = [(draws, n) for draws in DRAWS for n in range(1, 5) if draws != "hub" or n <= 2]  # hub: SpecHub's pair


PAIRS = [tuple(f64(t) for t in sd.post_pair())] + random_pairs(8, seed=24, sizes=4, low=0.5)


@functools.cache
def max_flow(case: int, draws: str, n: int) -> float:
    """The max-flow of the explicit graph: source -> each draft tuple (its probability) -> each token in it
    (unbounded) -> sink (p of the token); networkx's preflow-push, a different algorithm from the cut enumeration."""
    p, q = PAIRS[case]
    X, weight = draft_outcomes(q, n, draws)
    G = nx.DiGraph()
    for t, (row, w) in enumerate(zip(X.tolist(), weight.tolist())):
        G.add_edge("source", ("tuple", t), capacity=w)
        for y in set(row):
            G.add_edge(("tuple", t), ("token", y))  # no capacity: unbounded
    for y, py in enumerate(p.tolist()):
        G.add_edge(("token", y), "sink", capacity=py)
    return nx.maximum_flow_value(G, "source", "sink")


@pytest.mark.heavy
@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_optimum_is_the_max_flow(case):
    p, q = PAIRS[case]
    for draws, n in SCHEMES:
        assert abs(multidraft_optimum(p, q, n, draws=draws) - max_flow(case, draws, n)) < 1e-9, (draws, n)


def test_the_max_flow_tells_the_schemes_apart():
    # negative control: the i.i.d. formula q(A)^n in place of draws without replacement misses the max-flow by far
    p, q = PAIRS[0]
    for n in (2, 3, 4):
        wrong = multidraft_optimum(p, q, n, draws="iid")
        assert max_flow(0, "without_replacement", n) - wrong > 0.05


@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_all_drafts_in_is_the_enumerated_tuples(case):
    # the recursion over drawn sets (without replacement) and the closed forms against the draft tuples themselves
    p, q = PAIRS[case]
    sets = subsets(q.numel())
    for draws, n in SCHEMES:
        X, weight = draft_outcomes(q, n, draws)
        inside = sets[:, X].all(-1).double()  # (2^V, K): every draft of tuple t lies in set A
        assert (all_drafts_in(q, n, draws) - inside @ weight).abs().max().item() < 1e-12, (draws, n)


@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_one_draft_is_the_overlap(case):
    # one draft: the maximal coupling keeps sum min(p, q) (Act I); the top draft is kept when Y is it: p(argmax q)
    p, q = PAIRS[case]
    for draws in ("iid", "without_replacement", "hub"):
        assert abs(multidraft_optimum(p, q, 1, draws=draws) - sd.overlap(p, q)) < 1e-12
    assert abs(multidraft_optimum(p, q, 1, draws="top") - p[torch.sort(-q, stable=True).indices[0]].item()) < 1e-12


@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_no_exact_rule_beats_the_optimum(case):
    p, q = PAIRS[case]
    for r in sd.multidraft.multidraft_rules(None):
        for n in range(1, (r.max_drafts or 4) + 1):
            best = multidraft_optimum(p, q, n, draws=r.verifier.draws)
            accept = multidraft_accept_probability(p, q, num_drafts=n, rule=r.name)
            if r.exact:
                assert accept <= best + 1e-12, (r.name, n)
            if r.verifier.draws == "top":  # one-hot verification keeps Y whenever Y is a draft: it is optimal
                assert abs(accept - best) < 1e-12, (r.name, n)


def test_a_wrong_rule_can_beat_the_optimum():
    # the optimum binds exact verifiers only: two wrong rules keep more drafts than any exact one can on the post's pair
    p, q = PAIRS[0]
    for rule, draws in (("rrs_original_q", "without_replacement"), ("accept_first_pass", "iid")):
        assert multidraft_accept_probability(p, q, num_drafts=3, rule=rule) > multidraft_optimum(p, q, 3, draws=draws)


@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_more_drafts_never_lower_the_optimum(case):
    p, q = PAIRS[case]
    for draws in ("iid", "without_replacement", "top"):
        best = [multidraft_optimum(p, q, n, draws=draws) for n in range(1, 5)]
        assert all(b >= a - 1e-12 for a, b in zip(best, best[1:])) and best[-1] <= 1 + 1e-12, draws


def test_optimum_table_rows():
    p, q = sd.post_pair()
    rows = optimum_table(p, q, max_drafts=4)
    assert all(isinstance(r, OptimumRow) for r in rows)
    assert [(r.rule, r.num_drafts) for r in rows] == [(name, n) for name in RULES
                                                      for n in range(1, (RULES[name].max_drafts or 4) + 1)]
    for r in rows[::5]:
        assert r.draws == RULES[r.rule].verifier.draws and r.exact == RULES[r.rule].exact
        assert r.accept == multidraft_accept_probability(p, q, num_drafts=r.num_drafts, rule=r.rule)
        assert r.optimum == multidraft_optimum(p, q, r.num_drafts, draws=r.draws)
    assert [r.num_drafts for r in optimum_table(p, q, max_drafts=1)] == [1] * len(RULES)
    act6 = optimum_table(p, q, max_drafts=4, chapter="optimal verification")
    assert [(r.rule, r.num_drafts) for r in act6] == [(r.rule, r.num_drafts) for r in rows if r.rule in
                                                      ("kseq", "spechub", "spechub_code")]
    with pytest.raises(ValueError, match="max_drafts must be >= 1"):
        optimum_table(p, q, max_drafts=0)


def test_argument_errors_name_the_argument():
    p, q = PAIRS[0]
    with pytest.raises(TypeError, match="p must be a torch.Tensor"):
        multidraft_optimum([0.5, 0.5], q, 2)
    with pytest.raises(ValueError, match="q must sum to 1"):
        multidraft_optimum(p, q * 2, 2)
    with pytest.raises(ValueError, match="p and q must have the same shape"):
        multidraft_optimum(p, f64([0.5, 0.5]), 2)
    with pytest.raises(ValueError, match="num_drafts must be >= 1"):
        multidraft_optimum(p, q, 0)
    with pytest.raises(TypeError, match="num_drafts must be an integer"):
        multidraft_optimum(p, q, 2.0)
    with pytest.raises(ValueError, match="draws must be one of 'iid', 'without_replacement', 'top', 'hub'"):
        multidraft_optimum(p, q, 2, draws="without")
    with pytest.raises(ValueError, match="draws 'hub' draws at most 2 drafts .*num_drafts = 3"):
        multidraft_optimum(p, q, 3, draws="hub")
    big = f64(torch.ones(MAX_VOCAB + 1))
    with pytest.raises(ValueError, match=f"V = {MAX_VOCAB + 1} tokens.*MAX_VOCAB = {MAX_VOCAB}"):
        multidraft_optimum(big, big, 2)
    assert multidraft_optimum(f64(torch.ones(MAX_VOCAB)), f64(torch.ones(MAX_VOCAB)), 2) == pytest.approx(1.0)
