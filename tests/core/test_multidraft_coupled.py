"""Act VI: SpecTr's K-SEQ and SpecHub. Both exact, their samplers against their laws, and where they sit."""
import functools
import math

import pytest
import torch
from pairs import f64, random_pairs
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.multidraft import multidraft_accept_probability, multidraft_optimum
from specdec_lib.multidraft_draws import draft_outcomes, draw_drafts
from specdec_lib.multidraft_rules import Hub, KSeq, kseq_rho, step_law, step_sample

N = 200_000
RULE_NS = {"kseq": (1, 2, 3, 4), "spechub": (1, 2)}  # SpecHub drafts a pair


POST = tuple(f64(t) for t in sd.post_pair())
PAIRS = [POST] + random_pairs(40, seed=2310, sizes=5, low=0.3)


@pytest.mark.parametrize("rule", list(RULE_NS))
def test_the_law_is_p(rule):
    for p, q in PAIRS:
        for n in RULE_NS[rule]:
            law = sd.multidraft_law(p, q, num_drafts=n, rule=rule)
            assert (law - p).abs().max().item() < 1e-12, (rule, n)


def test_kseq_rho_is_the_papers():
    # rho = 1 at one draft (Act I's rule); else the smallest feasible rho: 1 - (1 - beta)^n <= rho beta holds at it and
    # fails just below it, and the acceptance is 1 - (1 - beta(rho))^n, beta(rho) = sum min(q, p / rho)
    for p, q in PAIRS:
        assert kseq_rho(p, q, 1) == 1.0
        for n in (2, 3, 4):
            rho = kseq_rho(p, q, n)
            beta = torch.minimum(q, p / rho).sum().item()
            assert 1 <= rho <= n and 1 - (1 - beta) ** n <= rho * beta + 1e-12
            if rho > 1:
                below = torch.minimum(q, p / (rho - 1e-9)).sum().item()
                assert 1 - (1 - below) ** n > (rho - 1e-9) * below
            accept = multidraft_accept_probability(p, q, num_drafts=n, rule="kseq")
            assert abs(accept - (1 - (1 - beta) ** n)) < 1e-12


def test_kseq_without_rho_is_not_exact():
    # negative control for the exactness test: rho = 1 at n >= 2 over-keeps q's tokens; the residual would need negative
    # mass, and the law leaves p (TV 0.066, 0.121, 0.168 at n = 2, 3, 4 on the post's pair)
    p, q = POST
    tvs = [sd.total_variation(step_law(p, q, num_drafts=n, verifier=KSeq(rho=1.0)).law, p) for n in (2, 3, 4)]
    assert min(tvs) > 0.05 and step_law(p, q, num_drafts=1, verifier=KSeq(rho=1.0)).law.sub(p).abs().max() < 1e-12


def test_hub_pairs():
    # SpecHub's scheme: the first draft is q's own draw, and every pair holds the hub a = argmax q exactly once
    for _, q in PAIRS:
        X, w = draft_outcomes(q, 2, "hub")
        a = torch.sort(-q, stable=True).indices[0]
        assert abs(w.sum().item() - 1) < 1e-12 and (w > 0).all()
        first = torch.zeros_like(q).index_add_(0, X[:, 0], w)
        assert (first - q).abs().max().item() < 1e-12
        if X.shape[1] == 2:
            assert ((X == a).sum(1) == 1).all()
    with pytest.raises(ValueError, match="draws 'hub' draws at most 2 drafts"):
        draft_outcomes(POST[1], 3, "hub")


@pytest.mark.stat
def test_hub_draws_follow_the_pair_law():
    # the sampler's pairs against the enumerated pair law: same bound as below (false alarm < 1e-6); negative control:
    # the pair law of draws without replacement, which the bound must reject
    p, q = POST
    X = draw_drafts(q, 2, "hub", N, torch.Generator().manual_seed(11))
    V = q.numel()
    emp = sd.empirical(X[:, 0] * V + X[:, 1], V * V)
    law = {}
    for draws in ("hub", "without_replacement"):
        Y, w = draft_outcomes(q, 2, draws)
        law[draws] = torch.zeros(V * V, dtype=torch.float64).index_add_(0, Y[:, 0] * V + Y[:, 1], w)
    assert sd.total_variation(emp, law["hub"]) < tv_bound(law["hub"], N)
    assert sd.total_variation(emp, law["without_replacement"]) > tv_bound(law["without_replacement"], N)


@functools.cache
def joint(rule_or_verifier, n: int, case: int) -> torch.Tensor:
    """P(kept, token) (2V,): the kept draft's law then the fallback's, exactly."""
    p, q = PAIRS[case]
    v = sd.multidraft.RULES[rule_or_verifier].verifier if isinstance(rule_or_verifier, str) else rule_or_verifier
    law = step_law(p, q, num_drafts=n, verifier=v)
    return torch.cat([law.kept, law.fallback])


def sampled_joint(rule: str, n: int, case: int) -> torch.Tensor:
    p, q = PAIRS[case]
    draw = step_sample(p, q, num_drafts=n, verifier=sd.multidraft.RULES[rule].verifier, size=N,
                       generator=torch.Generator().manual_seed(n + case))
    return sd.empirical(draw.token + p.numel() * (~draw.kept), 2 * p.numel())


@pytest.mark.stat
@pytest.mark.parametrize("rule, n, wrong", [("kseq", 3, KSeq(rho=1.0)), ("spechub", 2, "rrs")])
def test_sampler_agrees_with_the_exact_law(rule, n, wrong):
    # (kept, token) from N seeded steps against the exact split law; tv_bound(law, N): exceeded by an exact sampler
    # with probability < 1e-6 (Jensen for the mean, McDiarmid for the tail). Negative control: a different law (K-SEQ
    # without rho; rrs, another scheme) lies further than both bounds from this one, so the same samples must fail it
    for case in (0, 3):
        law, other = joint(rule, n, case), joint(wrong, n, case)
        emp = sampled_joint(rule, n, case)
        assert sd.total_variation(emp, law) < tv_bound(law, N)
        assert sd.total_variation(law, other) > tv_bound(law, N) + tv_bound(other, N)
        assert sd.total_variation(emp, other) > tv_bound(other, N)


def test_spechub_code_shortcut():
    # the code keeps the hub outright when p(a) > 1 - 1e-3: exact elsewhere, and TV = 1 - p(a) there
    p, q = POST
    assert sd.total_variation(sd.multidraft_law(p, q, num_drafts=2, rule="spechub_code"), p) < 1e-12
    sharp, q2 = f64([0.9995, 0.0003, 0.0002]), f64([0.6, 0.3, 0.1])
    tv = sd.total_variation(sd.multidraft_law(sharp, q2, num_drafts=2, rule="spechub_code"), sharp)
    assert abs(tv - 5e-4) < 1e-12
    assert sd.total_variation(sd.multidraft_law(sharp, q2, num_drafts=2, rule="spechub"), sharp) < 1e-12


@pytest.mark.stat
def test_sampling_sees_the_shortcut():
    # exact SpecHub emits a non-hub token with probability 5e-4: Binomial(N, 5e-4), mean 100, and P(count <= 40) <=
    # exp(-100 (0.6)^2 / 2) = 1.5e-8 (Chernoff); the code's rule never does (the count is 0, not a chance event)
    sharp, q2 = f64([0.9995, 0.0003, 0.0002]), f64([0.6, 0.3, 0.1])
    counts = {rule: int((sd.sample_multidraft(sharp, q2, num_drafts=2, num_samples=N, rule=rule,
                                              generator=torch.Generator().manual_seed(7)) != 0).sum())
              for rule in ("spechub", "spechub_code")}
    assert counts["spechub"] > 40 and counts["spechub_code"] == 0


def test_where_they_sit():
    # what the exact engine shows on 41 pairs: K-SEQ keeps at least mss's drafts and at least (1 - 1/e) of the i.i.d.
    # optimum (SpecTr's guarantee); SpecHub reaches the optimum of its own scheme, and is not always above rrs
    below_rrs = 0
    for p, q in PAIRS:
        for n in (2, 3, 4):
            kseq = multidraft_accept_probability(p, q, num_drafts=n, rule="kseq")
            assert kseq >= multidraft_accept_probability(p, q, num_drafts=n, rule="mss") - 1e-12
            assert kseq >= (1 - 1 / math.e) * multidraft_optimum(p, q, n, draws="iid")
        hub = multidraft_accept_probability(p, q, num_drafts=2, rule="spechub")
        assert abs(hub - multidraft_optimum(p, q, 2, draws="hub")) < 1e-12
        below_rrs += hub < multidraft_accept_probability(p, q, num_drafts=2, rule="rrs") - 1e-12
    assert below_rrs >= 1  # the post's pair is one: 0.2575 against rrs's 0.2912


def test_trees_run_them_at_uniform_widths():
    # a tree node is the rule's step at the node's width, so the tree law is the chain's; a tree of any shape needs a
    # stage law that ignores the width, which K-SEQ's rho and SpecHub's pair do not have: ordered trees refuse them
    ch = sd.reference_chain()
    target = sd.sequence_law(ch.P, start=ch.start, horizon=3)
    for rule, widths in (("kseq", (3, 2)), ("kseq", (1, 4)), ("spechub", (2, 2)), ("spechub", (2, 1))):
        law = sd.tree_law(ch.P, ch.Q, start=ch.start, horizon=3, widths=widths, rule=rule)
        assert (law - target).abs().max().item() < 1e-12, (rule, widths)
    with pytest.raises(ValueError, match="draws 'hub' draws at most 2 drafts"):
        sd.tree_law(ch.P, ch.Q, start=ch.start, horizon=3, widths=(3,), rule="spechub")
    with pytest.raises(ValueError, match="KSeq verifiers test with coins fixed by the whole draft tuple"):
        sd.markov.ordered_tree_tokens(ch.P, ch.Q, start=ch.start, tree="[[],[]]", rule="kseq")


def test_verifier_arguments():
    with pytest.raises(ValueError, match=r"rho must lie in \[1, inf\], got 0.5"):
        KSeq(rho=0.5)
    with pytest.raises(ValueError, match=r"shortcut must lie in \[0, 1\], got 2"):
        Hub(shortcut=2.0)
    assert KSeq().draws == "iid" and Hub().draws == "hub"
