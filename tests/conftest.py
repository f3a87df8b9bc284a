"""Shared fixtures, and the skip of `slow` tests (markers e2e, slow, stat, heavy: registered in pyproject.toml)."""
import pytest


def _fingerprint(fig) -> bytes:
    """Stands in for PNG bytes: titles, texts and plotted data, which change whenever the picture does."""
    parts = []
    for ax in fig.axes:
        parts.append((ax.get_title(), [t.get_text() for t in ax.texts],
                      [list(map(float, line.get_ydata())) for line in ax.get_lines()],
                      [p.get_height() for p in ax.patches], [im.get_array().sum() for im in ax.images]))
    return repr(parts).encode()


@pytest.fixture
def fast_png(monkeypatch):
    """Skip PNG rendering in slider tests (rendering itself is tested in test_presentation_widgets)."""
    from specdec_lib.presentation import widgets  # here, not at the top: the engines venv has no matplotlib

    monkeypatch.setattr(widgets, "png_bytes", _fingerprint)


def pytest_collection_modifyitems(config, items):
    """Tests marked slow are skipped unless the -m expression names them (make test-student: -m slow)."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run by `make test-student` (pytest -m slow tests/course/test_student.py)")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)
