"""Every workshop checker passes the reference solutions and diagnoses deliberately wrong ones in words."""
import math
import re
from pathlib import Path

import nbformat
import pytest
import torch
from exercise_support import failing, solutions

import specdec_lib as sd
from specdec_lib import exercises as ex
from specdec_lib.exercises import block_decoder as ex_block

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHECK_CALL = re.compile(r"sd\.exercises\.(grade_\w+)\((\w+)\)")


def passing(checker, fn):
    report = checker(fn, raise_on_failure=False, verbose=False)
    assert report.ok, str(report)
    return report


# ---- the solutions, as the notebooks hold them --------------------------------------------------------------

def solution_namespaces():
    """{notebook: namespace after running its solution cells in order with torch and sd preloaded}."""
    out = {}
    for path in sorted(NOTEBOOKS.glob("0*_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        ns = solutions(path)
        checks = [m.groups() for c in nb.cells if "exercise-check" in c.metadata.get("tags", [])
                  for m in CHECK_CALL.finditer(c.source)]
        if checks:  # the notebooks with exercises
            out[path.name] = (ns, checks)
    return out


SOLUTIONS = solution_namespaces()
NS = {name: fn for ns, _ in SOLUTIONS.values() for name, fn in ns.items()
      if callable(fn) and name not in ("torch", "sd")}


def test_every_notebook_that_teaches_a_skill_has_checked_exercises():
    assert set(SOLUTIONS) == {"01_distribution.ipynb", "02_block_decoder.ipynb", "02b_field_guide.ipynb",
                              "02c_audit.ipynb", "02d_sampling_surface.ipynb", "03_token_accounting.ipynb",
                              "04_cost_model.ipynb", "05_measure_it.ipynb", "06_many_drafts_and_trees.ipynb",
                              "07_bending_the_rules.ipynb", "08_optimal_verification.ipynb",
                              "09_drafts_from_the_target.ipynb"}
    for name, (ns, checks) in SOLUTIONS.items():
        assert 1 <= len(checks) <= 4, name
        for checker, fn in checks:
            assert fn in ns, f"{name}: the check cell names {fn}, which no solution cell defines"
            assert checker in ex.__all__


@pytest.mark.heavy
@pytest.mark.parametrize("notebook", sorted(SOLUTIONS))
def test_solution_cells_pass_their_checkers(notebook, capsys):
    ns, checks = SOLUTIONS[notebook]
    for checker, fn in checks:
        report = getattr(ex, checker)(ns[fn])  # verbose, raises on failure: as the check cell runs it
        assert report.ok
        assert "all checks passed" in capsys.readouterr().out


def test_every_checker_is_used_by_a_notebook():
    used = {c for _, checks in SOLUTIONS.values() for c, _ in checks}
    assert used == {name for name in ex.__all__ if name.startswith("grade_")}


# ---- the report and the exception contract ------------------------------------------------------------------

def test_report_prints_and_learner_exceptions_are_reported():
    def broken(p, q):
        raise ValueError("shapes do not match")

    report = failing(ex.grade_residual, broken, "your function raised ValueError: shapes do not match")
    with pytest.raises(AssertionError, match="shapes do not match"):  # raise_on_failure defaults to True
        ex.grade_residual(broken, verbose=False)
    assert str(report).startswith("residual: not right yet\n  - ")
    assert "ok=False" in repr(report)


def test_not_implemented_error_passes_through_unchanged():
    def stub(p, q):
        raise NotImplementedError("exercise: write the body of residual")

    with pytest.raises(NotImplementedError, match="write the body of residual"):
        ex.grade_residual(stub, raise_on_failure=False, verbose=False)


def test_not_a_function_and_unreadable_output():
    failing(ex.grade_residual, residual_ref(), "pass the function itself")
    failing(ex.grade_residual, lambda p, q: [0.5, 0.5], "must return a torch.Tensor")


def test_verbose_prints_the_report(capsys):
    ex.grade_expected_tokens(lambda alpha: 1 + sum(alpha), raise_on_failure=False)
    out = capsys.readouterr().out
    assert out.startswith("expected_tokens: not right yet") and "k * alpha" in out


def residual_ref():
    return NS["residual"](torch.tensor([0.5, 0.5]), torch.tensor([0.2, 0.8]))


# ---- Act I ----------------------------------------------------------------------------------------------------

def test_residual_diagnoses():
    def clamp_only(p, q):
        return torch.clamp(p - q, min=0)

    def softmax(p, q):
        return torch.softmax(torch.clamp(p - q, min=0), -1)

    def eager(p, q):
        r = torch.clamp(p - q, min=0)
        return r / r.sum()

    def in_place(p, q):
        p -= torch.minimum(p, q)
        return p / p.sum()

    failing(ex.grade_residual, clamp_only, "not normalised")
    failing(ex.grade_residual, softmax, "softmax", "PR #28508")
    failing(ex.grade_residual, lambda p, q: p, "you returned p")
    failing(ex.grade_residual, lambda p, q: (p - q).abs() / (p - q).abs().sum(), "|p - q|")
    failing(ex.grade_residual, lambda p, q: NS["residual"](q, p), "swapped")
    failing(ex.grade_residual, eager, "NaN at p == q", "#5")
    failing(ex.grade_residual, in_place, "in place")


def test_acceptance_probability_diagnoses():
    def no_clamp(lp, lq):
        return torch.exp(lp - lq)

    def naive(lp, lq):
        return torch.clamp(torch.exp(lp) / torch.exp(lq), max=1.0)

    def where_equal(lp, lq):
        return torch.where(lp >= lq, 0.9999999 * torch.ones_like(lp), torch.exp(lp - lq))

    def float32_inside(lp, lq):
        return torch.clamp(lp.float().exp() / lq.float().exp(), max=1.0).to(lp.dtype)

    failing(ex.grade_acceptance_probability, no_clamp, "above 1")
    failing(ex.grade_acceptance_probability, naive, "NaN for log p = -1000", "exp(min(0, log p - log q))")
    failing(ex.grade_acceptance_probability, where_equal, "exactly 1.0")
    failing(ex.grade_acceptance_probability, float32_inside, "underflows")


def test_speculative_sample_diagnoses():
    res = NS["residual"]

    def make(fallback):
        def sampler(p, q, n, generator):
            x = torch.multinomial(q, n, replacement=True, generator=generator)
            keep = torch.rand(n, dtype=torch.float64, generator=generator) < (p[x] / q[x]).clamp(max=1).double()
            return torch.where(keep, x, torch.multinomial(fallback(p, q), n, replacement=True, generator=generator))
        return sampler

    def global_rng(p, q, n, generator):
        return make(res)(p, q, n, None)

    failing(ex.grade_speculative_sample, make(lambda p, q: p), "draws from p instead of the residual",
            "noise bound")
    failing(ex.grade_speculative_sample, lambda p, q, n, g: torch.multinomial(q, n, replacement=True, generator=g),
            "every proposal is kept")
    failing(ex.grade_speculative_sample, make(lambda p, q: torch.softmax(torch.clamp(p - q, min=0), -1)),
            "softmax([p - q]_+)")
    failing(ex.grade_speculative_sample, global_rng, "seeded alike")
    failing(ex.grade_speculative_sample, lambda p, q, n, g: torch.zeros(n), "integer ids")
    eager = make(lambda p, q: torch.clamp(p - q, min=0) / torch.clamp(p - q, min=0).sum())
    failing(ex.grade_speculative_sample, eager, "p == q", "raised RuntimeError")


# ---- Act II ---------------------------------------------------------------------------------------------------

def make_verifier(*, fix="residual", bonus_offset=0, keep_rejected=False, deterministic=False, stop=True):
    """verify_block variants; each argument switches on one mistake."""
    def verify(p_rows, q_rows, proposals, generator):
        k, out = len(proposals), []
        for j in range(k):
            y = int(proposals[j])
            a = min(1.0, (p_rows[j, y] / q_rows[j, y]).item())
            a = float(a >= 1.0) if deterministic else a
            if torch.rand((), dtype=torch.float64, generator=generator).item() >= a:
                w = sd.residual(p_rows[j], q_rows[j]) if fix == "residual" else p_rows[j]
                z = torch.multinomial(w, 1, generator=generator).item()
                if stop:
                    return j, out + ([y] if keep_rejected else []) + [z]
                continue
            out.append(y)
        z = torch.multinomial(p_rows[k - bonus_offset], 1, generator=generator).item()
        return len(out), out + [z]
    return verify


@pytest.mark.heavy
def test_verify_block_diagnoses():
    failing(ex.grade_verify_block, make_verifier(fix="target"), "Drawing from p_1 instead of the residual")
    failing(ex.grade_verify_block, make_verifier(bonus_offset=1), "bonus after a full block comes from row 2",
            "the accepted counts are right")
    failing(ex.grade_verify_block, make_verifier(keep_rejected=True), "exactly one target token")
    failing(ex.grade_verify_block, make_verifier(stop=False), "y_1")
    failing(ex.grade_verify_block, make_verifier(deterministic=True), "only where p >= q",
            "the accepted counts are off too")
    failing(ex.grade_verify_block, lambda p, q, y, g: make_verifier()(p, q, y, None), "seeded alike")
    failing(ex.grade_verify_block, lambda p, q, y, g: (0, [0]), "with q == p at every slot")
    failing(ex.grade_verify_block, lambda p, q, y, g: [0, [0]], "must return a pair")


@pytest.mark.heavy
def test_smallest_catching_m_diagnoses():
    ref = NS["smallest_catching_m"]

    def with_threshold(threshold, plain_target=False, ignore_k=False):
        def fn(mode, k=2):
            tv, target = ex_block._catch_tv(mode, 2 if ignore_k else k)
            if plain_target:
                ch = sd.reference_chain()
                law = sd.decoder_law(ch.P, ch.Q, start=0, horizon=3, k=k, mode=mode, Q_bad=ch.Q_bad)
                target = sd.sequence_law(ch.P, start=0, horizon=3)
                tv = 0.5 * (law - target).abs().sum().item()
            return ex_block._first_m(target, tv, threshold)
        return fn

    failing(ex.grade_smallest_catching_m, with_threshold(sd.tv_noise_mean), "tv_noise_mean", "tv_noise_bound")
    failing(ex.grade_smallest_catching_m, with_threshold(sd.tv_noise_bound, plain_target=True), "mode.target(P)")
    failing(ex.grade_smallest_catching_m, with_threshold(sd.tv_noise_bound, ignore_k=True), "pass k on")
    failing(ex.grade_smallest_catching_m, lambda mode, k=2: (ref(mode, k) or 2) - 1, "not yet below the TV")
    failing(ex.grade_smallest_catching_m, lambda mode, k=2: (ref(mode, k) or 0) + 1, "a smaller M already")
    failing(ex.grade_smallest_catching_m, lambda mode, k=2: ref(mode, k) or 10**8, "this decoder is exact")


# ---- Act III --------------------------------------------------------------------------------------------------

def test_expected_tokens_diagnoses():
    failing(ex.grade_expected_tokens, lambda a: 1 + sum(a), "k * alpha", "prefix products")
    failing(ex.grade_expected_tokens, lambda a: NS["expected_tokens"](a) - 1, "off by one", "E[A]")
    failing(ex.grade_expected_tokens, lambda a: 1 + len(a) * a[0], "alpha = [0.9, 0.8, 0.7]")

    def no_empty(a):
        if not a:
            raise IndexError("list index out of range")
        return NS["expected_tokens"](a)

    failing(ex.grade_expected_tokens, no_empty, "raised IndexError", "k = 0")
    failing(ex.grade_expected_tokens, lambda a: NS["expected_tokens"](a) if a else 0.0, "must give 1.0")


def test_conditional_acceptance_diagnoses():
    def population(f):
        return f.double().mean(0).tolist()

    def nan_unreached(f):
        alive = f.long().cumprod(1).sum(0).double()
        reach = torch.cat([torch.tensor([float(len(f))]), alive[:-1]])
        return (alive / reach).tolist()

    def previous_only(f):
        f = f.double()
        return [f[:, 0].mean().item()] + [(f[:, j] * f[:, j - 1]).sum().item() / f[:, j - 1].sum().item()
                                          for j in range(1, f.shape[1])]

    failing(ex.grade_conditional_acceptance, population, "population rate")
    failing(ex.grade_conditional_acceptance, lambda f: sd.survivor_statistics(f).reach, "P(A >= j)")
    failing(ex.grade_conditional_acceptance, nan_unreached, "NaN at a position no block reached")
    failing(ex.grade_conditional_acceptance, previous_only, "flag j-1 alone")
    failing(ex.grade_conditional_acceptance, lambda f: [0.5], "one rate per position")


# ---- Act IV ---------------------------------------------------------------------------------------------------

def test_speedup_diagnoses():
    e_n = NS["expected_tokens"]

    def at(fn):
        return lambda alpha, c_d, k, c_v: 1.0 if k == 0 else fn(alpha, c_d, k, c_v)

    failing(ex.grade_speedup, at(lambda a, c_d, k, c_v: (1 + k * a) / (k * c_d + c_v(k))), "1 + k alpha")
    failing(ex.grade_speedup, at(lambda a, c_d, k, c_v: (e_n([a] * k) - 1) / (k * c_d + c_v(k))), "E[A]")
    failing(ex.grade_speedup, at(lambda a, c_d, k, c_v: e_n([a] * k) / (k * c_d + c_v(1))), "evaluate it at k")
    failing(ex.grade_speedup, at(lambda a, c_d, k, c_v: e_n([a] * k) / (c_d + c_v(k))), "k c_d")
    failing(ex.grade_speedup, lambda a, c_d, k, c_v: e_n([a] * k) / (k * c_d + c_v(k)), "S(0) = 1")
    failing(ex.grade_speedup, lambda a, c_d, k, c_v: e_n([a] * k) / (k * c_d + c_v), "raised TypeError")


def test_best_k_diagnoses():
    s = NS["speedup"]

    def search(ks, *, ties_to_larger=False, c_v_at=None):
        def fn(alpha, c_d, c_v, *, k_max):
            cv = (lambda k: c_v(c_v_at)) if c_v_at is not None else c_v
            vals = {k: s(alpha, c_d, k, cv) for k in ks(k_max)}
            best = max(vals.values())
            hits = [k for k, v in vals.items() if v == best]
            return hits[-1] if ties_to_larger else hits[0]
        return fn

    failing(ex.grade_best_k, search(lambda m: range(1, m + 1)), "k = 0 (switch speculation off)")
    failing(ex.grade_best_k, search(lambda m: range(m)), "range(k_max + 1)")
    failing(ex.grade_best_k, search(lambda m: range(m + 1), ties_to_larger=True), "ties")
    failing(ex.grade_best_k, search(lambda m: range(m + 1), c_v_at=1), "evaluate c_v(k) for each candidate k")
    failing(ex.grade_best_k, lambda *a, **kw: 3.0, "as an int")


def test_solution_namespace_values_match_the_markdown():
    """The expected outputs printed in the exercises' markdown."""
    assert NS["residual"](torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.3, 0.2, 0.5])).tolist() == \
        pytest.approx([2 / 3, 1 / 3, 0.0])
    lp = torch.tensor([-1000.0, -1001.0, -2.0, -math.inf], dtype=torch.float64)
    lq = torch.tensor([-1001.0, -1000.0, -2.0, -3.0], dtype=torch.float64)
    assert NS["acceptance_probability"](lp, lq).tolist() == pytest.approx([1.0, math.exp(-1), 1.0, 0.0])
    assert NS["smallest_catching_m"]("off_by_one") == 38 and NS["smallest_catching_m"]("stale_draft_cache") is None
    assert NS["expected_tokens"]([0.9, 0.8, 0.7]) == pytest.approx(3.124) and NS["expected_tokens"]([]) == 1.0
    flags = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    assert NS["conditional_acceptance"](flags) == pytest.approx([0.75, 2 / 3, 0.5])
    assert NS["speedup"](0.8, 0.15, 8, lambda k: 1 + 0.05 * k) == pytest.approx(1.66497, abs=1e-5)
    assert NS["best_k"](0.9, 0.15, lambda k: 1 + 0.05 * k, k_max=32) == 7
    assert NS["best_k"](0.5, 0.15, lambda k: 1 + 0.5 * k, k_max=32) == 0


@pytest.mark.heavy
def test_find_bug_diagnoses():
    def nearest(order=lambda laws: list(laws), pick=min, exact=False):
        def fn(freqs, laws):
            if exact:  # an exact match only: sampled frequencies never have one
                return next((name for name, law in laws.items() if torch.equal(law, freqs)), None)
            tv = {name: sd.total_variation(freqs, laws[name]) for name in order(laws)}
            best = pick(tv.values())
            return next(name for name, d in tv.items() if abs(d - best) <= 1e-9)  # equal laws: the first name
        return fn

    passing(ex.grade_find_bug, nearest())
    failing(ex.grade_find_bug, nearest(exact=True), "sampled frequencies never equal a law exactly")
    failing(ex.grade_find_bug, nearest(pick=max), "is the farthest law")
    failing(ex.grade_find_bug, nearest(order=lambda laws: list(laws)[::-1]), "have the same law", "correct")
    failing(ex.grade_find_bug, lambda freqs, laws: "correct", "the nearest law is off_by_one's")
    failing(ex.grade_find_bug, lambda freqs, laws: "bug", "return one of the names in laws")


@pytest.mark.heavy
def test_find_bug_cases_are_separable():
    # every case's own law is its unique nearest registered law, up to the group of laws equal to the target's
    from specdec_lib.exercises import field_guide as fg
    laws = fg.registry_laws()
    exact = {m.name for m in sd.failure_modes() if m.exact}
    for mode, _ in fg.CASES:
        assert fg.diagnosis(laws[mode], laws) == ("correct" if mode in exact else mode)
