"""Field-guide figures: the exact-TV bars, the bug view, the card and the dropdown."""
import pytest
import torch
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.presentation import field_guide as views
from specdec_lib.presentation import widgets


@pytest.fixture(scope="module")
def rows():
    return views.guide_rows()


@pytest.mark.heavy
def test_rows_cover_the_registry(rows):
    assert [r.name for r in rows] == [m.name for m in sd.failure_modes()]
    assert all((r.exact_tv < 1e-12) == r.exact for r in rows)
    table = views.guide_table(rows)
    assert table.splitlines()[1].startswith("correct") and "transformers #47932" in table


@pytest.mark.heavy
def test_guide_bars(rows):
    fig = views.plot_guide_tv(rows, threshold=0.02)
    ax = fig.axes[0]
    assert len(ax.patches) == len(rows)
    red = [p for p in ax.patches if p.get_facecolor()[0] > 0.7]  # correctness bugs are drawn red
    assert len(red) == sum(not r.exact for r in rows)
    top = max(ax.get_yticklabels(), key=lambda t: t.get_position()[1])
    assert top.get_text() == "correct"  # the registry's order, top to bottom


def test_bug_view_and_card():
    fig = views.plot_bug("bonus_from_draft")
    assert isinstance(fig, Figure) and "bonus_from_draft" in fig.axes[0].get_title()
    assert "exact: costs only speed" in views.bug_card("stale_draft_cache")
    assert "wrong: exact TV 0.5061" in views.bug_card("greedy_draft_softmax_q")


def test_explorer_switches_bug(monkeypatch):
    monkeypatch.setattr(widgets, "png_bytes", lambda fig: b"png")
    box = views.field_guide_explorer()
    dropdown, out = box.children[0].children[0], box.children[-1]
    assert out.outputs[1]["text"].startswith("greedy_draft_softmax_q")
    dropdown.value = "reused_uniform"
    assert out.outputs[1]["text"].startswith("reused_uniform")


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name):
    """Each figure draws the exact engine's numbers, computed here from the engine directly: one bar per field-guide
    mode in registry order, its width the mode's exact TV to 1e-12 (0 for the exact ones); the bug's figure carries
    its exact law and the target's, every sequence's probability (as multisets, the figure sorts them)."""
    from specdec_lib.markov import chain, exact
    from specdec_lib.markov.registry import MODES, failure_modes

    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure)
    ch = chain.reference_chain()

    def law(mode):
        got = exact.decoder_law(ch.P, ch.Q, start=ch.start, horizon=3, k=2, mode=mode, Q_bad=ch.Q_bad)
        return got, chain.sequence_law(MODES[mode].target(ch.P), start=ch.start, horizon=3)

    ax = fig.axes[0]
    if name == "act2b_field_guide_tv":
        modes = failure_modes(chapter="field guide")
        assert [t.get_text() for t in ax.get_yticklabels()] == [m.name for m in modes]
        widths = [bar.get_width() for bar in ax.patches]  # one bar per mode, in registry order (top to bottom)
        tvs = [float(sd.total_variation(*law(m.name))) for m in modes]
        assert max(abs(w - tv) for w, tv in zip(widths, tvs)) < 1e-12 and len(widths) == len(modes)
        assert all((tv < 1e-12) == m.exact for tv, m in zip(tvs, modes))
    else:
        got, want = law("greedy_draft_softmax_q")
        line = ax.get_lines()[0]
        drawn = torch.tensor(sorted(line.get_ydata()), dtype=torch.float64)
        assert (drawn - got.flatten().sort().values).abs().max() < 1e-12
        bars = torch.tensor(sorted(bar.get_height() for bar in ax.patches), dtype=torch.float64)
        assert (bars - want.flatten().sort().values).abs().max() < 1e-12
        assert f"TV {float(sd.total_variation(got, want)):.4f}" in line.get_label()
