"""The environment files agree with each other, torch stays pinned, and `make lab` stays local.

requirements.lock is the one lock file; environment.yml is generated from it
(tools/sync_environment.py); pyproject.toml carries the ranges for people who install the library
alone. These tests keep the three consistent and guard the two expensive mistakes: a torch
requirement that could resolve to a multi-GB CUDA build, and a Jupyter server open to the network.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
REQ_IN = ROOT / "requirements.in"
ENV_YML = ROOT / "environment.yml"
PYPROJECT = ROOT / "pyproject.toml"
MAKEFILE = ROOT / "Makefile"

TORCH_VERSION = "2.13.0"


def requirement_lines(path: Path) -> list[str]:
    """Requirement lines of a pip requirements file, comments and blank lines removed."""
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def pins_of(lines: list[str], where: str) -> dict[str, str]:
    """{canonical name: version} for lines that must all be exact `name==version` pins."""
    pins: dict[str, str] = {}
    for line in lines:
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{where}: not an exact pin: {line!r}"
        assert "*" not in specs[0].version, f"{where}: wildcard pin: {line!r}"
        assert req.url is None and req.marker is None, f"{where}: unexpected url/marker: {line!r}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{where}: {req.name} pinned twice"
        pins[name] = specs[0].version
    return pins


def lock_pins() -> dict[str, str]:
    return pins_of(requirement_lines(LOCK), LOCK.name)


def environment() -> dict:
    return yaml.safe_load(ENV_YML.read_text())


def env_pip_section() -> list[str]:
    sections = [d["pip"] for d in environment()["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(sections) == 1, "environment.yml needs exactly one pip: section"
    return [str(x) for x in sections[0]]


def pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text())


def pyproject_requirements() -> list[Requirement]:
    data = pyproject()
    reqs = list(data["project"].get("dependencies", []))
    for extra in data["project"].get("optional-dependencies", {}).values():
        reqs += extra
    reqs += data.get("build-system", {}).get("requires", [])
    return [Requirement(r) for r in reqs]


def makefile_rule(target: str) -> str:
    """The recipe text of `target:` in the Makefile (its header line plus tab-indented lines)."""
    lines = MAKEFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"^{re.escape(target)}\s*:(?!=)", line):
            body = [line]
            for nxt in lines[i + 1:]:
                if not nxt.startswith("\t"):
                    break
                body.append(nxt)
            return "\n".join(body)
    raise AssertionError(f"Makefile has no rule for {target!r}")


# --- the lock and environment.yml ---------------------------------------------------------------

def test_lock_is_exact_pins_only():
    pins = lock_pins()
    assert len(pins) > 20, "requirements.lock looks truncated"
    for line in requirement_lines(LOCK):
        assert "+" not in line, f"local version label in the lock (install would fail off this machine): {line}"
        assert not line.startswith("-e"), f"editable line in the lock: {line}"
    assert "specdec-lib" not in pins, "the project itself must not be in the lock"


def test_torch_pinned_exactly_in_lock():
    pins = lock_pins()
    assert pins.get("torch") == TORCH_VERSION, f"requirements.lock must pin torch=={TORCH_VERSION}"


def test_environment_yml_pins_equal_lock():
    env_pins = pins_of([x for x in env_pip_section() if not x.startswith("-e")], ENV_YML.name)
    lock = lock_pins()
    missing = sorted(set(lock) - set(env_pins))
    extra = sorted(set(env_pins) - set(lock))
    differ = sorted(n for n in set(lock) & set(env_pins) if lock[n] != env_pins[n])
    assert not (missing or extra or differ), (
        f"environment.yml out of sync with requirements.lock (run tools/sync_environment.py): "
        f"missing={missing} extra={extra} differ={differ}"
    )


def test_environment_yml_shape():
    env = environment()
    assert env["name"] == "specdec"
    assert env["channels"] == ["conda-forge"]
    deps = env["dependencies"]
    assert "python=3.11" in deps
    assert "pip" in deps
    assert env_pip_section().count("-e .") == 1, "environment.yml must install the package with `-e .`"


def test_requirements_in_names_are_locked():
    lock = lock_pins()
    for line in requirement_lines(REQ_IN):
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in lock, f"requirements.in names {req.name}, which requirements.lock lacks"
        assert req.specifier.contains(lock[name], prereleases=True), (
            f"requirements.in says {line!r} but the lock has {req.name}=={lock[name]}"
        )


# --- pyproject ranges ---------------------------------------------------------------------------

@pytest.mark.parametrize("req", pyproject_requirements(), ids=str)
def test_pyproject_range_admits_locked_version(req: Requirement):
    lock = lock_pins()
    name = canonicalize_name(req.name)
    assert name in lock, f"pyproject names {req.name}, which requirements.lock lacks"
    assert req.specifier.contains(lock[name], prereleases=True), (
        f"locked {req.name}=={lock[name]} is outside pyproject's range {req}"
    )


def test_pyproject_torch_range_excludes_cuda_default_releases():
    torch_reqs = [r for r in pyproject_requirements() if canonicalize_name(r.name) == "torch"]
    assert torch_reqs, "pyproject should declare torch"
    for req in torch_reqs:
        assert str(req.specifier), "pyproject must not name torch without a version range"
        for v in ("2.14.0", "2.14.1", "2.15.0", "3.0.0"):
            assert not req.specifier.contains(v, prereleases=True), f"pyproject's {req} admits torch {v}"


# --- torch never unpinned in a requirement file -------------------------------------------------

def requirement_files() -> list[Path]:
    files = {ROOT / "requirements.lock", ROOT / "requirements.in"}
    for pattern in ("requirements*.txt", "requirements*.in", "requirements*.lock", "*.lock", "**/requirements*.txt"):
        files.update(p for p in ROOT.glob(pattern) if ".venv" not in p.parts)
    return sorted(files)


@pytest.mark.parametrize("path", requirement_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_requirement_file_pins_torch_exactly(path: Path):
    for line in requirement_lines(path):
        if line.startswith("-"):
            continue
        req = Requirement(line)
        if canonicalize_name(req.name) == "torch":
            specs = list(req.specifier)
            assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, (
                f"{path.name}: torch must be pinned with == (an open torch pulls a CUDA build): {line!r}"
            )


def test_environment_yml_pins_torch_exactly():
    torch_lines = [x for x in env_pip_section() if re.match(r"^torch\b(?![-_.\w])", x, re.I)]
    assert torch_lines == [f"torch=={TORCH_VERSION}"]


def test_no_unpinned_torch_install_in_scripts():
    """`pip install torch` (or `torch>=...`) in the Makefile or CI scripts would pull a CUDA build."""
    scripts = [MAKEFILE, *sorted((ROOT / ".ci").glob("*")), *sorted((ROOT / "tools").glob("*"))]
    for path in scripts:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            if re.search(r"\bpip3?\b.*\binstall\b", line):
                for m in re.finditer(r"(?<![\w./-])torch(?![\w-])(\S*)", line):
                    assert m.group(1).startswith("=="), f"{path.name}: unpinned torch install: {line.strip()!r}"


# --- the installed environment matches the lock ---------------------------------------------------

def test_installed_packages_match_lock():
    """The running environment (normally .venv) holds the locked versions; run `make install` if not."""
    drift = []
    for name, version in lock_pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            drift.append(f"{name}: missing (lock {version})")
            continue
        if Version(installed).public != Version(version).public:
            drift.append(f"{name}: installed {installed}, lock {version}")
    assert not drift, "environment differs from requirements.lock:\n" + "\n".join(drift)


def test_makefile_min_python_covers_locked_packages():
    """The Makefile's MIN_PYTHON check must not let through a Python the locked packages reject."""
    m = re.search(r"^MIN_PYTHON\s*:?=\s*(\S+)", MAKEFILE.read_text(), re.M)
    assert m, "Makefile should define MIN_PYTHON"
    min_python = m.group(1)
    assert Version(min_python) >= Version("3.10")
    too_old = []
    for name in lock_pins():
        try:
            requires = importlib.metadata.metadata(name).get("Requires-Python")
        except importlib.metadata.PackageNotFoundError:
            continue  # reported by test_installed_packages_match_lock
        if requires and not SpecifierSet(requires).contains(min_python, prereleases=True):
            too_old.append(f"{name} requires Python {requires}")
    assert not too_old, f"MIN_PYTHON={min_python} is too low:\n" + "\n".join(too_old)
    assert sys.version_info[:3] >= tuple(int(x) for x in min_python.split("."))


# --- make lab stays local and authenticated -------------------------------------------------------

def test_lab_rule_binds_localhost():
    rule = makefile_rule("lab")
    assert "--ServerApp.ip=127.0.0.1" in rule
    assert "0.0.0.0" not in rule and "--ip=*" not in rule and "ServerApp.ip=*" not in rule
    assert len(re.findall(r"--(?:ServerApp\.)?ip[= ]", rule)) == 1, "exactly one ip setting, 127.0.0.1"


def test_lab_rule_never_uses_empty_token():
    rule = makefile_rule("lab")
    assert "--IdentityProvider.token=" in rule and "ServerApp.token" not in rule  # ServerApp.token is deprecated
    for m in re.finditer(r"token=(\S*)", rule):
        value = m.group(1)
        assert value not in ("", "''", '""', "\\'\\'"), f"empty token in lab rule: {m.group(0)!r}"
    assert "--IdentityProvider.token=\"$$TOKEN\"" in rule, "lab should pass the generated/given token"
    assert "secrets." in rule, "lab should generate a random token with python secrets"
    assert re.search(r'if \[ -z "\$\$TOKEN" \]', rule), "lab should refuse/replace an empty token"
    assert "NotebookApp.token" not in rule and "disable_check_xsrf" not in rule
    assert "password=''" not in rule and 'password=""' not in rule


def test_lab_rule_allow_root_only_for_root():
    rule = makefile_rule("lab")
    for line in rule.splitlines():
        if "--allow-root" in line:
            assert "id -u" in line, f"--allow-root must be conditional on running as root: {line.strip()!r}"


def test_ci_run_is_executable():
    ci = ROOT / ".ci" / "run"
    assert ci.is_file() and os.access(ci, os.X_OK)
    text = ci.read_text()
    assert "set -euo pipefail" in text and "make test" in text


# --- the audit extra (transformers) ---------------------------------------------------------------

def locked_closure(root: str) -> dict[str, str]:
    """{name: version} of an installed distribution and everything it requires (markers evaluated, no extras)."""
    seen: dict[str, str] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen[name] = importlib.metadata.version(name)
        for raw in importlib.metadata.requires(name) or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_audit_extra_is_pinned_in_pyproject_and_lock():
    audit = [Requirement(r) for r in pyproject()["project"]["optional-dependencies"]["audit"]]
    assert [canonicalize_name(r.name) for r in audit] == ["transformers"]
    specs = list(audit[0].specifier)
    assert len(specs) == 1 and specs[0].operator == "==", "the audit's verdicts are about one transformers version"
    assert lock_pins()["transformers"] == specs[0].version


def test_lock_holds_the_audit_extra_with_all_its_dependencies():
    """`make install` installs the lock: every package transformers needs must be pinned there, torch untouched."""
    lock = lock_pins()
    closure = locked_closure("transformers")
    missing = sorted(n for n in closure if n not in lock)
    assert not missing, f"transformers needs packages the lock does not pin: {missing}"
    for name in closure:
        for raw in importlib.metadata.requires(name) or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                assert req.specifier.contains(lock[canonicalize_name(req.name)], prereleases=True), (name, raw)
    assert lock["torch"] == TORCH_VERSION and ("torch" not in closure or closure["torch"].startswith(TORCH_VERSION))


def test_install_rule_checks_requirements_and_keeps_the_locked_torch():
    rule = makefile_rule("$(STAMP)")
    assert "$(VENV)/bin/pip install -r requirements.lock" in rule
    assert "$(VENV)/bin/pip check" in rule, "make install must fail if the audit extra's requirements are not met"
    assert "sed -n 's/^torch==//p' requirements.lock" in rule and 'torch.__version__.split("+")[0]' in rule


def test_installed_torch_is_the_cpu_build():
    import torch

    assert torch.__version__.split("+")[0] == TORCH_VERSION
    assert torch.version.cuda is None, "a CUDA torch replaced the CPU build"
