"""Lab: what one model of a measured pair is: its files' sizes and sha256, its source, licence, GGUF header and size
(the manifest.json `make real-pair` writes beside the weights; recordings keep a copy per model they ran)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelFile", "ModelManifest"]


@dataclass(frozen=True)
class ModelFile:
    """One weight file: its name (no folder), size and sha256."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class ModelManifest:
    """What one model of the pair is, where it came from, under which licence, and its files' checksums."""

    role: str  # "target" | "draft"
    name: str  # e.g. "Qwen2.5-Coder-1.5B-Instruct"
    source: str  # how it was obtained
    licence: str
    files: list[ModelFile]
    header: dict  # GGUF header fields (general.name, general.architecture, tokenizer.ggml.model, ...)
    params: int
