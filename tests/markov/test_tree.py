"""Act V on the chain: a static draft tree, each node a multi-draft step. Exact rules keep the target chain's law at
every width, wrong ones do not, the sampler follows the exact law, and E[N] is what the sampler retires."""
import functools

import pytest
import torch
from stats import rate_bound, tv_bound

import specdec_lib as sd
from specdec_lib.markov import tree as engine
from specdec_lib.markov.tree import Sampling, node_tables
from specdec_lib.multidraft import MAX_TABLE, RULES
from specdec_lib.multidraft_rules import step_law, step_sample

CH = sd.reference_chain()
# Act V's rules (the default listing); Act VI's kseq and spechub run on trees in tests/core/test_multidraft_coupled.py
ACT5 = [r.name for r in sd.multidraft.multidraft_rules()]
EXACT = [r.name for r in sd.multidraft.multidraft_rules() if r.exact]
WRONG = [r.name for r in sd.multidraft.multidraft_rules() if not r.exact]
TWIN = {"walk_duplicate_siblings": "onehot_walk", "rrs_residual_next_q": "rrs", "rrs_original_q": "rrs",
        "accept_first_pass": "mss"}  # the exact rule each wrong one is a corrupted copy of
ONE_DRAFT_EXACT = ("walk_duplicate_siblings", "rrs_original_q", "accept_first_pass")  # exact at n = 1 (test_multidraft)
WIDTHS = [(1,), (2,), (3, 2, 1), (2, 2), (1, 1, 1, 1)]
HORIZON = 5  # past every tree's depth + 1, so every exact law below includes full paths and their bonus tokens
CHAINS = {  # (P, Q): the post's chain, its badly wrong draft, a draft with zeros where P has mass, and the reverse
    "reference": (CH.P, CH.Q),
    "Q_bad": (CH.P, CH.Q_bad),
    "q zero where p > 0": (CH.P, sd.policy_table(CH.Q, top_k=2)),  # two tokens per row: fewer than 3 children
    "p zero where q > 0": (sd.policy_table(CH.P, top_k=2), CH.Q),
}
N = 100_000
SAMPLED = [("reference", (2, 2), 3), ("Q_bad", (3, 2, 1), 4), ("q zero where p > 0", (3, 2, 1), 3)]  # bonus inside


def f64(table: torch.Tensor) -> torch.Tensor:
    """Rows in float64, renormalised (what the library computes with)."""
    return table.double() / table.double().sum(-1, keepdim=True)


@functools.cache
def tree_law(rule, chain, widths, horizon=HORIZON):
    P, Q = CHAINS[chain]
    return sd.tree_law(P, Q, start=CH.start, horizon=horizon, widths=widths, rule=rule)


@functools.cache
def target(chain, horizon=HORIZON):
    return sd.sequence_law(CHAINS[chain][0], start=CH.start, horizon=horizon)


def tv_from_target(rule, chain, widths, horizon=HORIZON):
    return sd.total_variation(tree_law(rule, chain, widths, horizon), target(chain, horizon))


@functools.cache
def sampled(rule, chain, widths, horizon):
    """N seeded sequences of the tree decoder, drawn once and shared by the tests that read them."""
    P, Q = CHAINS[chain]
    g = torch.Generator().manual_seed(sum(map(ord, rule + chain)) + sum(widths))
    return sd.markov.decode_tree_markov(P, Q, start=CH.start, horizon=horizon, widths=widths, num_samples=N, rule=rule,
                                 sampling=Sampling(generator=g))


@pytest.mark.heavy
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("rule", ACT5)
def test_a_node_is_the_rules_own_step(rule, chain):
    # kept + fallback is the rule's multidraft_law, kept's mass its acceptance, at every state and width
    P, Q = (f64(t) for t in CHAINS[chain])
    for s in range(P.shape[0]):
        for n in (1, 2, 3):
            one = step_law(P[s], Q[s], num_drafts=n, verifier=RULES[rule].verifier)
            kept, fallback = one.kept, one.fallback
            law = sd.multidraft_law(P[s], Q[s], num_drafts=n, rule=rule)
            assert (kept + fallback - law).abs().max().item() < 1e-12
            accept = sd.multidraft.multidraft_accept_probability(P[s], Q[s], num_drafts=n, rule=rule)
            assert abs(kept.sum().item() - accept) < 1e-12
            assert (kept >= 0).all() and (fallback >= 0).all()


@pytest.mark.stat
@pytest.mark.parametrize("rule", ACT5)
def test_a_node_samples_as_the_rule_samples(rule):
    # the same uniforms in the same order: step_sample's tokens are sample_multidraft's, draw for draw; its kept
    # flags come at the rule's acceptance rate, within 5 standard deviations (rate_bound: two-sided 5.7e-7 each)
    P, Q = (f64(t) for t in CHAINS["q zero where p > 0"])
    size = 20_000
    for s, n in ((0, 1), (1, 2), (3, 3)):
        draw = step_sample(P[s], Q[s], num_drafts=n, verifier=RULES[rule].verifier, size=size,
                           generator=torch.Generator().manual_seed(s))
        ours, kept = draw.token, draw.kept
        theirs = sd.sample_multidraft(P[s], Q[s], num_drafts=n, num_samples=size, rule=rule,
                                      generator=torch.Generator().manual_seed(s))
        assert torch.equal(ours, theirs) and kept.dtype == torch.bool
        accept = min(1.0, sd.multidraft.multidraft_accept_probability(P[s], Q[s], num_drafts=n,
                                                                      rule=rule))  # 1 + 1e-16 at most
        assert abs(kept.double().mean().item() - accept) < rate_bound(accept, size), (s, n)


@pytest.mark.stat
def test_kept_rate_check_has_power():
    # negative control: three drafts' kept flags sit far outside the bound around one draft's acceptance
    P, Q = (f64(t) for t in CHAINS["reference"])
    g = torch.Generator().manual_seed(1)
    kept = step_sample(P[1], Q[1], num_drafts=3, verifier=RULES["mss"].verifier, size=20_000, generator=g).kept
    accept = sd.multidraft.multidraft_accept_probability(P[1], Q[1], num_drafts=1, rule="mss")
    assert abs(kept.double().mean().item() - accept) > rate_bound(accept, 20_000)


@pytest.mark.heavy
@pytest.mark.parametrize("chain", ["reference", "Q_bad"])
@pytest.mark.parametrize("rule", ACT5)
def test_the_first_round_by_hand(rule, chain):
    # widths (n,): one multi-draft step, then a bonus from P after a kept child, or a new round after the fallback;
    # widths (n, m): a kept root child is followed by the m-draft step at its state
    P, Q = (f64(t) for t in CHAINS[chain])
    s = CH.start
    one = step_law(P[s], Q[s], num_drafts=3, verifier=RULES[rule].verifier)
    kept, fallback = one.kept, one.fallback
    step = {m: torch.stack([sd.multidraft_law(P[x], Q[x], num_drafts=m, rule=rule) for x in range(P.shape[0])])
            for m in (2, 3)}
    assert (tree_law(rule, chain, (3,), 1) - (kept + fallback)).abs().max().item() < 1e-12
    by_hand = {(3,): kept[:, None] * P + fallback[:, None] * step[3],
               (3, 2): kept[:, None] * step[2] + fallback[:, None] * step[3]}  # (V, V) the first two tokens
    for widths, law in by_hand.items():
        assert (tree_law(rule, chain, widths, 2) - law).abs().max().item() < 1e-12, widths


@pytest.mark.heavy
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("rule", EXACT)
def test_exact_rules_keep_the_target_chain(rule, chain):
    for widths in WIDTHS:
        law = tree_law(rule, chain, widths)
        assert law.shape == (5,) * HORIZON and law.dtype == torch.float64
        assert (law - target(chain)).abs().max().item() < 1e-12, widths


@functools.cache
def path_law(chain, horizon=4):
    """The block decoder's exact law at k = 4 (horizon 4 reaches a full block; 5 would add its bonus, 5x slower)."""
    P, Q = CHAINS[chain]
    return sd.decoder_law(P, Q, start=CH.start, horizon=horizon, k=4)


@pytest.mark.heavy
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("rule", EXACT + list(ONE_DRAFT_EXACT))
def test_a_path_tree_is_the_single_path_decoder(rule, chain):
    # widths (1, 1, 1, 1) against the block decoder with k = 4, drafting from the same table
    assert (tree_law(rule, chain, (1, 1, 1, 1), 4) - path_law(chain)).abs().max().item() < 1e-12


@pytest.mark.parametrize("rule", WRONG)
def test_wrong_rules_are_wrong_in_a_tree(rule):
    tvs = {widths: tv_from_target(rule, "reference", widths) for widths in WIDTHS}
    assert max(tvs.values()) > 1e-3, tvs
    if rule in ONE_DRAFT_EXACT:  # exact with one child per node: only a tree with siblings shows the bug
        assert tvs[(1,)] < 1e-12 and tvs[(1, 1, 1, 1)] < 1e-12 and tvs[(2, 2)] > 1e-3


@pytest.mark.stat
@pytest.mark.parametrize("chain, widths, horizon", SAMPLED)
@pytest.mark.parametrize("rule", ACT5)
def test_sampler_agrees_with_exact_law(rule, chain, widths, horizon):
    # tv_bound(law, N): an exact sampler's N samples exceed it with probability < delta = 1e-6 (Jensen for the mean,
    # McDiarmid for the tail; see noise.tv_noise_bound), so that is this test's false-alarm rate
    law = tree_law(rule, chain, widths, horizon)
    assert sd.sequence_tv(sampled(rule, chain, widths, horizon), law) < tv_bound(law, N)


@pytest.mark.stat
@pytest.mark.parametrize("rule", WRONG)
def test_sampling_catches_each_wrong_rule(rule):
    # negative control: a wrong rule's samples against the target law. TV(emp, target) >= TV(w, target) - TV(emp, w),
    # and TV(emp, w) < tv_bound(w, N) except with probability < 1e-6: so a gap above the two bounds is missed as rarely
    chain, widths, horizon = max(SAMPLED, key=lambda c: tv_from_target(rule, *c))
    law, p = tree_law(rule, chain, widths, horizon), target(chain, horizon)
    assert sd.total_variation(law, p) > tv_bound(p, N) + tv_bound(law, N)
    assert sd.sequence_tv(sampled(rule, chain, widths, horizon), p) > tv_bound(p, N)
    assert sd.sequence_tv(sampled(TWIN[rule], chain, widths, horizon), p) < tv_bound(p, N)  # its exact twin passes


def simulated_tokens(log) -> tuple[float, float]:
    """(mean tokens per round, A + 1, over the logged rounds; its standard error), from the log's counts of A >= a."""
    s = log.summary()
    at_least = torch.tensor(s.accepted_at, dtype=torch.float64) / s.rounds  # P(A >= a), a = 1 .. k
    a = torch.arange(1, s.k + 1, dtype=torch.float64)
    mean, square = at_least.sum().item(), ((2 * a - 1) * at_least).sum().item()  # E[A], E[A^2]
    return 1 + mean, ((square - mean ** 2) / s.rounds) ** 0.5


ROUNDS = 50_000  # rounds per E[N] check: A's sd is below 1.2 here, so the standard error of E[N] is below 0.006


def tree_rounds(rule, widths, seed):
    """ROUNDS first rounds from the start state: horizon 1 ends each sequence after one round; the log keeps its A."""
    log = sd.SpecDecodeLog(k=len(widths))
    sd.markov.decode_tree_markov(CH.P, CH.Q, start=CH.start, horizon=1, widths=widths, num_samples=ROUNDS, rule=rule,
                          sampling=Sampling(generator=torch.Generator().manual_seed(seed), log=log))
    return simulated_tokens(log)


@pytest.mark.stat
@pytest.mark.parametrize("rule, widths", [(rule, (3, 2, 1)) for rule in ACT5] + [(rule, (2, 2)) for rule in EXACT])
def test_expected_tokens_match_simulation(rule, widths):
    # 5 standard errors of a mean of ROUNDS bounded draws: two-sided normal tail 5.7e-7 per check (the false-alarm
    # rate); the standard error is estimated from the same rounds
    exact = sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=widths, rule=rule)
    mean, se = tree_rounds(rule, widths, seed=len(rule) + sum(widths))
    assert 1 <= exact <= len(widths) + 1 and abs(mean - exact) < 5 * se


@pytest.mark.stat
def test_expected_tokens_check_has_power():
    # negative control: mss's simulated E[N] sits far outside 5 standard errors of rrs's exact E[N]
    mean, se = tree_rounds("mss", (3, 2, 1), seed=1)
    assert abs(mean - sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=(3, 2, 1), rule="rrs")) > 5 * se


@pytest.mark.stat
def test_a_path_tree_retires_what_the_block_decoder_retires():
    # the single path: one proposal per position kept with sum_y min(p, q), so P(A >= j) = (M^j 1)[start], M = min(P, Q)
    M = torch.minimum(f64(CH.P), f64(CH.Q))  # (V, V)
    for k in range(1, 5):
        reach = [torch.linalg.matrix_power(M, j).sum(-1)[CH.start].item() for j in range(1, k + 1)]
        for rule in ("mss", "rrs"):
            assert abs(sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=(1,) * k, rule=rule)
                       - (1 + sum(reach))) < 1e-12
    log = sd.SpecDecodeLog(k=4)  # and the block decoder's own log at k = 4, one round per sequence
    sd.decode_markov(CH.P, CH.Q, start=CH.start, horizon=1, k=4, num_samples=ROUNDS,
                     generator=torch.Generator().manual_seed(4),
                     log=log)
    mean, se = simulated_tokens(log)  # 5 standard errors, as above
    assert abs(mean - sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=(1, 1, 1, 1),
                                                     rule="mss")) < 5 * se


def test_node_tables_end_with_the_bonus():
    P, Q = (f64(t) for t in CHAINS["reference"])
    tables = node_tables(P, Q, (3, 2), RULES["mss"].verifier)
    assert len(tables) == 3 and torch.equal(tables[-1][1], P) and not tables[-1][0].any()
    for kept, fallback in tables:
        assert ((kept + fallback).sum(-1) - 1).abs().max().item() < 1e-12


def test_generator_makes_runs_reproducible():
    runs = [sd.markov.decode_tree_markov(CH.P, CH.Q, start=0, horizon=4, widths=(2, 2), num_samples=500, rule="rrs",
                                  sampling=Sampling(generator=torch.Generator().manual_seed(3))) for _ in range(2)]
    assert torch.equal(runs[0], runs[1]) and runs[0].dtype == torch.long and runs[0].shape == (500, 4)
    assert 0 <= int(runs[0].min()) and int(runs[0].max()) < 5


@pytest.mark.heavy
@pytest.mark.parametrize("rule", ACT5)
def test_a_verifier_is_its_registered_rule(rule):
    # rule= takes any Stages / Walk verifier: the registered one gives the named rule's law and E[N], to 1e-12
    v = RULES[rule].verifier
    for widths, horizon in [((3, 2, 1), 4), ((1, 2), 3)]:
        by_name, by_verifier = (sd.tree_law(CH.P, CH.Q, start=CH.start, horizon=horizon, widths=widths,
                                            rule=r) for r in (rule, v))
        assert (by_name - by_verifier).abs().max().item() < 1e-12
    assert sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=(2, 2), rule=v) == pytest.approx(
        sd.markov.tree_expected_tokens(CH.P, CH.Q, start=CH.start, widths=(2, 2), rule=rule), abs=1e-12)


def test_tree_law_from_tables_with_another_bonus():
    # tables_law with the bonus drawn from Q at the leaf instead of P: only the token after a kept leaf changes
    P, Q = (f64(t) for t in CHAINS["reference"])
    tables = node_tables(P, Q, (2,), RULES["rrs"].verifier)[:-1]
    law = engine.tables_law(tables, tables[-1][0][:, :, None] * Q[None], start=CH.start, horizon=2)
    kept, fallback = tables[0]
    second = torch.stack([sd.multidraft_law(P[x], Q[x], num_drafts=2, rule="rrs") for x in range(5)])  # new round at x
    want = kept[CH.start][:, None] * Q + fallback[CH.start][:, None] * second  # (V, V) by hand
    assert (law - want).abs().max().item() < 1e-12
    assert sd.total_variation(law, target("reference", 2)) > 0.05  # the wrong bonus shows, 2 tokens suffice
    assert (engine.tables_law(tables, tables[-1][0][:, :, None] * Q[None], start=CH.start, horizon=1)
            - (kept + fallback)[CH.start]).abs().max().item() < 1e-12  # and hides when it is past the horizon


def test_argument_errors_name_the_argument():
    P, Q = CH.P, CH.Q
    exact = functools.partial(sd.tree_law, start=0, horizon=3)
    tokens = functools.partial(sd.markov.tree_expected_tokens, start=0)
    decode = functools.partial(sd.markov.decode_tree_markov, start=0, horizon=3, num_samples=10)
    for fn in (exact, tokens, decode):
        with pytest.raises(TypeError, match="widths must be a tuple of ints"):
            fn(P, Q, widths=3, rule="mss")
        with pytest.raises(ValueError, match="widths must be non-empty"):
            fn(P, Q, widths=(), rule="mss")
        with pytest.raises(ValueError, match=r"widths\[1\] must be >= 1, got 0"):
            fn(P, Q, widths=(2, 0), rule="mss")
        with pytest.raises(TypeError, match=r"widths\[0\] must be an integer"):
            fn(P, Q, widths=(2.0,), rule="mss")
        with pytest.raises(ValueError, match="rule must be one of 'mss', 'rrs', 'onehot_sequential', 'onehot_walk'"):
            fn(P, Q, widths=(2,), rule="specinfer")
        with pytest.raises(TypeError, match="rule must be a registered rule's name or a Stages / Walk verifier"):
            fn(P, Q, widths=(2,), rule=3)
        with pytest.raises(ValueError, match="P must be a square"):
            fn(P[:3], Q, widths=(2,), rule="mss")
        with pytest.raises(ValueError, match="P and Q must have the same shape"):
            fn(P, sd.reference_chain(vocab=4).Q, widths=(2,), rule="mss")
        with pytest.raises(ValueError, match="Q must sum to 1"):
            fn(P, Q * 2, widths=(2,), rule="mss")
        with pytest.raises(ValueError, match=r"start must be a token id in \[0, 5\)"):
            fn(P, Q, widths=(2,), rule="mss", start=5)
    for fn in (exact, decode):
        with pytest.raises(ValueError, match="horizon must be >= 1"):
            fn(P, Q, widths=(2,), rule="mss", horizon=0)
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        decode(P, Q, widths=(2,), rule="mss", num_samples=0)
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None"):
        decode(P, Q, widths=(2,), rule="mss", sampling=Sampling(generator=0))
    with pytest.raises(TypeError, match="sampling must be a Sampling"):
        decode(P, Q, widths=(2,), rule="mss", sampling=None)
    with pytest.raises(TypeError, match="log must be a SpecDecodeLog or None"):
        Sampling(log=[])
    with pytest.raises(ValueError, match=r"log must be a SpecDecodeLog with k = len\(widths\) = 2"):
        decode(P, Q, widths=(2, 2), rule="mss", sampling=Sampling(log=sd.SpecDecodeLog(k=4)))
    with pytest.raises(ValueError, match=f"widths holds 9, which gives 1953125 draft outcomes.*most {MAX_TABLE}"):
        exact(P, Q, widths=(2, 9), rule="mss")
    assert decode(P, Q, widths=(9,), rule="mss").shape == (10, 3)  # sampling needs no enumeration
    with pytest.raises(TypeError):
        sd.tree_law(P, Q, 0, 3, (2,), "mss")  # start, horizon, widths, rule by position: refused
