"""lab/self_recording.py: the one reader of the recorded `make measure-self` run, shipped as package data."""
import dataclasses
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
        assert R.tree("lookahead W4 n4 G4", temperature=temperature).table.trees == [None]
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


# ---- rankings inside the noise (issue 37) ------------------------------------------------------------------------

def test_best_speeds_carry_the_range_and_rank_only_outside_it():
    R = sd.lab.self_recorded()
    best = {(b.draft, b.target): b for b in R.best_speeds(temperature=0.0)}
    for (draft, target), b in best.items():
        run = R.chain(draft, target=target, temperature=0.0)
        assert (b.k, b.median) == (run.table.ks[run.best], max(run.table.measured))
        assert b.low <= b.median <= b.high
    medusa, draft, lookup = best[("medusa", "target")], best[("draft", "target")], best[("lookup", "target")]
    assert medusa.within_noise(draft) and draft.within_noise(medusa) and not medusa.beats(draft)
    assert lookup.beats(medusa) and not medusa.beats(lookup) and not lookup.within_noise(medusa)
    assert not R.keeps_repeats  # this recording keeps medians and ranges only: the notebook says the bias
    with pytest.raises(ValueError, match="keeps no per-repeat speedups"):
        R.chain("medusa", temperature=0.0).split()


# A hand-made recording where choosing k on every repeat and choosing it on half of them disagree: k = 2 has the
# larger median over all five repeats, carried by repeats 1, 3 and 4; repeats 0, 2, 4 prefer k = 1.
KS = [1, 2]
SPEEDS = [[1.10, 1.00, 1.10, 1.00, 1.10],
          [1.00, 1.30, 1.00, 1.30, 1.30]]


def test_split_best_k_chooses_on_some_repeats_and_reports_the_others():
    import statistics
    assert max(range(2), key=lambda i: statistics.median(SPEEDS[i])) == 1  # argmax over all repeats: k = 2
    s = sr.split_best_k(KS, SPEEDS)  # choose on 0, 2, 4; report 1, 3
    assert (s.k, s.chosen, s.reported, s.reported_range) == (1, 1.10, 1.00, (1.00, 1.00))
    s = sr.split_best_k(KS, SPEEDS, choose=(1, 3), report=(0, 2, 4))
    assert (s.k, s.chosen, s.reported, s.reported_range) == (2, 1.30, 1.00, (1.00, 1.30))
    table = dataclasses.replace(sd.lab.self_recorded().chain("medusa", temperature=0.0).table, ks=KS,
                                repeat_speeds=SPEEDS)
    assert sr.ChainRun("target", 0.0, table).split() == sr.split_best_k(KS, SPEEDS)


@pytest.mark.parametrize("kwargs, match", [
    ({"choose": (0, 1), "report": (1, 3)}, "must not share a repeat"),
    ({"choose": (), "report": (1, 3)}, "choose must name at least one repeat"),
    ({"choose": (0, 2), "report": (5,)}, r"report must name repeats 0 \.\. 4, got 5"),
])
def test_split_best_k_refuses_bad_splits(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sr.split_best_k(KS, SPEEDS, **kwargs)
    with pytest.raises(ValueError, match="one list per k"):
        sr.split_best_k(KS, SPEEDS[:1])
