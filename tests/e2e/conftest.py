"""pytest wiring for tests/e2e: the fixtures and the timing summary live in e2e_support.py.

(A module of its own, so that test modules import helpers by a name no other conftest.py can shadow.)
"""
from e2e_support import browser, lab, pytest_terminal_summary  # noqa: F401  (fixtures and a hook)
