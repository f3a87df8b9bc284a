"""Draft trees of any shape: the ordered tree, its exact E[N] (the uniform engine's on uniform trees, a simulation's on
others), and the Pareto search for the best tree, held to brute force over every ordered tree in small budgets."""
import functools
import math

import pytest
import torch

import specdec_lib as sd
from specdec_lib.markov.tree_cost import TreeSearch
from specdec_lib.markov.tree_search import OrderedTree, stage_laws, stage_table, staircase, tree_values
from specdec_lib.multidraft import RULES
from specdec_lib.multidraft_rules import Walk, draw_drafts, stage, step_law

CH = sd.reference_chain()
ACT5 = [r.name for r in sd.multidraft.multidraft_rules()]  # Act V's rules: stage i reads drafts 1..i only
C_D = 0.15


def memory_bound(n):
    return 1 + 0.05 * n  # the notebook's c_v(|T|), in units of T_1


CHAINS = {  # (P, Q): the post's chain, its bad draft, a draft with two tokens a row, and a seeded random pair
    "reference": (CH.P, CH.Q),
    "Q_bad": (CH.P, CH.Q_bad),
    "q zero where p > 0": (CH.P, sd.policy_table(CH.Q, top_k=2)),
    "random": (sd.random_table(5, 0, 2.0), sd.random_table(5, 100, 2.0)),
}
REVIEWED = "[[[[[[]]]]],[[]]]"  # issue 22: a root of two children, the first a chain to depth 5, the second depth 2


def f64(table: torch.Tensor) -> torch.Tensor:
    """Rows in float64, renormalised (what the library computes with)."""
    return table.double() / table.double().sum(-1, keepdim=True)


@functools.cache
def forests(n: int, width: int) -> tuple[tuple[OrderedTree, ...], ...]:
    """Every tuple of at most `width` subtrees holding n draft nodes in all (each subtree: its root and below)."""
    if n == 0:
        return ((),)
    return tuple((t,) + rest for first in range(n) for t in trees(first, width)
                 for rest in forests(n - 1 - first, width) if len(rest) < width)


def trees(n: int, width: int) -> list[OrderedTree]:
    """Every ordered tree of n draft nodes, at most width children a node."""
    return [OrderedTree(f) for f in forests(n, width)]


def brute_force(P, Q, *, rule, budget, width, start=CH.start):
    """{tree: E[N]} for every ordered tree of 1..budget nodes, from the recursion D_T = sum_i a_i (1 + D_{T_i})."""
    a = stage_table(f64(P), f64(Q), width, RULES[rule].verifier)
    return {t: 1 + tree_values(t, a)[start].item() for n in range(1, budget + 1) for t in trees(n, width)}


def test_tree_counts_are_catalan_numbers():
    # ordered trees of n + 1 nodes (the root and n drafts): the Catalan number C_n, each once
    for n in range(1, 8):
        assert len(trees(n, n)) == len(set(trees(n, n))) == math.comb(2 * n, n) // (n + 1)
    assert all(max(map(len, [t.children] + [c.children for c in t.children])) <= 2 for t in trees(5, 2))


def test_ordered_tree_shape_text_and_widths():
    t = OrderedTree.parse(REVIEWED)
    assert (t.size, t.depth, str(t), t.widths()) == (7, 5, REVIEWED, None)
    assert t.paths() == [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0, 0), (1,), (1, 0)]
    assert OrderedTree.parse(" [ [ [] ] , [] ] ") == OrderedTree((OrderedTree((OrderedTree(),)), OrderedTree()))
    for widths in [(1,), (3, 2, 1), (2, 1, 1, 1), (1, 4)]:
        u = OrderedTree.from_widths(widths)
        assert (u.size, u.depth, u.widths()) == (sd.markov.tree_nodes(widths), len(widths), widths)
        assert OrderedTree.parse(str(u)) == u and len(u.paths()) == u.size
    for n in range(1, 6):  # every tree round-trips through its text
        assert all(OrderedTree.parse(str(u)) == u for u in trees(n, n))
    assert OrderedTree().size == OrderedTree().depth == 0 and str(OrderedTree()) == "[]"
    assert OrderedTree([OrderedTree()]).children == (OrderedTree(),)  # a list is kept as a tuple


def test_bad_trees_raise_naming_the_argument():
    with pytest.raises(TypeError, match="children must be a tuple of OrderedTree"):
        OrderedTree(3)
    with pytest.raises(TypeError, match=r"children\[1\] must be an OrderedTree, got tuple"):
        OrderedTree((OrderedTree(), ()))
    for bad in ["", "[[]", "[[]]]", "[[][]]", "[x]", "()"]:
        with pytest.raises(ValueError, match="text must"):
            OrderedTree.parse(bad)
    with pytest.raises(TypeError, match="text must be a str"):
        OrderedTree.parse(3)
    with pytest.raises(ValueError, match="widths must be non-empty"):
        OrderedTree.from_widths(())
    with pytest.raises(TypeError, match="tree must be an OrderedTree"):
        sd.markov.ordered_tree_tokens(CH.P, CH.Q, start=0, tree=(2, 1), rule="rrs")
    with pytest.raises(ValueError, match="rule must be one of"):
        sd.markov.ordered_tree_tokens(CH.P, CH.Q, start=0, tree="[[]]", rule="specinfer")
    with pytest.raises(ValueError, match=r"start must be a token id in \[0, 5\)"):
        sd.markov.ordered_tree_tokens(CH.P, CH.Q, start=5, tree="[[]]", rule="rrs")
    with pytest.raises(ValueError, match="c_d must lie in"):
        sd.markov.ordered_tree_speedup(CH.P, CH.Q, start=0, tree="[[]]", rule="rrs", c_d=-1, c_v=1.0)
    best = functools.partial(sd.markov.best_ordered_trees, CH.P, CH.Q, start=0, rule="rrs", c_d=C_D, c_v=memory_bound)
    with pytest.raises(ValueError, match=r"budgets\[1\] must be >= 1"):
        best(budgets=(4, 0))
    with pytest.raises(ValueError, match="budgets must hold at least one"):
        best(budgets=())
    with pytest.raises(ValueError, match="max_width must be >= 1"):
        best(budgets=(4,), search=TreeSearch(max_width=0))
    with pytest.raises(TypeError, match="search must be a TreeSearch"):
        best(budgets=(4,), search=6)
    with pytest.raises(ValueError, match="budget must be >= 1"):
        sd.markov.best_ordered_tree(CH.P, CH.Q, start=0, rule="rrs", c_d=C_D, c_v=memory_bound, budget=0)
    with pytest.raises(ValueError, match="a node of 9 children has 1953125 draft outcomes"):
        sd.markov.best_ordered_tree(CH.P, CH.Q, start=0, rule="mss", c_d=C_D, c_v=memory_bound, budget=9,
                             search=TreeSearch(max_width=9))


@pytest.mark.heavy
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("rule", ACT5)
def test_stage_laws_split_the_kept_child_by_stage(rule, chain):
    # summed over stages, the per-stage law is step_law's law of the kept child; a node of k < n children is rows [:k]
    P, Q = (f64(t) for t in CHAINS[chain])
    v = RULES[rule].verifier
    for s in range(5):
        wide = stage_laws(P[s], Q[s], num_drafts=4, verifier=v)  # (4, V)
        for n in (1, 2, 3, 4):
            law = stage_laws(P[s], Q[s], num_drafts=n, verifier=v)
            assert (law.sum(0) - step_law(P[s], Q[s], num_drafts=n, verifier=v).kept).abs().max().item() < 1e-12
            assert (law - wide[:n]).abs().max().item() < 1e-12 and law.min().item() >= 0


@pytest.mark.heavy
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("rule", ACT5)
def test_uniform_trees_match_the_uniform_engine(rule, chain):
    P, Q = CHAINS[chain]
    for widths in [(1,), (2,), (3, 2, 1), (2, 1, 1, 1), (1, 3), (2, 2)]:
        for start in (0, 3):
            exact = sd.markov.tree_expected_tokens(P, Q, start=start, widths=widths, rule=rule)
            mine = sd.markov.ordered_tree_tokens(P, Q, start=start, tree=OrderedTree.from_widths(widths), rule=rule)
            assert abs(mine - exact) < 1e-12
    s = sd.markov.tree_speedup(P, Q, start=0, widths=(3, 2, 1), rule=rule, c_d=C_D, c_v=memory_bound)
    assert abs(sd.markov.ordered_tree_speedup(P, Q, start=0, tree=OrderedTree.from_widths((3, 2, 1)), rule=rule,
                                              c_d=C_D,
                                       c_v=memory_bound) - s) < 1e-12


def simulate_tokens(P, Q, *, start, tree, rule, rounds, generator) -> torch.Tensor:
    """N (rounds,) of seeded first rounds: the tree walked node by node, drafts drawn and tested as the rule does.

    All rounds at a node are drawn together, grouped by state; the fallback and bonus tokens are not drawn: a round
    ends at the node where every child is rejected (N = depth + 1), or below a leaf it reached.
    """
    P, Q, v = f64(P), f64(Q), RULES[rule].verifier
    N = torch.ones(rounds, dtype=torch.long)
    stack = [(tree, torch.arange(rounds), torch.full((rounds,), start))]  # (node, rounds there, their states)
    while stack:
        node, ids, states = stack.pop()
        if not node.children or not ids.numel():
            continue
        slot, token = torch.full_like(ids, -1), torch.zeros_like(ids)  # (m,) the kept stage (-1: none), its token
        for s in states.unique().tolist():
            at = (states == s).nonzero().squeeze(1)
            X = draw_drafts(Q[s], len(node.children), v.draws, at.numel(), generator)  # (m_s, k)
            if isinstance(v, Walk):  # one uniform along the children's target mass
                u = torch.rand(at.numel(), 1, dtype=torch.float64, generator=generator)
                first = (P[s][X].cumsum(-1) <= u).sum(-1)  # (m_s,) k when u is past every child
            else:  # one coin per stage, the stage state carried row by row
                first = torch.full((at.numel(),), X.shape[1])
                target, q_i = P[s].repeat(at.numel(), 1), Q[s].repeat(at.numel(), 1)
                for i, x in enumerate(X.T):
                    a, target, q_i = stage(v, Q[s], target, q_i, x)
                    coin = torch.rand(at.numel(), dtype=torch.float64, generator=generator) < a
                    first = torch.where(coin & (first == X.shape[1]), i, first)
            kept = first < X.shape[1]
            slot[at[kept]] = first[kept]
            token[at[kept]] = X[kept].gather(1, first[kept, None]).squeeze(1)
        for i, child in enumerate(node.children):
            hit = slot == i
            N[ids[hit]] += 1
            stack.append((child, ids[hit], token[hit]))
    return N


ROUNDS = 100_000
# N lies in [1, depth + 1], a range of depth; Hoeffding: P(|mean - E[N]| >= t) <= 2 exp(-2 ROUNDS t^2 / depth^2),
# so t = depth sqrt(ln(2 / 1e-6) / (2 ROUNDS)) holds with probability 1 - 1e-6 (t = 0.043 at depth 5)


def hoeffding(depth: int) -> float:
    return depth * math.sqrt(math.log(2 / 1e-6) / (2 * ROUNDS))


@pytest.mark.stat
@pytest.mark.parametrize("rule, text", [("rrs", REVIEWED), ("mss", "[[[[]]],[],[[],[]]]"),
                                        ("onehot_walk", "[[[[]]],[]]"), ("rrs_original_q", "[[[]],[[[]]],[]]"),
                                        ("walk_duplicate_siblings", "[[[[]]],[],[]]")])
def test_expected_tokens_match_a_simulation(rule, text):
    tree = OrderedTree.parse(text)
    g = torch.Generator().manual_seed(len(text) + len(rule))
    mean = simulate_tokens(CH.P, CH.Q, start=CH.start, tree=tree, rule=rule, rounds=ROUNDS,
                           generator=g).double().mean().item()
    exact = sd.markov.ordered_tree_tokens(CH.P, CH.Q, start=CH.start, tree=tree, rule=rule)
    assert abs(mean - exact) < hoeffding(tree.depth)
    # negative control: the same nodes with the root's children in reverse order retire another E[N] (these trees
    # are chosen so that it lies over 2 bounds away: the check has power)
    swapped = OrderedTree(tree.children[::-1])
    other = sd.markov.ordered_tree_tokens(CH.P, CH.Q, start=CH.start, tree=swapped, rule=rule)
    assert abs(mean - other) > hoeffding(tree.depth)


@pytest.mark.stat
def test_simulation_power_on_the_reviewed_tree():
    # negative control with a wrong rule: mss's E[N] on the same tree lies outside the bound around rrs's simulation
    tree = OrderedTree.parse(REVIEWED)
    mean = simulate_tokens(CH.P, CH.Q, start=CH.start, tree=tree, rule="rrs", rounds=ROUNDS,
                           generator=torch.Generator().manual_seed(7)).double().mean().item()
    mss = sd.markov.ordered_tree_tokens(CH.P, CH.Q, start=CH.start, tree=tree, rule="mss")
    assert abs(mean - mss) > hoeffding(tree.depth) > 0


def best_by_brute_force(values: dict, *, budget, c_d, c_v):
    """(S, tree) of largest S among the trees of at most budget nodes; ties to fewer nodes, then shallower."""
    return max(((e / (t.depth * c_d + c_v(t.size)), -t.size, -t.depth, t) for t, e in values.items()
                if t.size <= budget), key=lambda r: r[:3])


COSTS = [(C_D, memory_bound), (0.0, lambda n: 1.0), (0.4, lambda n: 1 + 0.3 * (n % 3))]  # the last not monotone
CASES = [("reference", "rrs", 6, 7), ("reference", "onehot_sequential", 7, 7), ("reference", "onehot_walk", 7, 7),
         ("Q_bad", "rrs", 7, 7), ("q zero where p > 0", "rrs", 3, 7), ("random", "rrs", 4, 7), ("random", "mss", 3, 6),
         ("reference", "rrs_original_q", 3, 6)]  # (chain, rule, max width, budget)


@pytest.mark.heavy
@pytest.mark.parametrize("chain, rule, width, budget", CASES)
def test_search_matches_brute_force(chain, rule, width, budget):
    P, Q = CHAINS[chain]
    for start in (CH.start, 2):
        values = brute_force(P, Q, rule=rule, budget=budget, width=width, start=start)
        found = staircase(f64(P), f64(Q), start=start, v=RULES[rule].verifier, budget=budget, max_width=width,
                          views=[[x, 5] for x in range(5)] if RULES[rule].verifier.draws == "top" else [list(range(6))])
        for n in range(1, budget + 1):  # the root's staircase: the best E[N] of each size within each depth
            for d in range(1, n + 1):  # (none when n nodes of at most `width` children a node need more depth)
                brute = max([e for t, e in values.items() if t.size == n and t.depth <= d], default=None)
                got = max([e for e, t in found if t.size == n and t.depth <= d], default=None)
                assert (got is None) == (brute is None) and (brute is None or abs(got - brute) < 1e-12)
        for c_d, c_v in COSTS:
            best = sd.markov.best_ordered_trees(P, Q, start=start, rule=rule, c_d=c_d, c_v=c_v,
                                                budgets=range(1, budget + 1), search=TreeSearch(max_width=width))
            for b, got in best.items():
                s, *_ = best_by_brute_force(values, budget=b, c_d=c_d, c_v=c_v)
                assert abs(got.speedup - s) < 1e-12 and got.nodes <= b and got.tree.size == got.nodes
                assert abs(sd.markov.ordered_tree_speedup(P, Q, start=start, tree=got.tree, rule=rule, c_d=c_d,
                                                   c_v=c_v) - got.speedup) < 1e-12


def test_one_best_subtree_per_state_is_not_exact():
    # negative control: keeping only each state's best subtree (scalar DP per state, exact for one-hot drafts)
    # misses the best 7-node tree of this chain under rrs, which brute force and the Pareto search find
    P, Q = CHAINS["random"]
    values = brute_force(P, Q, rule="rrs", budget=7, width=4, start=2)
    brute = max(e for t, e in values.items() if t.size == 7)
    kw = dict(start=2, v=RULES["rrs"].verifier, budget=7, max_width=4)
    pareto = max(e for e, t in staircase(f64(P), f64(Q), views=[list(range(6))], **kw) if t.size == 7)
    scalar = max(e for e, t in staircase(f64(P), f64(Q), views=[[x, 5] for x in range(5)], **kw) if t.size == 7)
    assert abs(pareto - brute) < 1e-12 and brute - scalar > 1e-3


@pytest.mark.heavy
def test_the_reviewed_tree_is_the_best_at_budget_8():
    values = brute_force(CH.P, CH.Q, rule="rrs", budget=8, width=8)  # all 2055 ordered trees of 1..8 nodes
    s, _, _, tree = best_by_brute_force(values, budget=8, c_d=C_D, c_v=memory_bound)
    got = sd.markov.best_ordered_tree(CH.P, CH.Q, start=CH.start, rule="rrs", c_d=C_D, c_v=memory_bound, budget=8,
                               search=TreeSearch(max_width=8))
    uniform = sd.markov.best_tree(CH.P, CH.Q, start=CH.start, rule="rrs", c_d=C_D, c_v=memory_bound, budget=8)
    assert str(got.tree) == str(tree) == REVIEWED and abs(got.speedup - s) < 1e-12
    assert (got.nodes, got.depth) == (7, 5) and round(got.speedup, 4) == 2.0036
    assert uniform.widths == (2, 1, 1, 1) and got.speedup - uniform.speedup > 0.01


@pytest.mark.heavy
def test_best_ordered_tree_beats_or_ties_every_uniform_tree():
    for rule in ("rrs", "onehot_sequential", "mss"):
        best = sd.markov.best_ordered_trees(CH.P, CH.Q, start=CH.start, rule=rule, c_d=C_D, c_v=memory_bound,
                                     budgets=(4, 8))
        for b, got in best.items():
            uniform = sd.markov.best_tree(CH.P, CH.Q, start=CH.start, rule=rule, c_d=C_D, c_v=memory_bound, budget=b)
            assert got.speedup >= uniform.speedup - 1e-12 and got.nodes <= b
            one = sd.markov.best_ordered_tree(CH.P, CH.Q, start=CH.start, rule=rule, c_d=C_D, c_v=memory_bound,
                                              budget=b)
            assert one.tree == got.tree and abs(one.speedup - got.speedup) < 1e-12
