"""lab/self_recording.py: the one reader of the recorded `make measure-self` run, shipped as package data."""
import json
import pathlib

import pytest

import specdec_lib as sd
from specdec_lib.lab import self_recording as sr

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_recording_holds_every_draft_on_both_targets_and_policies():
    assert sr.SELF_REFERENCE_PATH == ROOT / "specdec_lib" / "data" / "self_drafts_reference.json"
    R = sd.lab.self_recorded()
    assert sd.lab.self_recorded() is R  # read once
    for temperature in (0.0, 1.0):
        assert R.drafts(temperature=temperature) == ["exit1", "exit2", "exit3", "medusa", "eagle", "draft",
                                                     "draft_deep", "lookup"]
        assert R.drafts(target="target_ee", temperature=temperature) == ["exit1", "exit2", "exit3"]
        assert R.chain("medusa", temperature=temperature).table.ks == [1, 2, 3, 4]  # one proposal per head
        assert R.tree("medusa", temperature=temperature, rule="onehot_sequential").table.trees[0] == (1,)
        assert R.tree("lookahead W4 N4 G4", temperature=temperature).table.trees == [None]
    assert [r.table.rule for r in R.trees if r.table.draft == "medusa" and r.temperature == 1.0] == \
        ["onehot_sequential", "mss"]
    for run in R.chains:
        t = run.table
        assert all(1.0 <= e <= k + 1 for e, k in zip(t.e_n, t.ks)) and min(t.c_v) > 0 and min(t.measured) > 0
        assert t.measured[run.best] == max(t.measured)
    assert R.machine["threads"] == 1


def test_lookups_name_what_was_recorded_and_bad_files_are_refused(tmp_path):
    R = sd.lab.self_recorded()
    with pytest.raises(ValueError, match=r"\(draft, target, temperature\) must be one of .*got \('exit4'"):
        R.chain("exit4")
    with pytest.raises(ValueError, match=r"\(draft, rule, target, temperature\) must be one of"):
        R.tree("medusa", rule="rrs")
    with pytest.raises(ValueError, match="target must be one of 'target', 'target_ee'"):
        R.drafts(target="draft")
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"chains": []}))
    with pytest.raises(ValueError, match="path must hold measure_self's JSON"):
        sr.load_self_recording(path)
    with pytest.raises(TypeError, match="path must be a str or pathlib.Path, got int"):
        sr.load_self_recording(3)
