"""`make figures` writes every registered figure, and every notebook's presentation module is registered."""
import pathlib
import re

import pytest
from matplotlib.figure import Figure

from specdec_lib.presentation import figure_files as figures

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def presentation_module(notebook: pathlib.Path) -> str:
    """notebooks/02b_field_guide.ipynb -> field_guide: the module that draws the notebook's figures."""
    return re.sub(r"^\d+[a-z]?_", "", notebook.stem)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_has_registered_figures(notebook):
    name = presentation_module(notebook)
    assert name in figures.figure_modules(), f"{notebook.name}: presentation.{name} is missing or has no FIGURES"
    module = __import__(f"specdec_lib.presentation.{name}", fromlist=["FIGURES"])
    assert module.FIGURES and set(module.FIGURES) <= set(figures.all_figures())


def test_course_order_comes_first():
    assert figures.figure_modules()[:len(figures.ACTS)] == list(figures.ACTS)
    assert len(NOTEBOOKS) >= 6  # the negative control of the test above: it must have notebooks to check


@pytest.mark.heavy
def test_write_figures_writes_the_whole_registry(tmp_path, monkeypatch):
    saved = []

    def fake_savefig(self, path, **kw):  # every builder runs; only the PNG encoding is skipped
        assert isinstance(self, Figure)
        pathlib.Path(path).write_bytes(b"png")
        saved.append(pathlib.Path(path).stem)

    monkeypatch.setattr(Figure, "savefig", fake_savefig)
    written = figures.write_figures(tmp_path)
    assert saved == list(figures.all_figures()) == [p.stem for p in written]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{s}.png" for s in saved)


def test_a_stem_registered_twice_is_an_error(monkeypatch):
    from specdec_lib.presentation import field_guide
    monkeypatch.setitem(field_guide.FIGURES, "act1_shared_mass", field_guide.plot_guide_tv)
    with pytest.raises(ValueError, match="'act1_shared_mass' is registered twice"):
        figures.all_figures()
