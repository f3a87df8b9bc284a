"""The test entry points: what `make test-fast` leaves out (stat, heavy, slow, e2e), which nbval environments run.

tools/nbval_envs.py is imported and its selection checked with `run` replaced: no notebook is executed here.
"""
from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALL = ["default", "generic-kernels", "mkl-compatible", "one-thread", "sse4.2"]


@pytest.fixture(scope="module")
def nbval_envs():
    spec = importlib.util.spec_from_file_location("nbval_envs", ROOT / "tools" / "nbval_envs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_selection_of_environments(nbval_envs):
    assert list(nbval_envs.ENVIRONMENTS) == ALL
    assert nbval_envs.selection() == ALL
    assert nbval_envs.selection(only="one-thread") == ["one-thread"]
    assert nbval_envs.selection(skip=["default"]) == ALL[1:]
    assert nbval_envs.selection(skip=["sse4.2", "default"]) == ALL[1:-1]  # the table's order, whatever skip's


@pytest.mark.parametrize("kw, match", [
    ({"skip": ["defualt"]}, "unknown environment 'defualt'; valid: default, generic-kernels"),
    ({"only": "avx"}, "unknown environment 'avx'"),
    ({"only": "default", "skip": ["one-thread"]}, "only and skip exclude each other"),
    ({"skip": ALL}, "skip leaves no environment to run"),
])
def test_selection_rejects_what_it_cannot_run(nbval_envs, kw, match):
    with pytest.raises(ValueError, match=match):
        nbval_envs.selection(**kw)


@pytest.fixture
def runs(nbval_envs, monkeypatch, tmp_path):
    """main()'s calls to run(name, log), recorded instead of executed (each reports a pass)."""
    calls = []

    def fake_run(name, log):
        calls.append((name, log))
        return name, 0, 0.0

    monkeypatch.setattr(nbval_envs, "run", fake_run)
    monkeypatch.setattr(nbval_envs.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    return calls


@pytest.mark.parametrize("argv, names", [
    ([], ALL),  # make test-portable
    (["--skip", "default"], ALL[1:]),  # .ci/run: make test-portable PORTABLE_SKIP=default
    (["--skip", "default", "--skip", "one-thread", "--jobs", "1"], ["generic-kernels", "mkl-compatible", "sse4.2"]),
])
def test_main_runs_the_selected_environments(nbval_envs, runs, argv, names, capsys):
    assert nbval_envs.main(argv) == 0
    assert sorted(name for name, _ in runs) == sorted(names) and all(log is not None for _, log in runs)
    assert f"{len(names)} of {len(names)} environments pass" in capsys.readouterr().out


def test_main_only_streams_one_environment(nbval_envs, runs):
    assert nbval_envs.main(["--only", "default"]) == 0
    assert runs == [("default", None)]  # make test-notebooks: the output goes to the terminal


@pytest.mark.parametrize("argv, message", [
    (["--skip", "nope"], "invalid choice: 'nope'"),
    (["--only", "default", "--skip", "sse4.2"], "only and skip exclude each other"),
    ([f"--skip={name}" for name in ALL], "skip leaves no environment to run"),
    (["--jobs", "0"], "--jobs must be >= 1, got 0"),
])
def test_main_refuses_bad_arguments_before_running_anything(nbval_envs, runs, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        nbval_envs.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err and runs == []


# --- the Makefile and .ci/run ---------------------------------------------------------------------------------

def command(args: tuple[str, ...], script: str) -> list[str]:
    """The one command `make -n ARGS` would run that names `script` (a path or `-m module`), split into words.

    make -n prints every recipe line (the install's too, when .venv is stale) and runs none; echo lines are skipped."""
    out = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    found = [shlex.split(line) for line in out.splitlines() if script in line and not line.lstrip().startswith("echo")]
    assert len(found) == 1, (args, script, found)
    return found[0]


def test_portable_skips_only_what_portable_skip_names():
    assert command(("test-portable",), "tools/nbval_envs.py")[2:] == ["--jobs", "2"]  # all five
    assert command(("test-portable", "PORTABLE_SKIP=default"), "tools/nbval_envs.py")[2:] == [
        "--jobs", "2", "--skip", "default"]
    assert command(("test-portable", "PORTABLE_SKIP=default one-thread", "PORTABLE_JOBS=1"),
                   "tools/nbval_envs.py")[2:] == ["--jobs", "1", "--skip", "default", "--skip", "one-thread"]
    assert command(("test-notebooks",), "tools/nbval_envs.py")[2:] == ["--only", "default"]


def test_test_fast_leaves_out_stat_heavy_slow_and_e2e_and_test_keeps_stat_and_heavy():
    fast = command(("test-fast",), "-m pytest")
    assert fast[-2:] == ["-m", "not stat and not heavy and not slow and not e2e"] and "tests/" in fast
    lib = command(("test-lib",), "-m pytest")
    assert "-m" not in lib[3:], "make test-lib must run stat and heavy (pyproject's addopts leaves out e2e only)"
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in markers["addopts"]
    assert {m.split(":")[0] for m in markers["markers"]} == {"e2e", "slow", "stat", "heavy"}


def test_ci_runs_each_environment_once():
    lines = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    makes = [re.sub(r"\$\{PYTHON:\+PYTHON=\"\$PYTHON\"\}\s*", "", line).strip() for line in lines
             if line.startswith("make ") and "--version" not in line]
    assert makes == ["make lint", "make test", "make gpu-smoke", "make engines-env",
                     "make test-portable PORTABLE_SKIP=default", "make test-student", "make e2e"], makes
