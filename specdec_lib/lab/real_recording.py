"""Lab: the recorded `make measure-real` run on a pretrained pair, the one reader of data/real_pair_reference.json.

`benchmarks/measure_real.py --json PATH` times the real pair (every task, draft, k, temperature, dtype and
fp32 matrix-multiply path), transformers' own generate beside our loop, and block-versus-incremental numerics;
it writes `dataclasses.asdict` of a RealRecording plus "schema": 2 (a schema-1 file, one run per configuration, is
read with no repeats). load_real_recording checks every field's name and type before building the dataclasses, so a
stale or hand-edited file fails naming the field; real_recorded() reads the committed run once. Times nothing.
"""
from __future__ import annotations

import functools
import json
import pathlib
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from importlib import resources

from .real_terms import RunRepeat, check_repeats

__all__ = ["REAL_REFERENCE_PATH", "SCHEMA", "ModelFile", "ModelManifest", "RealRun", "CvPoint", "HFRun",
           "NumericsRow", "RealRecording", "load_checked", "load_real_recording", "real_recorded"]

REAL_REFERENCE_PATH = pathlib.Path(str(resources.files("specdec_lib") / "data" / "real_pair_reference.json"))
SCHEMA = 2  # the version of the JSON layout this reader understands (1, before repeats, is read too)
CHOICES = {  # fields whose value is one of a few names
    "role": ("target", "draft"), "draft": ("model", "lookup", "table", "plain"), "dtype": ("float32", "bfloat16"),
    "matmul": ("default", "onednn"), "mode": ("assistant", "lookup"),
}


@dataclass(frozen=True)
class ModelFile:
    """One weight file: its name (no folder), size and sha256."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class ModelManifest:
    """What one model of the pair is, where it came from, under which licence, and its files' checksums."""

    role: str  # "target" | "draft"
    name: str  # e.g. "Qwen2.5-Coder-1.5B-Instruct"
    source: str  # how it was obtained
    licence: str
    files: list[ModelFile]
    header: dict  # GGUF header fields (general.name, general.architecture, tokenizer.ggml.model, ...)
    params: int


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
    e_n: float  # E[N]: tokens committed per round (the last round cut at n_new; real_terms.round_counts)
    alpha: list[float | None]  # conditional acceptance by position 1..k (None: never reached); every round in full
    predicted: float  # E[N] / (k c_d + c_v)
    measured: float  # speculative tokens/s over plain tokens/s
    equal_to_plain: bool | None  # greedy: output == plain greedy token for token (every repeat); None when sampling
    first_divergence: int | None  # first token that differs from plain greedy; None if equal or sampling
    repeats: list[RunRepeat] = field(default_factory=list)  # each repeat's own terms; empty: one run
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

    def table(self, runs: list[RealRun] | None = None) -> str:
        """A text table, one line per run: its setting, c_d, c_v, E[N], predicted, measured, rel. error, exact."""
        lines = [f"{'task':<6}{'draft':<7}{'k':>3}{'temp':>5} {'dtype':<9}{'matmul':<8}{'c_d':>7}{'c_v':>7}"
                 f"{'E[N]':>7}{'pred':>7}{'meas':>7}{'rel.err':>8}  exact"]
        for r in self.runs if runs is None else runs:
            err = abs(r.predicted - r.measured) / r.measured
            exact = {True: "equal", False: f"left at {r.first_divergence}", None: "-"}[r.equal_to_plain]
            lines.append(f"{r.task:<6}{r.draft:<7}{r.k:>3}{r.temperature:>5.1f} {r.dtype:<9}{r.matmul:<8}"
                         f"{r.c_d:>7.3f}{r.c_v:>7.3f}{r.e_n:>7.3f}{r.predicted:>7.3f}{r.measured:>7.3f}{err:>8.3f}"
                         f"  {exact}")
        return "\n".join(lines)

    def hf_table(self) -> str:
        """A text table of transformers' generate beside our loop, one line per task and mode."""
        lines = [f"{'task':<6}{'mode':<10}{'k':>3}{'HF spec/plain':>15}{'ours spec/plain':>17}{'ours/HF':>9}  equal"]
        for h in self.hf:
            lines.append(f"{h.task:<6}{h.mode:<10}{h.k:>3}{h.hf_speedup:>15.3f}{h.ours_speedup:>17.3f}"
                         f"{h.ours_over_hf:>9.3f}  {h.equal_to_plain}")
        return "\n".join(lines)

    def numerics_table(self) -> str:
        """A text table of block-versus-incremental logits, one line per task and dtype."""
        lines = [f"{'task':<6}{'dtype':<10}{'positions':>10}{'max|diff|':>11}{'flips':>6}{'first':>7}{'min gap':>9}"
                 f"{'gap at first':>13}"]
        for n in self.numerics:
            first = "-" if n.first_flip is None else str(n.first_flip)
            gap = "-" if n.gap_at_first_flip is None else f"{n.gap_at_first_flip:.2e}"
            lines.append(f"{n.task:<6}{n.dtype:<10}{n.positions:>10}{n.max_abs_diff:>11.2e}{n.flips:>6}{first:>7}"
                         f"{n.min_gap:>9.2e}{gap:>13}")
        return "\n".join(lines)


def _value(hint, x, where: str, choices: dict):
    """x checked against the type hint (str, int, float, bool, dict, list[...], X | None, a dataclass)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None
        if x is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(inner, x, where, choices)
    if is_dataclass(hint):
        return _build(hint, x, where, choices)
    if origin is list:
        if not isinstance(x, list):
            raise TypeError(f"{where} must be a list, got {type(x).__name__}")
        return [_value(args[0], v, f"{where}[{i}]", choices) for i, v in enumerate(x)]
    if origin is dict or hint is dict:
        if not isinstance(x, dict):
            raise TypeError(f"{where} must be a dict, got {type(x).__name__}")
        key, val = args or (str, typing.Any)
        return {_value(key, k, f"{where} key", choices): _value(val, v, f"{where}[{k!r}]", choices)
                for k, v in x.items()}
    if hint is typing.Any:
        return x
    ok = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}[hint]
    if isinstance(x, bool) and hint is not bool or not isinstance(x, ok):
        raise TypeError(f"{where} must be {hint.__name__}, got {type(x).__name__} {x!r}")
    return float(x) if hint is float else x


def _build(cls, data, where: str, choices: dict = CHOICES):
    """cls(**data) with every field present, no unknown ones, each of its declared type and choices (field name ->
    the names it may hold)."""
    if not isinstance(data, dict):
        raise TypeError(f"{where} must be a JSON object (a {cls.__name__}), got {type(data).__name__}")
    names = [f.name for f in fields(cls)]
    missing, unknown = [n for n in names if n not in data], sorted(set(data) - set(names))
    if missing or unknown:
        raise ValueError(f"{where} ({cls.__name__}): missing fields {missing}, unknown fields {unknown}")
    hints = typing.get_type_hints(cls)
    values = {n: _value(hints[n], data[n], f"{where}.{n}", choices) for n in names}
    for n, allowed in choices.items():
        if n in values and values[n] not in allowed:
            raise ValueError(f"{where}.{n} must be one of {', '.join(map(repr, allowed))}; got {values[n]!r}")
    return cls(**values)


def _check_consistent(rec: RealRecording) -> None:
    """The cross-field rules: one target and at most one draft (none when tiny), runs on recorded tasks, k, alpha."""
    roles = sorted(m.role for m in rec.models)
    if roles not in (["draft", "target"], ["target"]) and not (rec.tiny and not roles):  # tiny: no files
        raise ValueError(f"models must be one target and at most one draft, got roles {roles}")
    for i, r in enumerate(rec.runs):
        if r.task not in rec.prompts:
            raise ValueError(f"runs[{i}].task must be one of the prompts {sorted(rec.prompts)}; got {r.task!r}")
        if (r.k == 0) != (r.draft == "plain") or r.k < 0:
            raise ValueError(f"runs[{i}].k must be 0 for the plain run and >= 1 for a draft; got {r.k} ({r.draft})")
        if len(r.alpha) != r.k:
            raise ValueError(f"runs[{i}].alpha must hold k = {r.k} rates by position, got {len(r.alpha)}")
        if r.measured <= 0 or r.predicted <= 0:
            raise ValueError(f"runs[{i}].measured and .predicted must be > 0, got {r.measured}, {r.predicted}")
        check_repeats(r, f"runs[{i}]")


def load_checked(cls, path, *, schema: int, choices: dict = CHOICES, upgrades: dict | None = None):
    """cls from the JSON object in path (every field checked by name, type and choices), whose "schema" is schema or
    a key of upgrades (an older layout -> a function returning its dict in this one's); every real reader's start."""
    if not isinstance(path, (str, pathlib.Path)):
        raise TypeError(f"path must be a str or pathlib.Path, got {type(path).__name__}")
    data = json.loads(pathlib.Path(path).read_text())
    if not isinstance(data, dict):
        raise TypeError(f"path must hold a JSON object (a {cls.__name__}), got {type(data).__name__} in {path}")
    upgrades = {schema: lambda d: d, **(upgrades or {})}
    if data.get("schema") not in upgrades:
        raise ValueError(f"schema must be {' or '.join(map(str, upgrades))}, got {data.get('schema')!r} in {path}")
    data = upgrades[data["schema"]](data)
    return _build(cls, {n: v for n, v in data.items() if n != "schema"}, "recording", choices)


def _one_run_each(data: dict) -> dict:  # a schema-1 recording (one run per configuration) in schema 2's layout
    runs = data.get("runs")  # a run that is not a dict, or runs not a list, is left for _build to name
    return dict(data, runs=[dict(r, repeats=[], ranges={}) if isinstance(r, dict) else r for r in runs]) \
        if isinstance(runs, list) else data


def load_real_recording(path: str | pathlib.Path = REAL_REFERENCE_PATH) -> RealRecording:
    """The RealRecording in a JSON file written by `benchmarks/measure_real.py --json PATH` (schema 2, or 1)."""
    rec = load_checked(RealRecording, path, schema=SCHEMA, upgrades={1: _one_run_each})
    _check_consistent(rec)
    return rec


@functools.cache
def real_recorded() -> RealRecording:
    """The committed run (REAL_REFERENCE_PATH), read once."""
    return load_real_recording()
