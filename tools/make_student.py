#!/usr/bin/env python3
"""Write the learners' copies of the notebooks: every `solution` cell's functions stubbed, all outputs cleared.

    python tools/make_student.py [--out student] [notebooks ...]      (default: notebooks/[0-9]*.ipynb)

In a cell tagged `solution`, each function keeps its def line and docstring; its body becomes
`raise NotImplementedError(...)`. Code outside functions is kept as it is. The `exercise-check` cells are kept, so a
learner's copy runs top to bottom and fails only in the check cells, with NotImplementedError, until the exercises
are done. Functions are found with `ast`, so decorators, multi-line signatures and nested helpers are handled.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import nbformat

SOLUTION_TAG = "solution"
STUB = 'raise NotImplementedError("exercise: write the body of {name}")'


def stub_source(source: str) -> str:
    """The cell's source with the body of every top-level function replaced by a NotImplementedError stub."""
    tree = ast.parse(source)
    lines = source.splitlines()
    cuts = []  # (first body line, last body line, indent, name), 1-based line numbers
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        first = body[0]
        has_doc = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                   and isinstance(first.value.value, str))
        keep_until = first.end_lineno if has_doc else first.lineno - 1  # the def header (and docstring) stay
        if first.lineno == node.lineno:  # a one-line def: `def f(x): return x`
            raise ValueError(f"put the body of {node.name} on its own lines so it can be stubbed")
        indent = " " * first.col_offset
        cuts.append((keep_until + 1, node.end_lineno, indent, node.name))
    for start, end, indent, name in reversed(cuts):
        lines[start - 1:end] = [indent + STUB.format(name=name)]
    return "\n".join(lines)


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy with solution cells stubbed and every output and execution count cleared."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if SOLUTION_TAG in cell.metadata.get("tags", []):
            cell.source = stub_source(cell.source)
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)  # stored widget state belongs to the executed edition
    return nb


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/[0-9]*.ipynb")
    parser.add_argument("--out", type=Path, default=root / "student", help="output folder (default: student/)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    args.out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        n_solutions = sum(SOLUTION_TAG in c.metadata.get("tags", []) for c in nb.cells)
        nbformat.write(student_notebook(nb), args.out / path.name)
        print(f"{args.out / path.name}: {n_solutions} solution cell(s) stubbed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
