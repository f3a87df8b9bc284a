"""lab/recordings.py over lab/schema.py: the one reader of the recorded runs shipped as package data. Per kind, a
round trip, every validation with its negative control, the lookups, and the committed recording's own promises."""
import dataclasses
import json
import pathlib
import tomllib

import pytest
from recording_files import write

import specdec_lib as sd
from specdec_lib.cost import BestK
from specdec_lib.lab import recorded_terms as rt
from specdec_lib.lab import recordings as rec_
from specdec_lib.lab.recordings import load_recording, recorded
from specdec_lib.lab.speedup_table import VerifierRun

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = {"measure": "measure_reference.json", "measure-self": "self_drafts_reference.json",
         "measure-real": "real_pair_reference.json", "measure-real-self": "real_self_reference.json",
         "measure-gpu": "gpu_reference.json", "audit-engines": "engines_reference.json",
         "measure-engines": "engine_speed_reference.json"}



# ---- every kind: where the files are, what the reader refuses -----------------------------------------------------

def test_the_recordings_are_package_data_under_specdec_lib_data():
    assert set(rec_.REFERENCE_PATHS) == set(FILES) == set(rec_.SCHEMAS)
    for kind, name in FILES.items():
        path = rec_.REFERENCE_PATHS[kind]
        assert path == ROOT / "specdec_lib" / "data" / name and path.is_file()
        assert json.loads(path.read_text())["schema"] in (rec_.SCHEMAS[kind], 1)  # each file declares its layout
        assert recorded(kind) is recorded(kind)  # read once
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.json" in package_data["specdec_lib"]  # so the wheel carries them
    assert not (ROOT / "specdec_lib" / "presentation" / "data").exists()  # one copy
    assert sd.lab.recorded is recorded and sd.lab.load_recording is load_recording


def test_kind_path_and_file_shape_are_checked(tmp_path):
    with pytest.raises(ValueError, match="kind must be one of 'measure', 'measure-self', 'measure-real', "
                                         "'measure-real-self', 'measure-gpu', 'audit-engines', 'measure-engines'; "
                                         "got 'real'"):
        load_recording("real")
    for kind in FILES:
        with pytest.raises(TypeError, match="path must be a str or pathlib.Path, got int"):
            load_recording(kind, 3)
        path = write(tmp_path, [1, 2])
        with pytest.raises(TypeError, match=f"{path}: the file must hold a JSON object"):
            load_recording(kind, path)
        data = json.loads(rec_.REFERENCE_PATHS[kind].read_text())
        load_recording(kind, write(tmp_path, data))  # the negative control: a copy of the committed file loads
        for schema in (None, True, 7):
            bad = {**data, "schema": schema} if schema is not None else {n: v for n, v in data.items() if n != "schema"}
            with pytest.raises(ValueError, match=f"{path}: schema must be .*, got {schema}"):
                load_recording(kind, write(tmp_path, bad))


# ---- make measure ------------------------------------------------------------------------------------------------

def test_a_measure_recording_is_refused_naming_the_file_and_the_field(tmp_path):
    data = json.loads(rec_.REFERENCE_PATHS["measure"].read_text())
    again = load_recording("measure", write(tmp_path, data))  # the committed file, read twice, reads the same
    R = recorded("measure")
    assert again == R and again.tables[0].measured == R.tables[0].measured and again.batch.best == R.batch.best
    assert R.drafts == ["draft", "draft_deep", "table", "lookup"]
    assert isinstance(R.tables[0].T_1_range, tuple) and isinstance(R.tables[0].measured_range[0], tuple)
    assert isinstance(R.batch.fits[0], tuple) and isinstance(R.batch.best[0], BestK)
    path = write(tmp_path, {"schema": 1, "tables": []})
    with pytest.raises(ValueError, match=rf"{path}: recording \(MeasureRecording\): missing fields \['batch'\]"):
        load_recording("measure", path)
    with pytest.raises(ValueError, match="tables must hold at least one table, got none"):
        load_recording("measure", write(tmp_path, {**data, "tables": []}))
    for edit, error, match in [
        (lambda d: d["tables"][1]["ks"].__setitem__(0, "1"), TypeError, r"recording.tables\[1\].ks\[0\] must be int"),
        (lambda d: d["tables"][0].update(T_1_range=[0.1, 0.2, 0.3]), ValueError, r"T_1_range must hold 2 values"),
        (lambda d: d["tables"][0].pop("c_v"), ValueError, r"tables\[0\] \(SpeedupTable\): missing fields \['c_v'\]"),
        (lambda d: d["batch"]["best"][0].update(k=1.5), TypeError, r"recording.batch.best\[0\].k must be int"),
        (lambda d: d["tables"][2].update(extra=1), ValueError, r"unknown fields \['extra'\]"),
    ]:
        bad = json.loads(json.dumps(data))
        edit(bad)
        with pytest.raises(error, match=match):
            load_recording("measure", write(tmp_path, bad))


def test_a_run_with_block_verification_beside_reads_back(tmp_path):
    """measure_speedup's JSON with the block rule's runs beside the token rule's round-trips through the reader."""
    R = recorded("measure")
    run = VerifierRun(verifier="block", e_n=list(R.tables[0].e_n), measured=list(R.tables[0].measured),
                      measured_range=list(R.tables[0].measured_range))
    tables = [dataclasses.replace(R.tables[0], beside=(run,)), *R.tables[1:]]
    path = write(tmp_path, {"schema": rec_.SCHEMAS["measure"], "tables": [dataclasses.asdict(t) for t in tables],
                            "batch": dataclasses.asdict(R.batch)})
    again = load_recording("measure", path)
    assert again.tables == tables and again.tables[0].beside[0] == run
    assert all(t.beside == () for t in R.tables)  # the committed run predates block verification


# ---- make measure-self -------------------------------------------------------------------------------------------

def test_the_self_recording_holds_every_draft_on_both_targets_and_policies():
    R = recorded("measure-self")
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


def test_self_lookups_name_what_was_recorded_and_bad_files_are_refused(tmp_path):
    R = recorded("measure-self")
    with pytest.raises(ValueError, match=r"\(draft, target, temperature\) must be one of .*got \('exit4'"):
        R.chain("exit4")
    with pytest.raises(ValueError, match=r"\(draft, rule, target, temperature\) must be one of"):
        R.tree("medusa", rule="rrs")
    with pytest.raises(ValueError, match="target must be one of 'target', 'target_ee'"):
        R.drafts(target="draft")
    with pytest.raises(ValueError, match=r"recording \(SelfRecording\): missing fields \['trees', 'machine'\]"):
        load_recording("measure-self", write(tmp_path, {"schema": 1, "chains": []}))
    with pytest.raises(ValueError, match="chains must hold at least one table, got none"):
        load_recording("measure-self", write(tmp_path, {"schema": 1, "chains": [], "trees": [], "machine": {}}))
    data = json.loads(rec_.REFERENCE_PATHS["measure-self"].read_text())
    data["trees"][0]["table"]["trees"][0] = [1, "2"]  # medusa's widths by depth
    with pytest.raises(TypeError, match=r"recording.trees\[0\].table.trees\[0\]\[1\] must be int, got str"):
        load_recording("measure-self", write(tmp_path, data))


def test_best_speeds_carry_the_range_and_rank_only_outside_it():
    R = recorded("measure-self")
    best = {(b.draft, b.target): b for b in map(rt.best_speed, R.chains) if b.temperature == 0.0}
    for (draft, target), b in best.items():
        run = R.chain(draft, target=target, temperature=0.0)
        assert (b.k, b.median) == (run.table.ks[run.best], max(run.table.measured))
        assert b.low <= b.median <= b.high
    medusa, draft, lookup = best[("medusa", "target")], best[("draft", "target")], best[("lookup", "target")]
    assert medusa.within_noise(draft) and draft.within_noise(medusa) and not medusa.beats(draft)
    assert lookup.beats(medusa) and not medusa.beats(lookup) and not lookup.within_noise(medusa)
    assert not any(r.table.repeat_speeds for r in R.chains)  # medians and ranges only: the notebook says the bias
    t = R.chain("medusa", temperature=0.0).table
    with pytest.raises(ValueError, match="keeps no per-repeat speedups"):
        rt.split_best_k(t.ks, t.repeat_speeds)


# ---- make measure-real -------------------------------------------------------------------------------------------

def repeated(run: dict, T_1s=(0.012, 0.010, 0.011), measured=(0.9, 1.1, 1.0)) -> dict:
    """run with three repeats (T_1 and the clock moving, the other terms fixed) and its medians and ranges."""
    reps = [rt.RunRepeat(T_1=t, c_d=run["c_d"], c_v=run["c_v"], e_n=run["e_n"], measured=m,
                         predicted=run["e_n"] / (run["k"] * run["c_d"] + run["c_v"]), equal_to_plain=True)
            for t, m in zip(T_1s, measured)]
    return dict(run, **rt.summarise_repeats(reps, run["k"]), repeats=[dataclasses.asdict(r) for r in reps])


def synthetic_pair(*, tiny: bool = True) -> dict:
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


def load_pair(path):
    return load_recording("measure-real", path)


def test_a_written_pair_recording_round_trips(tmp_path):
    data = synthetic_pair()
    rec = load_pair(write(tmp_path, data))
    assert isinstance(rec.runs[0], rec_.RealRun) and isinstance(rec.models[0].files[0], rec_.ModelFile)
    assert isinstance(rec.c_v_curve[0], rec_.CvPoint) and isinstance(rec.hf[0], rec_.HFRun)
    assert {**dataclasses.asdict(rec), "schema": 2} == data  # what the benchmark writes is what comes back
    assert isinstance(rec.runs[4].repeats[0], rt.RunRepeat) and len(rec.runs[4].repeats) == 3
    assert rec.tasks == ["code", "edit"] and rec.drafts == ["plain", "model", "lookup"]
    assert rec.model("draft").params == 2000 and rec.tiny
    with pytest.raises(ValueError, match="role must be one of 'target', 'draft'"):
        rec.model("teacher")


def test_ints_are_read_as_floats_but_never_bools(tmp_path):
    data = synthetic_pair()
    data["runs"][0]["T_1"] = 1  # JSON writes 1.0 as 1 in some writers: still a float
    rec = load_pair(write(tmp_path, data))
    assert isinstance(rec.runs[0].T_1, float)
    data["runs"][0]["T_1"] = True
    with pytest.raises(TypeError, match=r"recording.runs\[0\].T_1 must be float, got bool"):
        load_pair(write(tmp_path, data))


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
    (lambda d: d["runs"][2].update(measured=0.0), ValueError, r"runs\[2\]: T_1, measured and predicted must be > 0"),
    (lambda d: d["models"][0]["files"][0].update(bytes=1.5), TypeError, r"files\[0\].bytes must be int"),
    (lambda d: d["models"][1].update(role="target"), ValueError, r"roles \['draft', 'target'\] or \['target'\]"),
    (lambda d: d.update(models=[]), None, None),  # a tiny recording has no files to list
    (lambda d: d.update(models=[], tiny=False), ValueError, r"models must have the roles .*, got \[\]"),
    (lambda d: d["prompts"].update(code="40"), TypeError, r"recording.prompts\['code'\] must be int"),
    (lambda d: d.update(machine=[]), TypeError, "recording.machine must be a dict"),
    (lambda d: d["numerics"][0].update(first_flip=None, gap_at_first_flip=0.5), None, None),  # None is allowed
    (lambda d: d["numerics"][1].update(first_flip=1.0), TypeError, r"numerics\[1\].first_flip must be int"),
    (lambda d: d["hf"][0].update(mode="medusa"), ValueError, r"hf\[0\].mode must be one of 'assistant'"),
    (lambda d: d["c_v_curve"][0].update(matmul="mkl"), ValueError, r"c_v_curve\[0\].matmul must be one of"),
])
def test_bad_pair_fields_are_named(tmp_path, edit, error, match):
    data = synthetic_pair()
    path = write(tmp_path, data)
    load_pair(path)  # the negative control: the unedited file loads
    edit(data)
    if error is None:
        load_pair(write(tmp_path, data))
    else:
        with pytest.raises(error, match=f"^{path}: .*{match}"):  # the file, then the field
            load_pair(write(tmp_path, data))


def test_a_pair_run_that_is_not_an_object_is_named(tmp_path):
    with pytest.raises(TypeError, match=r"recording.runs\[0\] must be a JSON object"):
        load_pair(write(tmp_path, {**synthetic_pair(), "runs": [3]}))


def test_run_finds_one_configuration_and_lists_what_exists(tmp_path):
    rec = load_pair(write(tmp_path, synthetic_pair()))
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
    data = synthetic_pair()
    del data["machine"]["fp32_matmul"]
    data["runs"] = [r for r in data["runs"] if r["matmul"] != "onednn"]
    assert load_pair(write(tmp_path, data)).fp32_matmul == "default"


def test_the_tables_have_a_line_per_row(tmp_path):
    rec = load_pair(write(tmp_path, synthetic_pair()))
    lines = rt.runs_table(rec.runs).splitlines()
    assert len(lines) == 1 + len(rec.runs) and "rel.err" in lines[0] and "exact" in lines[0]
    assert any("left at 3" in line for line in lines) and any(line.endswith("equal") for line in lines)
    assert len(rt.runs_table(rec.runs[:2]).splitlines()) == 3
    assert len(rt.hf_table(rec.hf).splitlines()) == 1 + len(rec.hf) and "ours/HF" in rt.hf_table(rec.hf)
    assert len(rt.numerics_table(rec.numerics).splitlines()) == 1 + len(rec.numerics)


def test_the_committed_pair_recording_loads_and_is_exact_in_fp32():
    rec = recorded("measure-real")
    greedy32 = [r for r in rec.runs if r.temperature == 0 and r.dtype == "float32" and r.draft != "plain"]
    assert greedy32 and all(r.equal_to_plain is True for r in greedy32)
    assert all(r.first_divergence is None for r in greedy32)


def off_the_equation(runs) -> list:
    """The draft runs whose stored prediction is not E[N] / (k c_d + c_v) of their stored terms (to 1e-9)."""
    return [r for r in runs if r.draft != "plain"
            and abs(r.predicted - r.e_n / (r.k * r.c_d + r.c_v)) > 1e-9 * max(1.0, r.predicted)]


def test_off_the_equation_finds_a_prediction_that_does_not_follow(tmp_path):
    rec = load_pair(write(tmp_path, synthetic_pair()))
    assert off_the_equation(rec.runs) == []
    bent = dataclasses.replace(rec.runs[2], predicted=rec.runs[2].predicted * (1 + 1e-6))
    assert off_the_equation([bent]) == [bent]  # the negative control


def test_the_committed_predictions_follow_from_the_stored_terms():
    assert off_the_equation(recorded("measure-real").runs) == []


def test_a_schema_1_recording_is_read_as_one_run_per_configuration(tmp_path):
    data = synthetic_pair()
    old = dict(data, schema=1, runs=[{n: v for n, v in r.items() if n not in ("repeats", "ranges")}
                                     for r in data["runs"]])
    old["runs"][4].update(T_1=0.011, measured=1.0)  # schema 1 held each configuration's one run
    rec = load_pair(write(tmp_path, old))
    assert all(r.repeats == [] and r.ranges == {} for r in rec.runs)
    assert load_pair(write(tmp_path, data)).runs[4].repeats  # the negative control: schema 2 keeps them


def test_the_median_and_the_ranges_follow_the_repeats(tmp_path):
    run = load_pair(write(tmp_path, synthetic_pair())).runs[4]
    assert run.T_1 == 0.011 and run.measured == 1.0  # the middle of (0.012, 0.010, 0.011) and (0.9, 1.1, 1.0)
    assert run.ranges["T_1"] == [0.010, 0.012] and run.ranges["measured"] == [0.9, 1.1]
    assert run.predicted == pytest.approx(run.e_n / (run.k * run.c_d + run.c_v), rel=1e-12)
    even = repeated(synthetic_pair()["runs"][4], T_1s=(0.010, 0.016, 0.011, 0.012), measured=(1, 1, 1, 1))
    assert even["T_1"] == pytest.approx(0.0115) and even["ranges"]["T_1"] == [0.010, 0.016]  # mean of the middle two


# ---- make measure-real-self --------------------------------------------------------------------------------------

def synthetic_self(*, tiny: bool = True) -> dict:
    """A small recording as measure_real_self writes it: two tasks, exits at 7 and 14 of 28 both ways, lookahead."""
    exits, lookahead = [], []
    for task in ("code", "edit"):
        for L in (7, 14):
            for cache, k in (("own", 4), ("shared", 1), ("shared", 4)):
                c_d, c_v, e_n = 0.3 + L / 56, 1.1 + (0.4 if cache == "own" else 0.1) * k, 1.0 + 0.02 * k
                exits.append(dict(task=task, exit_layer=L, layers=28, cache=cache, k=k, T_1=0.8, c_d=c_d, c_v=c_v,
                                  e_n=e_n, alpha=[0.02] + [None] * (k - 1), predicted=e_n / (k * c_d + c_v),
                                  measured=0.9 * e_n / (k * c_d + c_v), equal_to_plain=True, first_divergence=None))
        lookahead.append(dict(task=task, window=4, ngram=3, guesses=4, nodes=17, T_1=0.8, c_d=0.01, c_v=1.7,
                              e_n=1.4, predicted=1.4 / 1.71, measured=0.8, equal_to_plain=True))
    manifest = dict(role="target", name="tiny-qwen2", source="random init", licence="none",
                    files=[dict(path="model.safetensors", bytes=1234, sha256="ab" * 32)],
                    header={"general.architecture": "qwen2"}, params=5000)
    return dict(schema=1, machine=dict(platform="linux", threads=1), models=[manifest],
                prompts={"code": 40, "edit": 60}, n_new=48, exits=exits, lookahead=lookahead, tiny=tiny)


def load_self(path):
    return load_recording("measure-real-self", path)


def test_a_written_real_self_recording_round_trips_and_finds_each_run(tmp_path):
    data = synthetic_self()
    rec = load_self(write(tmp_path, data))
    assert {**dataclasses.asdict(rec), "schema": 1} == data
    assert rec.tasks == ["code", "edit"] and len(rec.exits) == 12 and len(rec.lookahead) == 2
    r = rec.exit("edit", 14, cache="own", k=4)
    assert (r.task, r.exit_layer, r.cache, r.k) == ("edit", 14, "own", 4)
    assert rec.best_exit("code").measured == max(x.measured for x in rec.exits if x.task == "code")
    with pytest.raises(ValueError, match=r"\(task, exit_layer, cache, k\) must be one of"):
        rec.exit("code", 3)
    with pytest.raises(ValueError, match="task must be one of"):
        rec.best_exit("prose")
    assert len(rt.exits_table(rec.exits, rec.lookahead).splitlines()) == 1 + 12 + 2


@pytest.mark.parametrize("edit, error, match", [
    (lambda d: d.update(schema=2), ValueError, "schema must be 1"),
    (lambda d: d["exits"][0].pop("cache"), ValueError, r"exits\[0\] \(ExitRun\): missing fields \['cache'\]"),
    (lambda d: d["exits"][0].update(cache="private"), ValueError, r"exits\[0\]\.cache must be one of 'shared', 'own'"),
    (lambda d: d["exits"][1].update(c_v=True), TypeError, r"exits\[1\]\.c_v must be float, got bool"),
    (lambda d: d["exits"][2].update(alpha=[0.1]), ValueError, r"exits\[2\]\.alpha must hold k = 4 rates"),
    (lambda d: d["exits"][0].update(exit_layer=28), ValueError, r"exits\[0\] must have 1 <= exit_layer < layers"),
    (lambda d: d["exits"][1].update(k=0, alpha=[]), ValueError, r"exits\[1\] must have .* k >= 1"),
    (lambda d: d["lookahead"][0].update(task="prose"), ValueError, r"lookahead\[0\]\.task must be one of"),
    (lambda d: d["lookahead"][1].update(measured=0.0), ValueError, r"lookahead\[1\]: T_1, measured and predicted"),
    (lambda d: d.update(models=[]), ValueError, r"models must have the roles \['target'\]"),
])
def test_bad_real_self_fields_are_named(tmp_path, edit, error, match):
    data = synthetic_self(tiny=False)
    path = write(tmp_path, data)
    load_self(path)  # the unedited file loads: the control
    edit(data)
    with pytest.raises(error, match=f"^{path}: .*{match}"):
        load_self(write(tmp_path, data))


def real_self_off_the_equation(rec) -> list:
    """The runs whose stored prediction is not E[N] / (k c_d + c_v) (exits) or E[N] / (c_d + c_v) (lookahead)."""
    exits = [r for r in rec.exits if abs(r.predicted - r.e_n / (r.k * r.c_d + r.c_v)) > 1e-9 * r.predicted]
    return exits + [r for r in rec.lookahead if abs(r.predicted - r.e_n / (r.c_d + r.c_v)) > 1e-9 * r.predicted]


def test_real_self_off_the_equation_finds_a_prediction_that_does_not_follow(tmp_path):
    rec = load_self(write(tmp_path, synthetic_self()))
    assert real_self_off_the_equation(rec) == []
    bent = dataclasses.replace(rec, exits=[dataclasses.replace(rec.exits[3], predicted=rec.exits[3].predicted * 1.01)])
    assert len(real_self_off_the_equation(bent)) == 1  # the negative control


def test_the_committed_real_self_recording_keeps_its_promises():
    rec = recorded("measure-real-self")
    assert not rec.tiny  # the real target
    assert all(r.equal_to_plain is True and r.first_divergence is None for r in rec.exits)
    assert all(r.equal_to_plain is True for r in rec.lookahead)
    assert real_self_off_the_equation(rec) == []
    drafts = {(L, cache, k) for L in (7, 14) for cache, k in (("own", 4), ("shared", 1), ("shared", 4))}
    assert {(r.exit_layer, r.cache, r.k) for r in rec.exits} == drafts
    real_pair = recorded("measure-real").model("target")
    assert rec.models[0].files == real_pair.files and rec.models[0].name == real_pair.name  # the same weights
