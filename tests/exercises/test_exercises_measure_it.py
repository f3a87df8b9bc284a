"""The lab's checkers (exercises 5.1 and 5.2): the reference solutions pass, each known mistake is named."""
import dataclasses
from types import SimpleNamespace

import pytest
from exercise_support import failing

import specdec_lib as sd
from specdec_lib import exercises as ex
from specdec_lib.exercises import measure_it as ex_lab


def fit_alpha(e_n, k):
    return sd.accounting.alpha_from_tokens(e_n, k)


def predict_speedup(alpha, c_d, c_v, k):
    return sd.expected_tokens(alpha, k) / (k * c_d + c_v)


def test_reference_alpha_inverts_expected_tokens():
    for alpha, k in [(0.0, 2), (0.5, 1), (0.8, 8), (1.0, 3)]:
        assert sd.accounting.alpha_from_tokens(sd.expected_tokens(alpha, k), k) == pytest.approx(alpha, abs=1e-12)


def test_fit_alpha_passes_and_names_each_mistake():
    report = ex.grade_fit_alpha(fit_alpha, raise_on_failure=False, verbose=False)
    assert report.ok and "24 recorded E[N]" in str(report)
    failing(ex.grade_fit_alpha, lambda e_n, k: e_n - 1, "E[N] = 1 + alpha holds at k = 1 only")
    failing(ex.grade_fit_alpha, lambda e_n, k: (e_n - 1) / k, "1 + k alpha")
    failing(ex.grade_fit_alpha, lambda e_n, k: fit_alpha(e_n + 1, k) if e_n + 1 <= k + 1 else 1.0, "fits E[A]")
    failing(ex.grade_fit_alpha, lambda e_n, k: 2 * e_n, "it lies in [0, 1]")
    failing(ex.grade_fit_alpha, lambda e_n, k: round(fit_alpha(e_n, k), 2), "expected")  # too coarse
    failing(ex.grade_fit_alpha, lambda e_n, k: "0.5", "must return a number")


def test_predict_speedup_passes_and_names_each_mistake():
    report = ex.grade_predict_speedup(predict_speedup, raise_on_failure=False, verbose=False)
    assert report.ok and "against the recorded clock" in str(report)
    e_n, e_a = sd.expected_tokens, sd.expected_accepted
    failing(ex.grade_predict_speedup, lambda a, c_d, c_v, k: (1 + k * a) / (k * c_d + c_v), "1 + k alpha")
    failing(ex.grade_predict_speedup, lambda a, c_d, c_v, k: e_a(a, k) / (k * c_d + c_v), "E[A]")
    failing(ex.grade_predict_speedup, lambda a, c_d, c_v, k: e_n(a, k) / (c_d + c_v), "k c_d")
    failing(ex.grade_predict_speedup, lambda a, c_d, c_v, k: (k * c_d + c_v) / e_n(a, k), "cost per token")
    failing(ex.grade_predict_speedup, lambda a, c_d, c_v, k: e_n(a, k) / (k * c_d), "also pays c_v")
    failing(ex.grade_predict_speedup, lambda a, c_d, c_v, k: 1.0, "got 1.0000")


def test_predict_speedup_is_checked_against_the_recorded_clock(monkeypatch):
    """Right on the constructed settings but far from the clock on the recording: the second stage catches it."""
    tables = [dataclasses.replace(t, measured=[2 * m for m in t.measured], predicted=[2 * m for m in t.measured])
              for t in ex_lab.recorded("measure").tables]
    monkeypatch.setattr(ex_lab, "recorded", lambda kind: SimpleNamespace(tables=tables))
    failing(ex.grade_predict_speedup, predict_speedup, "against the recorded clock", "the cost equation is within")


def test_checkers_are_exported():
    assert {"grade_fit_alpha", "grade_predict_speedup"} <= set(ex.__all__)
