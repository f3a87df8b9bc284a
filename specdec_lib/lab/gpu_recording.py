"""Lab: the GPU recording's record (kind "measure-gpu", specdec_lib/data/gpu_reference.json): the real pair's cost
terms on one GPU, column by column, and what they predict with the CPU recording's acceptance.

A column is one way of running the target: "eager" (transformers through sd.lab.HFCausalLM), "minimal-eager" (a
minimal static-cache decoder, uncaptured) or "captured" (the same as CUDA graphs). It holds T_1 (ms), c_v(k) at
batch 1, one target pass over B x T new tokens in ms (pass_ms[B][T], so c_v(k; B) = pass_ms[B][k+1] / pass_ms[B][1])
and the drafts by depth (c_d(k) = D(k) / (k T_1) against the column's target). A column not measured (measured=False)
holds no terms and says why in its note. A prediction is S = E[N] / (k c_d + c_v(k)) with E[N] from the CPU
recording (acceptance needs real weights); measured and equal_to_plain are the GPU clock's, with real weights only.
recordings.py registers the kind and reads the file; benchmarks/measure_gpu.py writes one, and
benchmarks/gpu_reference_from_probe.py wrote the committed one from an outside probe's figures.
"""
from __future__ import annotations

from dataclasses import dataclass

from .batch_cost import BatchCost, best_k_by_batch, fit_c_v
from .speedup_table import SpeedupTable

__all__ = ["GPU_CHOICES", "ModelShape", "DepthDraft", "CostColumn", "TaskPrediction", "GPURecording",
           "check_gpu_recording"]

GPU_CHOICES = {  # the fields whose value is one of a few names
    "role": ("target", "draft"), "path": ("eager", "minimal-eager", "captured"), "weights": ("random", "real", "tiny"),
}


@dataclass(frozen=True)
class ModelShape:
    """One model's shape (what random weights of the real pair copy) and its parameter count."""

    role: str  # "target" | "draft"
    name: str  # e.g. "Qwen2.5-Coder-1.5B-Instruct"
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool  # the head shares the embedding's weights
    params: int


@dataclass(frozen=True)
class DepthDraft:
    """One draft by depth: its layers and width, c_d(k) against its column's target step, and its own passes."""

    draft: str  # "0.5B", "exit7" (the target's first 7 layers + head), "one_layer", "lookup", ...
    layers: int  # 0: no network (prompt lookup)
    hidden: int  # 0: no network
    ks: list[int]
    c_d: list[float]  # D(k) / (k T_1) per ks
    c_v: list[float]  # the target's c_v(k) timed with this draft (time_terms), per ks; empty when timed alone
    T_1_ms: float | None  # the target step c_d is relative to, when not the column's
    pass_ms: dict[str, float]  # new tokens T -> the draft's own pass, ms (empty where not timed alone)
    step_over_target: float | None  # the draft's one-token step over the target's, where timed so
    weight_GB: float | None  # the weights one of its steps reads

    def at(self, k: int) -> float:
        """c_d(k) (ValueError listing the recorded ks otherwise)."""
        if k not in self.ks:
            raise ValueError(f"k must be one of {self.ks} for draft {self.draft!r}; got {k!r}")
        return self.c_d[self.ks.index(k)]


@dataclass(frozen=True)
class CostColumn:
    """One way of running the target on one GPU: T_1, c_v(k) at batch 1, passes by (B, T), drafts by depth."""

    path: str  # "eager" | "minimal-eager" | "captured"
    run: str  # which run or machine ("run1", "run2", "measure_gpu")
    decoder: str  # what ran
    measured: bool  # False: a placeholder with no terms; the note says why
    context: int  # cached positions before each timed pass
    T_1_ms: float | None  # one plain step of the target, ms
    ks: list[int]
    c_v: list[float]  # c_v(k) = V(k) / T_1 at batch 1, per ks
    pass_ms: dict[str, dict[str, float]]  # batch B -> new tokens T -> one target pass, ms
    drafts: list[DepthDraft]
    note: str

    @property
    def batches(self) -> list[int]:
        """The batch sizes B with timed passes, ascending."""
        return sorted(int(B) for B in self.pass_ms)

    def c_v_batch(self, *, k: int, B: int) -> float:
        """c_v(k; B) = one pass over B x (k+1) new tokens / one over B x 1 (ValueError naming what is missing)."""
        row = self.pass_ms.get(str(B))
        if row is None:
            raise ValueError(f"B must be one of {self.batches} in column {self.path}/{self.run}; got {B!r}")
        if str(k + 1) not in row or "1" not in row:
            have = sorted(int(T) - 1 for T in row if int(T) > 1)
            raise ValueError(f"k must be one of {have} at B = {B} in column {self.path}/{self.run}; got {k!r}")
        return row[str(k + 1)] / row["1"]

    def batch_cost(self, *, alpha: float, c_d: float) -> BatchCost:
        """The batch regime of this column's passes as make measure records it: c_v(k; B) at every k timed at every B,
        its line per B and the best k per B for alpha and c_d (k up to the largest timed)."""
        ks = sorted(set.intersection(*({int(T) - 1 for T in row if int(T) > 1} for row in self.pass_ms.values())))
        if len(ks) < 2:
            raise ValueError(f"column {self.path}/{self.run} needs passes at 2 or more k at every B; got {ks}")
        c_v = [[self.c_v_batch(k=k, B=B) for k in ks] for B in self.batches]
        fits = [fit_c_v(ks, row) for row in c_v]
        return BatchCost(batches=self.batches, ks=ks, T_1=[self.pass_ms[str(B)]["1"] / 1e3 for B in self.batches],
                         c_v=c_v, fits=fits, best=best_k_by_batch(fits, alpha, c_d, k_max=max(ks)), alpha=alpha,
                         c_d=c_d)

    def draft(self, name: str) -> DepthDraft:
        """The draft called name (ValueError listing the recorded ones otherwise)."""
        for d in self.drafts:
            if d.draft == name:
                return d
        raise ValueError(f"draft must be one of {[d.draft for d in self.drafts]}; got {name!r}")


@dataclass(frozen=True)
class TaskPrediction:
    """One task, draft and column: the equation's S from the CPU recording's E[N] (the GPU clock's: real weights)."""

    task: str
    draft: str  # a draft of the column ("0.5B", "lookup", "one_layer", ...)
    path: str
    run: str
    k: int
    e_n: float  # E[N] of the CPU recording (greedy) for this task and kind of draft at k
    c_d: float
    c_v: float
    predicted: float  # E[N] / (k c_d + c_v)
    cpu_measured: float | None  # the CPU recording's measured S for the same task, kind of draft and k
    measured: float | None  # the GPU clock's S (real weights only)
    equal_to_plain: bool | None  # greedy output equal to plain decoding on the GPU (real weights only)


@dataclass(frozen=True)
class GPURecording:
    """One GPU's cost terms for the real pair's shapes: provenance, machine, method, the columns, the predictions."""

    source: str  # who measured it, how, and with what weights
    measured_by: str  # "an outside probe" or "benchmarks/measure_gpu.py"
    machine: dict  # gpu, torch, transformers, python, date, ...
    method: dict[str, str]  # what each part timed and how
    weights: str  # "random" (the real shapes), "real" or "tiny"
    models: list[ModelShape]
    columns: list[CostColumn]
    predictions: list[TaskPrediction]
    byte_pair: list[SpeedupTable]  # the course's byte pair, `make measure --device cuda`; empty where not run
    byte_pair_batch: BatchCost | None
    zero_coin: dict  # counts of exact zeros (and ones) from the device's uniform and exponential draws
    smoke: dict  # which lab decoders ran on the device and matched plain greedy decoding
    notes: dict[str, str]
    tiny: bool  # True: written by --tiny (small shapes): never the reference

    def column(self, path: str, run: str | None = None) -> CostColumn:
        """The first column of path (and run, when given); ValueError listing the recorded ones otherwise."""
        for c in self.columns:
            if c.path == path and run in (None, c.run):
                return c
        raise ValueError(f"(path, run) must be one of {[(c.path, c.run) for c in self.columns]}; got {(path, run)}")

    def prediction(self, task: str, draft: str, *, path: str = "eager", run: str | None = None) -> TaskPrediction:
        """The prediction for task and draft in the column path (and run)."""
        for p in self.predictions:
            if (p.task, p.draft, p.path) == (task, draft, path) and run in (None, p.run):
                return p
        have = sorted({(p.task, p.draft, p.path, p.run) for p in self.predictions})
        raise ValueError(f"(task, draft, path, run) must be one of {have}; got {(task, draft, path, run)}")

    @property
    def tasks(self) -> list[str]:
        """The predicted tasks, in order of first appearance."""
        return list(dict.fromkeys(p.task for p in self.predictions))


def _check_column(c: CostColumn, where: str) -> None:
    """A measured column has T_1 > 0 and one c_v per k, each draft one c_d per k; a placeholder holds no terms."""
    if not c.measured:
        if c.T_1_ms is not None or c.ks or c.c_v or c.pass_ms or c.drafts or not c.note:
            raise ValueError(f"{where}: a column with measured false must hold no terms and a note saying why")
        return
    if c.T_1_ms is None or not c.T_1_ms > 0 or len(c.ks) != len(c.c_v) or min(c.c_v, default=1.0) <= 0:
        raise ValueError(f"{where} must have T_1_ms > 0 and one c_v > 0 per k; got T_1_ms {c.T_1_ms}, "
                         f"{len(c.ks)} ks and c_v {c.c_v}")
    for j, d in enumerate(c.drafts):
        if len(d.ks) != len(d.c_d) or (d.c_v and len(d.c_v) != len(d.ks)) or min(d.c_d, default=0.0) < 0:
            raise ValueError(f"{where}.drafts[{j}] must have one c_d >= 0 per k (and c_v empty or one per k); got "
                             f"{len(d.ks)} ks, c_d {d.c_d}, c_v {d.c_v}")


def check_gpu_recording(rec: GPURecording) -> None:
    """The cross-field rules: columns and their terms, predictions on a recorded column, clocks with real weights."""
    if not rec.columns:
        raise ValueError("columns must hold at least one column, got none")
    if rec.tiny != (rec.weights == "tiny"):
        raise ValueError(f"tiny must be true exactly when weights is 'tiny'; got tiny {rec.tiny}, "
                         f"weights {rec.weights!r}")
    for i, c in enumerate(rec.columns):
        _check_column(c, f"columns[{i}]")
    have = {(c.path, c.run) for c in rec.columns}
    for i, p in enumerate(rec.predictions):
        if (p.path, p.run) not in have:
            raise ValueError(f"predictions[{i}] must name a recorded column {sorted(have)}; got {(p.path, p.run)}")
        if p.k < 1 or min(p.e_n, p.c_v, p.predicted) <= 0:
            raise ValueError(f"predictions[{i}] must have k >= 1 and e_n, c_v, predicted > 0; got k {p.k}, e_n "
                             f"{p.e_n}, c_v {p.c_v}, predicted {p.predicted}")
        if rec.weights == "random" and (p.measured is not None or p.equal_to_plain is not None):
            raise ValueError(f"predictions[{i}]: measured and equal_to_plain must be null with random weights")
