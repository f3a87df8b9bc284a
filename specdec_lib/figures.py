"""`python -m specdec_lib.figures OUT_DIR`: write every key figure of the course as a PNG (fixed dpi and style)."""
from __future__ import annotations

import importlib
import pathlib
import sys

from .presentation.style import DPI

ACTS = ("distribution", "block_decoder", "token_accounting", "cost_model", "measure_it")  # presentation modules, in course order


def all_figures() -> dict:
    """Every presentation module's FIGURES, merged in course order: {file stem: zero-argument builder}."""
    figures = {}
    for act in ACTS:
        module = importlib.import_module(f"specdec_lib.presentation.{act}")
        figures.update(module.FIGURES)
    return figures


def write_figures(out_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """Build each figure and save it as OUT_DIR/<stem>.png; returns the paths written."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, build in all_figures().items():
        path = out / f"{stem}.png"
        build().savefig(path, dpi=DPI, metadata={"Software": None})  # no version stamp: stable files
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    """Command-line entry point."""
    if len(argv) != 1:
        print("usage: python -m specdec_lib.figures OUT_DIR", file=sys.stderr)
        return 2
    for path in write_figures(argv[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
