"""Lab: the recorded `make measure` run, the one reader of specdec_lib/data/measure_reference.json.

`benchmarks/measure_speedup.py --json` writes every draft's SpeedupTable and the batch regime's BatchCost;
the run committed as package data (specdec_lib/data/) is what figures, notebooks and exercises print, so they
show the same numbers on every machine and never time anything. recorded() reads it once.
"""
from __future__ import annotations

import functools
import json
import pathlib
from dataclasses import dataclass
from importlib import resources

from ..cost import BestK
from .batch_cost import BatchCost, LinearCost, fit_c_v
from .speedup_table import SpeedupTable, VerifierRun

__all__ = ["REFERENCE_PATH", "Recording", "load_recording", "beside_runs", "recorded"]

REFERENCE_PATH = pathlib.Path(str(resources.files("specdec_lib") / "data" / "measure_reference.json"))


@dataclass(frozen=True)
class Recording:
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


def load_recording(path: str | pathlib.Path = REFERENCE_PATH) -> Recording:
    """The Recording in a JSON file written by `benchmarks/measure_speedup.py --json PATH`."""
    if not isinstance(path, (str, pathlib.Path)):
        raise TypeError(f"path must be a str or pathlib.Path, got {type(path).__name__}")
    path = pathlib.Path(path)
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or set(data) != {"tables", "batch"} or not data["tables"]:
        raise ValueError(f"path must hold measure_speedup's JSON ({{'tables': [...], 'batch': {{...}}}}), got {path}")
    tables = [SpeedupTable(**{**t, "measured_range": [tuple(r) for r in t["measured_range"]],
                              "T_1_range": tuple(t["T_1_range"]), "beside": beside_runs(t)}) for t in data["tables"]]
    b = data["batch"]
    batch = BatchCost(**{**b, "fits": [tuple(f) for f in b["fits"]], "best": [BestK(**x) for x in b["best"]]})
    return Recording(tables=tables, batch=batch)


def beside_runs(table: dict) -> tuple[VerifierRun, ...]:
    """The other verifiers' runs of one table's JSON (none in a run recorded before they existed)."""
    return tuple(VerifierRun(**{**run, "measured_range": [tuple(r) for r in run["measured_range"]]})
                 for run in table.get("beside", ()))


@functools.cache
def recorded() -> Recording:
    """The committed run (REFERENCE_PATH), read once."""
    return load_recording()
