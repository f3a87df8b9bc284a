"""Fixtures and helpers for the browser tests: a throwaway JupyterLab server and Debian's Chromium via Playwright.

Nothing here downloads a browser: Playwright's Python package drives /usr/bin/chromium (override with
E2E_CHROMIUM). The server runs on 127.0.0.1, a free port and a random token, with every Jupyter, IPython
and matplotlib folder in a temporary directory, over a COPY of notebooks/ (running cells in the browser
can never autosave over the committed notebooks).

Screenshots go to build/e2e/screenshots/; with E2E_UPDATE_SCREENSHOTS=1 they are also copied into
docs/screenshots/ (what the README shows). Timings are printed at the end of the run and written to
build/e2e/timings.json.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
OUT = ROOT / "build" / "e2e"
SCREENSHOTS = OUT / "screenshots"
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"
CHROMIUM = os.environ.get("E2E_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 "--disable-dev-shm-usage"]
# JupyterLab user settings written before the server starts.
LAB_SETTINGS = {
    # no news toast, no update check (both would fetch from the network)
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    # the browser never writes a notebook back
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    # every cell in the DOM, so selectors see every output
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}

TIMINGS: dict[str, float] = {}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def shows_widgets(notebook: str) -> bool:
    """Whether the committed notebook displays any widget (a notebook with none has nothing to move)."""
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    return any(WIDGET_VIEW in out.get("data", {}) for cell in nb["cells"] if cell["cell_type"] == "code"
               for out in cell.get("outputs", []))


def record_timing(name: str, seconds: float) -> None:
    TIMINGS[name] = round(seconds, 1)


def save_screenshot(page_or_locator, name: str) -> Path:
    """Write build/e2e/screenshots/NAME.png (and docs/screenshots/NAME.png with E2E_UPDATE_SCREENSHOTS=1)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page_or_locator.screenshot(path=str(path))
    if os.environ.get("E2E_UPDATE_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, DOCS_SCREENSHOTS / path.name)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A running `jupyter lab` subprocess with its URL and token, and a tiny client for its REST API."""

    def __init__(self, proc: subprocess.Popen, port: int, token: str, root: Path, log: Path):
        self.proc, self.port, self.token, self.root, self.log = proc, port, token, root, log
        self.base = f"http://127.0.0.1:{port}"

    def api(self, method: str, path: str, timeout: float = 10):
        req = urllib.request.Request(self.base + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def url(self, notebook: str) -> str:
        return f"{self.base}/lab/tree/notebooks/{notebook}?reset&token={self.token}"

    def delete_sessions(self, path_suffix: str = "") -> list[str]:
        """DELETE /api/sessions/<id> (which shuts the kernel down) for every session whose path ends so."""
        deleted = []
        for s in self.api("GET", "/api/sessions"):
            if s.get("path", "").endswith(path_suffix):
                self.api("DELETE", f"/api/sessions/{s['id']}", timeout=30)
                deleted.append(s["id"])
        return deleted


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> LabServer:
    tmp = tmp_path_factory.mktemp("lab")
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "mpl"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")]:
        (tmp / sub).mkdir()
        env[var] = str(tmp / sub)
    env["JUPYTER_PREFER_ENV_PATH"] = "1"  # the python3 kernel is this environment's Python
    for rel, settings in LAB_SETTINGS.items():
        f = tmp / "settings" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(settings))
    root = tmp / "root"
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))

    port, token = free_port(), secrets.token_urlsafe(24)
    jupyter = Path(sys.executable).parent / "jupyter"
    cmd = [str(jupyter), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = tmp / "lab.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=root)
    server = LabServer(proc, port, token, root, log)
    t0 = time.perf_counter()
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                server.api("GET", "/api/status", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.perf_counter() - t0 > 90:
                    pytest.fail(f"jupyter lab did not answer in 90 s:\n{log.read_text()[-3000:]}")
                time.sleep(0.25)
        record_timing("lab server start", time.perf_counter() - t0)
        yield server
    finally:
        try:
            if proc.poll() is None:
                server.delete_sessions()
                left = server.api("GET", "/api/kernels")
                assert not left, f"kernels still running after deleting the sessions: {left}"
        finally:
            proc.terminate()  # stop the server by its PID
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(scope="session")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: install Debian's Chromium "
                    "(apt-get install -y --no-install-recommends chromium); never `playwright install`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def pytest_terminal_summary(terminalreporter):
    if not TIMINGS:
        return
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "timings.json").write_text(json.dumps(TIMINGS, indent=1) + "\n")
    terminalreporter.write_sep("-", "e2e timings (s)")
    for name, seconds in TIMINGS.items():
        terminalreporter.write_line(f"{seconds:8.1f}  {name}")
    shots = sorted(SCREENSHOTS.glob("*.png")) if SCREENSHOTS.is_dir() else []
    if shots:
        where = "and docs/screenshots/" if os.environ.get("E2E_UPDATE_SCREENSHOTS") == "1" else \
            "(E2E_UPDATE_SCREENSHOTS=1 also copies them into docs/screenshots/)"
        terminalreporter.write_line(f"screenshots: {', '.join(p.name for p in shots)} in "
                                    f"{SCREENSHOTS.relative_to(ROOT)}/ {where}")
