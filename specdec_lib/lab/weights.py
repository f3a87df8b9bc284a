"""The lab's trained target/draft pair: loaded from, and saved to, specdec_lib/lab/weights/ (`make models`)."""
from __future__ import annotations

import pathlib
from dataclasses import asdict

import torch

from .transformer import CachedLM, LMConfig

WEIGHTS_DIR = pathlib.Path(__file__).parent / "weights"
WEIGHTS_FILE = "pair.pt"


def load_pair(device: str | torch.device = "cpu") -> tuple[CachedLM, CachedLM]:
    """(target, draft) with the weights trained by `make models`, in eval mode, as float32 on `device`."""
    path = WEIGHTS_DIR / WEIGHTS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no trained weights at specdec_lib/lab/weights/{WEIGHTS_FILE}: run `make models`")
    state = torch.load(path, map_location="cpu", weights_only=True)
    models = []
    for name in ("target", "draft"):
        model = CachedLM(LMConfig(**state[f"{name}_config"]))
        model.load_state_dict({k: v.float() for k, v in state[name].items()})
        models.append(model.to(device).eval())
    return models[0], models[1]


def save_pair(target: CachedLM, draft: CachedLM, path: pathlib.Path) -> None:
    """Write both models' weights (as float16, to halve the file) and configs to path."""
    state = {}
    for name, model in (("target", target), ("draft", draft)):
        state[name] = {k: v.detach().to("cpu", torch.float16) for k, v in model.state_dict().items()}
        state[f"{name}_config"] = asdict(model.config)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
