"""transformers' own greedy `generate` (plain, assisted by a draft model, or prompt lookup), timed for the side-by-side
ratio `make measure-real` records: its seconds per token after the first step (a streamer reads the lab's clock),
against the lab's by its round timers; both leave the prefill out.
"""
from __future__ import annotations

import torch

from specdec_lib._checks import check_choice, check_int
from specdec_lib.lab.steps import clock

HF_MODES = ("plain", "assistant", "lookup")  # transformers' generate alone, assistant_model=, prompt_lookup_num_tokens=


class _Arrivals:
    """A transformers streamer that only reads the clock: when each put (the prompt, then each step's tokens) came."""

    def __init__(self):
        self.times, self.counts = [], []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(clock())
        self.counts.append(value.numel())

    def end(self) -> None:
        pass

    def per_token(self) -> float:
        """Seconds per token after the first step (which holds the prefill), as our round timers count."""
        after = sum(self.counts[2:])  # counts[0] is the prompt, counts[1] the first step's tokens
        return (self.times[-1] - self.times[1]) / after if after else float("nan")


@torch.inference_mode()
def hf_generate(target, prompt: torch.Tensor, n_new: int, *, mode: str = "plain", k: int = 4, draft=None,
                m: int = 3) -> tuple[torch.Tensor, float, float]:
    """(tokens (n_new,), whole-call seconds, seconds per token after the first step) of transformers' greedy generate.

    mode "assistant" proposes k tokens a round with draft's model (a constant schedule, no confidence stop, so
    the same k as ours); "lookup" is prompt_lookup_num_tokens=k, max_matching_ngram_size=m. EOS never stops it
    (eos_token_id=None), as our loop never stops.
    """
    from transformers import GenerationConfig

    mode = check_choice("mode", mode, HF_MODES)
    n_new, k = check_int("n_new", n_new, minimum=1), check_int("k", k, minimum=1)
    config = GenerationConfig(max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    extra = {}
    if mode == "assistant":
        if draft is None:
            raise ValueError("mode 'assistant' needs draft (an HFCausalLM), got None")
        gc = draft.model.generation_config
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = k, "constant", 0
        extra["assistant_model"] = draft.model
    elif mode == "lookup":
        config.prompt_lookup_num_tokens, config.max_matching_ngram_size = k, check_int("m", m, minimum=1)
    arrivals = _Arrivals()
    t0 = clock()
    out = target.model.generate(prompt[None], generation_config=config, attention_mask=torch.ones_like(prompt[None]),
                                streamer=arrivals, **extra)
    return out[0, prompt.numel():], clock(out) - t0, arrivals.per_token()
