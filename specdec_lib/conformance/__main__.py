"""python -m specdec_lib.conformance package.module:function: prints the report, exits 1 on failure."""
from .cli import main

__all__: list[str] = []

raise SystemExit(main())
