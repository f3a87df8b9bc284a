"""Act I figures and the temperature explorer: right artists, post's numbers in the titles, sliders redraw."""
from __future__ import annotations

import base64
import math

import pytest
import torch
from matplotlib.figure import Figure

from specdec_lib.presentation import distribution as views

SAME = [1.000, 0.999, 0.953, 0.913, 0.890, 0.936, 0.982]
DIFFERENT = [0.036, 0.417, 0.725, 0.812, 0.918, 0.974, 0.995]


def _bars(ax):
    return [patch for container in ax.containers for patch in container]


def test_post_pair_reproduces_the_post():
    p, q = views.post_pair()
    assert [round(x, 4) for x in p.tolist()] == [0.7333, 0.0562, 0.0040, 0.1879, 0.0186]
    assert round(torch.minimum(p, q).sum().item(), 4) == 0.1623


def test_overlap_curve_matches_the_post_table():
    pairs = views.logit_pairs()
    for name, expected in (("same argmax", SAME), ("different argmax", DIFFERENT)):
        got = views.overlap_curve(*pairs[name], views.POST_TEMPERATURES)
        assert [round(x, 3) for x in got] == expected
        assert round(views.overlap_at(*pairs[name], 0.7), 3) == expected[2]


def test_shared_mass_figure():
    fig = views.plot_shared_mass()
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert len(ax.containers) == 3 and len(_bars(ax)) == 15  # p, q, min for 5 tokens
    assert "0.1623" in ax.get_title()
    heights = [b.get_height() for b in ax.containers[2]]
    assert heights == pytest.approx([0.0233, 0.0562, 0.0040, 0.0602, 0.0186], abs=1e-4)


def test_sampler_frequencies_figure_accepts_samples_or_distributions():
    p, q = views.post_pair()
    g = torch.Generator().manual_seed(0)
    freqs = {"speculative, residual on reject": views.sampling.speculative_sample(p, q, num_samples=2000, generator=g),
             "exact": p.double()}
    fig = views.plot_sampler_frequencies(p, freqs)
    ax = fig.axes[0]
    assert len(ax.containers) == 2 and len(_bars(ax)) == 10
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "target p" in labels and "exact (TV 0.0000)" in labels


def test_overlap_vs_temperature_figure_and_marker():
    ax = views.plot_overlap_vs_temperature().axes[0]
    assert ax.get_xscale() == "log" and len(ax.lines) == 4  # a curve and the table's dots per pair
    ax = views.plot_overlap_vs_temperature(mark_T=0.3).axes[0]
    markers = [line for line in ax.lines if line.get_marker() == "D"]
    assert len(markers) == 2
    assert sorted(round(float(m.get_ydata()[0]), 3) for m in markers) == [0.417, 0.999]


def test_temperature_view_titles():
    fig = views.plot_temperature_view("different argmax", 0.1)
    assert len(fig.axes) == 2
    assert "overlap 0.036" in fig.axes[0].get_title()
    assert "overlap 0.890" in views.plot_pair_at_temperature("same argmax", 2.0).axes[0].get_title()


@pytest.mark.heavy
def test_explorer_controls_redraw(fast_png):
    box = views.temperature_explorer()
    (choose, temperature), (top_k, top_p) = box.children[0].children, box.children[1].children
    out = box.children[-1]

    def shown():
        assert len(out.outputs) == 1
        return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()  # fast_png: titles and data

    before = shown()
    assert "'same argmax, T = 1: overlap 0.913'" in before
    temperature.value = 2.0
    assert "'same argmax, T = 2: overlap 0.890'" in shown()
    choose.value = "different argmax"
    assert "'different argmax, T = 2: overlap 0.918'" in shown()
    temperature.value = 1.0
    at_one = shown()
    top_k.value = 2  # reaches both models: the notebook's table gives 0.803 for this pair at top_k=2
    assert shown() != at_one and "'different argmax, T = 1, top-k 2: overlap 0.803'" in shown()
    assert "'overlap against temperature, top-k 2'" in shown()
    with_k = shown()
    top_p.value = 0.5  # now only the argmax survives in each model, and they differ
    assert shown() != with_k and "'different argmax, T = 1, top-k 2, top-p 0.5: overlap 0.000'" in shown()
    top_k.value, top_p.value = 0, 1.0  # both back off: the untruncated view again
    assert shown() == at_one


def test_view_top_k_2_reports_the_notebooks_overlap(fast_png):
    # the notebook: with top-k = 2 the same-argmax pair's overlap drops from 0.913 to 0.881 at T = 1
    fig = views.plot_temperature_view("same argmax", 1.0, top_k=2)
    left, right = fig.axes
    assert left.get_title() == "same argmax, T = 1, top-k 2: overlap 0.881"
    p_bars, q_bars = ([b.get_height() for b in c] for c in left.containers[:2])
    assert p_bars == pytest.approx([0.881, 0.119, 0.0, 0.0], abs=1e-3)  # target keeps tokens 0 and 1
    assert q_bars == pytest.approx([0.881, 0.0, 0.0, 0.119], abs=1e-3)  # draft keeps tokens 0 and 3
    markers = {round(float(m.get_ydata()[0]), 3) for m in right.lines if m.get_marker() == "D"}
    assert markers == {0.881, 0.803}  # the right panel's marker sits on the truncated curves too
    box = views.temperature_explorer(top_k=2)
    assert "'same argmax, T = 1, top-k 2: overlap 0.881'" in base64.b64decode(
        box.children[-1].outputs[0]["data"]["image/png"]).decode()


def test_truncated_curves_agree_with_the_policy_pointwise():
    lp, lq = (logits.double() for logits in views.logit_pairs()["same argmax"])  # float64 like the curve
    temps = [0.1, 0.5, 1.0, 3.0, 20.0]
    for policy in ({"top_k": 2}, {"top_p": 0.9}, {"top_k": 3, "top_p": 0.7}):
        curve = views.overlap_curve(lp, lq, temps, **policy)  # batched, logits / T at temperature 1
        pointwise = [views.sampling.overlap(views.apply_policy(lp, temperature=t, **policy),
                                            views.apply_policy(lq, temperature=t, **policy)) for t in temps]
        assert curve == pytest.approx(pointwise, abs=1e-12)
    # top_p reaches both models: the draft keeps token 3, not 1, so the overlap falls below the untruncated 0.913
    assert round(views.overlap_at(lp, lq, 1.0, top_p=0.9), 3) == 0.881
    assert round(views.overlap_at(lp, lq, 1.0), 3) == 0.913


@pytest.mark.parametrize("kwargs, error, match", [
    ({"pair": "no such pair"}, ValueError, "pair must be one of"),
    ({"temperature": 0.0}, ValueError, "temperature must lie in"),
    ({"top_k": 0}, ValueError, "top_k must be >= 1"),
    ({"top_k": 1.5}, TypeError, "top_k must be an integer"),
    ({"top_p": 0.0}, ValueError, "top_p must lie in"),
    ({"top_p": 1.5}, ValueError, "top_p must lie in"),
])
def test_temperature_view_validates_its_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        views.plot_temperature_view(**kwargs)


def test_beta_by_state_is_the_overlap_of_each_row():
    ch = views.reference_chain()
    for t in (1.0, 0.5):
        P_T, Q_T = views.policy_table(ch.P, temperature=t), views.policy_table(ch.Q, temperature=t)
        expected = [views.sampling.overlap(P_T[h], Q_T[h]) for h in range(5)]
        assert views.beta_by_state(ch.P, ch.Q, temperature=t) == pytest.approx(expected, abs=1e-12)
    betas = views.beta_by_state(ch.P, ch.Q, temperature=1.0)
    assert [round(b, 3) for b in betas] == [0.791, 0.893, 0.776, 0.837, 0.888]  # the notebook's table, T = 1
    assert views.beta_by_state(ch.P, ch.P) == pytest.approx([1.0] * 5)  # a draft equal to the target: always accept


def test_beta_by_state_figure():
    ch = views.reference_chain()
    ax = views.plot_beta_by_state(P=ch.P, Q=ch.Q, temperatures=(1.0, 0.5)).axes[0]
    assert len(ax.containers) == 2 and len(_bars(ax)) == 10  # 5 states x 2 temperatures
    for container, t in zip(ax.containers, (1.0, 0.5)):
        assert [b.get_height() for b in container] == pytest.approx(views.beta_by_state(ch.P, ch.Q, temperature=t))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["T = 1 (min 0.776, max 0.893)", "T = 0.5 (min 0.630, max 0.980)"]


@pytest.mark.parametrize("kwargs, match", [
    ({"temperatures": ()}, "temperatures must hold 1 to"),
    ({"temperatures": (1.0, -0.5)}, "temperature must lie in"),
    ({"P": torch.eye(5)}, "pass both P and Q"),
    ({"P": torch.eye(5), "Q": torch.eye(4)}, "same shape"),
    ({"P": torch.ones(5, 4) / 4, "Q": torch.ones(5, 4) / 4}, "square"),
])
def test_beta_by_state_validates_its_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        views.plot_beta_by_state(**kwargs)


def _pairs():
    return {name: (lp.double(), lq.double()) for name, (lp, lq) in views.logit_pairs().items()}


def _overlap(lp, lq, temps):
    """(n,) temperatures -> (n,) overlaps sum min(softmax(l_p / T), softmax(l_q / T)), by hand in float64."""
    temps = torch.as_tensor(temps, dtype=torch.float64)[:, None]
    return torch.minimum(torch.softmax(lp / temps, -1), torch.softmax(lq / temps, -1)).sum(-1)


def _check_curves(ax, mark_T=None, highlight=None):
    """Each pair's curve on the 200-point log grid, its dots at the post's temperatures, its marker at mark_T."""
    grid = torch.logspace(math.log10(0.05), math.log10(50.0), 200, dtype=torch.float64)
    lines = ax.get_lines()
    for pair, (lp, lq) in _pairs().items():
        curve = next(ln for ln in lines if ln.get_label() == pair)
        assert curve.get_linewidth() == (3.0 if pair == highlight else 1.5)
        x = torch.tensor(curve.get_xdata(), dtype=torch.float64)  # the log grid, its ends from float32 logs
        assert len(x) == 200 and x.div(grid).sub(1).abs().max() < 1e-6
        assert x.log().diff().sub(x.log().diff().mean()).abs().max() < 1e-12
        assert torch.tensor(curve.get_ydata()).sub(_overlap(lp, lq, x)).abs().max() < 1e-12
        dots = [ln for ln in lines if ln.get_marker() == "o" and ln.get_color() == curve.get_color()]
        assert len(dots) == 1 and list(dots[0].get_xdata()) == list(views.POST_TEMPERATURES)
        table = _overlap(lp, lq, views.POST_TEMPERATURES)
        assert torch.tensor(dots[0].get_ydata()).sub(table).abs().max() < 1e-12
        assert [round(x, 3) for x in table.tolist()] == (SAME if pair == "same argmax" else DIFFERENT)
        marks = [ln for ln in lines if ln.get_marker() == "D" and ln.get_color() == curve.get_color()]
        if mark_T is None:
            assert not marks
        else:  # the marker's value comes from the float32 logits' policy: float32 rounding
            assert len(marks) == 1 and list(marks[0].get_xdata()) == [mark_T]
            assert abs(marks[0].get_ydata()[0] - float(_overlap(lp, lq, [mark_T])[0])) < 1e-6


def _check_samplers(ax, p, q):
    """The three samplers replayed from seed 1 (bars, TV labels), the target ticks, and each sampler's exact law."""
    g = torch.Generator().manual_seed(1)
    n, sampling = views.POST_DRAWS, views.sampling
    drawn = {"direct sampling from p": sampling.sample_from(p, num_samples=n, generator=g),
             "speculative, residual on reject": sampling.speculative_sample(p, q, num_samples=n, generator=g,
                                                                          mode="correct"),
             "speculative, p on reject": sampling.speculative_sample(p, q, num_samples=n, generator=g,
                                                                   mode="target_on_reject")}
    assert [c.get_label().split(" (TV")[0] for c in ax.containers] == list(drawn)
    for container, tokens in zip(ax.containers, drawn.values()):
        freq = torch.bincount(tokens, minlength=5).double() / n
        assert max(abs(b.get_height() - f) for b, f in zip(container, freq.tolist())) < 1e-7
        assert container.get_label().endswith(f"(TV {0.5 * float((freq - p.double()).abs().sum()):.4f})")
    ticks = ax.collections[0].get_segments()
    assert max(abs(seg[0][1] - x) for seg, x in zip(ticks, p.tolist())) == 0.0 and len(ticks) == 5
    # the bug's exact law: accept min(p, q), else draw from p; 400k draws put each rate within 5 sigma
    pd, qd = p.double(), q.double()
    bug = torch.minimum(pd, qd) + (1 - torch.minimum(pd, qd).sum()) * pd
    for label, law in (("direct sampling from p", pd), ("speculative, residual on reject", pd),
                       ("speculative, p on reject", bug)):
        freq = torch.bincount(drawn[label], minlength=5).double() / n
        assert ((freq - law).abs() < 5 * (law * (1 - law) / n).sqrt() + 1e-12).all()
    assert 0.5 * float((bug - pd).abs().sum()) > 0.09  # far from p: the 0.0967 the label shows


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name):
    """Each figure draws the post's numbers, computed here by hand: the pair's p, q and min(p, q) bars (post_pair at
    seed 0); the three samplers' frequencies replayed from seed 1 with the library's samplers, their TV labels, the
    target ticks at p, and the p-on-reject law min(p, q) + (1 - beta) p that only the buggy sampler follows; the
    overlap curves sum min(softmax(l_p / T), softmax(l_q / T)) on the 200-point log grid and at the post's
    temperatures (float64, to 1e-12); beta(h) = sum_x min of the rows raised to 1 / T and renormalised."""
    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure)
    p, q = views.post_pair()
    ax = fig.axes[0]
    if name in ("act1_shared_mass", "act1_temperature_view"):
        if name == "act1_temperature_view":  # the same-argmax pair at T = 1, both panels
            lp, lq = _pairs()["same argmax"]
            p, q = torch.softmax(lp, -1), torch.softmax(lq, -1)
            _check_curves(fig.axes[1], mark_T=1.0, highlight="same argmax")
        heights = [[b.get_height() for b in c] for c in ax.containers]
        for drawn, want in zip(heights, (p, q, torch.minimum(p, q))):
            assert max(abs(h - w) for h, w in zip(drawn, want.double().tolist())) < 1e-6  # float32 tables
        shared = float(torch.minimum(p, q).double().sum())
        assert ax.get_title().endswith(f"{shared:.4f}" if name == "act1_shared_mass" else f"{shared:.3f}")
        assert [len(h) for h in heights] == [p.shape[0]] * 3
    elif name == "act1_sampler_frequencies":
        _check_samplers(ax, p, q)
    elif name == "act1_overlap_vs_temperature":
        _check_curves(ax)
    else:
        ch = views.reference_chain()
        for container, t in zip(ax.containers, views.STATE_TEMPERATURES):
            rows_p, rows_q = (m.double() ** (1 / t) for m in (ch.P, ch.Q))
            beta = torch.minimum(rows_p / rows_p.sum(-1, keepdim=True), rows_q / rows_q.sum(-1, keepdim=True)).sum(-1)
            tol = 1e-6 if t == 1.0 else 1e-12  # T = 1 leaves the float32 table as it is: float32 sums
            assert max(abs(b.get_height() - w) for b, w in zip(container, beta.tolist())) < tol
            assert len(container) == 5
        assert len(ax.containers) == len(views.STATE_TEMPERATURES)
