"""`python -m specdec_lib.presentation OUT_DIR`: write every registered figure of the course as a PNG."""
from __future__ import annotations

import sys

from .figure_files import write_figures


def main(argv: list[str]) -> int:
    """Command-line entry point."""
    if len(argv) != 1:
        print("usage: python -m specdec_lib.presentation OUT_DIR", file=sys.stderr)
        return 2
    for path in write_figures(argv[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
