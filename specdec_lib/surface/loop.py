"""The reference generation loop with the whole sampling surface: plain decoding and speculative decoding.

Plain decoding (`generate`) draws each token from next_probs at the text before it, until an EOS or the cap.
Speculative decoding (`speculate`) does the same in rounds, and keeps plain decoding's law exactly because every
position is judged with the history its own text produces:

  1. draft    up to min(k, tokens left) tokens, each from next_probs(draft, ...) at the drafted prefix before it
              (penalty counts, n-gram bans and the automaton's state all advance with the drafted tokens);
              drafting stops after an EOS
  2. judge    the target's rows at every drafted position i, next_probs(target, ...) at prompt + generated +
              drafts[:i], plus one row after the last draft (the bonus row); the core verifier (the token rule,
              verification.verify_batch, or block verification, block_verification.verify_batch_block) keeps a
              prefix of the drafts and draws one more token
  3. commit   keep the tokens up to an EOS accepted mid-block (the rest is discarded), cut at max_new_tokens
  4. report   each committed token's logprob: the target's processed log p at its position, exactly plain's value

One definition per idea: processing is processors.next_probs, verification is the core's; the exact engine
(exact.py) reads the same pieces below (block_size, draft_view, drafting_stops, target_rows, commit,
reported_logprobs, next_lasts), so a variant's exact law comes out of the definitions the sampler runs.

`LoopSpec()` (settings.py) is the correct loop; its other values are the shipped ways of carrying a per-token
state wrong, each read here by the same pieces (registry.py names them and cites their sources).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from .._checks import check_generator, check_int
from ..block_verification import verify_batch_block
from ..sampling import sample_rows
from ..verification import verify_batch
from .grammar import DEAD
from .processors import PROCESSORS, View, next_probs
from .settings import SPEC_CHOICES, LoopSpec, Settings

__all__ = ["Output", "LoopSpec", "SPEC_CHOICES", "generate", "speculate", "block_size", "draft_view",
           "draft_row", "drafting_stops", "round_block", "target_view", "target_rows", "commit", "reported_logprobs",
           "next_lasts", "check_prompt_ids", "RAW", "CORRECT"]

RAW = View(processors=frozenset())  # no processor runs: the model's own softmax


@dataclass(frozen=True)
class Output:
    """One generation: the tokens, the logprob reported for each, and why it stopped."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop: Literal["eos", "length"]


PENALTIES = ("repetition_penalty", "frequency_penalty", "presence_penalty")
BIAS_AND_MIN_P = ("min_p", "logit_bias")
BANS = ("no_repeat_ngram_size", "bad_words")


CORRECT = LoopSpec()  # the correct loop


def check_prompt_ids(prompt) -> tuple[int, ...]:
    """The prompt as a tuple of token ids (ints >= 0)."""
    if isinstance(prompt, torch.Tensor):
        prompt = prompt.tolist()
    if not isinstance(prompt, (tuple, list)):
        raise TypeError(f"prompt must be a tuple of token ids, got {type(prompt).__name__}")
    return tuple(check_int(f"prompt[{i}]", t, minimum=0) for i, t in enumerate(prompt))


def _check_call(prompt, settings, generator) -> tuple[int, ...]:
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    check_generator(generator)
    return check_prompt_ids(prompt)


def _log(p: float) -> float:
    return math.log(p) if p > 0 else float("-inf")


def generate(model, prompt, settings: Settings, *, generator: torch.Generator | None = None) -> Output:
    """Plain decoding: each token from next_probs at the text before it, until an EOS or max_new_tokens.

    generator: the torch.Generator of every draw (None: torch's global one, as the core's samplers do)."""
    prompt = _check_call(prompt, settings, generator)
    tokens: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    while len(tokens) < settings.max_new_tokens:
        probs = next_probs(model, prompt, tokens, settings)  # (V,)
        token = int(sample_rows(probs, generator))
        tokens, logprobs = tokens + (token,), logprobs + (_log(float(probs[token])),)
        if token == settings.eos:
            return Output(tokens, logprobs, "eos")
    return Output(tokens, logprobs, "length")


# ---- one round, in the pieces the exact engine reads too ------------------------------------------------------

def block_size(generated: tuple[int, ...], settings: Settings, k: int) -> int:
    """How many tokens a round drafts: k, or fewer when fewer are left before max_new_tokens."""
    return min(k, settings.max_new_tokens - len(generated))


def _view(off: set, penalty_tokens=None, ban_tokens=None) -> View:
    return View(penalty_tokens=penalty_tokens, ban_tokens=ban_tokens,
                processors=frozenset(set(PROCESSORS) - off) if off else None)


def draft_view(spec: LoopSpec) -> View:
    """What the draft's processors see: the true history, without the grammar where the spec drafts unmasked."""
    return _view({"grammar"} if spec.grammar != "per_position" else set())


def draft_row(draft, prompt, generated, drafted, settings: Settings, spec: LoopSpec, *,
              probs=next_probs) -> torch.Tensor | None:
    """The draft's row after generated + drafted, or None when it bans every token (drafting stops there: the
    drafted prefix may hold a token the target would never allow, so plain decoding never reaches this text)."""
    return probs(draft, prompt, generated + tuple(drafted), settings, view=draft_view(spec), strict=False)


def drafting_stops(token: int, settings: Settings, spec: LoopSpec) -> bool:
    """Drafting stops after an EOS (under eos="run_past" or "finish_round" it goes on: no EOS check)."""
    return token == settings.eos and spec.eos == "truncate"


def round_block(drafts, accepted: int, token: int, settings: Settings, spec: LoopSpec) -> tuple[int, ...]:
    """The tokens a round commits: the accepted drafts, then the verifier's token (when drafting runs past EOS, a
    fully accepted block that ends in EOS gets no bonus, as transformers' is_done_candidate drops it)."""
    drafts = tuple(drafts)
    if spec.eos != "truncate" and accepted == len(drafts) and drafts and drafts[-1] == settings.eos:
        return drafts
    return drafts[:accepted] + (token,)


def _penalty_view(spec: LoopSpec, generated, lasts, judged: bool) -> tuple[set, tuple | None]:
    """(processors off, the generated tokens the penalties count) for a target row."""
    rule = spec.penalties
    if rule == "ignored" or (rule == "bonus_only" and judged):
        return set(PENALTIES), None
    return set(), {"round_start": generated, "bonus_only": generated, "last_commit": lasts}.get(rule)


def _grammar_on(spec: LoopSpec, settings: Settings, generated, drafts, i: int) -> bool:
    """Whether target row i is masked by the grammar."""
    rule = spec.grammar
    if rule == "unmasked_after_illegal" and settings.grammar is not None:
        return settings.grammar.state_after(generated + tuple(drafts[:i])) != DEAD
    return rule == "per_position" or (rule == "unmasked_drafts" and i == 0)


def target_view(spec: LoopSpec, settings: Settings, generated, lasts, drafts, i: int) -> View:
    """What the target's processors see at row i of a round of len(drafts) drafts (the last row is the bonus)."""
    judged = i < len(drafts)
    off, penalty_tokens = _penalty_view(spec, generated, lasts, judged)
    ban_tokens = None
    if spec.processors == "ignored" or (spec.processors == "bonus_only" and judged):
        off |= set(BIAS_AND_MIN_P)
    elif spec.processors == "bonus_only_all":
        if judged:
            off |= set(PENALTIES + BANS + BIAS_AND_MIN_P)
        else:
            penalty_tokens = ban_tokens = generated
    if not _grammar_on(spec, settings, generated, drafts, i):
        off.add("grammar")
    return _view(off, penalty_tokens, ban_tokens)


def target_rows(target, prompt, generated, drafts, settings: Settings, spec: LoopSpec, *, lasts=(),
                probs=next_probs) -> list[torch.Tensor]:
    """The target's n + 1 rows for drafts (n,): row i at prompt + generated + drafts[:i], under the spec's view.

    A row no outcome can read is not computed (a uniform row stands in): the rows after a draft the target gives
    probability 0 (it is never kept), after an EOS draft (what follows it is discarded), and past max_new_tokens
    (what lands there is cut)."""
    n, rows, read = len(drafts), [], True
    eos_ends = spec.eos == "truncate" and spec.length == "truncate"
    for i in range(n + 1):
        read = read and (i == 0 or not (float(rows[-1][drafts[i - 1]]) == 0.0 or
                                        (drafts[i - 1] == settings.eos and eos_ends) or
                                        len(generated) + i >= settings.max_new_tokens))
        if not read:
            rows.append(torch.full_like(rows[0], 1.0 / rows[0].shape[0]))
        else:
            rows.append(probs(target, prompt, generated + tuple(drafts[:i]), settings,
                              view=target_view(spec, settings, generated, lasts, drafts, i)))
    return rows


def commit(generated: tuple[int, ...], block: tuple[int, ...], settings: Settings,
           spec: LoopSpec) -> tuple[tuple[int, ...], str | None]:
    """The generated text after a round committed block: (text, "eos" | "length" | None if it goes on)."""
    eos, cap = settings.eos, settings.max_new_tokens
    full = generated + tuple(block)
    if spec.length == "checked_first" and len(full) >= cap:
        return full[:cap], "length"
    text = full[:cap]
    new = text[len(generated):]
    if eos is not None and eos in new:
        if spec.eos == "truncate":  # an EOS accepted mid-block ends the text: what follows it is discarded
            return generated + new[:new.index(eos) + 1], "eos"
        if spec.eos == "finish_round" or text[-1] == eos:  # run_past: only a round whose last token is EOS stops
            return text, "eos"
    return text, ("length" if len(text) >= cap else None)


def next_lasts(lasts: tuple[int, ...], text: tuple[int, ...], spec: LoopSpec) -> tuple[int, ...]:
    """The tokens a last_commit penalty tracker has been fed: one per round, the round's last; () otherwise."""
    return lasts + (text[-1],) if spec.penalties == "last_commit" else ()


def reported_logprobs(p_rows, block: tuple[int, ...], accepted: int, count: int, spec: LoopSpec, *,
                      raw_bonus: torch.Tensor | None = None) -> tuple[float, ...]:
    """The logprobs reported for the first count tokens of block: accepted drafts, then the target's token
    (raw_bonus: the target's raw row after the drafts, read when spec.logprobs is "raw_bonus")."""
    n = len(p_rows) - 1
    out = []
    for i, token in enumerate(block[:count]):
        if spec.logprobs == "zero":
            out.append(0.0)
        elif spec.logprobs == "raw_bonus" and i == n == accepted:
            out.append(_log(float(raw_bonus[token])))
        else:
            out.append(_log(float(p_rows[i][token])))
    return tuple(out)


def _draft(draft, prompt, generated, settings, n, spec, generator) -> tuple[list[int], list[torch.Tensor]]:
    """Up to n drafted tokens and the draft rows that produced them."""
    drafts: list[int] = []
    q_rows: list[torch.Tensor] = []
    while len(drafts) < n:
        q = draft_row(draft, prompt, generated, drafts, settings, spec)  # (V,)
        if q is None:
            break
        token = int(sample_rows(q, generator))
        drafts.append(token)
        q_rows.append(q)
        if drafting_stops(token, settings, spec):
            break
    return drafts, q_rows


def _round(models, prompt, settings, k, spec, state, generator):
    """One speculative round from state = (generated, lasts): (committed block, accepted drafts, p_rows, drafts)."""
    (target, draft), (generated, lasts) = models, state
    drafts, q_rows = _draft(draft, prompt, generated, settings, block_size(generated, settings, k), spec, generator)
    p_rows = target_rows(target, prompt, generated, drafts, settings, spec, lasts=lasts)
    verify = verify_batch if spec.verifier == "token" else verify_batch_block
    q = torch.stack(q_rows) if q_rows else p_rows[0].new_zeros(0, p_rows[0].shape[0])  # (n, V); n = 0: no draft
    accepted, nxt = verify(torch.stack(p_rows)[None], q[None], torch.tensor([drafts], dtype=torch.long), generator)
    a = int(accepted[0])
    return round_block(drafts, a, int(nxt[0]), settings, spec), a, p_rows, drafts


def speculate(target, draft, prompt, settings: Settings, *, k: int, spec: LoopSpec = CORRECT,
              generator: torch.Generator | None = None) -> Output:
    """Speculative decoding with the whole sampling surface (module doc); its law is generate's under LoopSpec()."""
    prompt = _check_call(prompt, settings, generator)
    k = check_int("k", k, minimum=1)
    if not isinstance(spec, LoopSpec):
        raise TypeError(f"spec must be a LoopSpec, got {type(spec).__name__}")
    generated: tuple[int, ...] = ()
    lasts: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    if spec.first_token == "plain":  # one plain step first, as a prefill step samples the first token
        probs = next_probs(target, prompt, (), settings)
        token = int(sample_rows(probs, generator))
        generated, stop = commit((), (token,), settings, spec)
        lasts, logprobs = next_lasts((), generated, spec), (_log(float(probs[token])),)
        if stop is not None:
            return Output(generated, logprobs, stop)
    while True:
        block, a, p_rows, drafts = _round((target, draft), prompt, settings, k, spec, (generated, lasts), generator)
        text, stop = commit(generated, block, settings, spec)
        raw = next_probs(target, prompt, generated + tuple(drafts), settings, view=RAW) \
            if spec.logprobs == "raw_bonus" and a == len(drafts) else None
        logprobs += reported_logprobs(p_rows, block, a, len(text) - len(generated), spec, raw_bonus=raw)
        generated, lasts = text, next_lasts(lasts, text, spec)
        if stop is not None:
            return Output(generated, logprobs, stop)
