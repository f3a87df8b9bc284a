"""Strict nbval over notebooks/ under environments that imitate other machines (`make test-portable`).

A stored output must not depend on the CPU, the BLAS path or the thread count. These variables make this
machine compute like another one: torch's generic kernels instead of AVX2/AVX-512 (ATEN_CPU_CAPABILITY),
MKL's reproducible or SSE4.2 code paths (MKL_CBWR, MKL_ENABLE_INSTRUCTIONS), and one thread. Every
notebook must pass strict nbval under each.

    python tools/nbval_envs.py                 # every environment, JOBS at a time (make test-portable)
    python tools/nbval_envs.py --only default  # one environment, output streamed (make test-notebooks)
    python tools/nbval_envs.py --skip default  # all but the default, which `make test` already ran (.ci/run)
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS = {  # name: the variables set (every variable of any environment is unset first)
    "default": {},
    "generic-kernels": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
    "one-thread": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "sse4.2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ATEN_CPU_CAPABILITY": "default"},
}
NBVAL = ["-m", "pytest", "--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
         "-p", "no:cacheprovider", "notebooks/"]


def environment(name: str) -> dict[str, str]:
    """os.environ with every imitation variable removed, then the named environment's set."""
    env = {k: v for k, v in os.environ.items() if not any(k in e for e in ENVIRONMENTS.values())}
    env.update(ENVIRONMENTS[name])
    return env


def label(name: str) -> str:
    """'sse4.2 (MKL_ENABLE_INSTRUCTIONS=SSE4_2 ATEN_CPU_CAPABILITY=default)'."""
    return f"{name} ({' '.join(f'{k}={v}' for k, v in ENVIRONMENTS[name].items()) or 'no variable set'})"


def selection(only: str | None = None, skip: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The environments to run, in ENVIRONMENTS order: `only` alone, or all of them but those in `skip`."""
    unknown = [name for name in ([only] if only else []) + list(skip) if name not in ENVIRONMENTS]
    if unknown:
        raise ValueError(f"unknown environment {unknown[0]!r}; valid: {', '.join(ENVIRONMENTS)}")
    if only and skip:
        raise ValueError("only and skip exclude each other: pass one of them")
    names = [only] if only else [name for name in ENVIRONMENTS if name not in skip]
    if not names:
        raise ValueError(f"skip leaves no environment to run (skipped {', '.join(skip)})")
    return names


def run(name: str, log: Path | None) -> tuple[str, int, float]:
    """(name, exit status, seconds) of one nbval run; its output goes to log, or to the terminal when None."""
    t0 = time.perf_counter()
    cmd, env = [sys.executable, *NBVAL], environment(name)
    if log is None:
        rc = subprocess.call(cmd, cwd=ROOT, env=env)
    else:
        with open(log, "w") as out:
            rc = subprocess.call(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return name, rc, time.perf_counter() - t0


def failures(log: Path, max_lines: int = 200) -> str:
    """The FAILURES section of a pytest log (where nbval shows each differing output), at most max_lines."""
    lines = log.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if "= FAILURES =" in line), max(0, len(lines) - 40))
    return "\n".join(lines[start:start + max_lines])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(ENVIRONMENTS), help="run one environment, its output streamed")
    parser.add_argument("--skip", action="append", default=[], choices=list(ENVIRONMENTS), metavar="NAME",
                        help=f"leave an environment out (repeatable); one of {', '.join(ENVIRONMENTS)}")
    parser.add_argument("--jobs", type=int, default=2, help="environments run at once (default 2)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    try:
        names = selection(args.only, args.skip)
    except ValueError as e:
        parser.error(str(e))
    if args.only:
        print(f"nbval under {label(args.only)}", flush=True)
        return run(args.only, None)[1]
    logs = Path(tempfile.mkdtemp(prefix="nbval-envs-"))
    skipped = f"; skipped: {', '.join(args.skip)}" if args.skip else ""
    print(f"strict nbval over notebooks/ in {len(names)} environments, {args.jobs} at a time "
          f"(logs in {logs}{skipped})", flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda n: run(n, logs / f"{n}.log"), names))
    failed = [name for name, rc, _ in results if rc]
    for name, rc, seconds in results:
        print(f"  {'PASS' if rc == 0 else 'FAIL'}  {label(name):<72} {seconds:5.0f} s")
    for name in failed:
        print(f"\n--- {label(name)}: the failing cells ---")
        print(failures(logs / f"{name}.log"))
    print(f"\ntest-portable: {len(results) - len(failed)} of {len(results)} environments pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
