"""lab/recording.py: the one reader of the recorded `make measure` run, shipped as package data."""
import dataclasses
import json
import pathlib
import tomllib

import pytest

from specdec_lib.lab import recording
from specdec_lib.lab.speedup_table import VerifierRun

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_recording_is_package_data_under_specdec_lib_data():
    assert recording.REFERENCE_PATH == ROOT / "specdec_lib" / "data" / "measure_reference.json"
    assert recording.REFERENCE_PATH.is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.json" in package_data["specdec_lib"]  # so the wheel carries it
    assert not (ROOT / "specdec_lib" / "presentation" / "data").exists()  # one copy


def test_load_recording_rejects_other_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"tables": []}))
    with pytest.raises(ValueError, match="path must hold measure_speedup's JSON"):
        recording.load_recording(path)
    with pytest.raises(TypeError, match="path must be a str or pathlib.Path, got int"):
        recording.load_recording(3)
    again = recording.load_recording(recording.REFERENCE_PATH)  # the committed file, read twice, reads the same
    R = recording.recorded()
    assert recording.recorded() is R  # read once
    assert again.tables[0].measured == R.tables[0].measured and again.batch.best == R.batch.best
    assert R.drafts == ["draft", "draft_deep", "table", "lookup"]


def test_a_run_with_block_verification_beside_reads_back(tmp_path):
    """measure_speedup's JSON with the block rule's runs beside the token rule's round-trips through the reader."""
    R = recording.recorded()
    run = VerifierRun(verifier="block", e_n=list(R.tables[0].e_n), measured=list(R.tables[0].measured),
                      measured_range=list(R.tables[0].measured_range))
    tables = [dataclasses.replace(R.tables[0], beside=(run,)), *R.tables[1:]]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"tables": [dataclasses.asdict(t) for t in tables],
                                "batch": dataclasses.asdict(R.batch)}))
    again = recording.load_recording(path)
    assert again.tables == tables and again.tables[0].beside[0] == run
    assert all(t.beside == () for t in R.tables)  # the committed run predates block verification
