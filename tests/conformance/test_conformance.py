"""The conformance kit tests itself: every known verification bug fails it, correct verifiers pass it, and a
correct verifier's false-failure rate over seeds stays within what the report states."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from kit_support import sampled_law

import specdec_lib as sd
from specdec_lib.conformance import (
    Promise,
    assert_conformant,
    audit_drafter,
    audit_verifier,
    battery,
    committed_block_law,
    complete,
    known_verifiers,
    power,
    target_law,
)
from specdec_lib.conformance.bugs import BLOCK_VERIFIERS
from specdec_lib.conformance.cli import main
from specdec_lib.markov.registry import MODES

BUGS = [kv for kv in known_verifiers() if not kv.exact]
EXACT = [kv for kv in known_verifiers() if kv.exact]


def test_known_verifiers_are_the_field_guide_bugs_by_name():
    names = {kv.name for kv in known_verifiers()}
    guide = {m.name for m in sd.failure_modes()}
    wanted = {"softmax_residual", "target_on_reject", "reused_uniform", "single_token_residual", "off_by_one",
              "bonus_from_draft", "mismatched_q", "rejected_kept", "first_unverified"}
    assert wanted <= guide and names == wanted | {"correct", "tempting", "match_acceptance"} | set(BLOCK_VERIFIERS)
    assert set(BLOCK_VERIFIERS) == {"block_verification", "block_verification_naive"} <= set(MODES)


def test_exact_laws_are_laws_and_exact_rules_complete_to_the_target():
    for kv in known_verifiers():
        tvs = []
        for case in battery():
            law = committed_block_law(kv.spec, case.p_rows, case.q_rows)
            assert abs(sum(law.values()) - 1) < 1e-12
            tvs.append(sd.total_variation(complete(law, case.p_rows), target_law(case.p_rows)))
        assert (max(tvs) < 1e-12) == kv.exact, (kv.name, tvs)


@pytest.mark.parametrize("kv", BUGS, ids=lambda kv: kv.name)
def test_every_bug_is_far_enough_off_to_be_caught(kv):
    # the power promise covers TV >= epsilon on some case; each bug clears it with room (the smallest is 0.1998)
    worst = max(sd.total_variation(complete(committed_block_law(kv.spec, c.p_rows, c.q_rows), c.p_rows),
                                   target_law(c.p_rows)) for c in battery())
    assert worst >= 0.19 > power(battery()[0], cases=len(battery())).detectable


@pytest.mark.stat
@pytest.mark.parametrize("kv", BUGS, ids=lambda kv: kv.name)
def test_every_bug_fails_the_kit_and_is_named(kv):
    report = audit_verifier(kv.verify, convention="batched", subject=kv.name)
    assert not report.passed and not bool(report)
    assert report.diagnosis.startswith(f"{kv.name}:"), report.diagnosis
    assert "FAILED" in str(report) and kv.name in str(report)


@pytest.mark.stat
@pytest.mark.parametrize("kv", known_verifiers(), ids=lambda kv: kv.name)
def test_each_sampler_lands_on_its_own_exact_law(kv):
    # the samplers and committed_block_law are independent code: each sampler's completed law is within the noise
    # bound of its rule's law (the bound is sd.tv_noise_bound, so a correct pairing fails with probability < 1e-6)
    g = torch.Generator().manual_seed(1)
    for case in battery():
        n = 4000
        exact = complete(committed_block_law(kv.spec, case.p_rows, case.q_rows), case.p_rows)
        assert sd.total_variation(sampled_law(kv.verify, case, n, g), exact) <= sd.tv_noise_bound(exact, n)


@pytest.mark.stat
def test_verify_block_passes_and_the_report_reads():
    report = assert_conformant(sd.verify_block)  # the per-block convention, block by block (about 7 s)
    text = str(report)
    assert report.passed and "PASSED: all 9 cases" in text and "0.15 TV" in text and "<= 0.001" in text
    assert all(c.tv <= c.threshold and c.violations == 0 for c in report.cases)
    assert [c.k for c in report.cases] == [1, 1, 1, 1, 2, 2, 2, 3, 4]
    assert text.splitlines()[-1] == "PASSED: all 9 cases"  # the verdict stays last, after the efficiency lines
    assert all(f"{c.name:18s} pass; keeps {c.kept:.2f}" in text for c in report.cases)


def test_a_fixed_n_promises_no_power():
    """With n fixed by the caller the sample is not sized for epsilon, so the header must not claim the power."""
    text = str(audit_verifier(sd.verify_blocks, convention="batched", num_blocks=200))
    assert "none promised" in text and "0.15 TV off is caught" not in text


@pytest.mark.stat
@pytest.mark.parametrize("kv", EXACT, ids=lambda kv: kv.name)
def test_exact_rules_pass(kv):
    assert audit_verifier(kv.verify, convention="batched").passed


@pytest.mark.stat
def test_assert_conformant_raises_with_the_report():
    with pytest.raises(AssertionError, match="looks like softmax_residual|Looks like softmax_residual"):
        assert_conformant(BUGS[0].verify, convention="batched")


@pytest.mark.stat
def test_false_failure_rate_over_seeds_stays_within_the_stated_bound():
    # delta = 0.2 per report: under a rate of 0.2, failures in S = 60 seeds are Binomial(60, 0.2) (mean 12, sd 3.1);
    # more than 12 + 3.3 sd = 22 has probability < 1e-3, so a kit whose real rate exceeded 0.35 would be caught.
    # n = 300 blocks per case keeps each check to a fraction of a second (sd.verify_blocks, batched).
    S, delta = 60, 0.2
    reports = [audit_verifier(sd.verify_blocks, convention="batched", seed=s, num_blocks=300,
                              promise=Promise(delta=delta)) for s in range(S)]
    failures = sum(not r.passed for r in reports)
    assert failures <= S * delta + 3.3 * math.sqrt(S * delta * (1 - delta))
    # negative control: half the noise floor is a threshold a correct verifier exceeds in most reports, and this
    # count sees it (the same seeds, the same bound on the count)
    floor_failures = sum(any(c.tv > c.floor / 2 for c in r.cases) for r in reports)
    assert floor_failures > S * delta + 3.3 * math.sqrt(S * delta * (1 - delta))


@pytest.mark.stat
def test_conventions_agree_on_a_correct_verifier():
    def by_logits(p_logits, q_logits, proposals, generator):
        return sd.verify_block(p_logits.softmax(-1), q_logits.softmax(-1), proposals, generator)

    def batch_first(p, q, y, generator):  # (1, k+1, V) ...: one block with a leading batch axis, per call
        out = sd.verify_blocks(p[None], q[None], y[None], generator)
        return int(out.accepted[0]), out.tokens[0][out.tokens[0] >= 0]

    for fn, convention in [(by_logits, "logits"), (batch_first, "probs")]:
        assert audit_verifier(fn, convention=convention, num_blocks=300, promise=Promise(delta=1e-3)).passed


@pytest.mark.stat
def test_transformers_convention_with_a_bug_fails():
    verify = BUGS[0].verify

    def hf_softmax_residual(ids, q_logits, k, p_logits):  # the PR #28508 bug, in transformers' convention
        p, q = p_logits[0].softmax(-1), q_logits[0].softmax(-1)
        a, toks = verify(p[None], q[None], ids[:, -k:], None)  # its randomness: the forked global generator
        t = toks[0][toks[0] >= 0]
        return t[None], a[0]

    report = audit_verifier(hf_softmax_residual, convention="transformers", num_blocks=200)
    assert not report.passed and report.diagnosis.startswith("softmax_residual")


@pytest.mark.heavy
def test_contract_violations_fail_even_when_the_law_is_right():
    def lies_about_accepted(p, q, y, g):
        v = sd.verify_block(p, q, y, g)
        return v.accepted + 1, v.tokens  # accepted no longer len(tokens) - 1

    report = audit_verifier(lies_about_accepted, num_blocks=300)
    assert not report.passed and all(c.violations > 0 for c in report.cases)


def test_bad_input_raises():
    with pytest.raises(TypeError, match="fn must be callable"):
        audit_verifier(3)
    with pytest.raises(ValueError, match="convention must be one of"):
        audit_verifier(sd.verify_block, convention="numpy")
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        audit_verifier(sd.verify_block, num_blocks=0)
    with pytest.raises(ValueError, match="delta must lie in"):
        audit_verifier(sd.verify_block, promise=Promise(delta=1.5))
    with pytest.raises(TypeError, match="promise must be a Promise"):
        audit_verifier(sd.verify_block, promise=0.2)
    with pytest.raises(TypeError, match="must return \\(accepted, tokens\\) or a Verdict"):
        audit_verifier(lambda p, q, y, g: None, num_blocks=10)
    with pytest.raises(TypeError, match="batched verifier must return"):
        audit_verifier(lambda p, q, y, g: None, convention="batched", num_blocks=10)


def _drafter(mode):
    def draft(logits, n, generator):
        q = logits.softmax(-1)
        if mode == "greedy":  # transformers #32867: argmax proposals, softmax reported
            return logits.argmax().repeat(n), q
        if mode == "top2":  # transformers #47932: top-k = 2 sampled, the raw softmax reported
            return sd.sample_from(sd.apply_policy(logits, top_k=2), num_samples=n, generator=generator), q
        return sd.sample_from(q, num_samples=n, generator=generator), q

    return draft


@pytest.mark.stat
def test_audit_drafter_passes_an_honest_drafter_and_fails_the_two_q_bugs():
    assert audit_drafter(_drafter("honest")).passed
    for mode in ("greedy", "top2"):
        report = audit_drafter(_drafter(mode))
        assert not report.passed and "FAILED" in str(report)


@pytest.mark.heavy
def test_cli_exit_codes(tmp_path, capsys):
    mod = tmp_path / "user_verifiers.py"
    mod.write_text("from specdec_lib.conformance import known_verifiers\n"
                   "bad = [k for k in known_verifiers() if k.name == 'target_on_reject'][0].verify\n"
                   "import specdec_lib as sd\ngood = sd.verify_blocks\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["user_verifiers:bad", "--convention", "batched"]) == 1
        assert "Looks like target_on_reject" in capsys.readouterr().out
        assert main(["user_verifiers:good", "--convention", "batched"]) == 0
        assert main(["user_verifiers"]) == 2 and main(["user_verifiers:missing"]) == 2
        assert main(["specdec_lib.conformance.check:DRAFT_LOGITS"]) == 2  # not a function
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.heavy
def test_python_dash_m_runs():
    out = subprocess.run([sys.executable, "-m", "specdec_lib.conformance", "specdec_lib:verify_blocks",
                          "--convention", "batched"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "PASSED" in out.stdout


def test_catch_probability_is_one_minus_beta_at_the_detectable_tv():
    """The power bound a report states: exactly 1 - beta at epsilon(n), 0 at the false-failure threshold, rising."""
    for case in battery():
        pw = power(case, cases=8)
        assert pw.catch_probability(pw.detectable, 0.001) == pytest.approx(0.999, abs=1e-12)
        assert pw.catch_probability(pw.threshold, 0.001) == 0.0
        assert pw.catch_probability(0.15, 0.001) >= 0.999 > pw.catch_probability(0.5 * pw.detectable, 0.001)
