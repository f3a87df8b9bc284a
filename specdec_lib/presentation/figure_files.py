"""Every registered figure of the course, written as PNG files (fixed dpi and style): `make figures`."""
from __future__ import annotations

import importlib
import pathlib
import pkgutil

from .. import presentation
from .style import DPI

__all__ = ["ACTS", "figure_modules", "all_figures", "write_figures"]

# presentation modules in course order; any other module with FIGURES follows, so none is ever left out
ACTS = ("distribution", "block_decoder", "field_guide", "audit", "sampling_surface", "engines", "token_accounting",
        "cost_model", "gpu_regime", "measure_it", "real_pair", "many_drafts_and_trees", "bending_the_rules",
        "optimal_verification", "drafts_from_the_target")


def figure_modules() -> list[str]:
    """Every presentation module that defines FIGURES: those of ACTS in course order, then the rest by name."""
    found = sorted(m.name for m in pkgutil.iter_modules(presentation.__path__)
                   if hasattr(importlib.import_module(f"{presentation.__name__}.{m.name}"), "FIGURES"))
    return [a for a in ACTS if a in found] + [m for m in found if m not in ACTS]


def all_figures() -> dict:
    """Every presentation module's FIGURES, merged in course order: {file stem: zero-argument builder}."""
    figures = {}
    for name in figure_modules():
        for stem, build in importlib.import_module(f"{presentation.__name__}.{name}").FIGURES.items():
            if stem in figures:
                raise ValueError(f"figure {stem!r} is registered twice (second time in presentation.{name})")
            figures[stem] = build
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
