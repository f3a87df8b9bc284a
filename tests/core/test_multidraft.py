"""Act V: many drafts at one position. The exact rules emit p, the wrong ones do not, and sampling tells them apart."""
import dataclasses
import functools

import pytest
import torch
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.multidraft import MAX_TABLE, RULES, MultiDraftRule, acceptance_table
from specdec_lib.multidraft_rules import Stages, Walk

EVERY = sd.multidraft.multidraft_rules(None)  # Act V's rules (the default listing), then Act VI's
EXACT = [r.name for r in EVERY if r.exact]
WRONG = [r.name for r in EVERY if not r.exact]
TWIN = {"walk_duplicate_siblings": "onehot_walk", "rrs_residual_next_q": "rrs", "rrs_original_q": "rrs",
        "accept_first_pass": "mss", "spechub_code": "spechub"}  # the exact rule each wrong one is a corrupted copy of
SHORTCUT = ("spechub_code",)  # wrong only where p(argmax q) > 1 - 1e-3: tests/core/test_multidraft_coupled.py
NS = (1, 2, 3, 5)  # n = 5 is more drafts than q has tokens in four cases, and all five tokens of the post's q
N = 200_000
AGREE = [("post pair", 3), ("q zero where p > 0", 3)]  # n = 3 > the two tokens q gives mass to in the second


def ns(rule, candidates=NS) -> list[int]:
    """The candidate num_drafts the rule draws (spechub's pair: two at most)."""
    return [n for n in candidates if n <= (RULES[rule].max_drafts or n)]


def f64(x) -> torch.Tensor:
    """A distribution in float64, renormalised (what the library computes with)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    return x / x.sum()


def suite() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(p, q) pairs that break naive multi-draft verifiers, all in float64."""
    p, q = sd.post_pair()
    lp = torch.tensor([3.0, 2.5, 1.0, 0.2, -1.0, -2.0])
    lq = torch.tensor([1.0, 3.0, 2.9, 0.0, 0.5, -3.0])
    cases = {
        "post pair": (p, q),
        "p == q": (p, p.clone()),
        "disjoint supports": ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.25, 0.75]),
        "one-hot q": (p, torch.nn.functional.one_hot(torch.tensor(2), 5)),
        "q zero where p > 0": ([0.4, 0.3, 0.2, 0.1], [0.0, 0.5, 0.5, 0.0]),
        "tied q": ([0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]),
        "T near 0": (sd.apply_policy(lp, temperature=0.05), sd.apply_policy(lq, temperature=0.05)),
    }
    return {name: (f64(a), f64(b)) for name, (a, b) in cases.items()}


SUITE = suite()


@functools.cache
def exact(rule, case, n):
    """(law, acceptance) of a rule on a suite case, computed once."""
    p, q = SUITE[case]
    return (sd.multidraft_law(p, q, num_drafts=n, rule=rule),
            sd.multidraft.multidraft_accept_probability(p, q, num_drafts=n, rule=rule))


def tv_from_p(rule, case, n):
    return sd.total_variation(exact(rule, case, n)[0], SUITE[case][0])


@functools.cache
def sampled(rule, case, n):
    """Empirical law of N seeded samples of a rule on a suite case, drawn once and shared by the tests that read it."""
    p, q = SUITE[case]
    g = torch.Generator().manual_seed(sum(map(ord, rule + case)) + n)
    return sd.empirical(sd.sample_multidraft(p, q, num_drafts=n, num_samples=N, rule=rule, generator=g), p.numel())


def test_registry():
    rules = sd.multidraft.multidraft_rules(None)
    act5 = sd.multidraft.multidraft_rules()
    assert [r.name for r in act5[:4]] == ["mss", "rrs", "onehot_sequential", "onehot_walk"] and len(act5) == 8
    act6 = sd.multidraft.multidraft_rules("optimal verification")
    assert [r.name for r in act6] == ["kseq", "spechub", "spechub_code"] and rules == act5 + act6
    assert {r.chapter for r in act5} == {"many drafts"} and {r.chapter for r in act6} == {"optimal verification"}
    with pytest.raises(ValueError, match="chapter must be one of 'many drafts', 'optimal verification'"):
        sd.multidraft.multidraft_rules("act vi")
    assert set(EXACT) == {"mss", "rrs", "onehot_sequential", "onehot_walk", "kseq", "spechub"} and len(WRONG) >= 3
    assert len(RULES) == len(rules) and set(TWIN) == set(WRONG)
    for r in rules:
        assert isinstance(r, MultiDraftRule) and r.description and r.reference
        # a wrong rule is constructed, or is public code as it runs, pinned at the commit read
        assert r.exact or "constructed" in r.reference or "@" in r.reference, r.name
    assert [r.name for r in rules if r.max_drafts is not None] == ["spechub", "spechub_code"]
    assert [r.name for r in rules if not r.nested] == ["kseq", "spechub", "spechub_code"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rules[0].exact = False
    with pytest.raises(ValueError, match="residual must be one of 'q', 'q_i', 'q_next', 'onehot', 'none'"):
        Stages("iid", ratio="q", residual="p")
    with pytest.raises(ValueError, match="draws must be one of 'iid', 'without_replacement', 'top', 'hub'"):
        Walk("sorted")


@pytest.mark.heavy
@pytest.mark.parametrize("case", list(SUITE))
@pytest.mark.parametrize("rule", list(RULES))
def test_every_law_is_a_distribution(rule, case):
    for n in ns(rule):
        law, accept = exact(rule, case, n)
        assert law.dtype == torch.float64 and torch.isfinite(law).all() and (law >= 0).all()
        assert abs(law.sum().item() - 1) < 1e-12 and 0 <= accept <= 1 + 1e-12


@pytest.mark.heavy
@pytest.mark.parametrize("case", list(SUITE))
@pytest.mark.parametrize("rule", EXACT)
def test_exact_rules_emit_p(rule, case):
    for n in ns(rule):
        assert (exact(rule, case, n)[0] - SUITE[case][0]).abs().max().item() < 1e-12, (rule, case, n)


@pytest.mark.parametrize("case", list(SUITE))
def test_one_draft_is_the_single_draft_rule(case):
    p, q = SUITE[case]
    beta = sd.overlap(p, q)
    single = torch.minimum(p, q) + (1 - beta) * sd.residual(p, q)  # Act I: keep min(p, q), the residual fills the rest
    for rule in ("mss", "rrs", "kseq", "spechub"):  # K-SEQ's rho is 1 at one draft; SpecHub's pair is one draft
        law, accept = exact(rule, case, 1)
        assert (law - single).abs().max().item() < 1e-12 and abs(accept - beta) < 1e-12
    # one-hot verification keeps the top draft with probability p(argmax q), which is not the overlap in general
    assert abs(exact("onehot_sequential", case, 1)[1] - p[q.argmax()].item()) < 1e-12


@pytest.mark.parametrize("case", list(SUITE))
def test_walk_equals_sequential(case):
    # the walk keeps child i when u lands in [p(x_1..x_{i-1}), p(x_1..x_i)): probability p(x_i); the sequential
    # test reaches child i with probability 1 - p(x_1..x_{i-1}) and keeps it with p(x_i) / (1 - p(x_1..x_{i-1}))
    for n in NS:
        walk, seq = exact("onehot_walk", case, n), exact("onehot_sequential", case, n)
        assert (walk[0] - seq[0]).abs().max().item() < 1e-12 and abs(walk[1] - seq[1]) < 1e-12


@pytest.mark.parametrize("rule", [r for r in WRONG if r not in SHORTCUT])
def test_wrong_rules_are_wrong(rule):
    worst = max(tv_from_p(rule, case, n) for case in SUITE for n in (2, 3))
    assert worst > 1e-3


def test_three_wrong_rules_are_exact_at_one_draft():
    # a test at n = 1 cannot catch them: each reduces to the single-draft rule (or to one-hot verification of it)
    for rule in ("walk_duplicate_siblings", "rrs_original_q", "accept_first_pass"):
        assert max(tv_from_p(rule, case, 1) for case in SUITE) < 1e-12, rule
    assert tv_from_p("rrs_residual_next_q", "post pair", 1) > 1e-3


@pytest.mark.stat
@pytest.mark.parametrize("rule", [r for r in WRONG if r not in SHORTCUT])
def test_sampling_catches_each_wrong_rule(rule):
    # tv_bound(p, N): an exact sampler's N samples exceed it with probability < delta = 1e-6 (Jensen for the mean,
    # McDiarmid for the tail; see noise.tv_noise_bound), so that is the false-alarm rate of this test. A wrong rule
    # with law w lands at TV(emp, p) >= TV(w, p) - TV(emp, w), and TV(emp, w) < tv_bound(w, N) except with
    # probability < 1e-6: so TV(w, p) > tv_bound(p, N) + tv_bound(w, N) makes a miss that unlikely too.
    case, n = max(((c, k) for c in SUITE for k in (2, 3)), key=lambda ck: tv_from_p(rule, *ck))
    p = SUITE[case][0]
    wrong = exact(rule, case, n)[0]
    assert tv_from_p(rule, case, n) > tv_bound(p, N) + tv_bound(wrong, N)
    assert sd.total_variation(sampled(rule, case, n), p) > tv_bound(p, N)
    assert sd.total_variation(sampled(TWIN[rule], case, n), p) < tv_bound(p, N)  # negative control


@pytest.mark.stat
@pytest.mark.parametrize("case, n", AGREE)
@pytest.mark.parametrize("rule", list(RULES))
def test_sampler_agrees_with_exact_law(rule, case, n):
    # the same bound, now around the rule's own law: an honest sampler of any rule, exact or not, stays under it
    n = ns(rule, (n,))[0] if ns(rule, (n,)) else RULES[rule].max_drafts
    law = exact(rule, case, n)[0]
    assert sd.total_variation(sampled(rule, case, n), law) < tv_bound(law, N)


def test_acceptance_grows_with_n_on_the_post_pair():
    accept = {rule: [exact(rule, "post pair", n)[1] for n in ns(rule, range(1, 7))] for rule in EXACT}
    for rule, a in accept.items():
        assert all(later >= earlier - 1e-12 for earlier, later in zip(a, a[1:])), rule
    assert all(r >= m - 1e-12 for r, m in zip(accept["rrs"], accept["mss"]))  # without replacement never loses here
    # five drafts without replacement cover q's whole support, and a rejected draft keeps no residual mass, so the
    # fifth stage's target is a point mass on the fifth draft; i.i.d. drafts keep re-proposing q's likely tokens
    assert accept["rrs"][4] == pytest.approx(1.0, abs=1e-12) and accept["mss"][4] < 0.4


def test_generator_makes_runs_reproducible():
    p, q = SUITE["post pair"]
    runs = [sd.sample_multidraft(p, q, num_drafts=3, num_samples=1000, rule="rrs",
                                 generator=torch.Generator().manual_seed(3))
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1]) and runs[0].dtype == torch.long and runs[0].shape == (1000,)


def test_float32_inputs_are_taken_in_float64():
    p, q = sd.post_pair()
    assert (sd.multidraft_law(p, q, num_drafts=2, rule="mss") - f64(p)).abs().max().item() < 1e-12


def test_argument_errors_name_the_argument():
    p, q = SUITE["post pair"]
    fns = [lambda p, q, n, **k: sd.multidraft_law(p, q, num_drafts=n, **k),
           lambda p, q, n, **k: sd.multidraft.multidraft_accept_probability(p, q, num_drafts=n, **k),
           lambda p, q, n, **k: sd.sample_multidraft(p, q, num_drafts=n, num_samples=10, **k)]
    for fn in fns:
        with pytest.raises(TypeError, match="p must be a torch.Tensor"):
            fn([0.5, 0.5], q, 2, rule="mss")
        with pytest.raises(ValueError, match="q must sum to 1"):
            fn(p, q * 2, 2, rule="mss")
        with pytest.raises(ValueError, match="p and q must have the same shape"):
            fn(p, f64([0.5, 0.5]), 2, rule="mss")
        with pytest.raises(ValueError, match="1-D"):
            fn(p[None], q[None], 2, rule="mss")
        with pytest.raises(ValueError, match="num_drafts must be >= 1"):
            fn(p, q, 0, rule="mss")
        with pytest.raises(TypeError, match="num_drafts must be an integer"):
            fn(p, q, 2.0, rule="mss")
        with pytest.raises(ValueError, match="rule must be one of 'mss', 'rrs', 'onehot_sequential'"):
            fn(p, q, 2, rule="specinfer")
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        sd.sample_multidraft(p, q, num_drafts=2, num_samples=0, rule="mss")
    with pytest.raises(TypeError, match="num_samples must be an integer"):
        sd.sample_multidraft(p, q, num_drafts=2, num_samples=10.0, rule="mss")
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None"):
        sd.sample_multidraft(p, q, num_drafts=2, num_samples=10, rule="mss", generator=0)
    for fn in fns:
        with pytest.raises(ValueError, match="rule 'spechub' draws at most 2 drafts .*'hub'.*num_drafts = 3"):
            fn(p, q, 3, rule="spechub")
    with pytest.raises(ValueError, match=f"= 9 gives 1953125 draft outcomes .* 9765625 numbers.*{MAX_TABLE}"):
        sd.multidraft_law(p, q, num_drafts=9, rule="mss")
    # sampling needs no enumeration
    assert sd.sample_multidraft(p, q, num_drafts=9, num_samples=10, rule="mss").shape == (10,)


def test_acceptance_table_is_every_rule_by_num_drafts():
    p, q = SUITE["post pair"]
    table = acceptance_table(p, q, max_drafts=3)
    assert list(table) == [r.name for r in sd.multidraft.multidraft_rules()] and {len(r) for r in table.values()} == {3}
    every = acceptance_table(p, q, max_drafts=3, chapter=None)
    assert list(every) == list(RULES) and all(len(row) == min(3, RULES[r].max_drafts or 3) for r, row in every.items())
    assert table["rrs"][1] == sd.multidraft.multidraft_accept_probability(p, q, num_drafts=2, rule="rrs")
    with pytest.raises(ValueError, match="max_drafts must be >= 1"):
        acceptance_table(p, q, max_drafts=0)


def test_named_law_tests_the_drafts_in_the_order_given():
    from specdec_lib.multidraft_rules import named_law, step_law
    g = torch.Generator().manual_seed(3)  # notebook 09's node: a target row and a head's row over 6 tokens
    p = torch.softmax(1.5 * torch.randn(6, generator=g, dtype=torch.float64), 0)
    q = torch.softmax(1.5 * torch.randn(6, generator=g, dtype=torch.float64), 0)
    top = dataclasses.replace(RULES["mss"].verifier, draws="top")
    onehot = dataclasses.replace(RULES["onehot_sequential"].verifier, draws="top")
    for v in (top, onehot, RULES["onehot_walk"].verifier):  # q's own top order: step_law's "top" scheme, to 1e-12
        want = step_law(p, q, num_drafts=3, verifier=dataclasses.replace(v, draws="top"))
        got = named_law(p, q, sd.multidraft_rules.top_order(q)[:3], verifier=v)
        assert (got.law - want.law).abs().max() < 1e-12 and abs(got.accept - want.accept) < 1e-12
    guesses = sd.multidraft_rules.top_order(q)[:3]  # tokens 5, 1, 3
    invented = torch.zeros_like(q).index_fill_(0, guesses, 1 / 3)  # a uniform q over named guesses: ties, id order
    tv = {o: sd.total_variation(named_law(p, invented, torch.tensor(o), verifier=top).law, p) for o in
          [(5, 1, 3), (1, 3, 5), (3, 5, 1)]}
    assert abs(tv[(1, 3, 5)] - sd.total_variation(step_law(p, invented, num_drafts=3, verifier=top).law, p)) < 1e-12
    assert min(tv.values()) > 0.1 and max(tv.values()) - min(tv.values()) > 0.1  # the order moves the error
    for o in [(5, 1, 3), (1, 3, 5), (3, 5, 1)]:  # the one-hot rule is exact in every order
        assert sd.total_variation(named_law(p, invented, torch.tensor(o), verifier=onehot).law, p) < 1e-12
    with pytest.raises(ValueError, match="drafts must be distinct tokens"):
        named_law(p, q, torch.tensor([1, 1]), verifier=top)
    with pytest.raises(ValueError, match=r"drafts must hold token ids in \[0, 6\)"):
        named_law(p, q, torch.tensor([1, 7]), verifier=top)
    with pytest.raises(TypeError, match="verifier must be a Stages or Walk verifier"):
        named_law(p, q, torch.tensor([1, 2]), verifier=RULES["kseq"].verifier)
