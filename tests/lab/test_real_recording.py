"""The reader of `make measure-real`'s JSON: a round trip, every validation with its negative control, run()'s
lookup, and (when the package file exists) the committed recording's own promises."""
import dataclasses
import json

import pytest

from specdec_lib.lab import real_recording as rr
from specdec_lib.lab import real_terms as rt


def repeated(run: dict, T_1s=(0.012, 0.010, 0.011), measured=(0.9, 1.1, 1.0)) -> dict:
    """run with three repeats (T_1 and the clock moving, the other terms fixed) and its medians and ranges."""
    reps = [rt.RunRepeat(T_1=t, c_d=run["c_d"], c_v=run["c_v"], e_n=run["e_n"], measured=m,
                         predicted=run["e_n"] / (run["k"] * run["c_d"] + run["c_v"]), equal_to_plain=True)
            for t, m in zip(T_1s, measured)]
    return dict(run, **rt.summarise_repeats(reps, run["k"]), repeats=[dataclasses.asdict(r) for r in reps])


def synthetic_recording(*, tiny: bool = True) -> dict:
    """A small RealRecording as measure_real writes it (asdict + schema): two tasks, plain/model/lookup, two dtypes;
    the fp32 onednn greedy model runs with three repeats."""
    runs = []
    for task in ("code", "edit"):
        for dtype, matmul in (("float32", "default"), ("float32", "onednn"), ("bfloat16", "default")):
            runs.append(dict(task=task, draft="plain", k=0, temperature=0.0, dtype=dtype, matmul=matmul, n_new=16,
                             T_1=0.01, c_d=0.0, c_v=1.0, e_n=1.0, alpha=[], predicted=1.0, measured=1.0,
                             equal_to_plain=True, first_divergence=None, repeats=[], ranges={}))
            for draft, k, c_d, e_n in (("model", 4, 0.35, 2.5), ("lookup", 6, 0.0, 3.0 if task == "edit" else 1.2)):
                c_v = 1.2 + 0.1 * k
                flip = dtype == "bfloat16" and draft == "model" and task == "code"
                runs.append(dict(task=task, draft=draft, k=k, temperature=0.0, dtype=dtype, matmul=matmul, n_new=16,
                                 T_1=0.01, c_d=c_d, c_v=c_v, e_n=e_n, alpha=[0.7] + [None] * (k - 1),
                                 predicted=e_n / (k * c_d + c_v), measured=0.95 * e_n / (k * c_d + c_v),
                                 equal_to_plain=not flip, first_divergence=3 if flip else None, repeats=[],
                                 ranges={}))
                if (draft, matmul) == ("model", "onednn"):
                    runs[-1] = repeated(runs[-1])
    runs.append({**runs[4], "temperature": 1.0, "equal_to_plain": None, "first_divergence": None, "repeats": [],
                 "ranges": {}})
    manifest = dict(role="target", name="tiny-qwen2", source="random init", licence="none",
                    files=[dict(path="model.safetensors", bytes=1234, sha256="ab" * 32)],
                    header={"general.architecture": "qwen2"}, params=5000)
    return dict(schema=2, machine=dict(platform="linux", threads=1, fp32_matmul="onednn", loadavg_before=[0.1]),
                models=[manifest, {**manifest, "role": "draft", "params": 2000}],
                prompts={"code": 40, "edit": 60}, runs=runs,
                c_v_curve=[dict(dtype="float32", matmul=m, k=k, c_v=1 + 0.2 * k) for m in ("default", "onednn")
                           for k in (1, 2, 4)],
                hf=[dict(task="edit", mode="assistant", k=4, hf_speedup=1.4, ours_speedup=1.5, ours_over_hf=1.1,
                         equal_to_plain=True)],
                numerics=[dict(task="code", dtype="bfloat16", positions=32, max_abs_diff=0.1, flips=1, first_flip=3,
                               min_gap=0.01, gap_at_first_flip=0.02),
                          dict(task="code", dtype="float32", positions=32, max_abs_diff=1e-6, flips=0,
                               first_flip=None, min_gap=0.01, gap_at_first_flip=None)],
                tiny=tiny)


def write(tmp_path, data) -> str:
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_written_recording_round_trips(tmp_path):
    data = synthetic_recording()
    rec = rr.load_real_recording(write(tmp_path, data))
    assert isinstance(rec.runs[0], rr.RealRun) and isinstance(rec.models[0].files[0], rr.ModelFile)
    assert isinstance(rec.c_v_curve[0], rr.CvPoint) and isinstance(rec.hf[0], rr.HFRun)
    assert {**dataclasses.asdict(rec), "schema": 2} == data  # what the benchmark writes is what comes back
    assert isinstance(rec.runs[4].repeats[0], rt.RunRepeat) and len(rec.runs[4].repeats) == 3
    assert rec.tasks == ["code", "edit"] and rec.drafts == ["plain", "model", "lookup"]
    assert rec.model("draft").params == 2000 and rec.tiny
    with pytest.raises(ValueError, match="role must be one of 'target', 'draft'"):
        rec.model("teacher")


def test_ints_are_read_as_floats_but_never_bools(tmp_path):
    data = synthetic_recording()
    data["runs"][0]["T_1"] = 1  # JSON writes 1.0 as 1 in some writers: still a float
    rec = rr.load_real_recording(write(tmp_path, data))
    assert isinstance(rec.runs[0].T_1, float)
    data["runs"][0]["T_1"] = True
    with pytest.raises(TypeError, match=r"recording.runs\[0\].T_1 must be float, got bool"):
        rr.load_real_recording(write(tmp_path, data))


@pytest.mark.parametrize("edit, error, match", [
    (lambda d: d.update(schema=3), ValueError, "schema must be 2 or 1, got 3"),
    (lambda d: d.pop("schema"), ValueError, "schema must be 2 or 1, got None"),
    (lambda d: d["runs"][4]["repeats"].pop(0), ValueError, r"runs\[4\].T_1 must be the median of its 2 repeats"),
    (lambda d: d["runs"][4].update(T_1=0.012), ValueError, r"runs\[4\].T_1 must be the median of its 3 repeats"),
    (lambda d: d["runs"][4].update(predicted=1.0), ValueError, r"runs\[4\].predicted must be the median"),
    (lambda d: d["runs"][4]["ranges"].update(T_1=[0.010, 0.011]), ValueError, r"runs\[4\].ranges must be each"),
    (lambda d: d["runs"][2].update(ranges={"T_1": [0.1, 0.2]}), ValueError, r"runs\[2\].ranges must be empty"),
    (lambda d: d["runs"][4]["repeats"][0].pop("c_v"), ValueError, r"repeats\[0\] \(RunRepeat\): missing fields"),
    (lambda d: d.pop("hf"), ValueError, r"missing fields \['hf'\]"),
    (lambda d: d.update(extra=1), ValueError, r"unknown fields \['extra'\]"),
    (lambda d: d["runs"][2].pop("c_v"), ValueError, r"recording.runs\[2\] \(RealRun\): missing fields \['c_v'\]"),
    (lambda d: d["runs"][2].update(k="4"), TypeError, r"recording.runs\[2\].k must be int, got str"),
    (lambda d: d["runs"][2].update(alpha=[0.5, "x", None, None]), TypeError, r"runs\[2\].alpha\[1\] must be float"),
    (lambda d: d["runs"][2].update(equal_to_plain="yes"), TypeError, r"runs\[2\].equal_to_plain must be bool"),
    (lambda d: d["runs"][2].update(dtype="float16"), ValueError, r"runs\[2\].dtype must be one of 'float32'"),
    (lambda d: d["runs"][2].update(draft="eagle"), ValueError, r"runs\[2\].draft must be one of 'model'"),
    (lambda d: d["runs"][2].update(task="poetry"), ValueError, r"runs\[2\].task must be one of the prompts"),
    (lambda d: d["runs"][2].update(alpha=[0.5]), ValueError, r"runs\[2\].alpha must hold k = 6 rates"),
    (lambda d: d["runs"][0].update(k=2), ValueError, r"runs\[0\].k must be 0 for the plain run"),
    (lambda d: d["runs"][2].update(measured=0.0), ValueError, r"runs\[2\].measured and .predicted must be > 0"),
    (lambda d: d["models"][0]["files"][0].update(bytes=1.5), TypeError, r"files\[0\].bytes must be int"),
    (lambda d: d["models"][1].update(role="target"), ValueError, "one target and at most one draft"),
    (lambda d: d.update(models=[]), None, None),  # a tiny recording has no files to list
    (lambda d: d.update(models=[], tiny=False), ValueError, r"one target and at most one draft, got roles \[\]"),
    (lambda d: d["prompts"].update(code="40"), TypeError, r"recording.prompts\['code'\] must be int"),
    (lambda d: d.update(machine=[]), TypeError, "recording.machine must be a dict"),
    (lambda d: d["numerics"][0].update(first_flip=None, gap_at_first_flip=0.5), None, None),  # None is allowed
    (lambda d: d["numerics"][1].update(first_flip=1.0), TypeError, r"numerics\[1\].first_flip must be int"),
    (lambda d: d["hf"][0].update(mode="medusa"), ValueError, r"hf\[0\].mode must be one of 'assistant'"),
    (lambda d: d["c_v_curve"][0].update(matmul="mkl"), ValueError, r"c_v_curve\[0\].matmul must be one of"),
])
def test_bad_fields_are_named(tmp_path, edit, error, match):
    data = synthetic_recording()
    rr.load_real_recording(write(tmp_path, data))  # the negative control: the unedited file loads
    edit(data)
    if error is None:
        rr.load_real_recording(write(tmp_path, data))
    else:
        with pytest.raises(error, match=match):
            rr.load_real_recording(write(tmp_path, data))


def test_path_and_file_shape_are_checked(tmp_path):
    with pytest.raises(TypeError, match="path must be a str or pathlib.Path, got int"):
        rr.load_real_recording(3)
    with pytest.raises(TypeError, match="path must hold a JSON object"):
        rr.load_real_recording(write(tmp_path, [1, 2]))
    with pytest.raises(TypeError, match=r"recording.runs\[0\] must be a JSON object"):
        rr.load_real_recording(write(tmp_path, {**synthetic_recording(), "runs": [3]}))


def test_run_finds_one_configuration_and_lists_what_exists(tmp_path):
    rec = rr.load_real_recording(write(tmp_path, synthetic_recording()))
    assert rec.fp32_matmul == "onednn"  # the machine's field names the chosen fp32 path
    r = rec.run("edit", "lookup")
    assert (r.task, r.draft, r.dtype, r.matmul, r.temperature) == ("edit", "lookup", "float32", "onednn", 0.0)
    assert rec.run("edit", "lookup", matmul="default").matmul == "default"
    assert rec.run("code", "model", dtype="bfloat16", matmul="default").first_divergence == 3
    assert rec.run("code", "model", dtype="bfloat16").matmul == "default"  # bf16's own path, not fp32's
    assert rec.run("code", "model", temperature=1.0).equal_to_plain is None
    with pytest.raises(ValueError, match=r"task must be one of 'code', 'edit'; got 'prose'"):
        rec.run("prose", "model")
    with pytest.raises(ValueError, match=r"draft must be one of 'plain', 'model', 'lookup'; got 'table'"):
        rec.run("code", "table")
    with pytest.raises(ValueError, match=r"no run with .*recorded \(task, draft, temperature, dtype, matmul\)"):
        rec.run("edit", "model", temperature=1.0)  # every value exists, the combination does not
    with pytest.raises(ValueError, match=r"matmul must be one of 'default', 'onednn'; got 'mkl'"):
        rec.run("code", "model", matmul="mkl")


def test_the_fp32_path_falls_back_to_the_runs(tmp_path):
    data = synthetic_recording()
    del data["machine"]["fp32_matmul"]
    data["runs"] = [r for r in data["runs"] if r["matmul"] != "onednn"]
    assert rr.load_real_recording(write(tmp_path, data)).fp32_matmul == "default"


def test_the_tables_have_a_line_per_row(tmp_path):
    rec = rr.load_real_recording(write(tmp_path, synthetic_recording()))
    lines = rec.table().splitlines()
    assert len(lines) == 1 + len(rec.runs) and "rel.err" in lines[0] and "exact" in lines[0]
    assert any("left at 3" in line for line in lines) and any(line.endswith("equal") for line in lines)
    assert len(rec.table(rec.runs[:2]).splitlines()) == 3
    assert len(rec.hf_table().splitlines()) == 1 + len(rec.hf) and "ours/HF" in rec.hf_table()
    assert len(rec.numerics_table().splitlines()) == 1 + len(rec.numerics)


needs_file = pytest.mark.skipif(not rr.REAL_REFERENCE_PATH.exists(), reason="no committed real recording yet")


@needs_file
def test_the_committed_recording_loads_and_is_exact_in_fp32():
    rec = rr.real_recorded()
    assert rec is rr.real_recorded()  # read once
    greedy32 = [r for r in rec.runs if r.temperature == 0 and r.dtype == "float32" and r.draft != "plain"]
    assert greedy32 and all(r.equal_to_plain is True for r in greedy32)
    assert all(r.first_divergence is None for r in greedy32)


def off_the_equation(runs) -> list:
    """The draft runs whose stored prediction is not E[N] / (k c_d + c_v) of their stored terms (to 1e-9)."""
    return [r for r in runs if r.draft != "plain"
            and abs(r.predicted - r.e_n / (r.k * r.c_d + r.c_v)) > 1e-9 * max(1.0, r.predicted)]


def test_off_the_equation_finds_a_prediction_that_does_not_follow(tmp_path):
    rec = rr.load_real_recording(write(tmp_path, synthetic_recording()))
    assert off_the_equation(rec.runs) == []
    bent = dataclasses.replace(rec.runs[2], predicted=rec.runs[2].predicted * (1 + 1e-6))
    assert off_the_equation([bent]) == [bent]  # the negative control


@needs_file
def test_the_committed_predictions_follow_from_the_stored_terms():
    assert off_the_equation(rr.real_recorded().runs) == []


def test_a_schema_1_recording_is_read_as_one_run_per_configuration(tmp_path):
    data = synthetic_recording()
    old = dict(data, schema=1, runs=[{n: v for n, v in r.items() if n not in ("repeats", "ranges")}
                                     for r in data["runs"]])
    old["runs"][4].update(T_1=0.011, measured=1.0)  # schema 1 held each configuration's one run
    rec = rr.load_real_recording(write(tmp_path, old))
    assert all(r.repeats == [] and r.ranges == {} for r in rec.runs)
    assert rr.load_real_recording(write(tmp_path, data)).runs[4].repeats  # the negative control: schema 2 keeps them


def test_the_median_and_the_ranges_follow_the_repeats(tmp_path):
    run = rr.load_real_recording(write(tmp_path, synthetic_recording())).runs[4]
    assert run.T_1 == 0.011 and run.measured == 1.0  # the middle of (0.012, 0.010, 0.011) and (0.9, 1.1, 1.0)
    assert run.ranges["T_1"] == [0.010, 0.012] and run.ranges["measured"] == [0.9, 1.1]
    assert run.predicted == pytest.approx(run.e_n / (run.k * run.c_d + run.c_v), rel=1e-12)
    even = repeated(synthetic_recording()["runs"][4], T_1s=(0.010, 0.016, 0.011, 0.012), measured=(1, 1, 1, 1))
    assert even["T_1"] == pytest.approx(0.0115) and even["ranges"]["T_1"] == [0.010, 0.016]  # mean of the middle two
