"""lab/gpu_recording.py through lab/recordings.py (kind "measure-gpu"): the committed GPU reference reads with its
provenance and every term of the outside probe, a written copy round-trips, and bad fields are refused naming the
file and the field."""
import dataclasses

import pytest
from recording_files import committed, write

import specdec_lib as sd
from specdec_lib.lab import recordings as rec_
from specdec_lib.lab.gpu_recording import CostColumn, GPURecording
from specdec_lib.lab.recordings import load_recording, recorded


def test_the_committed_gpu_reference_says_where_it_came_from():
    R = recorded("measure-gpu")
    assert isinstance(R, GPURecording) and committed("measure-gpu")["schema"] == rec_.SCHEMAS["measure-gpu"] == 1
    assert "outside probe" in R.source and "H200" in R.source and "random weights" in R.source
    assert "E[N] from the CPU recording" in R.source and "Not re-measured" in R.source
    assert R.measured_by == "an outside probe" and R.weights == "random" and not R.tiny
    assert R.machine["gpu"] == "NVIDIA H200" and R.machine["transformers"] == "5.24.0"
    assert [m.params for m in R.models] == [1_777_088_000, 630_167_424]
    assert [(c.path, c.run) for c in R.columns] == [("eager", "run1"), ("minimal-eager", "run1"),
                                                   ("captured", "run1"), ("captured", "run2")]
    assert {"hf_eager", "cuda_graph", "lab", "rand", "predictions"} <= set(R.method)
    assert R.zero_coin["rand_float32"]["zeros"] == 8158 and R.smoke["lab_pair_greedy_equal"]["eagle"]
    assert [t.draft for t in R.byte_pair] == ["draft", "draft_deep", "table", "lookup"] and R.byte_pair_batch.ks


def test_the_committed_terms_are_the_probes():
    R = recorded("measure-gpu")
    eager, captured = R.column("eager"), R.column("captured", "run2")
    assert eager.T_1_ms == pytest.approx(21.008, abs=1e-3) and eager.ks == [1, 2, 4, 6, 8]
    assert eager.draft("0.5B").at(4) == pytest.approx(0.833, abs=1e-3)
    assert eager.c_v[2] == pytest.approx(1.219, abs=1e-3)
    assert R.column("captured", "run1").T_1_ms == pytest.approx(3.264, abs=1e-3)
    assert captured.batches == [1, 4, 16, 64] and captured.ks == [1, 2, 4, 8]
    assert [round(captured.c_v_batch(k=4, B=B), 2) for B in (4, 16, 64)] == [1.25, 1.36, 2.14]
    assert captured.draft("one_layer").c_d == [pytest.approx(0.0745, abs=1e-3)]
    assert captured.draft("exit7").layers == 7 and captured.draft("0.5B").layers == 24
    with pytest.raises(ValueError, match=r"B must be one of \[1, 4, 16, 64\] in column captured/run2; got 8"):
        captured.c_v_batch(k=1, B=8)
    with pytest.raises(ValueError, match=r"k must be one of \[1, 2, 4, 8\] at B = 4"):
        captured.c_v_batch(k=3, B=4)
    with pytest.raises(ValueError, match="draft must be one of"):
        captured.draft("medusa")
    with pytest.raises(ValueError, match=r"\(path, run\) must be one of"):
        R.column("captured", "run3")


def test_the_committed_predictions_follow_from_the_cpu_recordings_e_n():
    R, cpu = recorded("measure-gpu"), recorded("measure-real")
    assert R.tasks == cpu.tasks
    for p in R.predictions:
        kind = "lookup" if p.draft == "lookup" else "model"
        assert p.e_n == cpu.run(p.task, kind).e_n
        assert p.predicted == pytest.approx(sd.cost.cost_equation(p.e_n, draft_steps=p.k, c_d=p.c_d, c_v=p.c_v))
        assert p.measured is None and p.equal_to_plain is None  # random weights: no clock of a speedup
    assert R.prediction("edit", "0.5B").predicted == pytest.approx(1.0, abs=0.02)  # the 1.01
    assert R.prediction("edit", "lookup").predicted == pytest.approx(3.09, abs=0.01)
    assert R.prediction("edit", "one_layer", path="captured").predicted > 2
    with pytest.raises(ValueError, match=r"\(task, draft, path, run\) must be one of"):
        R.prediction("edit", "one_layer", path="eager")


def test_a_written_gpu_recording_round_trips(tmp_path):
    R = recorded("measure-gpu")
    again = load_recording("measure-gpu", write(tmp_path, {"schema": 1, **dataclasses.asdict(R)}))
    assert again == R


@pytest.mark.parametrize("edit, error, match", [
    (lambda d: d.pop("source"), ValueError, r"recording \(GPURecording\): missing fields \['source'\]"),
    (lambda d: d.update(weights="fake"), ValueError, r"recording.weights must be one of 'random', 'real', 'tiny'"),
    (lambda d: d["columns"][0].update(path="graphs"), ValueError, r"recording.columns\[0\].path must be one of"),
    (lambda d: d["columns"][0].update(T_1_ms="21"), TypeError, r"recording.columns\[0\].T_1_ms must be float"),
    (lambda d: d["columns"][0]["c_v"].pop(), ValueError, r"columns\[0\] must have T_1_ms > 0 and one c_v > 0 per k"),
    (lambda d: d["columns"][0]["drafts"][0]["c_d"].pop(), ValueError, r"columns\[0\].drafts\[0\] must have one c_d"),
    (lambda d: d["columns"][3]["pass_ms"]["4"].update({"2": "x"}), TypeError,
     r"recording.columns\[3\].pass_ms\['4'\]\['2'\] must be float"),
    (lambda d: d.update(columns=[]), ValueError, "columns must hold at least one column, got none"),
    (lambda d: d.update(tiny=True), ValueError, "tiny must be true exactly when weights is 'tiny'"),
    (lambda d: d["predictions"][0].update(run="run9"), ValueError, r"predictions\[0\] must name a recorded column"),
    (lambda d: d["predictions"][0].update(measured=1.2), ValueError,
     r"predictions\[0\]: measured and equal_to_plain must be null with random weights"),
    (lambda d: d["predictions"][0].update(k=0), ValueError, r"predictions\[0\] must have k >= 1"),
    (lambda d: d["byte_pair"][0].pop("c_v"), ValueError, r"byte_pair\[0\] \(SpeedupTable\): missing fields \['c_v'\]"),
])
def test_bad_gpu_fields_are_refused_naming_the_file_and_the_field(tmp_path, edit, error, match):
    data = committed("measure-gpu")
    edit(data)
    path = write(tmp_path, data)
    with pytest.raises(error, match=f"{path}: .*{match}"):
        load_recording("measure-gpu", path)


def test_a_placeholder_column_holds_no_terms_and_says_why(tmp_path):
    data = committed("measure-gpu")
    empty = {f.name: v for f, v in zip(dataclasses.fields(CostColumn), ["captured", "measure_gpu", "none", False, 0,
                                                                         None, [], [], {}, [], "not built"])}
    load_recording("measure-gpu", write(tmp_path, {**data, "columns": data["columns"] + [empty]}))
    for bad in ({"T_1_ms": 3.0}, {"note": ""}, {"ks": [1]}):
        path = write(tmp_path, {**data, "columns": data["columns"] + [{**empty, **bad}]})
        with pytest.raises(ValueError, match=rf"{path}: columns\[4\]: a column with measured false must hold no terms"):
            load_recording("measure-gpu", path)


def test_a_column_batch_cost_is_its_passes_ratios_with_the_lab_fit():
    """CostColumn.batch_cost: c_v(k; B) = pass(B, k+1) / pass(B, 1) at every k timed at every B, fitted as make measure
    fits, the best k per B from them; a column timed at one k has no line to fit."""
    from specdec_lib.lab.batch_cost import best_k_by_batch, fit_c_v

    column = recorded("measure-gpu").column("captured", run="run2")
    batch = column.batch_cost(alpha=0.8, c_d=0.1)
    assert batch.batches == [1, 4, 16, 64] and batch.ks == [1, 2, 4, 8]
    assert batch.c_v[3][2] == column.pass_ms["64"]["5"] / column.pass_ms["64"]["1"]
    assert batch.fits == [fit_c_v(batch.ks, row) for row in batch.c_v]
    assert batch.best == best_k_by_batch(batch.fits, 0.8, 0.1, k_max=8) and batch.best[3].k < 8  # B = 64: shorter
    one_k = dataclasses.replace(column, pass_ms={"1": {"1": 3.0, "2": 4.0}})
    with pytest.raises(ValueError, match="2 or more k"):
        one_k.batch_cost(alpha=0.8, c_d=0.1)
