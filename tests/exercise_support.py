"""Shared by the exercise tests: run a notebook's solution cells, and assert that a checker fails with its message."""
from pathlib import Path

import nbformat
import torch

import specdec_lib as sd

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def solutions(notebook: str | Path) -> dict:
    """The notebook's solution cells run in order, with torch and sd preloaded: {name: object}."""
    path = NOTEBOOKS / notebook if isinstance(notebook, str) else notebook
    ns = {"torch": torch, "sd": sd}
    for cell in nbformat.read(path, as_version=4).cells:
        if "solution" in cell.metadata.get("tags", []):
            exec(compile(cell.source, f"{path.name}:solution", "exec"), ns)
    return ns


def failing(checker, fn, *needles):
    """Run checker on fn (raise_on_failure=False): it must fail and mention every needle."""
    report = checker(fn, raise_on_failure=False, verbose=False)
    assert not report.ok, str(report)
    text = str(report)
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text}"
    return report
