"""The reference generation loop with the whole sampling surface (torch + core only).

settings    Settings: temperature, top-k/p, min_p, penalties, n-gram and word bans, logit bias, grammar, EOS, cap
grammar     Grammar: a small automaton that masks tokens; example grammars
processors  next_probs: the processed law of the next token given the text before it (View: what it sees)
loop        generate (plain) and speculate (speculative, LoopSpec: the correct loop and its shipped variants)
exact       plain_law, speculative_law, logprob_error, law_tv: the exact engine
registry    the field guide's sampling-surface chapter: the loop's registered variants
tiny_model  tiny_causal_lm: a tiny random transformers causal LM for tests (transformers imported inside)
"""
from .exact import law_tv, logprob_error, plain_law, speculative_law
from .grammar import Grammar, alternating, no_immediate_repeat
from .loop import LoopSpec, Output, generate, speculate
from .processors import PROCESSORS, View, logprob, next_probs
from .settings import FEATURES, Settings
from .tiny_model import TinyConfig, tiny_causal_lm

__all__ = ["Settings", "FEATURES", "Grammar", "alternating", "no_immediate_repeat", "View", "PROCESSORS",
           "next_probs", "logprob", "Output", "LoopSpec", "generate", "speculate", "plain_law", "speculative_law",
           "logprob_error", "law_tv", "TinyConfig", "tiny_causal_lm"]
