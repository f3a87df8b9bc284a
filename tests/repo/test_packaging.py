"""Each packaging fact is written once: the version in specdec_lib/__init__.py, the Python floor in the Makefile."""
from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

import specdec_lib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def min_python() -> str:
    """The Makefile's MIN_PYTHON, the floor `make install` enforces."""
    m = re.search(r"^MIN_PYTHON\s*:?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert m, "Makefile should define MIN_PYTHON"
    return m.group(1)


def test_the_version_is_read_from_the_package():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project.get("dynamic", []), "pyproject must not repeat it"
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "specdec_lib.__version__"}
    assert Version(specdec_lib.__version__) == Version(specdec_lib.__version__.strip())  # a valid version


def test_installed_metadata_carries_the_package_version():
    # the editable install's dist-info: stale (a reinstall is due: `make install`) if __version__ moved since
    assert importlib.metadata.version("specdec_lib") == specdec_lib.__version__


def test_requires_python_is_the_makefiles_min_python():
    floor = min_python()
    spec = PYPROJECT["project"]["requires-python"]
    assert spec == f">={floor}", f"pyproject says requires-python {spec!r}, the Makefile MIN_PYTHON {floor}"
    # the same floor, not merely a compatible one: the floor passes, the release just below it does not
    major, minor, patch = Version(floor).release
    assert SpecifierSet(spec).contains(floor) and not SpecifierSet(spec).contains(f"{major}.{minor}.{patch - 1}")
    assert importlib.metadata.metadata("specdec_lib")["Requires-Python"] == spec  # what pip installed agrees
    # ruff's pyupgrade rules target the same Python
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
