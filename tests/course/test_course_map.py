"""One house style for every notebook's opening, a course map that agrees with it, and a short closing page."""
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
README = (ROOT / "README.md").read_text()


def opening(path: Path) -> str:
    return nbformat.read(path, as_version=4).cells[0].source


def book():
    """tools/book/build_book.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("build_book", ROOT / "tools" / "book" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_opens_the_same_way(path):
    text = opening(path)
    assert re.match(rf"# {re.escape(path.stem.split('_')[0])} · \S", text), f"{path.name}: title must be 'NN · Title'"
    paras = [p.strip() for p in text.split("\n\n")]
    assert not paras[1].startswith(("**", ">", "-")), f"{path.name}: a paragraph saying what it is about comes first"
    heads = ["**What you'll learn**", "**What you'll do**", "**What you'll need:**", "> **Notation.**"]
    where = [text.find(h) for h in heads]
    assert -1 not in where and where == sorted(where), f"{path.name}: learn, do, need, then the notation box"
    need = next(p for p in paras if p.startswith("**What you'll need:**"))
    assert re.search(r"About \d+ minutes", need), f"{path.name}: the need paragraph gives the time"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_course_map_lists_every_notebook_with_its_time(path):
    row = next((line for line in README.splitlines() if line.startswith(f"| `notebooks/{path.name}`")), None)
    assert row, f"README's course map has no row for {path.name}"
    minutes = re.search(r"About (\d+) minutes", opening(path)).group(1)
    assert row.rstrip().endswith(f"| {minutes} min |"), f"{path.name}: the map and the notebook disagree on the time"


def test_the_offline_index_reads_each_opening():
    build_book = book()
    for path in NOTEBOOKS:
        question, need = build_book.opening(nbformat.read(path, as_version=4))
        assert len(question) > 40 and "What you'll" not in question, path.name
        assert re.search(r"About \d+ minutes", need) and not need.startswith(("*", "-", "—")), path.name
    assert book().markdown_inline("a `b` *c*") == "a <code>b</code> <em>c</em>"


def test_the_closing_page_is_short_and_linked():
    text = (ROOT / "docs" / "carry_away.md").read_text()
    bullets = [line for line in text.splitlines() if line.startswith("- ")]
    assert text.startswith("# What to carry away") and 3 <= len(bullets) <= 8
    assert "docs/carry_away.md" in README
