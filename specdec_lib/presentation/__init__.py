"""Presentation: figures and widgets built on the math modules (which never import this package)."""
from .widgets import register_png_formatter

register_png_formatter()
