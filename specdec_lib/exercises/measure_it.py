"""Lab exercises: fit alpha from E[N]; predict S for a draft before timing it, against the recorded clock.

The recorded run is the lab's `make measure` JSON (specdec_lib/data/measure_reference.json), read
here as plain data: the exercises layer does not import the lab or the presentation.
"""
from __future__ import annotations

from ..accounting import alpha_from_tokens, expected_accepted, expected_tokens
from ..cost import speedup
from ..lab.recordings import recorded
from ._report import Grade, Stop, as_number, call, run

__all__ = ["grade_fit_alpha", "grade_predict_speedup"]

TOL_ALPHA = 1e-6  # a root finder's tolerance on alpha; bisection reaches it in 20 halvings


def grade_fit_alpha(fit_alpha_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 5.1: fit_alpha(e_n, k) -> the constant alpha whose E[N(k)] = (1 - alpha^(k+1)) / (1 - alpha) is e_n."""
    def body(fn, report):
        cases = [(a, k) for k in (4, 8, 1) for a in (0.3, 0.677, 0.9)] + [(0.0, 4), (1.0, 4)]
        clock = [(e, k, t.draft) for t in recorded("measure").tables for k, e in zip(t.ks, t.e_n)]
        for e_n, k, on in [(expected_tokens(a, k), k, f"alpha = {a}") for a, k in cases] + clock:
            where = f"e_n = {e_n:.4f}, k = {k} ({on})"
            got = as_number(call(fn, e_n, k, on=where), "fit_alpha", where)
            want = alpha_from_tokens(e_n, k)
            if abs(got - want) <= TOL_ALPHA:
                continue
            msg = f"{where}: got alpha = {got:.6f}, expected {want:.6f}"
            if not 0.0 <= got <= 1.0:
                raise Stop(f"alpha is a probability: it lies in [0, 1] ({msg})")
            if abs(got - (e_n - 1)) <= TOL_ALPHA:
                raise Stop(f"E[N] = 1 + alpha holds at k = 1 only; at k = {k} solve "
                           f"(1 - alpha^(k+1)) / (1 - alpha) = e_n ({msg})")
            if abs(got - (e_n - 1) / k) <= TOL_ALPHA:
                raise Stop(f"that inverts E[N] = 1 + k alpha, which forgets that position j is reached with "
                           f"probability alpha^(j-1) ({msg})")
            if abs(expected_accepted(got, k) - e_n) <= 1e-6:
                raise Stop(f"that fits E[A] = e_n; a round retires E[N] = 1 + E[A] tokens ({msg})")
            raise Stop(f"{msg}; E[N({k})] at your alpha is {expected_tokens(min(max(got, 0.0), 1.0), k):.4f}")
        report.note(f"alpha right to {TOL_ALPHA:g} on {len(cases)} constructed settings (alpha = 0 and 1 included) "
                    f"and the {len(clock)} recorded E[N] of every draft and k")
    return run("fit_alpha", body, fit_alpha_fn, raise_on_failure=raise_on_failure, verbose=verbose)


def grade_predict_speedup(predict_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 5.2: predict_speedup(alpha, c_d, c_v, k) -> E[N(k)] / (k c_d + c_v), then against the recorded clock."""
    def body(fn, report):
        for alpha, c_d, c_v, k in [(0.8, 0.15, 1.6, 8), (0.54, 0.013, 1.7, 4), (0.65, 0.35, 1.48, 4),
                                   (0.9, 0.4, 2.0, 1)]:
            where = f"alpha = {alpha}, c_d = {c_d}, c_v = {c_v}, k = {k}"
            got = as_number(call(fn, alpha, c_d, c_v, k, on=where), "predict_speedup", where)
            want = speedup(alpha, c_d=c_d, k=k, c_v=c_v)
            if abs(got - want) <= 1e-9:
                continue
            msg = f"{where}: got {got:.4f}, expected {want:.4f}"
            e_n, cost = expected_tokens(alpha, k), k * c_d + c_v
            for wrong, text in [((1 + k * alpha) / cost, "the numerator is 1 + k alpha; use E[N(k)]"),
                                (expected_accepted(alpha, k) / cost, "the numerator is E[A]; a round retires E[N]"),
                                (e_n / (c_d + c_v), "the draft cost is k c_d: k sequential draft steps"),
                                (cost / e_n, "that is the cost per token; S is tokens per round over its cost"),
                                (e_n / (k * c_d), "the round also pays c_v: one target pass over k + 1 positions")]:
                if abs(got - wrong) <= 1e-9:
                    raise Stop(f"{text} ({msg})")
            raise Stop(msg)
        tables = recorded("measure").tables
        errors = []  # (relative error against the clock, draft, k, prediction, measured median)
        for t in tables:
            for i, k in enumerate(t.ks):
                alpha = alpha_from_tokens(t.e_n[i], k)  # what exercise 5.1 fits from the round counts
                where = f"draft {t.draft}, k = {k}"
                got = as_number(call(fn, alpha, t.c_d[i], t.c_v[i], k, on=where), "predict_speedup", where)
                errors.append((abs(got - t.measured[i]) / t.measured[i], t.draft, k, got, t.measured[i]))
        tol = max(abs(p - m) / m for t in tables for p, m in zip(t.predicted, t.measured)) + 1e-9
        worst = max(errors)
        if worst[0] > tol:
            raise Stop(f"against the recorded clock, draft {worst[1]} at k = {worst[2]}: you predict {worst[3]:.3f}, "
                       f"measured {worst[4]:.3f}, off by {worst[0]:.3f}; the cost equation is within {tol:.3f} "
                       f"at every recorded draft and k")
        report.note("S right on 4 constructed settings")
        report.note(f"against the recorded clock: within {worst[0]:.3f} of the measured median at all "
                    f"{len(errors)} recorded drafts and k (tolerance {tol:.3f}, the cost equation's own worst error; "
                    f"the worst: {worst[1]} at k = {worst[2]})")
    return run("predict_speedup", body, predict_fn, raise_on_failure=raise_on_failure, verbose=verbose)
