"""Notebook 02d's checker (exercise 2d.1, penalties under speculation): the solution passes, every recognised
mistake fails with its name, and the cases can tell each mistake from the right rows."""
import pytest
import torch
from exercise_support import failing, solutions

from specdec_lib import exercises as ex
from specdec_lib.exercises import sampling_surface as ss
from specdec_lib.surface import Settings, next_probs

NS = solutions("02d_sampling_surface.ipynb")


def test_the_solution_passes(capsys):
    assert ex.grade_penalised_rows(NS["penalised_rows"]).ok  # verbose and raising, as the check cell runs it
    assert "all checks passed" in capsys.readouterr().out
    assert "grade_penalised_rows" in ex.__all__


def test_the_cases_hold_what_the_grader_says():
    for _, prompt, generated, drafted, s in ss.CASES:  # the grader's reference rows are next_probs at each prefix
        raw = torch.stack([ss.table_model(prompt + generated + drafted[:j]) for j in range(len(drafted) + 1)])
        want = torch.stack([next_probs(ss.table_model, prompt, generated + drafted[:j], s)
                            for j in range(len(drafted) + 1)])
        assert (torch.softmax(NS["penalised_rows"](raw, prompt, generated, drafted, s), -1) - want).abs().max() < 1e-12
    for name in ss.PENALTY_MISTAKES:  # each recognised mistake moves some row of some case beyond the tolerance
        assert any((torch.softmax(ss.penalty_mistake(name, torch.stack(
            [ss.table_model(c[1] + c[2] + c[3][:j]) for j in range(len(c[3]) + 1)]), *c[1:]), -1)
            - torch.stack([next_probs(ss.table_model, c[1], c[2] + c[3][:j], c[4]) for j in range(len(c[3]) + 1)])
        ).abs().max() > 10 * ss.TOL for c in ss.CASES), name
    with pytest.raises(ValueError, match="known: round_start"):
        ss.penalty_mistake("typo", torch.zeros(2, 5), (0,), (), (1,), Settings())


def rows_with(*, history="per_position", rows="all", prompt_in="repetition", sign=True, once=True,
              presence="indicator"):
    """A penalised_rows with one knob turned, written as a learner would (independently of the grader's mistakes)."""
    def penalised_rows(logits_rows, prompt, generated, drafted, settings):
        out = logits_rows.clone()
        k, V = len(drafted), out.shape[1]
        r, f, pres = settings.repetition_penalty, settings.frequency_penalty, settings.presence_penalty
        for j in range(k + 1):
            if (rows == "bonus" and j < k) or (rows == "drafts" and j == k) or rows == "none":
                continue  # this row left raw
            n = {"per_position": j, "round_start": 0, "block_end": k, "own_token": j + 1}[history]
            if rows == "bonus":
                n = 0  # vLLM before PR #19482: the bonus row with the committed history only
            before = list(generated) + list(drafted[:n])
            for t in (set if once else list)((list(prompt) if prompt_in != "none" else []) + before):
                x = out[j, t].item()
                out[j, t] = x / r if (x > 0 or not sign) else x * r
            counted = before + (list(prompt) if prompt_in == "all" else [])
            for t in range(V):
                c = counted.count(t)
                out[j, t] -= f * c + pres * (c if presence == "count" else float(c > 0))
        return out
    return penalised_rows


def test_the_rows_machinery_is_right_when_no_knob_is_turned():
    assert ex.grade_penalised_rows(rows_with(), raise_on_failure=False, verbose=False).ok  # negative control
    half = rows_with()
    assert ex.grade_penalised_rows(lambda *a: half(*a).float(), raise_on_failure=False, verbose=False).ok
    shifted = rows_with()  # a constant added to a row changes no probability
    assert ex.grade_penalised_rows(lambda *a: shifted(*a) + 3.0, raise_on_failure=False, verbose=False).ok


@pytest.mark.parametrize("variant, needles", [
    (dict(history="round_start"), ["every row penalised with the state at the round's start", "row 1"]),
    (dict(history="block_end"), ["the state after the whole block", "row 0"]),
    (dict(history="own_token"), ["row j counts drafted[:j + 1]"]),
    (dict(rows="bonus"), ["penalties only on the bonus row", "every residual drawn from them"]),
    (dict(rows="none"), ["no penalty on any row"]),
    (dict(rows="drafts"), ["the bonus row (row k, after the last draft) left unpenalised", "row 3"]),
    (dict(prompt_in="all"), ["the frequency and presence penalties counted the prompt"]),
    (dict(prompt_in="none"), ["the repetition penalty ignored the prompt"]),
    (dict(sign=False), ["divided every logit by r", "a negative logit must be multiplied by r"]),
    (dict(once=False), ["once per occurrence"]),
    (dict(presence="count"), ["the presence penalty multiplied by the count"]),
])
def test_known_mistakes_are_named(variant, needles):
    failing(ex.grade_penalised_rows, rows_with(**variant), *needles)


@pytest.mark.parametrize("mistake, variant, knobs", [
    ("round_start", "penalties_last_commit", dict(history="round_start")),
    ("bonus_only", "sampler_on_bonus_only", dict(rows="bonus")),
    ("ignored", "penalties_ignored", dict(rows="none")),
])
def test_a_shipped_shortcut_cites_the_registry(mistake, variant, knobs):
    # the field guide's entry for the bug, its reference and its exact TV on the checker's chain (> 0: it matters)
    story = ss.shipped(mistake)
    assert f"the field guide's {variant}:" in story and " @ " in story and "its output law is TV" in story
    failing(ex.grade_penalised_rows, rows_with(**knobs), story)
    assert ss.shipped("sign") == "" and ss.shipped("no such mistake") == ""


def test_penalised_rows_structure():
    failing(ex.grade_penalised_rows, lambda rows, p, g, d, s: rows.tolist(),
            "must return a torch.Tensor of shape (4, 5)")
    failing(ex.grade_penalised_rows, lambda rows, p, g, d, s: rows[:-1], "got (3, 5)", "k + 1 rows")
    failing(ex.grade_penalised_rows, lambda rows, p, g, d, s: rows * float("nan"), "without NaN")
    failing(ex.grade_penalised_rows, lambda rows, p, g, d, s: rows.flip(-1), "row 0 gives p", "Row j follows prompt")
    failing(ex.grade_penalised_rows, lambda rows, p, g, d: rows, "your function raised TypeError")

    def stub(logits_rows, prompt, generated, drafted, settings):
        raise NotImplementedError("exercise: write the body of penalised_rows")

    with pytest.raises(NotImplementedError):
        ex.grade_penalised_rows(stub, raise_on_failure=False, verbose=False)
