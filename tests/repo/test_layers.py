"""The package's layers, read off its import statements: imports only go down, and no private name crosses a module.

core (specdec_lib/*.py) imports nothing else of the package; surface/ (the generation loop with the whole sampling
surface) imports core and itself; markov/ and lab/ import core, surface and themselves, never each other;
presentation/ and exercises/ sit on top (exercises read the lab's recordings, not the kit), and only notebooks and
tools import them;
conformance/ (the kit) imports core, surface and markov, and only presentation/ imports it: presentation sits above the
kit, whose reports it draws (the facade specdec_lib/__init__.py re-exports core, markov and lab, never presentation,
exercises or conformance).
"""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "specdec_lib"
MODULES = sorted(p for p in PKG.rglob("*.py"))
ALLOWED = {  # layer -> the layers it may import
    "facade": {"core", "surface", "markov", "lab"},
    "core": {"core"},
    "surface": {"core", "surface"},
    "markov": {"core", "surface", "markov"},
    "lab": {"core", "surface", "lab"},
    "presentation": {"core", "surface", "markov", "lab", "presentation", "conformance"},
    "exercises": {"core", "surface", "markov", "lab", "exercises"},
    "conformance": {"core", "surface", "markov", "conformance"},
}


SUBPACKAGES = ("surface", "markov", "lab", "presentation", "exercises", "conformance")


def layer(module: str) -> str:
    """'specdec_lib.markov.chain' -> 'markov'; a top-level module is core; the package itself is the facade."""
    parts = module.split(".")
    if parts == ["specdec_lib"]:
        return "facade"
    return parts[1] if parts[1] in SUBPACKAGES else "core"


def module_name(path: Path, root: Path = PKG) -> str:
    """specdec_lib/markov/chain.py -> 'specdec_lib.markov.chain' (root is the package folder)."""
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(path: Path, root: Path = PKG) -> list[tuple[str, list[str]]]:
    """(imported specdec_lib module, names) for every import statement of the file, relative ones resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "specdec_lib":
                names = [a.name for a in node.names]
                if node.module is None:  # from . import x: x is a module
                    out += [(f"{target}.{n}", []) for n in names]
                else:
                    out.append((target, names))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.split(".")[0] == "specdec_lib"]
    return out


@pytest.mark.heavy
@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_only_go_down(path):
    me = layer(module_name(path))
    for target, _ in package_imports(path):
        assert layer(target) in ALLOWED[me], f"{module_name(path)} ({me}) imports {target} ({layer(target)})"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_private_name_crosses_a_module(path):
    for target, names in package_imports(path):
        private = [n for n in names if n.startswith("_")]
        assert not private, f"{module_name(path)} imports private {private} from {target}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_modules_hold_one_idea_in_about_400_lines(path):
    # one idea per module, named after it; about 400 lines at most (420 is the hard stop), never one idea split
    # across files to meet a count (issue 38 replaced the 300-line cap that had pushed ideas apart)
    assert len(path.read_text().splitlines()) <= 420


def test_layers_are_folders():
    assert {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(SUBPACKAGES)
    assert layer("specdec_lib.sampling") == "core" and layer("specdec_lib.markov.chain") == "markov"
    assert layer("specdec_lib") == "facade" and layer("specdec_lib.lab") == "lab"


def test_the_checker_sees_a_violation(tmp_path):
    # negative control: a core module that imports the Markov testbed, and a private import
    bad = tmp_path / "specdec_lib" / "cost_bad.py"
    bad.parent.mkdir()
    bad.write_text("from .markov.chain import reference_chain\nfrom .accounting import _hidden\n")
    imports = package_imports(bad, root=bad.parent)
    assert [layer(t) for t, _ in imports] == ["markov", "core"]
    assert "markov" not in ALLOWED["core"] and imports[1][1] == ["_hidden"]


def _module_paths(root: Path = PKG) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its text (function-level imports count too);
    `from pkg import name` points at pkg.name when that is a module, else at pkg itself."""
    paths = _module_paths(root)
    graph = {}
    for name, path in paths.items():
        edges = set()
        for target, names in package_imports(path, root):
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in paths]
            edges |= set(subs) if subs and len(subs) == len(names) else {target}
        graph[name] = {t for t in edges if t in paths and t != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_two_modules_import_each_other():
    assert import_cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_circle(tmp_path):
    # negative control: a imports b at the top, b imports a inside a function (a lazy import is still a circle)
    pkg = tmp_path / "specdec_lib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import g\n")
    (pkg / "b.py").write_text("def g():\n    from .a import f\n    return f\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert import_cycles(import_graph(pkg)) == [["specdec_lib.a", "specdec_lib.b"]]


def test_the_facade_holds_at_most_60_names_and_nothing_else():
    # the nouns and verbs of the Acts on sd; everything else under sd.markov, sd.lab, sd.conformance, ...
    import types

    import specdec_lib as sd

    assert len(sd.__all__) <= 60 and len(set(sd.__all__)) == len(sd.__all__)
    assert all(hasattr(sd, name) for name in sd.__all__)
    public = {n for n, v in vars(sd).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public == set(sd.__all__), sorted(public ^ set(sd.__all__))


@pytest.mark.parametrize("path", [p for p in MODULES if p.name not in ("__main__.py",)], ids=lambda p: module_name(p))
def test_every_module_says_what_it_exports(path):
    tree = ast.parse(path.read_text())
    listed = [node for node in tree.body if isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
    assert listed, f"{module_name(path)} has no __all__"
    names = ast.literal_eval(listed[0].value)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
    for n in tree.body:  # names bound at the top: a = ..., a: T = ..., a, b = ...
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                defined |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
    defined |= {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    missing = [n for n in names if n not in defined]
    assert not missing or path.name == "__init__.py" and _lazy(tree), f"{module_name(path)}: __all__ lists {missing}"


def _lazy(tree: ast.Module) -> bool:
    """True when a package's __init__ resolves names on first use (a module-level __getattr__)."""
    return any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


def test_test_files_have_unique_basenames():
    # tests/ has no __init__.py files, so pytest imports each test file by its basename: two files of one name in
    # different folders break the whole collection ("import file mismatch")
    from collections import Counter

    names = Counter(p.name for p in (PKG.parent / "tests").rglob("test_*.py"))
    assert not [n for n, c in names.items() if c > 1], sorted(n for n, c in names.items() if c > 1)
