"""Lab: the recorded runs and the one reader of them, every file checked against its declared schema.

Six benchmarks and the engines' audit write a recording; the committed ones (specdec_lib/data/) are what figures,
notebooks and exercises print, so they show the same numbers on every machine and never time anything. A recording's
kind is the make target that writes it:

    kind               file                        record             written by
    measure            measure_reference.json      MeasureRecording   benchmarks/measure_speedup.py --json
    measure-self       self_drafts_reference.json  SelfRecording      benchmarks/measure_self.py --json
    measure-real       real_pair_reference.json    RealRecording      benchmarks/measure_real.py --json
    measure-real-self  real_self_reference.json    RealSelfRecording  benchmarks/measure_real_self.py --json
    measure-gpu        gpu_reference.json          GPURecording       benchmarks/measure_gpu.py --json (gpu_recording)
    audit-engines      engines_reference.json      EnginesRecording   tools/audit_engines.py --json (engines_recording)
    measure-engines    engine_speed_reference.json EngineSpeedRecording  benchmarks/measure_engines.py (engine_speed)

A file is `dataclasses.asdict` of its record plus "schema" (SCHEMAS[kind]). load_recording checks the schema, then
every field by name (each present but those with a default, which a file written before the field existed lacks;
none unknown), type and choice, then the kind's cross-field rules, and raises naming the file and the field.
recorded(kind) reads the committed file once. What the terms say is recorded_terms.py.
"""
from __future__ import annotations

import functools
import pathlib
from dataclasses import dataclass, field
from importlib import resources

from .._checks import check_choice
from .batch_cost import BatchCost, LinearCost, fit_c_v
from .engine_speed import SPEED_CHOICES, EngineSpeedRecording, check_engine_speed
from .engines_recording import ENGINE_CHOICES, EnginesRecording, check_engines_recording
from .gpu_recording import GPU_CHOICES, GPURecording, check_gpu_recording
from .model_manifest import ModelFile, ModelManifest
from .recorded_terms import RunRepeat, check_repeats
from .schema import load_checked
from .speedup_table import SpeedupTable
from .tree_measure import TreeTable

__all__ = ["REFERENCE_PATHS", "SCHEMAS", "load_recording", "recorded", "MeasureRecording", "SelfRecording",
           "ChainRun", "TreeRun", "RealRecording", "ModelFile", "ModelManifest", "RealRun", "CvPoint", "HFRun",
           "NumericsRow", "RealSelfRecording", "ExitRun", "LookaheadRun"]

CHOICES = {  # the real recordings' fields whose value is one of a few names
    "role": ("target", "draft"), "draft": ("model", "lookup", "table", "plain"), "dtype": ("float32", "bfloat16"),
    "matmul": ("default", "onednn"), "mode": ("assistant", "lookup"), "cache": ("shared", "own"),
}


@dataclass(frozen=True)
class MeasureRecording:
    """One `make measure` run: a SpeedupTable per draft and the batch regime's BatchCost."""

    tables: list[SpeedupTable]
    batch: BatchCost

    @property
    def drafts(self) -> list[str]:
        return [t.draft for t in self.tables]

    def table(self, draft: str) -> SpeedupTable:
        """The table of the draft called draft (ValueError listing the recorded names otherwise)."""
        for t in self.tables:
            if t.draft == draft:
                return t
        raise ValueError(f"draft must be one of {', '.join(self.drafts)}; got {draft!r}")

    def best(self) -> tuple[SpeedupTable, int]:
        """(table, index of k) of the largest measured speedup over every draft and k."""
        return max(((t, i) for t in self.tables for i in range(len(t.ks))), key=lambda ti: ti[0].measured[ti[1]])

    @property
    def measured(self) -> list[float]:
        """Every median measured speedup, over drafts and k."""
        return [m for t in self.tables for m in t.measured]

    @property
    def max_rel_error(self) -> float:
        """The equation's largest |predicted - measured| / measured over every draft and k."""
        return max(t.max_rel_error for t in self.tables)

    def c_v_line(self) -> LinearCost:
        """c_v(k) = c0 + slope k, least squares over every draft's (k, c_v(k)), rounded to 3 decimals."""
        c0, slope = fit_c_v([k for t in self.tables for k in t.ks], [c for t in self.tables for c in t.c_v])
        return LinearCost(round(c0, 3), round(slope, 3))


@dataclass(frozen=True)
class ChainRun:
    """One draft's chain table (measure_speedup) on one target at one temperature."""

    target: str  # "target" or "target_ee" (sd.lab.load_target)
    temperature: float
    table: SpeedupTable

    @property
    def best(self) -> int:
        """Index of the k with the largest measured speedup (the median over repeats: this choice favours a k whose
        repeats ran fast by chance, so the S there is biased upward; recorded_terms.split_best_k chooses apart)."""
        return max(range(len(self.table.ks)), key=lambda i: self.table.measured[i])


@dataclass(frozen=True)
class TreeRun:
    """One drafter's tree table (measure_trees) on one target at one temperature."""

    target: str
    temperature: float
    table: TreeTable


@dataclass(frozen=True)
class SelfRecording:
    """One `make measure-self` run: chain tables, tree tables, and the machine they ran on."""

    chains: list[ChainRun]
    trees: list[TreeRun]
    machine: dict

    def chain(self, draft: str, *, target: str = "target", temperature: float = 1.0) -> ChainRun:
        """The chain run of draft on target at temperature (ValueError listing what was recorded otherwise)."""
        for run in self.chains:
            if (run.table.draft, run.target, run.temperature) == (draft, target, temperature):
                return run
        have = sorted({(r.table.draft, r.target, r.temperature) for r in self.chains})
        raise ValueError(f"(draft, target, temperature) must be one of {have}; got {(draft, target, temperature)}")

    def tree(self, draft: str, *, target: str = "target", temperature: float = 1.0, rule: str | None = None) -> TreeRun:
        """The tree run of draft (and rule, when given) on target at temperature."""
        for run in self.trees:
            t = run.table
            if (t.draft, run.target, run.temperature) == (draft, target, temperature) and rule in (None, t.rule):
                return run
        have = sorted({(r.table.draft, r.table.rule, r.target, r.temperature) for r in self.trees})
        raise ValueError(f"(draft, rule, target, temperature) must be one of {have}; "
                         f"got {(draft, rule, target, temperature)}")

    def drafts(self, *, target: str = "target", temperature: float = 1.0) -> list[str]:
        """The chain drafts recorded on target at temperature, in order."""
        check_choice("target", target, tuple(dict.fromkeys(r.target for r in self.chains)))
        return [r.table.draft for r in self.chains if (r.target, r.temperature) == (target, temperature)]


@dataclass(frozen=True)
class RealRun:
    """One decode configuration on one task: the measured terms, the equation's speedup and the clock's."""

    task: str  # "code" | "prose" | "edit"
    draft: str  # "model" | "lookup" | "table" | "plain"
    k: int  # 0 for plain
    temperature: float
    dtype: str  # "float32" | "bfloat16"
    matmul: str  # "default" | "onednn"
    n_new: int
    T_1: float  # seconds per plain decode step (with repeats: this and c_d, c_v, e_n, measured are medians)
    c_d: float  # D(k) / (k T_1)
    c_v: float  # V(k) / T_1
    e_n: float  # E[N]: tokens committed per round (the last round cut at n_new; recorded_terms.round_counts)
    alpha: list[float | None]  # conditional acceptance by position 1..k (None: never reached); every round in full
    predicted: float  # E[N] / (k c_d + c_v)
    measured: float  # speculative tokens/s over plain tokens/s
    equal_to_plain: bool | None  # greedy: output == plain greedy token for token (every repeat); None when sampling
    first_divergence: int | None  # first token that differs from plain greedy; None if equal or sampling
    repeats: list[RunRepeat] = field(default_factory=list)  # each repeat's own terms; empty (schema 1): one run
    ranges: dict[str, list[float]] = field(default_factory=dict)  # field -> [min, max] over the repeats


@dataclass(frozen=True)
class CvPoint:
    """c_v(k) = V(k) / T_1 at one dtype and matrix-multiply path."""

    dtype: str
    matmul: str
    k: int
    c_v: float


@dataclass(frozen=True)
class HFRun:
    """transformers' own generate on the same prompt (fp32 greedy) beside our loop with the same kind of draft."""

    task: str
    mode: str  # "assistant" | "lookup"
    k: int
    hf_speedup: float  # HF speculative over HF plain generate
    ours_speedup: float  # our loop, same draft kind and k
    ours_over_hf: float  # our speculative tokens/s over HF's
    equal_to_plain: bool


@dataclass(frozen=True)
class NumericsRow:
    """Block (one pass over the continuation) against incremental logits under greedy decoding, at one dtype."""

    task: str
    dtype: str
    positions: int
    max_abs_diff: float  # max |block - incremental| logit
    flips: int  # positions where the argmax differs
    first_flip: int | None
    min_gap: float  # smallest top-1 minus top-2 logit gap (incremental)
    gap_at_first_flip: float | None


@dataclass(frozen=True)
class RealRecording:
    """One `make measure-real` run: machine, the pair's manifests, every run, c_v(k), transformers, numerics."""

    machine: dict  # platform, processor, torch, transformers, threads, loadavg_before/after, date, seconds
    models: list[ModelManifest]
    prompts: dict[str, int]  # task -> prompt tokens
    runs: list[RealRun]
    c_v_curve: list[CvPoint]
    hf: list[HFRun]
    numerics: list[NumericsRow]
    tiny: bool  # True: written from tiny random models (--tiny)

    @property
    def tasks(self) -> list[str]:
        """The recorded tasks, in the order of their first run."""
        return list(dict.fromkeys(r.task for r in self.runs))

    @property
    def drafts(self) -> list[str]:
        """The recorded drafts (plain included), in the order of their first run."""
        return list(dict.fromkeys(r.draft for r in self.runs))

    @property
    def fp32_matmul(self) -> str:
        """The fp32 matrix-multiply path the run chose: machine["fp32_matmul"], else the fp32 runs' only path."""
        if (chosen := self.machine.get("fp32_matmul")) in CHOICES["matmul"]:
            return chosen
        paths = list(dict.fromkeys(r.matmul for r in self.runs if r.dtype == "float32"))
        return "onednn" if "onednn" in paths else (paths[0] if paths else "default")

    def model(self, role: str) -> ModelManifest:
        """The manifest of the target or the draft."""
        for m in self.models:
            if m.role == role:
                return m
        raise ValueError(f"role must be one of {', '.join(repr(m.role) for m in self.models)}; got {role!r}")

    def matmul_for(self, dtype: str) -> str:
        """The path a dtype's runs used: fp32_matmul for float32, else that dtype's only (or first) path."""
        paths = list(dict.fromkeys(r.matmul for r in self.runs if r.dtype == dtype))
        return self.fp32_matmul if dtype == "float32" or not paths else paths[0]

    def run(self, task: str, draft: str, *, temperature: float = 0.0, dtype: str = "float32",
            matmul: str | None = None) -> RealRun:
        """The run of draft on task at that temperature, dtype and path (default: matmul_for(dtype))."""
        matmul = self.matmul_for(dtype) if matmul is None else matmul
        want = {"task": task, "draft": draft, "temperature": temperature, "dtype": dtype, "matmul": matmul}
        found = [r for r in self.runs if all(getattr(r, f) == v for f, v in want.items())]
        if found:
            return found[0]
        for name, value in want.items():  # name the first argument that matches no run at all
            have = list(dict.fromkeys(getattr(r, name) for r in self.runs))
            if value not in have:
                raise ValueError(f"{name} must be one of {', '.join(map(repr, have))}; got {value!r}")
        have = sorted({(r.task, r.draft, r.temperature, r.dtype, r.matmul) for r in self.runs})
        raise ValueError(f"no run with {want}; the recorded (task, draft, temperature, dtype, matmul) are "
                         + ", ".join(map(str, have)))


@dataclass(frozen=True)
class ExitRun:
    """An early exit after exit_layer of layers drafting k tokens a round on one task, against plain decoding."""

    task: str
    exit_layer: int
    layers: int
    cache: str  # "shared": one cache with the target (sd.lab.early_exit_pair); "own": a separate draft (early_exit_lm)
    k: int
    T_1: float  # seconds per plain decode step
    c_d: float  # D(k) / (k T_1)
    c_v: float  # V(k) / T_1
    e_n: float  # tokens per round
    alpha: list[float | None]  # conditional acceptance by position 1..k (None: never reached)
    predicted: float  # E[N] / (k c_d + c_v)
    measured: float  # speculative tokens/s over plain tokens/s
    equal_to_plain: bool | None  # greedy: the output is plain greedy's, token for token
    first_divergence: int | None


@dataclass(frozen=True)
class LookaheadRun:
    """Lookahead decoding at (window, ngram, guesses) on one task: measure_trees' terms and one greedy check."""

    task: str
    window: int
    ngram: int
    guesses: int
    nodes: int  # the most nodes a pass scores
    T_1: float
    c_d: float  # D / T_1 (the pool lookup and the window bookkeeping)
    c_v: float  # V / T_1 (one pass over the window and the guesses)
    e_n: float
    predicted: float  # E[N] / (c_d + c_v)
    measured: float
    equal_to_plain: bool


@dataclass(frozen=True)
class RealSelfRecording:
    """One `make measure-real-self` run: machine, the target's manifest, prompts, exit runs and lookahead runs."""

    machine: dict
    models: list[ModelManifest]
    prompts: dict[str, int]  # task -> prompt tokens
    n_new: int
    exits: list[ExitRun]
    lookahead: list[LookaheadRun]
    tiny: bool  # True: written from a tiny random model (--tiny)

    @property
    def tasks(self) -> list[str]:
        return list(self.prompts)

    def exit(self, task: str, exit_layer: int, *, cache: str = "shared", k: int = 4) -> ExitRun:
        """The exit run on task after exit_layer layers with that cache and k (ValueError listing the recorded)."""
        for r in self.exits:
            if (r.task, r.exit_layer, r.cache, r.k) == (task, exit_layer, cache, k):
                return r
        have = sorted({(r.task, r.exit_layer, r.cache, r.k) for r in self.exits})
        raise ValueError(f"(task, exit_layer, cache, k) must be one of {have}; got {(task, exit_layer, cache, k)}")

    def best_exit(self, task: str) -> ExitRun:
        """The exit run with the largest measured speedup on task."""
        runs = [r for r in self.exits if r.task == task]
        if not runs:
            raise ValueError(f"task must be one of {self.tasks}; got {task!r}")
        return max(runs, key=lambda r: r.measured)


def _check_tables(rec) -> None:
    """A lab recording holds at least one chain table."""
    name, tables = ("tables", rec.tables) if isinstance(rec, MeasureRecording) else ("chains", rec.chains)
    if not tables:
        raise ValueError(f"{name} must hold at least one table, got none")


def _check_runs(rec, name: str, *, roles: tuple[list[str], ...]) -> None:
    """The models' roles (none when tiny); each of rec.<name> on a recorded task with T_1, measured, predicted > 0."""
    have = sorted(m.role for m in rec.models)
    if have not in roles and not (rec.tiny and not have):
        raise ValueError(f"models must have the roles {' or '.join(map(str, roles))} (none when tiny), got {have}")
    for i, r in enumerate(getattr(rec, name)):
        if r.task not in rec.prompts:
            raise ValueError(f"{name}[{i}].task must be one of the prompts {sorted(rec.prompts)}; got {r.task!r}")
        if min(r.T_1, r.measured, r.predicted) <= 0:
            raise ValueError(f"{name}[{i}]: T_1, measured and predicted must be > 0, got {r.T_1}, {r.measured}, "
                             f"{r.predicted}")
        if hasattr(r, "alpha") and len(r.alpha) != r.k:  # a chain run (a lookahead run has a tree, no alpha)
            raise ValueError(f"{name}[{i}].alpha must hold k = {r.k} rates by position, got {len(r.alpha)}")


def _check_pair(rec: RealRecording) -> None:
    """One target and at most one draft; k is 0 for the plain run only; medians and ranges follow from repeats."""
    for i, r in enumerate(rec.runs):
        if (r.k == 0) != (r.draft == "plain") or r.k < 0:
            raise ValueError(f"runs[{i}].k must be 0 for the plain run and >= 1 for a draft; got {r.k} ({r.draft})")
    _check_runs(rec, "runs", roles=(["draft", "target"], ["target"]))
    for i, r in enumerate(rec.runs):
        check_repeats(r, f"runs[{i}]")


def _check_self(rec: RealSelfRecording) -> None:
    """The target's manifest alone; every exit drafts k >= 1 tokens after 1 <= exit_layer < layers."""
    for i, r in enumerate(rec.exits):
        if not 1 <= r.exit_layer < r.layers or r.k < 1:
            raise ValueError(f"exits[{i}] must have 1 <= exit_layer < layers and k >= 1; got exit_layer "
                             f"{r.exit_layer}, layers {r.layers}, k {r.k}")
    _check_runs(rec, "exits", roles=(["target"],))
    _check_runs(rec, "lookahead", roles=(["target"],))


_KINDS = {  # kind: (record, its file in specdec_lib/data/, the schemas read (writers write the first), the fields
    # whose value is one of a few names, the cross-field rules); measure-real's schema 1 has no repeats
    "measure": (MeasureRecording, "measure_reference.json", (1,), {}, _check_tables),
    "measure-self": (SelfRecording, "self_drafts_reference.json", (1,), {}, _check_tables),
    "measure-real": (RealRecording, "real_pair_reference.json", (2, 1), CHOICES, _check_pair),
    "measure-real-self": (RealSelfRecording, "real_self_reference.json", (1,), CHOICES, _check_self),
    "measure-gpu": (GPURecording, "gpu_reference.json", (1,), GPU_CHOICES, check_gpu_recording),
    "audit-engines": (EnginesRecording, "engines_reference.json", (1,), ENGINE_CHOICES, check_engines_recording),
    "measure-engines": (EngineSpeedRecording, "engine_speed_reference.json", (1,), SPEED_CHOICES, check_engine_speed),
}
REFERENCE_PATHS = {kind: pathlib.Path(str(resources.files("specdec_lib") / "data" / file))
                   for kind, (_, file, *_) in _KINDS.items()}  # the committed recordings
SCHEMAS = {kind: schemas[0] for kind, (_, _, schemas, *_) in _KINDS.items()}  # the "schema" each writer writes


def load_recording(kind: str, path: str | pathlib.Path | None = None):
    """The recording of kind (the make target that writes it) in path (default: the committed file), fields checked."""
    record, _, schemas, choices, check = _KINDS[check_choice("kind", kind, tuple(_KINDS))]
    return load_checked(record, REFERENCE_PATHS[kind] if path is None else path, schemas=schemas, choices=choices,
                        check=check)


@functools.cache
def recorded(kind: str):
    """The committed recording of kind (REFERENCE_PATHS[kind]), read once."""
    return load_recording(kind)
