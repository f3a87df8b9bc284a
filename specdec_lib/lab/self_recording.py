"""Lab: the recorded `make measure-self` run, the one reader of specdec_lib/data/self_drafts_reference.json.

`benchmarks/measure_self.py --json PATH` times every draft that comes from the target itself (early exit at each
layer, on the trained target and on its early-exit fine-tune; Medusa's heads as a chain and as trees; the EAGLE
feature draft; lookahead) beside the lab's separate drafts, greedy and at temperature 1. Notebook 09 prints and
plots this recording, so it shows the same numbers on every machine and never times anything.
"""
from __future__ import annotations

import functools
import json
import pathlib
import statistics
from dataclasses import dataclass
from importlib import resources

from .._checks import check_choice, check_int
from .recording import beside_runs
from .speedup_table import SpeedupTable
from .tree_measure import TreeTable

__all__ = ["SELF_REFERENCE_PATH", "ChainRun", "TreeRun", "SelfRecording", "BestSpeed", "SplitChoice", "split_best_k",
           "load_self_recording", "self_recorded"]

SELF_REFERENCE_PATH = pathlib.Path(str(resources.files("specdec_lib") / "data" / "self_drafts_reference.json"))


@dataclass(frozen=True)
class ChainRun:
    """One draft's chain table (measure_speedup) on one target at one temperature."""

    target: str  # "target" or "target_ee" (sd.lab.load_target)
    temperature: float
    table: SpeedupTable

    @property
    def best(self) -> int:
        """Index of the k with the largest measured speedup (the median over repeats: this choice favours a k whose
        repeats ran fast by chance, so the S there is biased upward; split_best_k chooses and reports apart)."""
        return max(range(len(self.table.ks)), key=lambda i: self.table.measured[i])

    def best_speed(self) -> BestSpeed:
        """The measured S at the best k, with its range over the repeats."""
        t, i = self.table, self.best
        low, high = t.measured_range[i]
        return BestSpeed(draft=t.draft, target=self.target, temperature=self.temperature, k=t.ks[i],
                         median=t.measured[i], low=low, high=high)

    def split(self, *, choose: tuple[int, ...] = (0, 2, 4), report: tuple[int, ...] = (1, 3)) -> SplitChoice:
        """split_best_k on this run's per-repeat speedups (ValueError when the recording kept none)."""
        if not self.table.repeat_speeds:
            raise ValueError(f"the {self.table.draft} table keeps no per-repeat speedups (only medians and ranges): "
                             "re-record with `make measure-self` to choose k on some repeats and report others")
        return split_best_k(self.table.ks, self.table.repeat_speeds, choose=choose, report=report)


@dataclass(frozen=True)
class BestSpeed:
    """One chain run at its best k: the median measured speedup over the repeats and its range [low, high]."""

    draft: str
    target: str
    temperature: float
    k: int
    median: float
    low: float
    high: float

    def within_noise(self, other: BestSpeed) -> bool:
        """True when the two ranges overlap: the recording cannot rank the two."""
        return self.low <= other.high and other.low <= self.high

    def beats(self, other: BestSpeed) -> bool:
        """True when every repeat of self ran faster than every repeat of other (the ranges do not overlap)."""
        return self.low > other.high


@dataclass(frozen=True)
class SplitChoice:
    """k chosen on some repeats, its speedup reported on the others: an estimate the choice did not inflate."""

    k: int
    chosen: float  # the median S at k over the repeats that chose it (biased upward, like any best-of)
    reported: float  # the median S at k over the other repeats
    reported_range: tuple[float, float]


def split_best_k(ks: list[int], repeat_speeds: list[list[float]], *, choose: tuple[int, ...] = (0, 2, 4),
                 report: tuple[int, ...] = (1, 3)) -> SplitChoice:
    """The k with the largest median S over the repeats `choose`, and its S over the repeats `report`.

    repeat_speeds[i][r] is repeat r's measured speedup at ks[i]. Choosing k as the argmax over every repeat and then
    reporting those same repeats favours a k that was lucky; the repeats that report never voted."""
    if len(ks) == 0 or len(repeat_speeds) != len(ks):
        raise ValueError(f"repeat_speeds must hold one list per k ({len(ks)}), got {len(repeat_speeds)}")
    n = len(repeat_speeds[0])
    if any(len(row) != n for row in repeat_speeds):
        raise ValueError("repeat_speeds must hold the same number of repeats at every k")
    for name, rs in (("choose", choose), ("report", report)):
        if not rs:
            raise ValueError(f"{name} must name at least one repeat")
        for r in rs:
            check_int(f"{name}[...]", r, minimum=0)
            if r >= n:
                raise ValueError(f"{name} must name repeats 0 .. {n - 1}, got {r}")
    if set(choose) & set(report):
        raise ValueError(f"choose and report must not share a repeat, got {sorted(set(choose) & set(report))}")
    med = statistics.median
    i = max(range(len(ks)), key=lambda j: med(repeat_speeds[j][r] for r in choose))  # ties: the smaller index
    shown = [repeat_speeds[i][r] for r in report]
    return SplitChoice(k=ks[i], chosen=med(repeat_speeds[i][r] for r in choose), reported=med(shown),
                       reported_range=(min(shown), max(shown)))


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

    def best_speeds(self, *, temperature: float = 1.0) -> list[BestSpeed]:
        """Every chain run at temperature, at its best k, with the range of its repeats there."""
        return [run.best_speed() for run in self.chains if run.temperature == temperature]

    @property
    def keeps_repeats(self) -> bool:
        """Whether every chain table keeps each repeat's speedup (recordings before issue 37 keep only the range)."""
        return all(run.table.repeat_speeds for run in self.chains)

    def drafts(self, *, target: str = "target", temperature: float = 1.0) -> list[str]:
        """The chain drafts recorded on target at temperature, in order."""
        check_choice("target", target, tuple(dict.fromkeys(r.target for r in self.chains)))
        return [r.table.draft for r in self.chains if (r.target, r.temperature) == (target, temperature)]


def _table(t: dict) -> SpeedupTable:
    return SpeedupTable(**{**t, "measured_range": [tuple(r) for r in t["measured_range"]],
                           "T_1_range": tuple(t["T_1_range"]), "beside": beside_runs(t)})


def _tree_table(t: dict) -> TreeTable:
    return TreeTable(**{**t, "trees": [None if w is None else tuple(w) for w in t["trees"]]})


def load_self_recording(path: str | pathlib.Path = SELF_REFERENCE_PATH) -> SelfRecording:
    """The SelfRecording in a JSON file written by `benchmarks/measure_self.py --json PATH`."""
    if not isinstance(path, (str, pathlib.Path)):
        raise TypeError(f"path must be a str or pathlib.Path, got {type(path).__name__}")
    path = pathlib.Path(path)
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or set(data) != {"chains", "trees", "machine"} or not data["chains"]:
        raise ValueError(f"path must hold measure_self's JSON ({{'chains': [...], 'trees': [...], 'machine': "
                         f"{{...}}}}), got {path}")
    chains = [ChainRun(c["target"], c["temperature"], _table(c["table"])) for c in data["chains"]]
    trees = [TreeRun(t["target"], t["temperature"], _tree_table(t["table"])) for t in data["trees"]]
    return SelfRecording(chains=chains, trees=trees, machine=data["machine"])


@functools.cache
def self_recorded() -> SelfRecording:
    """The committed run (SELF_REFERENCE_PATH), read once."""
    return load_self_recording()
