"""Notebook 02c's exercise: six verifiers nobody here wrote; run the kit on each and name its bug from the report.

The suspects are plain batched verifiers, each written the way a serving stack writes one (no spec, no switches):
p (n, k+1, V), q (n, k, V), proposals (n, k) and a generator in, (accepted (n,), tokens (n, k+1) padded with -1)
out, the kit's "batched" convention. The answers are what the kit's report says of each (the tests check that it
does); the grader itself runs no kit (exercises sit below it), it counts the calls and compares names.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..markov.registry import MODES
from ..sampling import residual_weights, sample_rows
from ..verification import accepted_prefix, commit_tokens
from ._report import Grade, Stop, call, run

__all__ = ["grade_name_bug", "SUSPECTS", "ANSWERS", "suspect"]


def _check(name: str, p: torch.Tensor, q: torch.Tensor, proposals: torch.Tensor) -> None:
    if p.dim() != 3 or q.dim() != 3 or proposals.dim() != 2:
        raise TypeError(f"suspect {name} verifies whole batches, p (n, k+1, V), q (n, k, V), proposals (n, k); got "
                        f"p of shape {tuple(p.shape)}: audit it with convention='batched'")


def _at(rows: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
    """(n, k) each row's probability of its proposal: rows (n, k, V), proposals (n, k)."""
    return rows.gather(-1, proposals[..., None]).squeeze(-1)


def _finish(p, proposals, accepted, fix_weights, generator, *, written=None):
    """Tokens (n, k+1): the first `written` proposals (the accepted ones unless given), then a draw from fix_weights
    (n, V) after a rejection, or from p_{k+1} after a full block."""
    k = proposals.shape[1]
    fix = sample_rows(fix_weights, generator)  # (n,)
    bonus = sample_rows(p[:, k], generator)  # (n,)
    return commit_tokens(proposals, accepted if written is None else written, torch.where(accepted < k, fix, bonus))


def suspect_a(p, q, proposals, generator=None):
    """Vendor A: accept while u < p/q, else draw from the residual."""
    _check("A", p, q, proposals)
    n, k = proposals.shape
    u = torch.rand(n, k, dtype=torch.float64, generator=generator)
    ratio = _at(p[:, 1:], proposals) / _at(q, proposals)  # (n, k)
    accepted = accepted_prefix(u < ratio)
    slot, rows = accepted.clamp(max=k - 1), torch.arange(n)
    return accepted, _finish(p, proposals, accepted, residual_weights(p[rows, slot + 1], q[rows, slot]), generator)


def suspect_b(p, q, proposals, generator=None):
    """Vendor B: the ratio test without a division, u q(y) < p(y)."""
    _check("B", p, q, proposals)
    n, k = proposals.shape
    u = torch.rand(n, k, dtype=torch.float64, generator=generator)
    accepted = accepted_prefix(u * _at(q, proposals) < _at(p[:, :k], proposals))
    slot, rows = accepted.clamp(max=k - 1), torch.arange(n)
    return accepted, _finish(p, proposals, accepted, residual_weights(p[rows, slot], q[rows, slot]), generator)


def suspect_c(p, q, proposals, generator=None):
    """Vendor C: on a rejection, draw again from the target, leaving out the token that was turned down."""
    _check("C", p, q, proposals)
    n, k = proposals.shape
    u = torch.rand(n, k, dtype=torch.float64, generator=generator)
    accepted = accepted_prefix(u < (_at(p[:, :k], proposals) / _at(q, proposals)).clamp(max=1))
    slot, rows = accepted.clamp(max=k - 1), torch.arange(n)
    target = p[rows, slot].clone()  # (n, V)
    target[rows, proposals[rows, slot]] = 0.0
    target = torch.where(target.sum(-1, keepdim=True) > 0, target, p[rows, slot])
    return accepted, _finish(p, proposals, accepted, target, generator)


def suspect_d(p, q, proposals, generator=None):
    """Vendor D: sample the target at each slot and keep the proposal when the two agree."""
    _check("D", p, q, proposals)
    n, k = proposals.shape
    sample = sample_rows(p[:, :k], generator)  # (n, k) a target draw per slot
    accepted = accepted_prefix(sample == proposals)
    slot, rows = accepted.clamp(max=k - 1), torch.arange(n)
    bonus = sample_rows(p[:, k], generator)  # (n,) after a full block
    nxt = torch.where(accepted < k, sample[rows, slot], bonus)  # the target draw that differed, or the bonus
    return accepted, commit_tokens(proposals, accepted, nxt)


def suspect_e(p, q, proposals, generator=None):
    """Vendor E: write the block out up to the first rejection, then the correction."""
    _check("E", p, q, proposals)
    n, k = proposals.shape
    u = torch.rand(n, k, dtype=torch.float64, generator=generator)
    accepted = accepted_prefix(u < _at(p[:, :k], proposals) / _at(q, proposals))
    slot, rows = accepted.clamp(max=k - 1), torch.arange(n)
    written = torch.where(accepted < k, accepted + 1, accepted)  # (n,) proposals written out, at most k
    return accepted, _finish(p, proposals, accepted, residual_weights(p[rows, slot], q[rows, slot]), generator,
                             written=written)


def suspect_f(p, q, proposals, generator=None):
    """Vendor F: keep a proposal as often as the target would have picked it, else sample the target."""
    _check("F", p, q, proposals)
    n, k = proposals.shape
    u = torch.rand(n, k, dtype=torch.float64, generator=generator)
    accepted = accepted_prefix(u < _at(p[:, :k], proposals))
    slot, rows = accepted.clamp(max=k - 1), torch.arange(n)
    return accepted, _finish(p, proposals, accepted, p[rows, slot], generator)


SUSPECTS: dict[str, Callable] = {"A": suspect_a, "B": suspect_b, "C": suspect_c, "D": suspect_d, "E": suspect_e,
                                 "F": suspect_f}
# what the kit's report says of each (tests/exercises/test_exercises_audit.py runs the kit to hold these)
ANSWERS = {"A": "off_by_one", "B": "correct", "C": "single_token_residual", "D": "correct", "E": "rejected_kept",
           "F": "tempting"}
_KNOWN = {*MODES, "tempting"}  # the names the kit's known_verifiers() uses: registry modes and the post's rule


def suspect(name: str) -> Callable:
    """The batched verifier of vendor `name` ("A" .. "F")."""
    if name not in SUSPECTS:
        raise ValueError(f"unknown suspect {name!r}; known: {', '.join(SUSPECTS)}")
    return SUSPECTS[name]


def _wrong(name: str, got: str) -> str:
    want = ANSWERS[name]
    where = f"(suspect {name}: got {got!r}, expected {want!r})"
    if ":" in got:
        return (f"return the name alone: a report's diagnosis reads 'name: what it does (reference)', and the name is "
                f"the text before the first ':' {where}")
    if got == "":
        return (f"an empty name: a report that passes has an empty diagnosis; a verifier the kit passes is "
                f"'correct' {where}")
    if want == "correct":
        return (f"the kit passes this verifier: every case is within its threshold. The per-case column 'nearest bug' "
                f"is filled even then (the nearest inexact law); read report.passed first {where}")
    if got == "correct":
        return f"the kit fails this verifier on some case: report.passed is False {where}"
    if got not in _KNOWN:
        return f"{got!r} is not the name of one of the kit's known verifiers (kit.known_verifiers()) {where}"
    return (f"the diagnosis names the known verifier nearest over all cases together; one case's 'nearest bug' "
            f"column can differ. Return the name in report.diagnosis {where}")


def grade_name_bug(name_bug, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 2c.1: name_bug(verify) -> "correct" if the kit passes the batched verifier, else the bug it names."""
    def body(fn, report):
        for name, verify in SUSPECTS.items():
            calls = []

            def counted(*args, verify=verify, calls=calls, **kwargs):
                calls.append(1)
                return verify(*args, **kwargs)

            got = call(fn, counted, on=f"suspect {name}")
            if not isinstance(got, str):
                raise Stop(f"name_bug must return a name (str), got {type(got).__name__} (suspect {name})")
            if not calls:
                raise Stop(f"your function never ran the verifier it was given: pass it to "
                           f"audit_verifier(verify, convention='batched') and read the report (suspect {name})")
            if got.strip() != ANSWERS[name]:
                raise Stop(_wrong(name, got.strip()))
        found = ", ".join(f"{n} {a}" for n, a in ANSWERS.items())
        report.note(f"named all {len(SUSPECTS)} suspects as the kit's reports do: {found}")
    return run("name_bug", body, name_bug, raise_on_failure=raise_on_failure, verbose=verbose)
