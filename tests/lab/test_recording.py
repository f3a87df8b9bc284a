"""lab/recording.py: the one reader of the recorded `make measure` run, shipped as package data."""
import json
import pathlib
import tomllib

import pytest

from specdec_lib.lab import recording

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
