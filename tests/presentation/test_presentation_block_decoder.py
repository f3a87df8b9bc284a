"""Act II presentation: the decoder-TV bars, the sequence-distribution plot, the dropdown view, FIGURES."""
import matplotlib
import pytest
import torch
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.presentation import block_decoder as views

matplotlib.use("Agg")
N_SMALL = 2_000  # enough to exercise the code paths quickly


@pytest.fixture(scope="module")
def exact():
    ch = sd.reference_chain()
    return sd.sequence_law(ch.P, start=ch.start, horizon=ch.horizon)


def test_plot_decoder_tv_bars_threshold_and_colours():
    fig = views.plot_decoder_tv(labels=["a", "b", "c"], tvs=[0.005, 0.3, 0.9], threshold=0.01)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 3
    assert [round(b.get_height(), 3) for b in bars] == [0.005, 0.3, 0.9]
    assert bars[0].get_facecolor() != bars[1].get_facecolor() == bars[2].get_facecolor()  # above threshold: red
    assert any(line.get_ydata()[0] == 0.01 for line in ax.get_lines())  # the threshold line
    assert ax.get_title() == "Sequence-level TV by decoder"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]


def test_plot_decoder_tv_length_mismatch():
    with pytest.raises(ValueError, match="same length"):
        views.plot_decoder_tv(labels=["a"], tvs=[0.1, 0.2], threshold=0.01)


@pytest.mark.heavy
def test_plot_sequence_distributions(exact):
    emp = sd.empirical_sequences(views.sample_sequences("correct", n=N_SMALL), 5)
    fig = views.plot_sequence_distributions(exact=exact, empirical_by_label={"correct": emp, "exact copy": exact})
    ax = fig.axes[0]
    assert len(ax.patches) == 125
    assert len(ax.get_lines()) == 2
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "exact copy (TV 0.0000)" in labels and "exact target" in labels
    heights = [b.get_height() for b in ax.patches]
    assert heights == sorted(heights, reverse=True)


def test_plot_sequence_distributions_shape_check(exact):
    with pytest.raises(ValueError, match="shape"):
        views.plot_sequence_distributions(exact=exact, empirical_by_label={"bad": torch.ones(5, 5) / 25})


def test_tv_threshold_shrinks_with_n(exact):
    assert views.tv_noise_bound(exact, 200_000) < views.tv_noise_bound(exact, 60_000) < 0.03


def test_decoder_explorer_updates_output(fast_png):
    box = views.decoder_explorer(n=N_SMALL)
    row, out = box.children
    dropdown = row.children[0]
    before = out.outputs
    assert before and "image/png" in before[0]["data"]
    dropdown.value = "correct"
    assert out.outputs != before


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name, monkeypatch):
    monkeypatch.setattr(views, "N", N_SMALL)  # keep the default-path runs cheap
    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure) and fig.axes
    if name == "act2_decoder_tv":  # direct sampling and the five decoders; the three broken ones in red
        colors = [b.get_facecolor() for b in fig.axes[0].patches]
        assert len(colors) == 1 + len(sd.markov.DECODER_MODES)
        assert colors[0] == colors[1] == colors[2] != colors[3] == colors[4] == colors[5]


def test_tv_convergence_lines_and_exact_markers():
    runs = {m: views.sample_sequences(m, n=2_000, seed=1) for m in ("correct", "off_by_one")}
    fig = views.plot_tv_convergence(runs=runs, exact_tv={"correct": 0.0, "off_by_one": 0.8966}, sizes=[500, 2_000])
    ax = fig.axes[0]
    solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(solid) == 3  # one per decoder plus the noise floor
    assert [line.get_ydata()[0] for line in dashed] == [0.8966]  # only the broken decoder has an exact TV above 0
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert views.tv_by_sample_size(runs["correct"], views._exact(), [2_000])[0] < 0.1


# ---- detectability ----------------------------------------------------------------------------------------

@pytest.mark.heavy
@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_bonus_from_draft_blind_spot_past_the_horizon(k):
    # k + 1 > horizon 3: a full block's bonus is token k + 1 or later, so it never enters the law the test sees
    d = views.detectability(mode="bonus_from_draft", k=k, M=1_000)
    assert d.exact_tv < 1e-12 and d.blind
    text = views.detectability_text(d)
    assert "blind spot" in text and f"k + 1 = {k + 1}" in text and "exact TV 0 (< 1e-12)" in text
    ax = views.plot_detectability(mode="bonus_from_draft", k=k, M=1_000).axes[0]
    assert "blind spot" in ax.get_title() and any("exact TV 0" in t.get_text() for t in ax.texts)
    assert not [line for line in ax.get_lines() if line.get_linestyle() == "--"]  # no exact-TV line at zero


@pytest.mark.stat
def test_bonus_from_draft_is_visible_when_the_bonus_lands_inside():
    # negative control of the blind spot: at k = 2 the bonus is token 3, inside the horizon
    d = views.detectability(mode="bonus_from_draft", k=2, M=200_000)
    assert not d.blind and d.exact_tv > 0.05
    assert d.exact_tv > 2 * d.bound and d.caught  # twice the bound: caught unless the run's noise exceeds the bound
    assert "blind spot" not in views.detectability_text(d)
    ax = views.plot_detectability(mode="bonus_from_draft", k=2, M=200_000).axes[0]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert [round(line.get_ydata()[0], 12) for line in dashed] == [round(d.exact_tv, 12)]
    assert ax.get_title().endswith("caught at M = 200,000")


@pytest.mark.stat
def test_phantom_history_missed_at_small_m_caught_at_large_m():
    # Thresholds come from M: tv_noise_bound(target, M). At M = 1,000 the bound is above the bug's exact TV, so
    # only noise could flag it; at M = 200,000 the exact TV is over twice the bound, so the measured TV (exact TV
    # minus at most the run's own noise, below the bound but for a 1e-6 chance) clears it. Seeded: deterministic.
    small = views.detectability(mode="phantom_history", k=2, M=1_000)
    large = views.detectability(mode="phantom_history", k=2, M=200_000)
    assert small.exact_tv == large.exact_tv and small.exact_tv < small.bound and large.exact_tv > 2 * large.bound
    assert not small.caught and large.caught
    assert "missed" in views.detectability_text(small) and "caught" in views.detectability_text(large)
    title = views.plot_detectability(mode="phantom_history", k=2, M=1_000).axes[0].get_title()
    assert title.endswith("not flagged at M = 1,000")
    correct = views.detectability(mode="correct", k=2, M=200_000)  # negative control: no false alarm
    assert not correct.caught and correct.exact_tv < 1e-12 and not correct.blind
    assert "exact decoder" in views.detectability_text(correct)


def test_detectability_reads_one_seeded_run():
    d = views.detectability(mode="phantom_history", k=1, M=1_000, seed=5)
    ch = sd.reference_chain()
    run = sd.decode_markov(ch.P, ch.Q, start=ch.start, horizon=3, k=1, num_samples=views.SIZES[-1],
                           mode="phantom_history",
                           generator=torch.Generator().manual_seed(5), Q_bad=ch.Q_bad)
    target = sd.sequence_law(ch.P, start=ch.start, horizon=3)
    assert d.measured_tv == sd.sequence_tv(run[:1_000], target)
    assert d.bound == sd.tv_noise_bound(target, 1_000)
    assert views.detectability(mode="phantom_history", k=1, M=1_000, seed=6).measured_tv != d.measured_tv


def test_detectability_uses_the_target_the_bug_should_sample():
    # target_policy_missing should sample P under top-p = 0.8, not P: its exact TV is measured against that
    ch = sd.reference_chain()
    bug = next(m for m in sd.failure_modes() if m.name == "target_policy_missing")
    law = sd.decoder_law(ch.P, ch.Q, start=ch.start, horizon=3, k=2, mode=bug.name)
    want = sd.sequence_law(bug.target(ch.P), start=ch.start, horizon=3)
    d = views.detectability(mode=bug.name, k=2, M=1_000)
    assert abs(d.exact_tv - sd.total_variation(law, want)) < 1e-12
    assert abs(d.exact_tv - sd.total_variation(law, sd.sequence_law(ch.P, start=ch.start, horizon=3))) > 0.01


@pytest.mark.parametrize("kwargs, error, match", [
    ({"mode": "nope"}, ValueError, "mode must be one of 'correct'"),
    ({"k": -1}, ValueError, "k must be >= 0"),
    ({"M": 0}, ValueError, "M must be >= 1"),
    ({"M": 1.5}, TypeError, "M must be an integer"),
    ({"seed": "1"}, TypeError, "seed must be an integer"),
])
def test_detectability_validates_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        views.plot_detectability(**kwargs)
    with pytest.raises(error, match=match):
        views.detectability(**kwargs)


def test_detectability_explorer_rejects_an_m_off_the_slider():
    with pytest.raises(ValueError, match="M must be one of"):
        views.detectability_explorer(M=1_234)


@pytest.mark.heavy
def test_detectability_explorer_each_control_redraws(fast_png):
    box = views.detectability_explorer()
    (mode,), (k, M), out = box.children[0].children, box.children[1].children, box.children[2]
    assert (mode.value, k.value, M.value) == ("phantom_history", 2, 10_000)
    assert (k.min, k.max) == (1, 6) and [v for _, v in M.options] == list(views.SIZES)
    seen = [(out.outputs[0]["data"]["image/png"], out.outputs[1]["text"])]
    assert "missed" in seen[0][1]
    for control, value in ((M, 200_000), (k, 4), (mode, "bonus_from_draft")):
        control.value = value
        seen.append((out.outputs[0]["data"]["image/png"], out.outputs[1]["text"]))
        assert seen[-1][0] != seen[-2][0] and seen[-1][1] != seen[-2][1]
    assert "caught" in seen[1][1] and "blind spot" in seen[3][1]  # phantom at 200,000; bonus_from_draft at k = 4
