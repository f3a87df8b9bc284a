"""Presentation: figures and widgets built on the math modules (which never import this package).

One module per notebook, imported as `views` there (`from specdec_lib.presentation import distribution as views`);
`sd.presentation.<module>` imports it on first use. Nothing here computes a law the notebooks assert on.
"""
import importlib

from .widgets import register_png_formatter

__all__ = ["audit", "bending_the_rules", "block_decoder", "cost_model", "distribution", "drafts_from_the_target",
           "field_guide",
           "figure_files", "many_drafts_and_trees", "measure_it", "optimal_verification", "sampling_surface", "style",
           "real_pair", "token_accounting",
           "widgets",
           "register_png_formatter"]

register_png_formatter()


def __getattr__(name: str):
    """sd.presentation.<module>: import one notebook's views module on first use."""
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
