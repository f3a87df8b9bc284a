"""Act VI, which verifier fits which draft: block verification's round law, the long run, the map (all exact)."""
import pytest
import torch

import specdec_lib as sd
from specdec_lib.markov import verifier_map as vm

CH = sd.reference_chain()
C_D, C_V = 0.15, 1.0
TOY_P = torch.tensor([[1 / 3, 2 / 3], [1 / 3, 2 / 3]])  # the paper's toy: the same rows in both states
TOY_Q = torch.tensor([[2 / 3, 1 / 3], [2 / 3, 1 / 3]])


def test_the_papers_toy_block_keeps_11_9_and_the_token_rule_10_9():
    block = vm.block_round_outcomes(TOY_P, TOY_Q, k=2)
    token = vm.verifier_speedup(TOY_P, TOY_Q, k=2, verifier="token", c_d=0.0, c_v=1.0)
    assert (block.n - 1 - 11 / 9).abs().max() < 1e-12  # accepted drafts per block, from either state
    assert abs(token.tokens_per_round - 1 - 10 / 9) < 1e-12
    alive = vm.alive_mass(TOY_P, TOY_Q, k=2)  # by hand: w_1 sums to 2/3, w_2 to 5/9
    assert (alive[:, 1] - 2 / 3).abs().max() < 1e-12 and (alive[:, 2] - 5 / 9).abs().max() < 1e-12


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_block_round_is_the_alive_mass_identity_and_the_naive_port_is_not(k):
    block, naive = vm.block_round_outcomes(CH.P, CH.Q, k=k), vm.block_round_outcomes(CH.P, CH.Q, k=k, naive=True)
    alive = vm.alive_mass(CH.P, CH.Q, k=k).sum(-1)  # E[N | s] = 1 + sum_i sum_paths w_i
    assert (block.n - alive).abs().max() < 1e-12
    assert (block.next_start.sum(-1) - 1).abs().max() < 1e-12 and (block.jumps[0] == 0).all()
    if k >= 2:  # the port keeps more than any exact verifier can: the negative control
        assert (naive.n - alive).min() > 1e-3
    else:
        assert (naive.n - alive).abs().max() < 1e-12


@pytest.mark.parametrize("k", [2, 3])
def test_path_mass_is_each_rules_full_block_probability(k):
    token = sd.markov.long_run.round_law(sd.markov.long_run.costed_chain(CH.P, CH.Q, c_d=C_D, c_v=C_V), k=k)
    block = vm.block_round_outcomes(CH.P, CH.Q, k=k)
    for s in range(5):
        m = vm.path_mass(CH.P, CH.Q, k=k, start=s)
        assert abs(m.draft.sum() - 1) < 1e-12 and abs(m.target.sum() - 1) < 1e-12
        assert abs(m.token.sum() - token.full[s].sum()) < 1e-12  # P(all k drafts accepted | s), token rule
        assert abs(m.block.sum() - block.jumps[k + 1, s].sum()) < 1e-12  # P(tau = k | s), block verification
        assert (m.token <= m.block + 1e-15).all() and (m.block <= torch.minimum(m.draft, m.target) + 1e-15).all()
    assert m.block.sum() - m.token.sum() > 1e-3  # the block keeps strictly more on the chain


def test_at_k_1_block_verification_is_the_token_rule():
    block = vm.block_round_outcomes(CH.P, CH.Q, k=1)
    token = sd.markov.long_run.round_law(sd.markov.long_run.costed_chain(CH.P, CH.Q, c_d=C_D, c_v=C_V), k=1)
    assert (block.n - token.n).abs().max() < 1e-12
    assert (block.next_start - token.next_start).abs().max() < 1e-12


def _tokens_per_call(P, Q, *, k, horizon, naive=False):
    """H / E[R_H | 0] by the renewal equation over block rounds (every round drafts k; tokens past H are cut)."""
    jumps = vm.block_round_outcomes(P, Q, k=k, naive=naive).jumps  # (k + 2, V, V) P(N = n, next start | s)
    rounds = {h: torch.zeros(P.shape[0], dtype=torch.float64) for h in range(-k, 1)}  # E[R_h] = 0 for h <= 0
    for h in range(1, horizon + 1):
        rounds[h] = 1 + sum(jumps[n] @ rounds[h - n] for n in range(1, k + 2))
    return horizon / rounds[horizon][0].item()


@pytest.mark.heavy
@pytest.mark.parametrize("mode,naive", [("block_verification", False), ("block_verification_naive", True)])
def test_block_round_agrees_with_the_exact_engine(mode, naive):
    for k, horizon in [(2, 3), (1, 3), (3, 2), (4, 3)]:
        stats = sd.decoder_stats(CH.P, CH.Q, start=0, horizon=horizon, k=k, mode=mode)
        assert abs(_tokens_per_call(CH.P, CH.Q, k=k, horizon=horizon, naive=naive) - stats.tokens_per_call) < 1e-12
    token = sd.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=2).tokens_per_call  # the renewal is not vacuous
    assert abs(_tokens_per_call(CH.P, CH.Q, k=2, horizon=3) - token) > 1e-3


@pytest.mark.parametrize("k", [1, 2, 4])
def test_a_deterministic_draft_gains_nothing_from_block_verification(k):
    greedy = vm.greedy_draft(CH.Q)
    assert ((greedy == 0) | (greedy == 1)).all() and (greedy.sum(-1) == 1).all()
    assert (greedy.argmax(-1) == CH.Q.argmax(-1)).all()
    token = vm.verifier_speedup(CH.P, greedy, k=k, verifier="token", c_d=C_D, c_v=C_V)
    block = vm.verifier_speedup(CH.P, greedy, k=k, verifier="block", c_d=C_D, c_v=C_V)
    assert abs(token.tokens_per_round - block.tokens_per_round) < 1e-12
    sampled = [vm.verifier_speedup(CH.P, CH.Q, k=k, verifier=v, c_d=C_D, c_v=C_V) for v in ("token", "block")]
    assert (sampled[1].tokens_per_round - sampled[0].tokens_per_round > 1e-3) == (k > 1)  # the control


def test_verifier_speedup_is_notebook_07s_long_run_for_the_token_rule():
    for k in (1, 4):
        mine = vm.verifier_speedup(CH.P, CH.Q, k=k, verifier="token", c_d=C_D, c_v=C_V)
        seven = sd.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="fixed", k=k)
        assert abs(mine.speedup - seven.speedup) < 1e-12 and abs(mine.cost_per_round - (k * C_D + C_V)) < 1e-12
        block = vm.verifier_speedup(CH.P, CH.Q, k=k, verifier="block", c_d=C_D, c_v=C_V)
        assert abs(block.speedup - block.tokens_per_round / (k * C_D + C_V)) < 1e-12


@pytest.mark.heavy
def test_against_k_puts_the_oracle_beside_both_rules():
    rows = vm.against_k(CH.P, CH.Q, ks=[1, 2, 4], c_d=C_D, c_v=C_V)
    assert [r.k for r in rows] == [1, 2, 4]
    for r in rows:
        oracle = sd.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="oracle", k_max=r.k)
        assert abs(r.oracle.speedup - oracle.speedup) < 1e-12
        assert r.oracle.speedup >= r.token.speedup - 1e-12  # the oracle may stop at any depth up to k
        assert r.block.tokens_per_round >= r.token.tokens_per_round - 1e-12
    assert abs(rows[0].gain) < 1e-12 and rows[2].gain > 0.04


@pytest.mark.heavy
def test_gain_grid_is_zero_at_k_1_and_grows_with_k():
    grid = vm.gain_grid(CH.P, CH.Q, ks=[1, 2, 4], temperatures=[0.5, 1.0])
    assert grid.gain.shape == (2, 3) and grid.gain[:, 0].abs().max() < 1e-12
    assert (grid.gain[:, 1:] > 0).all() and (grid.gain[:, 2] > grid.gain[:, 1]).all()
    at = vm.verifier_speedup(CH.P, CH.Q, k=4, verifier="block", c_d=0.0, c_v=1.0, temperature=0.5)
    assert abs(grid.block[0, 2] - at.tokens_per_round) < 1e-12
    assert abs(grid.block[1, 2] - at.tokens_per_round) > 1e-3  # the temperature reaches P and Q


@pytest.mark.heavy
def test_fit_picks_the_simplest_verifier_that_keeps_the_most():
    det = vm.fit(vm.Drafter("argmax", "deterministic", k=4))
    assert det.best == "token rule" and abs(det.tokens["token rule"] - det.tokens["block verification"]) < 1e-12
    sampled = vm.fit(vm.Drafter("sampled", "sampled", k=4))
    assert sampled.best == "block verification" and set(sampled.tokens) == {"token rule", "block verification"}
    assert sampled.tokens["token rule"] == pytest.approx(
        sd.markov.long_run.round_law(sd.markov.long_run.costed_chain(CH.P, CH.Q, c_d=0, c_v=1), k=4).n[0].item())
    assert vm.fit(vm.Drafter("k = 1", "sampled", k=1)).best == "token rule"  # a tie goes to the simpler rule
    tree = vm.fit(vm.Drafter("three paths", "sampled", num_drafts=3, k=2))
    want = sd.markov.tree_expected_tokens(CH.P, CH.Q, start=0, widths=(3, 1), rule="rrs")
    assert tree.best == "multi-draft" and abs(tree.tokens["multi-draft"] - want) < 1e-12
    greedy = vm.fit(vm.Drafter("greedy", "sampled", k=4, temperature=0.0))
    assert greedy.best == "token rule"


@pytest.mark.heavy
def test_the_map_each_cell_computed():
    rows = vm.verifier_map(k=4, num_drafts=3)
    assert [r.use for r in rows] == ["token rule", "block verification", "multi-draft", "mss", "rrs"]
    det, sampled = rows[0].values, rows[1].values
    assert abs(det["token rule"] - det["block verification"]) < 1e-12
    assert sampled["block verification"] > sampled["token rule"] + 0.1
    p, q = sd.post_pair()
    rrs = rows[4].values
    assert rrs["rrs"] == pytest.approx(sd.multidraft.multidraft_accept_probability(p, q, num_drafts=3, rule="rrs"))
    assert rrs["optimum"] > rrs["rrs"] + 1e-3  # rrs leaves mass on the table on the post's pair


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="verifier must be one of 'token', 'block', 'block_naive'"):
        vm.verifier_speedup(CH.P, CH.Q, k=2, verifier="blocks", c_d=C_D, c_v=C_V)
    with pytest.raises(ValueError, match="k = 9 needs 5\\^9 drafted paths"):
        vm.block_round_outcomes(CH.P, CH.Q, k=9)
    with pytest.raises(ValueError, match="k must be >= 1"):
        vm.block_round_outcomes(CH.P, CH.Q, k=0)
    with pytest.raises(ValueError, match="P and Q must have the same shape"):
        vm.block_round_outcomes(CH.P, TOY_Q, k=2)
    with pytest.raises(ValueError, match="draft must be one of 'sampled', 'deterministic'"):
        vm.Drafter("x", "greedy")
    with pytest.raises(TypeError, match="drafter must be a Drafter"):
        vm.fit("sampled")
