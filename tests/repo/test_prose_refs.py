"""Prose points at what exists: every file, test, library attribute or named function that prose cites resolves.

Where: the docstrings of every specdec_lib module, class and function (read with ast), every markdown cell of
notebooks/*.ipynb, README.md and docs/*.md. Fenced ``` blocks and URLs (anything with "://") are dropped first.
Three rules, and nothing else is checked:

1. path: a word, in backticks or not, that is a path ending in .py, .ipynb or .md, or that starts with one of the
   repository's folders (specdec_lib/, tests/, notebooks/, docs/, tools/, benchmarks/, figures/). It must exist
   relative to the repository root or to specdec_lib/ (`markov/tree.py`); a bare file name (`exact.py`) must be
   the name of some file in the repository; a glob (`notebooks/*.ipynb`) must match one.
   `tests/test_x.py::name` also needs `name` defined in that file.
2. attribute: every sd.NAME or specdec_lib.NAME, in backticks or not, dotted names included
   (`sd.exercises.check_x`): each step is an attribute of the one before, or a submodule that imports. A name
   followed by "<" is a template (`sd.exercises.check_<name>`) and is skipped.
3. named definition: "`NAME` in `FILE.py`" (or "`NAME()` in ..."): FILE resolves by rule 1 and defines NAME
   (a def, class or assigned name at any depth).

ALLOWED lists the paths that legitimately name a file outside this repository (a peer's source, cited with its
repository), each with its reason.
"""
from __future__ import annotations

import ast
import glob
import importlib
import json
import os
import re
from pathlib import Path

import pytest

import specdec_lib as sd

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "specdec_lib"
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", "build", "student", "_book", ".ipynb_checkpoints"}

ALLOWED = {  # a peer's file, cited next to its repository (and commit); not a file of this repository
    "model/utils.py": "SafeAILab/EAGLE's model/utils.py (evaluate_posterior): tree_bugs.py, notebook 06, workshop",
    "medusa/model/utils.py": "FasterDecoding/Medusa's typical acceptance: markov/draft_rules.py",
    "medusa/model/medusa_model.py": "FasterDecoding/Medusa's heads (ResBlock, MedusaModel): lab/medusa.py",
    "lade/decoding.py": "hao-ai-lab/LookaheadDecoding's greedy loop: lab/lookahead.py",
    "lade/models/llama.py": "hao-ai-lab/LookaheadDecoding's lookahead-branch mask: lab/lookahead.py",
    "eagle_utils.py": "sgl-project/sglang's python/sglang/srt/speculative/eagle_utils.py: notebook 06",
    "src/transformers/generation/utils.py": "huggingface/transformers' generate loop: notebook 01",
    "utils.py": "the same transformers file, listed under src/transformers/generation/ in markov/hf_assisted.py",
    "configuration_utils.py": "transformers' generation/configuration_utils.py: hf_assisted.py, notebook 07",
    "candidate_generator.py": "transformers' generation/candidate_generator.py: hf_assisted.py, notebook 07",
    "stopping_criteria.py": "transformers' generation/stopping_criteria.py: hf_assisted.py, notebook 07",
    "vllm/v1/sample/sampler.py": "vllm-project/vllm's V1 sampler: notebook 01",
    "vllm/config/speculative.py": "vllm-project/vllm's speculative-decoding config: notebook 07",
    "vllm/model_executor/layers/typical_acceptance_sampler.py": "vllm-project/vllm's removed sampler: notebook 07",
    "EAGLE/eagle/model/utils.py": "MasterGodzilla/Speculative_decoding_OT's SpecHub verifier: multidraft_rules.py",
    "eagle/model/cnets.py": "SafeAILab/EAGLE's draft network (class Model, its fc over cat(e, f)): lab/eagle.py",
    "eagle/model/ea_model.py": "SafeAILab/EAGLE's wrapper (the base model's post-norm hidden states): lab/eagle.py",
    "eagle/train/main.py": "SafeAILab/EAGLE's training loop (SmoothL1 + 0.1 x cross-entropy): lab/eagle.py",
    "vllm_ascend/worker/model_runner_v1.py": "vllm-project/vllm-ascend's model runner (draft_probs=None): notebook 08",
    "conversion/llama.py": "ggml-org/llama.cpp's LlamaModel.permute (Q/K rows): docs/engines-groundwork.md",
    "convert_hf_to_gguf.py": "ggml-org/llama.cpp's converter, which held permute before: docs/engines-groundwork.md",
    "llama_cpp/llama.py": "llama-cpp-python's Llama (generate, its draft loop): docs/engines-groundwork.md",
    "llama_cpp/_logger.py": "llama-cpp-python's log callback (strict UTF-8 decode): docs/engines-groundwork.md",
    "tools/server/server-context.cpp": "llama.cpp's server (the draft cap, the unset probability): notebook 02e",
    "rejection_sampler.py": "vllm-project/vllm's v1/sample/rejection_sampler.py (the expand): notebook 02e",
    "utils/cpu_triton_utils.py": "vllm-project/vllm's CPU stand-ins for Triton kernels: notebook 02e",
}

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
URL = re.compile(r"\S+://\S+")
FOLDERS = ("specdec_lib", "tests", "notebooks", "docs", "tools", "benchmarks", "figures")
PATH = re.compile(r"(?<![\w/.-])((?:[\w.*-]+/)*[\w.*-]+\.(?:py|ipynb|md)(?:::\w+)?(?![\w/])"
                  rf"|(?:{'|'.join(FOLDERS)})/[\w./*-]*)")
ATTR = re.compile(r"(?<![\w.])(sd|specdec_lib)\.((?>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))(?!<)")  # atomic: no backtracking
NAMED_IN = re.compile(r"`([A-Za-z_]\w*)(?:\(\))?` in `([^`\s]+\.py)`")


def _repo_files() -> dict[str, Path]:
    """Every file in the repository (outside SKIP_DIRS) by base name."""
    files = {}
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            files.setdefault(name, Path(folder) / name)
    return files


FILES = _repo_files()
GLOB = re.compile(r"[*?[]")


def _resolve_path(span: str) -> Path | None:
    """The file or folder a path span names, or None."""
    if "/" not in span and not GLOB.search(span):
        return FILES.get(span)
    for base in (ROOT, LIB):
        if GLOB.search(span):
            hits = sorted(glob.glob(str(base / span)))
            if hits:
                return Path(hits[0])
        elif (base / span).exists():
            return base / span
    return None


def _defined_names(path: Path) -> set[str]:
    """Every name a Python file defines: functions, classes and assigned names, nested ones included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Name, ast.arg)) and isinstance(getattr(node, "ctx", ast.Store()), ast.Store):
            names.add(node.id if isinstance(node, ast.Name) else node.arg)
    return names


def _attribute_ok(dotted: str) -> bool:
    """sd.a.b.c resolves: each step an attribute of the one before, or a submodule that imports."""
    obj, module = sd, "specdec_lib"
    for part in dotted.split("."):
        module = f"{module}.{part}"
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(module)
        except ImportError:
            return False
    return True


def check_text(text: str, counts: dict | None = None) -> list[str]:
    """Problems with the references in one piece of prose (empty when every one resolves); counts tallies them."""
    counts = {} if counts is None else counts
    text = URL.sub(" ", FENCE.sub("", text))
    problems = []
    for span in PATH.findall(text):
        span = span.rstrip(".")
        file, _, name = span.partition("::")
        if file in ALLOWED:
            continue
        counts["path"] = counts.get("path", 0) + 1
        found = _resolve_path(file)
        if found is None:
            problems.append(f"{span}: no such file")
        elif name and name not in _defined_names(found):
            problems.append(f"{span}: {file} defines no {name}")
    for root, dotted in ATTR.findall(text):
        counts["attribute"] = counts.get("attribute", 0) + 1
        if not _attribute_ok(dotted):
            problems.append(f"{root}.{dotted}: no such attribute")
    for name, file in NAMED_IN.findall(text):
        if file in ALLOWED:
            continue
        counts["named"] = counts.get("named", 0) + 1
        found = _resolve_path(file)
        if found is None or found.is_dir():
            problems.append(f"`{name}` in `{file}`: no such file")
        elif name not in _defined_names(found):
            problems.append(f"`{name}` in `{file}`: not defined there")
    return problems


def docstrings() -> list[tuple[str, str]]:
    """(where, text) for every docstring of a specdec_lib module, class or function."""
    out = []
    for path in sorted(LIB.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    where = path.relative_to(ROOT).as_posix() + ("" if isinstance(node, ast.Module) else
                                                                 f":{node.name}")
                    out.append((where, doc))
    return out


def prose_pages() -> list[tuple[str, str]]:
    """(where, text) for every notebook markdown cell, README.md, DEVELOPING.md and docs/*.md."""
    out = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        out += [(f"{path.name} cell {i}", "".join(c["source"])) for i, c in enumerate(cells)
                if c["cell_type"] == "markdown"]
    for path in [ROOT / "README.md", ROOT / "DEVELOPING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        out.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    return out


SOURCES = {"docstrings": docstrings, "prose": prose_pages}


@pytest.mark.parametrize("source", list(SOURCES))
def test_every_reference_resolves(source):
    texts = SOURCES[source]()
    counts: dict = {}
    problems = [f"{where}: {p}" for where, text in texts for p in check_text(text, counts)]
    assert not problems, "stale references in prose:\n" + "\n".join(problems)
    # a rule that silently matched nothing would pass above; these floors are well under the counts when written
    # (texts, paths, attributes, named): docstrings 600, 19, 31, 0; prose 227, 58, 116, 1
    floor = {"docstrings": (500, 15, 20, 0), "prose": (180, 45, 90, 1)}[source]
    got = (len(texts), counts.get("path", 0), counts.get("attribute", 0), counts.get("named", 0))
    assert all(g >= f for g, f in zip(got, floor)), (got, floor)


def test_every_allowed_name_is_still_cited():
    cited = " ".join(text for source in SOURCES.values() for _, text in source())
    assert [name for name in ALLOWED if name not in cited] == []


MADE_UP = [  # negative control: each is reported, once
    "`tests/test_nowhere.py`",
    "(tests/test_accept.py checks both, draw for draw)",  # the stale citation lab/accept.py carried, unquoted
    "`specdec_lib/markov/ghost.py`",
    "`markov/ghost.py`",
    "`ghost.py`",
    "`notebooks/*.nope`",
    "`tests/core/test_noise.py::test_ghost`",
    "`sd.no_such_function(p)`",
    "`sd.exercises.check_nothing`",
    "built from the same library phases (the drafter's `propose`, `sd.verify_round`)",
    "The loop is `_walk` in `specdec_lib/markov/exact.py` with $k = 1$ unrolled",
]


@pytest.mark.parametrize("text", MADE_UP)
def test_checker_reports_a_made_up_reference(text):
    assert len(check_text(text)) == 1, check_text(text)


def test_checker_passes_real_references():
    # positive control: the same kinds of reference, real ones, and what the rules skip
    real = ("See `tests/core/test_noise.py`, tests/lab/test_drafters.py, `specdec_lib/markov/exact.py`, "
            "`markov/tree.py`, "
            "`exact.py`, `notebooks/*.ipynb`, `sd.policy_table(P, temperature=0.5)`, `sd.exercises`, "
            "specdec_lib.verification.verify_batch, `tests/core/test_noise.py::test_scaling_and_validation`, "
            "`walk_law` in `specdec_lib/markov/exact.py`, a template `sd.exercises.check_<name>(fn)`, a peer's "
            "`evaluate_posterior` in `model/utils.py`, https://github.com/o/r/blob/x/ghost.py, and a fenced "
            "block:\n```\n`tests/test_nowhere.py`\n```\n")
    counts: dict = {}
    assert check_text(real, counts) == []
    assert counts == {"path": 8, "attribute": 3, "named": 1}, counts
