"""Act VI (the best exact verifier) checkers: the solutions pass, and each known mistake fails with its name."""
import pytest
import torch
from exercise_support import failing, solutions

from specdec_lib import exercises as ex
from specdec_lib.block_verification import block_weights
from specdec_lib.exercises import optimal_verification as ov

NS = solutions("08_optimal_verification.ipynb")


@pytest.mark.heavy
def test_the_solutions_pass(capsys):
    for checker, fn in ((ex.grade_block_h, NS["block_h"]), (ex.grade_needs, NS["needs"])):
        assert checker(fn).ok  # verbose and raising, as the check cell runs it
        assert "all checks passed" in capsys.readouterr().out
    assert {"grade_block_h", "grade_needs"} <= set(ex.__all__)


# ---- Exercise 8.1: block_h -------------------------------------------------------------------------------------

def weights(*, running="capped", z="weighted", rows="next", last="p_k", zero_over_zero=1.0, naive=False):
    """A block_h with one knob turned, written the way a learner would (independently of the checker's variants)."""
    def block_h(p_rows, q_rows, proposals):
        k = proposals.shape[0]
        at = torch.arange(k)
        ratio = (p_rows[at, proposals] / q_rows[at, proposals]).tolist()
        p, token = [1.0], [1.0]
        for r in ratio:
            p.append(min(1.0, p[-1] * r) if running == "capped" else p[-1] * r)
            token.append(token[-1] * min(1.0, r))
        if running == "token":
            p = token
        if naive:
            return torch.tensor(p[1:], dtype=torch.float64)
        h = []
        for i in range(1, k):
            row = i if rows == "next" else i - 1
            weight = p[i] if z == "weighted" else 1.0
            zi = (weight * p_rows[row] - q_rows[row]).clamp(min=0).sum().item()
            den = zi + 1 - p[i]
            h.append(zi / den if den > 0 else zero_over_zero)
        h.append(p[k] if last == "p_k" else 1.0)
        return torch.tensor(h, dtype=torch.float64)
    return block_h


def test_the_weights_machinery_is_right_when_no_knob_is_turned():
    assert ex.grade_block_h(weights(), raise_on_failure=False, verbose=False).ok  # negative control
    assert ex.grade_block_h(lambda p, q, x: weights()(p, q, x).float(), raise_on_failure=False, verbose=False).ok
    # where Z_i + 1 - pi_i = 0 a later row passes for sure: h_i does not matter (vllm-ascend's fix #7808 writes 0)
    assert ex.grade_block_h(weights(zero_over_zero=0.0), raise_on_failure=False, verbose=False).ok


def test_the_cases_hold_what_the_notebook_says():
    toy = {case[0]: block_weights(*case[1:]).h.tolist() for case in ov.h_cases()[:4]}
    assert list(toy.values()) == [[0.0, 0.25], [1.0, 0.5], [0.0, 1.0], [1.0, 1.0]]  # the paper's toy, by hand
    same = next(c for c in ov.h_cases() if c[0].startswith("P = Q"))
    assert block_weights(*same[1:]).h.tolist() == [1.0, 1.0, 1.0]  # 0/0 read as 1
    assert ov.free_rows(*same[1:]).tolist() == [True, True, False]  # h_k = pi_k always matters
    assert sum(int(ov.free_rows(*c[1:]).any()) for c in ov.h_cases()) == 1  # elsewhere every h_i is checked
    for name in ov.H_MISTAKES:  # every recognised mistake differs from h on some case: it can be caught
        assert any(not torch.allclose(ov.h_mistake(name, *c[1:]), block_weights(*c[1:]).h, atol=ov.TOL, rtol=0)
                   for c in ov.h_cases()), name


@pytest.mark.parametrize("variant, needles", [
    (dict(naive=True), ["h_i = pi_i", "block_verification_naive"]),
    (dict(z="unweighted"), ["Z_i without the pi_i weight"]),
    (dict(rows="judging"), ["Z_i from the rows that judged X_i"]),
    (dict(running="token"), ["the token rule's chance of passing rows 1..i"]),
    (dict(running="uncapped"), ["the running pi_i without its cap"]),
    (dict(zero_over_zero=float("nan")), ["h is not finite", "the rule sets h_i = 1", "any value in [0, 1]"]),
    (dict(zero_over_zero=2.0), ["P = Q at every row", "got [2, 2, 1], expected [1, 1, 1]"]),
    (dict(last="one"), ["got [0, 1], expected [0, 0.25]", "h_k = pi_k"]),  # unrecognised: the rule, in words
])
def test_known_mistakes_are_named(variant, needles):
    failing(ex.grade_block_h, weights(**variant), *needles)


def test_block_h_structure():
    failing(ex.grade_block_h, lambda p, q, x: [1.0] * x.shape[0], "must return a torch.Tensor of shape (2,), got list")
    failing(ex.grade_block_h, lambda p, q, x: block_weights(p, q, x).p, "got (3,) (h_1 .. h_k: h_0 = 1 is implicit")

    def overrun(p_rows, q_rows, proposals):  # h_k computed like the others: there is no draft row k + 1
        return torch.stack([q_rows[i].sum() for i in range(proposals.shape[0] + 1)])

    failing(ex.grade_block_h, overrun, "your function raised IndexError", "h_k has no draft row after it")

    def stub(p_rows, q_rows, proposals):
        raise NotImplementedError("exercise: write the body of block_h")

    with pytest.raises(NotImplementedError):
        ex.grade_block_h(stub, raise_on_failure=False, verbose=False)


# ---- Exercise 8.2: needs ---------------------------------------------------------------------------------------

@pytest.mark.heavy
def test_the_map_holds_what_the_notebook_says():
    fits = [ov.need_fit(i) for i in range(len(ov.NEED_CASES))]
    assert [f.best for f in fits] == ["block verification", "token rule", "token rule", "token rule",
                                      "block verification", "token rule", "multi-draft", "multi-draft"]
    for d, f in zip(ov.NEED_CASES, fits):
        token, block = f.tokens["token rule"], f.tokens["block verification"]
        if d.num_drafts > 1:  # more drafts keep more
            assert f.tokens["multi-draft"] > max(token, block) + 0.1, d.name
        elif f.best == "token rule":  # a tie, exact to rounding
            assert abs(block - token) < 1e-12, d.name
        else:  # a gain well above rounding
            assert block > token + 1e-3, d.name


def rule_of_thumb(*, drafts=True, determinism=True, k_one=True, greedy=True, label=None):
    """A needs with one consideration left out (or every answer the same label)."""
    def needs(drafter):
        if label is not None:
            return label
        if drafts and drafter.num_drafts > 1:
            return "multi-draft"
        if ((determinism and drafter.draft == "deterministic") or (k_one and drafter.k == 1)
                or (greedy and drafter.temperature == 0)):
            return "token rule"
        return "block verification"
    return needs


@pytest.mark.heavy
def test_the_rule_machinery_is_right_when_nothing_is_left_out():
    assert ex.grade_needs(rule_of_thumb(), raise_on_failure=False, verbose=False).ok  # negative control


@pytest.mark.heavy
@pytest.mark.parametrize("variant, needles", [
    (dict(determinism=False), ["a deterministic draft gains nothing from block verification",
                               "both keep E[N] = 1.5392 exactly", "is already optimal"]),
    (dict(k_one=False), ["at k = 1 block verification is the token rule", "both keep E[N] = 1.7906"]),
    (dict(greedy=False), ["under greedy decoding the target is one-hot", "both keep E[N] = 1.0000"]),
    (dict(drafts=False), ["with 3 drafts at a position", "keeps E[N] = 1.9714 against 1.7906"]),
    (dict(label="token rule"), ["block verification keeps E[N] = 3.7466 against the token rule's 3.5293",
                                "(+6.2%)"]),
    (dict(label="multi-draft"), ["one draft per position: a multi-draft rule with one draft is the token rule"]),
])
def test_known_mistakes_are_named_with_the_computed_numbers(variant, needles):
    failing(ex.grade_needs, rule_of_thumb(**variant), *needles)


@pytest.mark.heavy
def test_needs_structure():
    failing(ex.grade_needs, rule_of_thumb(label="block"), "needs must return one of 'token rule', 'block "
            "verification', 'multi-draft', got 'block'")
    failing(ex.grade_needs, lambda *, drafter: "token rule", "your function raised TypeError")

    def stub(drafter):
        raise NotImplementedError("exercise: write the body of needs")

    with pytest.raises(NotImplementedError):
        ex.grade_needs(stub, raise_on_failure=False, verbose=False)
