"""The learners' copies (tools/make_student.py): no solution code, and they run top to bottom failing only in the
check cells, with NotImplementedError. Executing the eleven notebooks with exercises takes minutes: marked slow, run by
`make test-student`."""
import ast
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_student  # noqa: E402

EXERCISE_NOTEBOOKS = ["01_distribution", "02_block_decoder", "02b_field_guide", "02c_audit", "02d_sampling_surface",
                      "03_token_accounting", "04_cost_model", "05_measure_it", "06_many_drafts_and_trees",
                      "07_bending_the_rules", "08_optimal_verification",
                      "09_drafts_from_the_target"]


def tags(cell):
    return cell.metadata.get("tags", [])


def solution_functions(source):
    return [n for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def body_lines(source, fn):
    """The stripped source lines of fn's body after its docstring."""
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    lines = source.splitlines()[body[0].lineno - 1:fn.end_lineno]
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_student.py"), "--out", str(out)], check=True,
                   capture_output=True, text=True)
    return out


def test_stub_keeps_signature_and_docstring():
    src = 'X = 1\n\n@staticmethod\ndef f(a,\n      b=2):\n    """Doc."""\n    y = a + b  # sum\n    return y\n\n' \
          'def g(x):\n    return x\n'
    out = make_student.stub_source(src)
    assert out == ('X = 1\n\n@staticmethod\ndef f(a,\n      b=2):\n    """Doc."""\n'
                   '    raise NotImplementedError("exercise: write the body of f")\n\n'
                   'def g(x):\n    raise NotImplementedError("exercise: write the body of g")')
    ns = {}
    exec(out.replace("@staticmethod\n", ""), ns)
    with pytest.raises(NotImplementedError):
        ns["f"](1)


@pytest.mark.heavy
@pytest.mark.parametrize("name", EXERCISE_NOTEBOOKS)
def test_student_copy_has_stubs_and_no_solution_code(student_dir, name):
    original = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    student = nbformat.read(student_dir / f"{name}.ipynb", as_version=4)
    assert [c.cell_type for c in student.cells] == [c.cell_type for c in original.cells]
    code = [c for c in student.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    text = "\n".join(c.source for c in student.cells)
    solutions = [c for c in original.cells if "solution" in tags(c)]
    assert solutions
    for cell in solutions:
        for fn in solution_functions(cell.source):
            assert f'raise NotImplementedError("exercise: write the body of {fn.name}")' in text
            assert f"def {fn.name}(" in text
            distinctive = max(body_lines(cell.source, fn), key=len)
            assert distinctive not in text, f"{name}: solution line {distinctive!r} of {fn.name} leaked"


@pytest.mark.slow
@pytest.mark.parametrize("name", EXERCISE_NOTEBOOKS)
def test_student_notebook_runs_and_fails_only_in_check_cells(student_dir, name):
    from nbclient import NotebookClient

    nb = nbformat.read(student_dir / f"{name}.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(student_dir)}}).execute()
    errors = [(i, c, o) for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    checks = [i for i, c in enumerate(nb.cells) if "exercise-check" in tags(c)]
    assert errors, f"{name}: no check cell failed, but every exercise is a stub"
    for i, cell, out in errors:
        assert "exercise-check" in tags(cell), f"{name}: cell {i} (not a check cell) failed: {out.ename}: {out.evalue}"
        assert out.ename == "NotImplementedError", f"{name}: check cell {i} failed with {out.ename}: {out.evalue}"
    assert sorted({i for i, _, _ in errors}) == checks, f"{name}: every check cell must fail until its exercise is done"
