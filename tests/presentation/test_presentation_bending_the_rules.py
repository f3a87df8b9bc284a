"""Act V, bending the rules, presentation: the Pareto plot, the typical and policy views and their explorers, lookup."""
import base64
import math

import pytest
import torch
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.markov.draft_rules import MEDUSA_EPS
from specdec_lib.presentation import bending_the_rules as views

CH = sd.reference_chain()
K_MAX = 5  # the explorer's policies at a small k_max: the optimal rule in well under a second


def _lines(ax, gid):
    return [ln for ln in ax.get_lines() if ln.get_gid() == gid]


def _fingerprint(out) -> str:
    """The explorer's figure as the fast_png fixture stores it: a repr of titles, texts and data."""
    return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()


def test_bending_stats_are_the_exact_engines():
    stats = views.bending_stats()
    assert list(stats) == ["correct"] + [m.name for m in sd.failure_modes(chapter="bending the rules")]
    assert {"typical_acceptance", "hf_schedule", "confidence_stop", "coin_peeking", "ngram_lookup"} <= set(stats)
    for mode, s in stats.items():
        want = sd.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=4, mode=mode)
        assert s.tv == pytest.approx(want.tv, abs=1e-15) and s.tokens_per_call == pytest.approx(want.tokens_per_call)
    assert views.exact_tokens() == pytest.approx(stats["correct"].tokens_per_call)


@pytest.mark.heavy
def test_pareto_plots_every_delta_against_the_gain():
    fig = views.plot_pareto()
    tv_ax, kl_ax = fig.axes
    for delta in views.DELTAS:
        points = sd.markov.typical_sweep(CH.P, CH.Q, start=0, horizon=3, k=4, epsilons=list(views.EPSILONS),
                                         delta=delta)
        (tv_line,), (kl_line,) = _lines(tv_ax, f"delta_{delta:g}"), _lines(kl_ax, f"delta_{delta:g}")
        gain = [p.tokens_per_call - views.exact_tokens() for p in points]
        assert list(tv_line.get_xdata()) == pytest.approx(gain) and list(kl_line.get_xdata()) == pytest.approx(gain)
        assert list(tv_line.get_ydata()) == pytest.approx([p.tv for p in points])
        assert list(kl_line.get_ydata()) == pytest.approx([p.kl for p in points])
    (star,) = _lines(tv_ax, views.EXACT_GID)
    assert list(star.get_xdata()) == [0.0] and list(star.get_ydata()) == [0.0]
    (medusa,) = _lines(tv_ax, "medusa")  # Medusa's defaults: the registry's decoder, worse than exact in E[N]
    default = views.bending_stats()["typical_acceptance"]
    assert medusa.get_ydata()[0] == pytest.approx(default.tv) and medusa.get_xdata()[0] < 0
    assert "H/E[R] = 2.220" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="deltas must hold 1 to 4 values"):
        views.plot_pareto(deltas=(0.1, 0.2, 0.3, 0.4, 0.5))
    with pytest.raises(ValueError, match=r"delta must lie in \[0, 1\]"):
        views.plot_pareto(deltas=(2.0,))


@pytest.mark.heavy
def test_typical_view_stars_the_setting_and_draws_each_threshold():
    fig, text = views.plot_typical_view(epsilon=0.09, delta=0.3)
    left, right = fig.axes
    (star,) = _lines(left, views.STAR_GID)
    assert star.get_ydata()[0] == pytest.approx(0.2830, abs=5e-5)
    assert star.get_xdata()[0] == pytest.approx(2.183 - 2.220, abs=1e-3)
    t = sd.markov.typical_threshold(CH.P, epsilon=0.09, delta=0.3)
    for s in range(5):
        (threshold,) = _lines(right, f"threshold_{s}")
        assert threshold.get_ydata()[0] == pytest.approx(t[s].item())
        kept, cut = _lines(right, f"kept_{s}")[0].get_ydata(), _lines(right, f"cut_{s}")[0].get_ydata()
        assert len(kept) + len(cut) == 5 and all(v > t[s].item() for v in kept) and all(v <= t[s] for v in cut)
    assert "TV 0.2830" in text and "H/E[R] 2.183 against the exact decoder's 2.220 (-0.037)" in text
    assert "threshold in 1 of 5 states" in text  # only state 0 has delta exp(-H) = 0.0838 < 0.09
    _, wide = views.plot_typical_view(epsilon=0.3, delta=1.0)
    assert "TV 0.5745" in wide and "in 1 of 5 states" in wide  # only state 0 has exp(-H) = 0.279 < 0.3
    with pytest.raises(ValueError, match=r"epsilon must lie in \[0, 1\]"):
        views.plot_typical_view(epsilon=-0.1)


def test_typical_explorer_every_control_redraws(fast_png):
    box = views.typical_explorer()
    epsilon, delta = box.children[0].children
    out = box.children[-1]
    text = lambda: out.outputs[1]["text"]  # noqa: E731
    assert text().startswith("epsilon = 0.09, delta = 0.30: TV 0.2830")
    for control, value, expect in [(epsilon, 0.02, "epsilon = 0.02, delta = 0.30: TV 0.2757"),
                                   (delta, 1.0, "epsilon = 0.02, delta = 1.00: TV 0.2757"),
                                   (epsilon, 0.3, "TV 0.5745")]:
        before = _fingerprint(out)
        control.value = value
        assert _fingerprint(out) != before and expect in text(), (expect, text())


def test_policy_results_and_view():
    res = views.policy_results(k=4, c_d=0.15, k_max=K_MAX)
    assert res["fixed k"].speedup == pytest.approx(sd.policy_speedup(CH.P, CH.Q, c_d=0.15, c_v=1.0, policy="fixed",
                                                                     k=4).speedup)
    opt = sd.markov.optimal_stopping(CH.P, CH.Q, c_d=0.15, c_v=1.0, k_max=K_MAX).result
    assert res["oracle stopping"].speedup == pytest.approx(opt.speedup)
    assert res["oracle stopping"].speedup > res["best fixed k"].speedup >= res["fixed k"].speedup
    fig, text = views.plot_policy_view(policy="transformers' schedule", k_max=K_MAX)
    left, right = fig.axes
    (curve,) = _lines(left, "fixed_curve")
    fixed = [sd.policy_speedup(CH.P, CH.Q, c_d=0.15, c_v=1.0, policy="fixed", k=k) for k in range(K_MAX + 1)]
    assert list(curve.get_ydata()) == pytest.approx([r.speedup for r in fixed])
    assert list(_lines(right, "fixed_curve")[0].get_ydata()) == pytest.approx([r.tokens_per_round for r in fixed])
    (star,) = _lines(left, views.STAR_GID)
    hf = sd.policy_speedup(CH.P, CH.Q, c_d=0.15, c_v=1.0, policy="hf_schedule", k_max=K_MAX)
    assert star.get_xdata()[0] == pytest.approx(hf.drafted_per_round) and star.get_ydata()[0] == pytest.approx(
        hf.speedup)
    assert text.startswith("transformers' schedule (hf schedule [1, 5])") and f"S = {hf.speedup:.3f}" in text
    with pytest.raises(ValueError, match="policy must be one of 'fixed k'"):
        views.plot_policy_view(policy="greedy")
    with pytest.raises(ValueError, match=r"k must lie in \[0, k_max = 5\]"):
        views.plot_policy_view(k=6, k_max=K_MAX)


@pytest.mark.heavy
def test_policy_explorer_every_control_redraws(fast_png):
    box = views.policy_explorer(k_max=K_MAX)
    (policy, k), (c_d, confidence) = box.children[0].children, box.children[1].children
    out = box.children[-1]
    text = lambda: out.outputs[1]["text"]  # noqa: E731
    assert text().startswith("oracle stopping (optimal stopping, an oracle)")
    for control, value, expect in [(policy, "fixed k", "fixed k (fixed k = 4)"), (k, 2, "fixed k (fixed k = 2)"),
                                   (policy, "confidence stop", "confidence stop (confidence stop < 0.4)"),
                                   (confidence, 0.6, "confidence stop < 0.6"), (c_d, 0.3, "")]:
        before, was = _fingerprint(out), text()
        control.value = value
        assert _fingerprint(out) != before and expect in text() and text() != was, (expect, text())
    k.value = 0  # a confidence stop capped at 0 proposals is plain decoding
    assert "m̄ = 0.000" in text() and "S = 1.000" in text()


@pytest.mark.heavy
def test_lookup_rows_and_break_even():
    lookup, model = views.lookup_rows()
    assert (lookup.name, model.name) == ("ngram_lookup", "model draft") and lookup.c_d == 0.0
    assert lookup.stats.horizon == 5 and lookup.stats.k == 4
    even = views.break_even_c_d()
    assert model.stats.speedup(c_d=even, c_v=1.0) == pytest.approx(lookup.speedup)  # the two S meet there
    assert model.stats.speedup(c_d=even - 0.01, c_v=1.0) > lookup.speedup > model.stats.speedup(c_d=even + 0.01,
                                                                                                c_v=1.0)
    ax = views.plot_lookup().axes[0]
    (flat,) = _lines(ax, "lookup")
    assert set(flat.get_ydata()) == {lookup.speedup}
    (line,) = _lines(ax, "model")
    assert line.get_ydata()[15] == pytest.approx(model.speedup)  # c_d = 0.15 is the model draft's own point
    assert [t.get_text() for t in ax.texts] == [f"break-even c_d = {even:.2f}"]


def test_lab_drafts_are_the_recorded_tables():
    drafts = views.lab_drafts()
    assert list(drafts) == ["table", "lookup"]
    lookup, table = drafts["lookup"], drafts["table"]
    assert max(lookup.measured) < 1.0 < max(table.measured)  # lookup lost to plain decoding at every k; the table won
    assert lookup.ks == table.ks and len(lookup.measured) == len(lookup.ks)
    with pytest.raises(ValueError, match="draft must be one of"):
        views.lab_drafts(("prompt",))


def _stats(mode, *, horizon=3, **options):
    """The exact engine's DecoderStats at k = 4 on the reference chain, called directly."""
    return sd.decoder_stats(CH.P, CH.Q, start=CH.start, horizon=horizon, k=4, mode=mode, options=options or None)


def _check_pareto(fig):
    """Every delta's front on both panels: x the gain in H/E[R] over the exact decoder, y its TV or KL, each point
    against typical_sweep called here at three epsilons, to 1e-12; Medusa's ring is the registry's decoder."""
    exact = _stats("correct").tokens_per_call
    medusa = _stats("typical_acceptance")
    for ax, what in zip(fig.axes, ("tv", "kl")):
        for delta in views.DELTAS:
            (line,) = _lines(ax, f"delta_{delta:g}")
            x, y = list(line.get_xdata()), list(line.get_ydata())
            assert len(x) == len(y) == 31
            at = [0, 9, 30]  # epsilon 0, Medusa's 0.09, 0.30
            points = sd.markov.typical_sweep(CH.P, CH.Q, start=CH.start, horizon=3, k=4,
                                             epsilons=[views.EPSILONS[i] for i in at], delta=delta)
            assert max(abs(x[i] - (p.tokens_per_call - exact)) for i, p in zip(at, points)) < 1e-12
            assert max(abs(y[i] - getattr(p, what)) for i, p in zip(at, points)) < 1e-12
        (ring,) = _lines(ax, "medusa")
        assert abs(ring.get_xdata()[0] - (medusa.tokens_per_call - exact)) < 1e-12
        assert abs(ring.get_ydata()[0] - getattr(medusa, what)) < 1e-12
        (star,) = _lines(ax, views.EXACT_GID)
        assert list(star.get_xdata()) == [0.0] and list(star.get_ydata()) == [0.0] and _stats("correct").tv < 1e-12
    assert f"H/E[R] = {exact:.3f}, TV 0" in fig._suptitle.get_text()


def _check_typical_view(fig):
    """Medusa's defaults (0.09, 0.3) starred at their exact gain and TV; each state's threshold
    min(epsilon, delta exp(-H)) by hand, its row's tokens above it kept and the rest cut."""
    left, right = fig.axes
    exact = _stats("correct").tokens_per_call
    (point,) = sd.markov.typical_sweep(CH.P, CH.Q, start=CH.start, horizon=3, k=4, epsilons=[0.09], delta=0.3)
    (star,) = _lines(left, views.STAR_GID)
    assert abs(star.get_xdata()[0] - (point.tokens_per_call - exact)) < 1e-12
    assert abs(star.get_ydata()[0] - point.tv) < 1e-12
    for s in range(5):
        p = CH.P[s].double()
        t = min(0.09, 0.3 * math.exp(float((p * torch.log(p + MEDUSA_EPS)).sum())))
        (threshold,) = _lines(right, f"threshold_{s}")
        assert max(abs(v - t) for v in threshold.get_ydata()) < 1e-12
        kept, cut = (list(_lines(right, f"{kind}_{s}")[0].get_ydata()) for kind in ("kept", "cut"))
        assert kept == [v for v in p.tolist() if v > t] and cut == [v for v in p.tolist() if v <= t]


def _check_policies(fig):
    """The long-run S (left) and N̄ (right) against m̄: the fixed-k curve k = 0..8 and every policy's marker from
    policy_speedup and optimal_stopping called here, to 1e-12; each S = N̄ / C̄; the oracle starred, best of all."""
    kw = {"c_d": 0.15, "c_v": 1.0}
    fixed = [sd.policy_speedup(CH.P, CH.Q, policy="fixed", k=k, **kw) for k in range(9)]
    res = {"fixed k": fixed[4],
           "transformers' schedule": sd.policy_speedup(CH.P, CH.Q, policy="hf_schedule", k_max=8, **kw),
           "confidence stop": sd.policy_speedup(CH.P, CH.Q, policy="confidence", confidence=0.4, k=4, k_max=8, **kw),
           "oracle stopping": sd.markov.optimal_stopping(CH.P, CH.Q, k_max=8, **kw).result}
    for r in [*fixed, *res.values()]:
        assert abs(r.speedup - r.tokens_per_round / r.cost_per_round) < 1e-12
    for ax, what in zip(fig.axes, ("speedup", "tokens_per_round")):
        (curve,) = _lines(ax, "fixed_curve")
        assert list(curve.get_xdata()) == list(range(9))
        assert max(abs(y - getattr(r, what)) for y, r in zip(curve.get_ydata(), fixed)) < 1e-12
        for name, r in [*res.items(), (views.STAR_GID, res["oracle stopping"])]:
            (mark,) = _lines(ax, name)
            assert abs(mark.get_xdata()[0] - r.drafted_per_round) < 1e-12
            assert abs(mark.get_ydata()[0] - getattr(r, what)) < 1e-12
    assert res["oracle stopping"].speedup > max(r.speedup for r in [*fixed, *res.values()][:-1])
    assert fig._suptitle.get_text().startswith(f"oracle stopping: S = {res['oracle stopping'].speedup:.3f}")


def _check_lookup(fig):
    """The model draft's S at each c_d = horizon / (plain rounds + verified rounds c_v + drafted c_d), by hand from
    the exact engine's stats, to 1e-12; lookup's flat S at c_d = 0; the break-even c_d where the two meet."""
    ax = fig.axes[0]
    lookup, model = _stats("ngram_lookup", horizon=5, ngram_match="latest"), _stats("correct", horizon=5)

    def s(st, c_d):
        return st.horizon / (st.plain_rounds + (st.rounds - st.plain_rounds) * 1.0 + st.drafted * c_d)

    (line,) = _lines(ax, "model")
    assert max(abs(x - 0.01 * i) for i, x in enumerate(line.get_xdata())) < 1e-12 and len(line.get_xdata()) == 81
    assert max(abs(y - s(model, x)) for x, y in zip(line.get_xdata(), line.get_ydata())) < 1e-12
    (flat,) = _lines(ax, "lookup")
    assert max(abs(y - s(lookup, 0.0)) for y in flat.get_ydata()) < 1e-12
    even = (model.horizon / s(lookup, 0.0) - model.plain_rounds - (model.rounds - model.plain_rounds)) / model.drafted
    assert abs(s(model, even) - s(lookup, 0.0)) < 1e-12
    (vline,) = [ln for ln in ax.get_lines() if ln.get_gid() is None and ln.get_xdata()[0] == ln.get_xdata()[-1]]
    assert abs(vline.get_xdata()[0] - even) < 1e-12
    assert [t.get_text() for t in ax.texts] == [f"break-even c_d = {even:.2f}"]


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["act5b_pareto", "act5b_typical_view", "act5b_policies", "act5b_lookup"])
def test_figures_are_registered_and_build(name):
    """The four registered figures, each drawing the exact engine's numbers computed here directly (see each check):
    the Pareto fronts, the typical view at Medusa's defaults, the long-run policies, lookup against a model draft."""
    assert set(views.FIGURES) == {"act5b_pareto", "act5b_typical_view", "act5b_policies", "act5b_lookup"}
    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure)
    {"act5b_pareto": _check_pareto, "act5b_typical_view": _check_typical_view, "act5b_policies": _check_policies,
     "act5b_lookup": _check_lookup}[name](fig)
