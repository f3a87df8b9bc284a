"""The lab's corpus: this interpreter's own standard library source, read as bytes (a vocabulary of 256)."""
from __future__ import annotations

import pathlib
import sysconfig

import torch

from .._checks import check_choice, check_int

__all__ = ["corpus_files", "corpus", "corpus_prompts"]


def corpus_files() -> list[pathlib.Path]:
    """The top-level *.py files of this interpreter's standard library, sorted by name."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    return sorted(root.glob("*.py"))


def corpus(split: str = "train") -> torch.Tensor:
    """Bytes (uint8 tensor) of the corpus: 'train' is 9 files in 10, 'heldout' the rest (every 10th file)."""
    check_choice("split", split, ("train", "heldout"))
    files = [f for i, f in enumerate(corpus_files()) if (i % 10 == 0) == (split == "heldout")]
    data = b"".join(f.read_bytes() for f in files)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def corpus_prompts(n: int, length: int, *, seed: int = 0) -> list[torch.Tensor]:
    """n prompts (LongTensor (length,)) cut from the held-out files at seeded offsets, each at a line start."""
    n, length = check_int("n", n, minimum=1), check_int("length", length, minimum=1)
    data = corpus("heldout")
    g = torch.Generator().manual_seed(check_int("seed", seed))
    starts = torch.randint(0, data.numel() - 4 * length, (n,), generator=g).tolist()
    out = []
    for s in starts:
        while s > 0 and data[s - 1] != 10:  # back up to the start of the line
            s -= 1
        out.append(data[s:s + length].long())
    return out
