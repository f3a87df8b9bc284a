"""The lab's trained models: loaded from, and saved to, specdec_lib/lab/weights/ (`make models`).

pair.pt holds the target and the 1-layer draft; draft_deep.pt a 2-layer draft of width 64 for the same target;
early_exit.pt the target after a short early-exit fine-tune ("target_ee", for sd.lab.early_exit_pair); medusa.pt
Medusa heads and eagle.pt an EAGLE-style feature draft (lab/eagle.py), both trained on the frozen target.
Each file is a dict {name: float16 state dict, name + "_config": LMConfig fields ({"num_heads": K} for Medusa's
heads)}, loaded with weights_only.
"""
from __future__ import annotations

import pathlib
from dataclasses import asdict

import torch

from .._checks import check_choice
from .eagle import EagleDraft
from .medusa import MedusaHeads
from .transformer import CachedLM, LMConfig

__all__ = [
    "WEIGHTS_DIR", "WEIGHTS_FILE", "DEEP_DRAFT_CONFIG", "DRAFT_FILES", "TARGET_FILES", "load_pair", "load_draft",
    "load_target", "HEADS_FILES", "load_heads", "save_models"
]

WEIGHTS_DIR = pathlib.Path(__file__).parent / "weights"
WEIGHTS_FILE = "pair.pt"
DEEP_DRAFT_CONFIG = LMConfig(vocab=256, d_model=64, n_head=2, n_layer=2, max_len=192)
DRAFT_FILES = {"draft": WEIGHTS_FILE, "draft_deep": "draft_deep.pt"}  # draft name: the file that holds it
TARGET_FILES = {"target": WEIGHTS_FILE, "target_ee": "early_exit.pt"}  # the target, and it early-exit fine-tuned
HEADS_FILES = {"medusa": "medusa.pt", "eagle": "eagle.pt"}  # nets trained on the frozen target: their files


def _load(file: str, names: tuple[str, ...], device) -> list[CachedLM]:
    """The named models of one weights file, in eval mode, as float32 on device."""
    path = WEIGHTS_DIR / file
    if not path.exists():
        raise FileNotFoundError(f"no trained weights at specdec_lib/lab/weights/{file}: run `make models`")
    state = torch.load(path, map_location="cpu", weights_only=True)
    models = []
    for name in names:
        model = CachedLM(LMConfig(**state[f"{name}_config"]))
        model.load_state_dict({k: v.float() for k, v in state[name].items()})
        models.append(model.to(device).eval())
    return models


def load_pair(device: str | torch.device = "cpu") -> tuple[CachedLM, CachedLM]:
    """(target, draft) with the weights trained by `make models`, in eval mode, as float32 on `device`."""
    target, draft = _load(WEIGHTS_FILE, ("target", "draft"), device)
    return target, draft


def load_draft(name: str = "draft_deep", device: str | torch.device = "cpu") -> CachedLM:
    """One trained draft for load_pair's target: 'draft' (1 layer, width 32) or 'draft_deep' (2 layers, width 64)."""
    check_choice("name", name, tuple(DRAFT_FILES))
    (draft,) = _load(DRAFT_FILES[name], (name,), device)
    return draft


def load_target(name: str = "target", device: str | torch.device = "cpu") -> CachedLM:
    """The trained target ('target', as load_pair's) or its early-exit fine-tune ('target_ee'), as float32."""
    check_choice("name", name, tuple(TARGET_FILES))
    (target,) = _load(TARGET_FILES[name], (name,), device)
    return target


def load_heads(name: str = "medusa", device: str | torch.device = "cpu") -> MedusaHeads | EagleDraft:
    """A net trained on the frozen 'target' (load_target()), as float32 on device: 'medusa' (MedusaHeads, for
    sd.lab.medusa_pair) or 'eagle' (an EagleDraft, for eagle_pair() in lab/eagle.py)."""
    check_choice("name", name, tuple(HEADS_FILES))
    path = WEIGHTS_DIR / HEADS_FILES[name]
    if not path.exists():
        raise FileNotFoundError(f"no trained {name} at specdec_lib/lab/weights/{HEADS_FILES[name]}: run `make models`")
    state = torch.load(path, map_location="cpu", weights_only=True)
    config = state[f"{name}_config"]
    net = MedusaHeads(load_target(), config["num_heads"]) if "num_heads" in config else EagleDraft(LMConfig(**config))
    net.load_state_dict({k: v.float() for k, v in state[name].items()})
    return net.to(device).eval()


def save_models(models: dict[str, CachedLM | MedusaHeads | EagleDraft], path: pathlib.Path) -> None:
    """Write the models' weights (as float16, to halve the file) and configs to path, keyed by name."""
    state = {}
    for name, model in models.items():
        state[name] = {k: v.detach().to("cpu", torch.float16) for k, v in model.state_dict().items()}
        is_heads = isinstance(model, MedusaHeads)
        state[f"{name}_config"] = {"num_heads": model.num_heads} if is_heads else asdict(model.config)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
