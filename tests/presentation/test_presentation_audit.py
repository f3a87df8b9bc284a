"""Audit figures: the report bars, the power curves from the kit's own calculation, and the epsilon/beta explorer."""
import base64
import math

import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.conformance import (
    BETA,
    EPSILON,
    audit_verifier,
    battery,
    committed_block_law,
    complete,
    known_verifiers,
    power,
    target_law,
)
from specdec_lib.presentation import audit as views
from specdec_lib.presentation.style import COLORS


@pytest.fixture(scope="module")
def reports():
    bug = next(kv for kv in known_verifiers() if kv.name == "target_on_reject")
    return (audit_verifier(sd.verify_blocks, convention="batched", subject="good"),
            audit_verifier(bug.verify, convention="batched", subject="bad"))


@pytest.mark.heavy
def test_report_bars_are_the_measured_tvs_coloured_by_verdict(reports):
    good, bad = reports
    fig = views.plot_report(good, bad)
    assert len(fig.axes) == 2
    for ax, report in zip(fig.axes, reports):
        widths = sorted(p.get_width() for p in ax.patches)
        assert widths == pytest.approx(sorted(c.tv for c in report.cases))
        red = sum(p.get_facecolor()[0] > 0.7 for p in ax.patches)  # failed cases are drawn red
        assert red == sum(not c.passed for c in report.cases)
        ticks = sorted(ax.collections[0].get_offsets()[:, 0].tolist())  # the thresholds, one tick per case
        assert ticks == pytest.approx(sorted(c.threshold for c in report.cases))
    assert "PASSED" in fig.axes[0].get_title() and "FAILED" in fig.axes[1].get_title()
    assert not any(p.get_facecolor()[0] > 0.7 for p in fig.axes[0].patches) and red > 0


def test_catch_probability_is_the_kits_promise_at_epsilon():
    # at TV = the case's `detectable` the bound is exactly 1 - beta; below the threshold it promises nothing
    for case in battery():
        pw = power(case, cases=len(battery()))
        assert views.catch_probability(pw.detectable, case=case.name) == pytest.approx(1 - BETA, abs=1e-9)
        assert views.catch_probability(pw.threshold, case=case.name) == 0.0
    p = [views.catch_probability(d / 100, case="binary_k4") for d in range(0, 101)]
    assert p == sorted(p) and p[-1] == pytest.approx(1.0) and p[10] == 0.0  # rises from 0, never falls
    # a looser promise (epsilon 0.3) needs fewer blocks, so the same TV is caught less surely
    assert views.catch_probability(0.2, epsilon=0.3) < views.catch_probability(0.2) <= 1


@pytest.mark.heavy
def test_every_bug_sits_above_the_promise():
    worst = views.worst_cases()
    assert set(worst) == {kv.name for kv in known_verifiers() if not kv.exact}
    assert all(tv > EPSILON and views.catch_probability(tv, case=case) > 1 - BETA for case, tv in worst.values())
    assert views.bug_tvs("forbidden")["off_by_one"] == pytest.approx(0.82, abs=1e-6)
    assert max(views.bug_tvs(c)["correct"] for c in views.CASES) < 1e-12  # the correct rule: exact on every case


@pytest.mark.heavy
def test_power_figure_draws_every_case_and_bug():
    ax = views.plot_power().axes[0]
    curves = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2]
    assert len(curves) == len(views.CASES)
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert len(dots) == len(views.worst_cases()) and all(ln.get_ydata()[0] > 1 - BETA for ln in dots)


def _image(out) -> str:
    return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()


@pytest.mark.heavy
def test_power_explorer_each_control_redraws(fast_png):
    box = views.power_explorer()
    (epsilon, beta), out = box.children[0].children, box.children[-1]
    assert (epsilon.value, beta.value) == (EPSILON, BETA)
    seen = [(_image(out), out.outputs[1]["text"])]
    total = sum(power(c, cases=len(battery())).num_blocks for c in battery())  # 22878 for the nine cases
    assert f"{total} in all" in seen[0][1]
    for control, value in ((epsilon, 0.3), (beta, 1e-6)):
        control.value = value
        seen.append((_image(out), out.outputs[1]["text"]))
        assert seen[-1][0] != seen[-2][0] and seen[-1][1] != seen[-2][1]
    n_all = int(seen[1][1].split(" in all")[0].split()[-1])
    assert n_all < total / 3  # epsilon doubled: about a quarter of the blocks (n scales as 1 / epsilon^2)


@pytest.mark.heavy
def test_bad_input_raises(reports):
    with pytest.raises(ValueError, match="case must be one of 'post_pair'"):
        views.catch_probability(0.2, case="nope")
    with pytest.raises(ValueError, match="tv must"):
        views.catch_probability(1.5)
    with pytest.raises(TypeError, match="conformance Reports"):
        views.plot_report()
    with pytest.raises(TypeError, match="conformance Reports"):
        views.plot_report("report")
    assert not math.isnan(views.catch_probability(0.0))


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name):
    """Each figure draws the kit's numbers, recomputed here: the report figure's ticks are each case's threshold,
    top to bottom in battery order; the softmax-residual bug's bars are its measured TVs through the kit replayed at
    seed 0, within the noise threshold of its exact TV (the completed block law against the target, no sampling),
    all red; sd.verify_blocks' bars lie within the threshold of 0, all blue. The power figure's curves are
    1 - exp(-2 n (d - m)^2) past m = detectable - sqrt(ln(1 / beta) / (2 n)), by hand from each case's n, to 1e-12;
    each bug's dot sits at its largest exact TV over the cases, at that curve's value."""
    fig = views.FIGURES[name]()
    assert name.startswith("audit_") and isinstance(fig, Figure)
    cases = list(battery())

    def exact_tv(spec, case):
        return float(sd.total_variation(complete(committed_block_law(spec, case.p_rows, case.q_rows), case.p_rows),
                                        target_law(case.p_rows)))

    bug = next(kv for kv in known_verifiers() if kv.name == "softmax_residual")
    if name == "audit_report":
        bad = audit_verifier(bug.verify, convention="batched", subject="softmax_residual")  # replayed, seed 0
        assert [ax.get_title() for ax in fig.axes] == ["sd.verify_blocks\nPASSED", "softmax_residual\nFAILED 9 of 9"]
        thresholds = [power(case, cases=len(cases)).threshold for case in cases]
        for ax, want in zip(fig.axes, ([None] * len(cases), [c.tv for c in bad.cases])):
            bars = sorted(ax.patches, key=lambda p: -p.get_y())  # top to bottom: the battery's order
            ticks = sorted(ax.collections[0].get_offsets().tolist(), key=lambda xy: -xy[1])
            assert [x for x, _ in ticks] == thresholds and len(bars) == len(cases)
            passed = [p.get_width() <= tau for p, tau in zip(bars, thresholds)]
            assert [p.get_facecolor() for p in bars] == [to_rgba(COLORS["target" if ok else "wrong"]) for ok in passed]
            if want[0] is not None:
                assert [p.get_width() for p in bars] == want
        assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [case.name for case in cases]
        good = [p.get_width() for p in sorted(fig.axes[0].patches, key=lambda p: -p.get_y())]
        assert all(tv < tau for tv, tau in zip(good, thresholds))  # the exact verifier: within the noise of 0
        assert all(abs(c.tv - exact_tv(bug.spec, case)) < c.threshold and not c.passed
                   for c, case in zip(bad.cases, cases))  # the bug: within the noise of its exact TV, all failed
        return
    ax = fig.axes[0]
    curves = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 401]
    assert len(curves) == len(cases)
    for ln, case in zip(curves, cases):
        pw = power(case, cases=len(cases))
        n, margin = pw.num_blocks, pw.detectable - math.sqrt(math.log(1 / BETA) / (2 * pw.num_blocks))
        x = ln.get_xdata()
        assert max(abs(d - i / 400) for i, d in enumerate(x)) < 1e-7  # float32 linspace(0, 1, 401)
        want = [1 - math.exp(-2 * n * (d - margin) ** 2) if d > margin else 0.0 for d in x]
        assert max(abs(y - w) for y, w in zip(ln.get_ydata(), want)) < 1e-12
    worst = {}
    for kv in known_verifiers():
        if not kv.exact:
            tvs = [exact_tv(kv.spec, case) for case in cases]
            worst[kv.name] = (cases[tvs.index(max(tvs))], max(tvs))
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    labels = [t.get_text() for t in ax.texts]
    assert len(dots) == len(worst) == len(labels)
    for (kv_name, (case, tv)), dot, label in zip(sorted(worst.items(), key=lambda item: item[1][1]), dots, labels):
        pw = power(case, cases=len(cases))
        margin = pw.detectable - math.sqrt(math.log(1 / BETA) / (2 * pw.num_blocks))
        assert label == f"{kv_name} ({case.name})" and abs(dot.get_xdata()[0] - tv) < 1e-12
        assert abs(dot.get_ydata()[0] - (1 - math.exp(-2 * pw.num_blocks * (tv - margin) ** 2))) < 1e-12
        assert tv > EPSILON  # every known bug past the promise: caught with probability > 1 - beta
