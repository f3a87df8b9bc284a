"""Lab: the hot-path pieces every decoder and draft shares: the policy's rows, one token choice, a prefilled cache."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .._checks import check_choice, check_generator, check_int, check_real
from ..verification import METHODS

__all__ = ["Decoding", "GREEDY", "check_policy", "check_verifier", "policy_probs", "sample_token", "prefill", "sync"]


def check_policy(temperature, top_k) -> tuple[float, int | None]:
    """(temperature >= 0, top_k >= 1 or None), validated: the sampling policy both decoders share."""
    temperature = check_real("temperature", temperature, low=0.0)
    if top_k is not None:
        top_k = check_int("top_k", top_k, minimum=1)
    return temperature, top_k


def check_verifier(verifier, name: str = "verifier") -> str:
    """verifier, one of specdec_lib.verification.METHODS ("token": the token rule; "block": block verification)."""
    return check_choice(name, verifier, METHODS)


@dataclass(frozen=True)
class Decoding:
    """How a decoder picks tokens: the sampling policy (temperature >= 0, 0 is greedy; top_k >= 1 or None), the
    generator of its draws (None: torch's global one) and the verifier of a speculative round (METHODS)."""

    temperature: float = 0.0
    top_k: int | None = None
    generator: torch.Generator | None = None
    verifier: str = "token"

    def __post_init__(self):
        check_policy(self.temperature, self.top_k)
        check_generator(self.generator)
        check_verifier(self.verifier)

    def kwargs(self) -> dict:
        """temperature=, top_k=, generator= for the phases that take them (decode_step, a drafter's propose)."""
        return {"temperature": self.temperature, "top_k": self.top_k, "generator": self.generator}


GREEDY = Decoding()  # argmax everywhere, no draws


def policy_probs(logits: torch.Tensor, temperature: float, top_k) -> torch.Tensor:
    """sd.apply_policy(logits, temperature > 0, top_k) without its argument checks (the decode loops' hot path)."""
    z = (logits - logits.amax(-1, keepdim=True)) / temperature  # (..., V)
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[..., -1:], float("-inf"))
    return torch.softmax(z, dim=-1)  # (..., V)


def sample_token(logits: torch.Tensor, temperature: float, top_k,
                 generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(token (1,), the policy's law (V,) it is drawn from, or None when greedy: the argmax) from logits (V,)."""
    if temperature == 0.0:
        return logits.argmax(-1, keepdim=True), None
    probs = policy_probs(logits, temperature, top_k)  # (V,)
    return torch.multinomial(probs, 1, generator=generator), probs


def prefill(model, prompt: torch.Tensor):
    """A cache holding every prompt token but the last."""
    cache = model.new_cache()
    if prompt.numel() > 1:
        model(prompt[None, :-1], cache)
    return cache


def sync(x: torch.Tensor) -> None:
    """Wait for queued GPU work, so that a clock read after it measures it (no-op on the CPU)."""
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


def clock(x: torch.Tensor | None = None) -> float:
    """The lab's one timer: perf_counter seconds, read once x's device has done its queued work (x None: at once)."""
    if x is not None:
        sync(x)
    return time.perf_counter()
