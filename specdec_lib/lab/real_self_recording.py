"""Lab: drafts from the real target itself, recorded; the one reader of data/real_self_reference.json.

`benchmarks/measure_real_self.py --json PATH` (`make measure-real-self`) times, on Qwen2.5-Coder-1.5B-Instruct, early
exit after L of its 28 layers (no fine-tune), through one cache shared with the target and as a separate draft with
a cache of its own, and lookahead decoding; greedy, one thread. Notebook 09 prints this recording, so it shows the
same numbers on every machine without the model. Fields are checked by name and type as
real_recording checks its own (load_checked); nothing here times anything.
"""
from __future__ import annotations

import functools
import pathlib
from dataclasses import dataclass
from importlib import resources

from .real_recording import CHOICES, ModelManifest, load_checked

__all__ = ["REAL_SELF_REFERENCE_PATH", "SCHEMA", "ExitRun", "LookaheadRun", "RealSelfRecording",
           "load_real_self_recording", "real_self_recorded"]

REAL_SELF_REFERENCE_PATH = pathlib.Path(str(resources.files("specdec_lib") / "data" / "real_self_reference.json"))
SCHEMA = 1  # the version of the JSON layout this reader understands
SELF_CHOICES = {**CHOICES, "cache": ("shared", "own")}


@dataclass(frozen=True)
class ExitRun:
    """An early exit after exit_layer of layers drafting k tokens a round on one task, against plain decoding."""

    task: str
    exit_layer: int
    layers: int
    cache: str  # "shared": one cache with the target (sd.lab.early_exit); "own": a separate draft (early_exit_lm)
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

    def table(self) -> str:
        """A text table, one line per run: the draft, c_d, c_v, E[N], first-position alpha, predicted, measured."""
        lines = [f"{'task':<6}{'draft':<28}{'k':>3}{'c_d':>7}{'c_v':>7}{'E[N]':>7}{'alpha1':>8}{'pred':>7}{'meas':>7}"
                 "  greedy = plain"]
        for r in self.exits:
            a1 = "-" if r.alpha[0] is None else f"{r.alpha[0]:.3f}"
            name = f"exit {r.exit_layer}/{r.layers}, {r.cache} cache"
            lines.append(f"{r.task:<6}{name:<28}{r.k:>3}{r.c_d:>7.3f}{r.c_v:>7.3f}{r.e_n:>7.2f}{a1:>8}"
                         f"{r.predicted:>7.2f}{r.measured:>7.2f}  {r.equal_to_plain}")
        for r in self.lookahead:
            name = f"lookahead W{r.window} n{r.ngram} G{r.guesses}"
            lines.append(f"{r.task:<6}{name:<28}{'-':>3}{r.c_d:>7.3f}{r.c_v:>7.3f}{r.e_n:>7.2f}{'-':>8}"
                         f"{r.predicted:>7.2f}{r.measured:>7.2f}  {r.equal_to_plain}")
        return "\n".join(lines)


def _check_consistent(rec: RealSelfRecording) -> None:
    """Runs on recorded tasks; 1 <= exit_layer < layers; alpha of length k; positive speedups; a target manifest."""
    roles = [m.role for m in rec.models]
    if roles != ["target"] and not (rec.tiny and not roles):
        raise ValueError(f"models must be the target's manifest alone (none when tiny), got roles {roles}")
    for name, runs in (("exits", rec.exits), ("lookahead", rec.lookahead)):
        for i, r in enumerate(runs):
            if r.task not in rec.prompts:
                raise ValueError(f"{name}[{i}].task must be one of the prompts {sorted(rec.prompts)}; got {r.task!r}")
            if r.measured <= 0 or r.predicted <= 0 or r.T_1 <= 0:
                raise ValueError(f"{name}[{i}]: T_1, measured and predicted must be > 0")
    for i, r in enumerate(rec.exits):
        if not 1 <= r.exit_layer < r.layers or r.k < 1 or len(r.alpha) != r.k:
            raise ValueError(f"exits[{i}] must have 1 <= exit_layer < layers, k >= 1 and k rates in alpha; got "
                             f"exit_layer {r.exit_layer}, layers {r.layers}, k {r.k}, {len(r.alpha)} rates")


def load_real_self_recording(path: str | pathlib.Path = REAL_SELF_REFERENCE_PATH) -> RealSelfRecording:
    """The RealSelfRecording in a JSON file written by `benchmarks/measure_real_self.py --json PATH` (schema 1)."""
    rec = load_checked(RealSelfRecording, path, schema=SCHEMA, choices=SELF_CHOICES)
    _check_consistent(rec)
    return rec


@functools.cache
def real_self_recorded() -> RealSelfRecording:
    """The committed run (REAL_SELF_REFERENCE_PATH), read once."""
    return load_real_self_recording()
