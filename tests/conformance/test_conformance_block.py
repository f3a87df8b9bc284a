"""Block verifiers in the kit: block verification passes, its naive port fails and is named, and the report's
efficiency line puts what a verifier keeps beside the exact E[accepted] of the token rule and of the optimum."""
from __future__ import annotations

import dataclasses
import functools
import math

import pytest
import torch
from kit_support import sampled_law

import specdec_lib as sd
from specdec_lib.block_verification import verify_batch_block
from specdec_lib.conformance import (
    BLOCK_VERIFIERS,
    Case,
    audit_verifier,
    battery,
    block_rule,
    committed_block_law,
    complete,
    mean_accepted,
    rule_verifier,
    target_law,
)
from specdec_lib.markov.registry import MODES
from specdec_lib.verification import commit_tokens

TOKEN, BLOCK, NAIVE = (MODES[name].spec for name in ("correct", *BLOCK_VERIFIERS))
N = 20_000  # blocks per case in the efficiency tests (a fixed n: the report then promises no power)


def _hoeffding(k: int, n: int = N, delta: float = 1e-6) -> float:
    """A deviation the mean of n accepted counts in [0, k] exceeds with probability below delta (Hoeffding):
    2 exp(-2 n t^2 / k^2) = delta, t = k sqrt(ln(2 / delta) / (2 n)); 0.038 at k = 2, 0.076 at k = 4 for N."""
    return k * math.sqrt(math.log(2 / delta) / (2 * n))


def _toy() -> Case:
    """The block paper's toy in float64: p = (1/3, 2/3), q = (2/3, 1/3) at every position, k = 2."""
    p = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64)
    q = torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    return Case("toy", torch.stack([p, p, p]), torch.stack([q, q]), "the paper's toy")


def naive_port(p, q, proposals, generator):
    """A user's block verifier with the vllm-ascend bug (its tau test and the ordinary residual), batched."""
    accepted, nxt = verify_batch_block(p, q, proposals, generator, naive=True)
    return accepted, commit_tokens(proposals, accepted, nxt)


def always_reject(p, q, proposals, generator):
    """Exact and wasteful: keep no proposal, emit one token from the first target row (batched)."""
    n, k = proposals.shape
    tokens = torch.full((n, k + 1), -1, dtype=torch.long)
    tokens[:, 0] = sd.sample_rows(p[:, 0], generator)
    return torch.zeros(n, dtype=torch.long), tokens


def test_the_papers_toy_token_rule_keeps_10_9_and_block_verification_11_9():
    toy = _toy()
    token, block = (committed_block_law(spec, toy.p_rows, toy.q_rows) for spec in (TOKEN, BLOCK))
    assert abs(mean_accepted(token) - 10 / 9) < 1e-12 and abs(mean_accepted(block) - 11 / 9) < 1e-12
    want = target_law(toy.p_rows)
    assert sd.total_variation(complete(block, toy.p_rows), want) < 1e-12
    assert sd.total_variation(complete(committed_block_law(NAIVE, toy.p_rows, toy.q_rows), toy.p_rows), want) > 0.15
    # the battery's copy of the toy has float32 rows (as every case): the same numbers to float32's precision
    case = next(c for c in battery() if c.name == "block_gain")
    assert abs(mean_accepted(committed_block_law(BLOCK, case.p_rows, case.q_rows)) - 11 / 9) < 1e-6


def test_block_verification_is_exact_and_keeps_the_most_on_every_case():
    gains = {}
    for case in battery():
        token, block = (committed_block_law(spec, case.p_rows, case.q_rows) for spec in (TOKEN, BLOCK))
        assert abs(sum(block.values()) - 1) < 1e-12
        assert sd.total_variation(complete(block, case.p_rows), target_law(case.p_rows)) < 1e-12
        gains[case.name] = mean_accepted(block) - mean_accepted(token)
        assert gains[case.name] > -1e-12
        if case.k == 1:  # one proposal: block verification is the token rule
            assert block == pytest.approx(token, abs=1e-12) and abs(gains[case.name]) < 1e-12
    assert {name for name, g in gains.items() if g > 0.1} == {"block_gain", "binary_k3", "binary_k4"}


def test_the_naive_port_is_inexact_and_buys_tokens():
    tvs, extra = {}, {}
    for c in battery():
        naive = committed_block_law(NAIVE, c.p_rows, c.q_rows)
        tvs[c.name] = sd.total_variation(complete(naive, c.p_rows), target_law(c.p_rows))
        extra[c.name] = mean_accepted(naive) - mean_accepted(committed_block_law(BLOCK, c.p_rows, c.q_rows))
    assert all(tvs[c.name] < 1e-12 and abs(extra[c.name]) < 1e-12 for c in battery() if c.k == 1)  # the token rule
    assert {name for name, tv in tvs.items() if tv > 0.19} == {"block_gain", "binary_k3", "binary_k4"}
    assert max(tvs.values()) > 0.3 and all(extra[name] > 0.4 for name in ("block_gain", "binary_k3", "binary_k4"))


@pytest.mark.stat
@pytest.mark.parametrize("fn, convention", [(functools.partial(sd.verify_blocks, method="block"), "batched"),
                                            (functools.partial(sd.verify_block, method="block"), "probs")],
                         ids=["verify_blocks", "verify_block"])
def test_a_correct_block_verifier_passes(fn, convention):
    n = None if convention == "batched" else 50  # the per-block convention: a fixed n keeps it to a few seconds
    report = audit_verifier(fn, convention=convention, num_blocks=n, subject="block")
    assert report.passed and report.diagnosis == "" and "PASSED: all 9 cases" in str(report)


@pytest.mark.stat
def test_the_naive_port_fails_and_is_named():
    report = audit_verifier(naive_port, convention="batched", subject="naive port")
    assert not report.passed and report.diagnosis.startswith("block_verification_naive:"), report.diagnosis
    text = str(report)
    assert "Looks like block_verification_naive" in text
    failed = {c.name for c in report.cases if not c.passed}
    assert {"block_gain", "binary_k3", "binary_k4"} <= failed  # exact TV above 0.19 on each: caught w.p. > 0.999
    assert not failed & {c.name for c in battery() if c.k == 1}  # it is exact at k = 1 (correct false-failure rate)
    assert all(c.nearest == "block_verification_naive" for c in report.cases if not c.passed)


def test_the_report_reads_its_exact_efficiency_numbers_from_the_block_law():
    report = audit_verifier(sd.verify_blocks, convention="batched", num_blocks=50)
    for c, case in zip(report.cases, battery()):
        assert abs(c.token_kept - mean_accepted(committed_block_law(TOKEN, case.p_rows, case.q_rows))) < 1e-12
        assert abs(c.optimal_kept - mean_accepted(committed_block_law(BLOCK, case.p_rows, case.q_rows))) < 1e-12
        assert f"{c.name:18s} {c.efficiency}" in str(report)
    toy = next(c for c in report.cases if c.name == "block_gain")
    assert "of the 1.22 an optimal verifier keeps (the token rule keeps 1.11)" in toy.efficiency


def _efficiency(fn) -> dict[str, object]:
    report = audit_verifier(fn, convention="batched", num_blocks=N, seed=3)
    assert report.passed, report  # every verifier here is exact
    return {c.name: c for c in report.cases}


@pytest.mark.stat
def test_the_token_rule_keeps_less_than_the_optimum_and_block_verification_keeps_it():
    # each measured mean lands within the Hoeffding bound t(k) of its own exact E[accepted] (a false failure has
    # probability < 1e-6 per case); where the optimum is more than 2 t(k) above the token rule, the token rule's
    # line is then below the optimum by more than t(k)
    token, block = _efficiency(sd.verify_blocks), _efficiency(functools.partial(sd.verify_blocks, method="block"))
    for name, c in token.items():
        t = _hoeffding(c.k)
        assert abs(c.kept - c.token_kept) <= t and abs(block[name].kept - c.optimal_kept) <= t
        assert c.kept_se < t / 4  # a standard error is far below the 1e-6 bound at this n
    gaps = [name for name, c in token.items() if c.optimal_kept - c.token_kept > 2 * _hoeffding(c.k)]
    assert gaps == ["block_gain", "binary_k3", "binary_k4"]
    for name in gaps:
        assert token[name].kept < token[name].optimal_kept - _hoeffding(token[name].k) < block[name].kept


@pytest.mark.stat
def test_an_exact_verifier_that_keeps_less_shows_it():
    # negative control for the efficiency line: always rejecting is exact (it passes) and keeps nothing; match
    # acceptance is exact and keeps less than the token rule where its exact E[accepted] is more than t(k) below
    never = _efficiency(always_reject)
    assert all(c.kept == 0.0 and c.kept_se == 0.0 and c.token_kept > _hoeffding(c.k) for c in never.values())
    assert all("pass; keeps 0.00 ± 0.00 of the" in c.efficiency for c in never.values())
    match_spec = MODES["match_acceptance"].spec
    match = _efficiency(rule_verifier(match_spec))
    below = [name for name, c in match.items() if c.kept < c.token_kept - _hoeffding(c.k)]
    exact_below = [c.name for c in battery()
                   if mean_accepted(committed_block_law(match_spec, c.p_rows, c.q_rows)) < match[c.name].token_kept
                   - 2 * _hoeffding(c.k)]
    assert exact_below and set(exact_below) <= set(below)


@pytest.mark.stat
def test_a_block_verifier_reads_the_believed_draft_rows():
    """ratio="Q_bad" with a block verifier: the rows are judged with q_{j-1} (q_k for the first), as the engines
    pass the ratio table; its law is a law, not exact, and the sampler lands on it (noise bound, < 1e-6)."""
    spec = dataclasses.replace(BLOCK, ratio="Q_bad")
    assert block_rule(spec) is spec
    g = torch.Generator().manual_seed(4)
    case = next(c for c in battery() if c.name == "forbidden")  # where the believed rows move the law most
    law = committed_block_law(spec, case.p_rows, case.q_rows)
    exact = complete(law, case.p_rows)
    assert abs(sum(law.values()) - 1) < 1e-12 and sd.total_variation(exact, target_law(case.p_rows)) > 0.25
    n = 4000
    sampled = sampled_law(rule_verifier(spec), case, n, g)
    assert sd.total_variation(sampled, exact) <= sd.tv_noise_bound(exact, n)
    # negative control: the same sample is far from block verification's own (exact) law
    assert sd.total_variation(sampled, target_law(case.p_rows)) > sd.tv_noise_bound(exact, n)


def test_a_verifier_given_no_draft_probabilities_reads_one_hot_rows():
    """ratio="argmax_Q": the verifier reads q_j as one-hot at its argmax (a kernel passed draft_probs=None). On
    one-hot draft rows that is the truth, so the token rule stays exact and the naive block port does not; on
    sampled draft rows even the token rule is wrong (it divides by 1 where q is below 1)."""
    case = next(c for c in battery() if c.name == "binary_k3")  # k = 3: where a later row can vouch for earlier ones
    one_hot = torch.nn.functional.one_hot(case.q_rows.argmax(-1), case.q_rows.shape[-1]).double()
    token, port = (dataclasses.replace(spec, ratio="argmax_Q") for spec in (TOKEN, NAIVE))
    truth = target_law(case.p_rows)
    assert sd.total_variation(complete(committed_block_law(token, case.p_rows, one_hot), case.p_rows), truth) < 1e-12
    assert sd.total_variation(complete(committed_block_law(port, case.p_rows, one_hot), case.p_rows), truth) > 0.05
    # negative controls: the same one-hot reading of a sampled draft is not exact, and the true q is
    for spec, exact in ((token, False), (TOKEN, True)):
        tv = sd.total_variation(complete(committed_block_law(spec, case.p_rows, case.q_rows), case.p_rows), truth)
        assert tv < 1e-12 if exact else tv > 0.05
