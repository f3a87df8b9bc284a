"""The command line: python -m specdec_lib.conformance package.module:function [--convention ...] [--seed ...]."""
from __future__ import annotations

import argparse
import importlib
import sys
import time

from .adapters import CONVENTIONS
from .check import audit_verifier

__all__ = ["load", "main"]


def load(target: str):
    """'package.module:function' (attributes may be dotted) -> the object; ValueError if the form is wrong."""
    if target.count(":") != 1:
        raise ValueError(f"target must look like package.module:function, got {target!r}")
    module, attr = target.split(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def main(argv: list[str] | None = None) -> int:
    """Audit the verifier named on the command line; the exit code: 0 passed, 1 failed, 2 it could not be loaded."""
    parser = argparse.ArgumentParser(prog="python -m specdec_lib.conformance",
                                     description="Check a speculative block verifier against exact laws.")
    parser.add_argument("target", help="package.module:function, e.g. specdec_lib:verify_block")
    parser.add_argument("--convention", default="probs", choices=CONVENTIONS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        fn = load(args.target)
    except (ValueError, ImportError, AttributeError) as err:
        print(f"error: cannot load {args.target}: {err}", file=sys.stderr)
        return 2
    if not callable(fn):
        print(f"error: {args.target} is a {type(fn).__name__}, not a function", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    report = audit_verifier(fn, convention=args.convention, seed=args.seed, subject=args.target)
    print(report)
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0 if report.passed else 1
