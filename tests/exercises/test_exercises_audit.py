"""Notebook 02c's checker (exercise 2c.1): the kit's reports hold the answer key, the solution passes, and each
recognised way of misreading a report fails with its message."""
import pytest
import torch
from exercise_support import failing, solutions

import specdec_lib as sd
from specdec_lib import conformance as kit
from specdec_lib import exercises as ex
from specdec_lib.exercises import audit

NS = solutions("02c_audit.ipynb")


def report_of(verify, seed=0):
    return kit.audit_verifier(verify, convention="batched", seed=seed)


@pytest.mark.heavy
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_answer_key_is_what_the_kit_says(seed):
    # not a sampled claim about one seed: every suspect that fails is > 0.2 TV off on some case, the kit's power
    # catches that with P >= 0.999 per case, and the diagnosis (summed over 9 cases) lands on the same name at each seed
    for name, verify in audit.SUSPECTS.items():
        r = report_of(verify, seed)
        got = "correct" if r.passed else r.diagnosis.split(":")[0]
        assert got == audit.ANSWERS[name], (name, seed, str(r))


def test_every_suspect_is_wrong_or_exact_as_its_law_says():
    known = {kv.name: kv for kv in kit.known_verifiers()}
    for name, answer in audit.ANSWERS.items():  # the exact law of the bug each suspect is named after
        spec = known[answer].spec
        worst = max(sd.total_variation(kit.complete(kit.committed_block_law(spec, c.p_rows, c.q_rows), c.p_rows),
                                       kit.target_law(c.p_rows)) for c in kit.battery())
        assert (worst < 1e-12) == (answer == "correct"), name
    # two of the answers are exact yet differ from the textbook rule: D keeps a proposal only on a match
    assert known["match_acceptance"].exact and audit.ANSWERS["D"] == "correct"


@pytest.mark.heavy
def test_the_solution_passes(capsys):
    assert ex.grade_name_bug(NS["name_bug"]).ok  # verbose and raising, as the check cell runs it
    out = capsys.readouterr().out
    assert "all checks passed" in out and "F tempting" in out
    assert NS["name_bug"](sd.verify_blocks) == "correct"
    assert NS["name_bug"](kit.known_verifiers()[2].verify) == "target_on_reject"  # the markdown's expected values


def reader(*, pick="diagnosis", check_passed=True, convention="batched", whole=False, empty=False):
    """A name_bug that reads the report one way (pick: 'diagnosis', 'first_case', 'first_failing')."""
    def name_bug(verify):
        r = kit.audit_verifier(verify, convention=convention)
        if check_passed and r.passed:
            return "" if empty else "correct"
        if pick == "first_case":
            return r.cases[0].nearest
        if pick == "first_failing":
            return next((c.nearest for c in r.cases if not c.passed), r.cases[0].nearest)
        return r.diagnosis if whole else r.diagnosis.split(":")[0]
    return name_bug


@pytest.mark.heavy
def test_the_reader_machinery_is_right_when_nothing_is_misread():
    assert ex.grade_name_bug(reader(), raise_on_failure=False, verbose=False).ok  # negative control


@pytest.mark.heavy
@pytest.mark.parametrize("variant, needles", [
    (dict(whole=True), ["return the name alone", "before the first ':'", "suspect A"]),
    (dict(empty=True), ["a report that passes has an empty diagnosis", "suspect B"]),
    (dict(check_passed=False, pick="first_case"), ["the kit passes this verifier", "read report.passed first",
                                                   "suspect B"]),
    (dict(pick="first_failing"), ["one case's 'nearest bug' column can differ", "suspect F",
                                  "got 'target_on_reject', expected 'tempting'"]),
    (dict(convention="probs"), ["your function raised TypeError", "convention='batched'", "suspect A"]),
])
def test_known_misreadings_are_named(variant, needles):
    failing(ex.grade_name_bug, reader(**variant), *needles)


@pytest.mark.heavy
def test_name_bug_structure():
    failing(ex.grade_name_bug, lambda verify: "correct", "never ran the verifier", "audit_verifier")
    failing(ex.grade_name_bug, lambda verify: verify(None, None, None), "your function raised AttributeError")

    def always_correct(verify):
        kit.audit_verifier(verify, convention="batched")
        return "correct"

    failing(ex.grade_name_bug, always_correct, "the kit fails this verifier", "report.passed is False", "suspect A")

    def report_object(verify):
        return kit.audit_verifier(verify, convention="batched")

    failing(ex.grade_name_bug, report_object, "must return a name (str), got VerifierReport")

    def made_up(verify):
        r = kit.audit_verifier(verify, convention="batched")
        return "correct" if r.passed else "broken"

    failing(ex.grade_name_bug, made_up, "'broken' is not the name of one of the kit's known verifiers")

    def stub(verify):
        raise NotImplementedError("exercise: write the body of name_bug")

    with pytest.raises(NotImplementedError):
        ex.grade_name_bug(stub, raise_on_failure=False, verbose=False)


def test_a_suspect_says_how_to_audit_it():
    c = kit.battery()[0]
    with pytest.raises(TypeError, match="convention='batched'"):
        audit.suspect("A")(c.p_rows, c.q_rows, torch.zeros(c.k, dtype=torch.long))
    with pytest.raises(ValueError, match="known: A, B, C, D, E, F"):
        audit.suspect("G")
