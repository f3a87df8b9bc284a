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
from dataclasses import dataclass
from importlib import resources

from .._checks import check_choice
from .recording import beside_runs
from .speedup_table import SpeedupTable
from .tree_measure import TreeTable

__all__ = ["SELF_REFERENCE_PATH", "ChainRun", "TreeRun", "SelfRecording", "load_self_recording", "self_recorded"]

SELF_REFERENCE_PATH = pathlib.Path(str(resources.files("specdec_lib") / "data" / "self_drafts_reference.json"))


@dataclass(frozen=True)
class ChainRun:
    """One draft's chain table (measure_speedup) on one target at one temperature."""

    target: str  # "target" or "target_ee" (sd.lab.load_target)
    temperature: float
    table: SpeedupTable

    @property
    def best(self) -> int:
        """Index of the k with the largest measured speedup."""
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
