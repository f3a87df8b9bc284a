"""Field-guide figures: the exact-TV bars, the bug view, the card and the dropdown."""
import pytest
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
    assert isinstance(views.FIGURES[name](), Figure)
