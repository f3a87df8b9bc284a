#!/usr/bin/env python3
"""Rewrite environment.yml (conda) from requirements.lock so that both carry the same pins.

Usage: python tools/sync_environment.py [LOCK] [ENVIRONMENT_YML]   (defaults: requirements.lock environment.yml)
`make lock` runs it after regenerating the lock. tests/repo/test_environment.py checks the two agree.
Standard library only, so it runs with any python3.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TEMPLATE = """\
# Conda environment for the specdec course. GENERATED from requirements.lock by
# tools/sync_environment.py (`make lock`); do not edit by hand, edit requirements.in and run `make lock`.
#     conda env create -f environment.yml && conda activate specdec
# The pip pins below are exactly those of requirements.lock; `-e .` installs specdec_lib from this checkout.
name: specdec
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - pip:
{pins}
      - -e .
"""


def read_pins(lock: Path) -> list[str]:
    pins = []
    for raw in lock.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "==" not in line or any(c in line for c in "<>~!;@ "):
            sys.exit(f"sync_environment: {lock}: not an exact pin: {raw!r}")
        pins.append(line)
    if not pins:
        sys.exit(f"sync_environment: {lock}: no pins")
    return pins


def main(argv: list[str]) -> int:
    lock = Path(argv[1]) if len(argv) > 1 else ROOT / "requirements.lock"
    env = Path(argv[2]) if len(argv) > 2 else ROOT / "environment.yml"
    pins = read_pins(lock)
    env.write_text(TEMPLATE.format(pins="\n".join(f"      - {p}" for p in pins)))
    print(f"sync_environment: wrote {env} ({len(pins)} pins from {lock.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
