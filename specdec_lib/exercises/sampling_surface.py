"""Notebook 02d's exercise: make the penalties correct under speculation, one drafted block at a time.

A serving engine gets the target's raw logits for a whole drafted block from one forward pass: row j judges
drafted[j] and row k (after the last draft) is the bonus row. Each row must be penalised with the text before its
own position, prompt + generated + drafted[:j], exactly as plain decoding would penalise it there; the grader
holds the learner's rows to surface.next_probs at that history, and names the shipped shortcuts it recognises
(the penalty state of the round's start for every row, penalties on the bonus row only, and the plain-decoding
slips: the prompt counted by the frequency penalty, the repetition penalty's sign rule).
"""
from __future__ import annotations

import functools

import torch

from ..surface import registry
from ..surface.processors import next_probs
from ..surface.settings import Settings
from ._report import Grade, Stop, call, fmt, run

__all__ = ["grade_penalised_rows", "CASES", "PENALTY_MISTAKES", "penalty_mistake", "table_model", "shipped"]

TOL = 1e-6  # on the processed probabilities: float32 rows pass, every recognised mistake is further on some case

# one logits row per last token (V = 5), mixed signs: the repetition rule treats positive and negative apart
_TABLE = ((1.2, -0.4, 0.3, -1.1, 0.6), (-0.5, 0.9, -0.2, 0.4, -1.3), (0.2, 0.7, -0.8, 1.0, -0.1),
          (-1.0, 0.3, 0.8, -0.3, 0.5), (0.4, -0.9, 1.1, 0.1, -0.6))


def table_model(context: tuple[int, ...]) -> torch.Tensor:
    """The grader's target: logits (5,) from the last token, shifted by the text's length (rows differ by position)."""
    row = torch.tensor(_TABLE[context[-1]], dtype=torch.float64)
    return row + 0.1 * len(context) * torch.tensor([1.0, -1.0, 0.5, 0.0, -0.5], dtype=torch.float64)


# (what it tests, prompt, generated, drafted, settings)
CASES = (
    ("frequency 0.7; the block drafts token 3 twice", (0, 1), (2,), (3, 3, 2), Settings(frequency_penalty=0.7)),
    ("presence 1.2; the same block (a token counts once)", (0, 1), (2,), (3, 3, 2), Settings(presence_penalty=1.2)),
    ("repetition 1.5; negative logits, and a drafted token that is in the prompt", (4, 1), (), (1, 2, 0),
     Settings(repetition_penalty=1.5)),
    ("frequency 1.0; the prompt repeats token 2 (frequency counts only what was generated)", (2, 2, 2), (), (2, 1),
     Settings(frequency_penalty=1.0)),
    ("all three at once, k = 4", (0,), (1, 2, 1), (2, 0, 4, 3),
     Settings(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.6)),
    ("repetition 2.0 and frequency 0.5, k = 1, nothing generated yet", (3,), (), (3,),
     Settings(repetition_penalty=2.0, frequency_penalty=0.5)),
)


def _penalise(row: torch.Tensor, seen: tuple[int, ...], counted: tuple[int, ...], s: Settings, *,
              sign: bool = True, once: bool = True, presence_counts: bool = False) -> torch.Tensor:
    """One logits row (V,) penalised: repetition over `seen`, frequency and presence over `counted` (knobs: slips)."""
    out = row.clone()
    tokens = sorted(set(seen)) if once else list(seen)
    for t in tokens:  # a token seen twice is scaled twice when not `once`
        x = out[t]
        out[t] = x / s.repetition_penalty if (x > 0 or not sign) else x * s.repetition_penalty
    counts = torch.bincount(torch.tensor(counted, dtype=torch.long), minlength=out.shape[0]).double()  # (V,)
    return out - s.frequency_penalty * counts - s.presence_penalty * (counts if presence_counts else counts > 0)


def penalty_mistake(name: str, rows: torch.Tensor, prompt, generated, drafted, s: Settings) -> torch.Tensor:
    """The rows (k+1, V) a recognised mistake returns (the tests' negative controls use the same names)."""
    if name not in PENALTY_MISTAKES:
        raise ValueError(f"unknown mistake {name!r}; known: {', '.join(PENALTY_MISTAKES)}")
    k, out = len(drafted), []
    for j in range(k + 1):
        before = {"round_start": (), "block_end": drafted, "own_token": drafted[:j + 1]}.get(name, drafted[:j])
        counted = tuple(generated) + tuple(before)
        if name == "ignored":
            out.append(rows[j].clone())
        elif name == "bonus_only":
            out.append(rows[j].clone() if j < k else _penalise(rows[j], prompt + tuple(generated), generated, s))
        elif name == "bonus_raw" and j == k:
            out.append(rows[j].clone())
        else:
            seen = counted if name == "prompt_unseen" else tuple(prompt) + counted
            out.append(_penalise(rows[j], seen, tuple(prompt) + counted if name == "prompt_counted" else counted, s,
                                 sign=name != "sign", once=name != "per_occurrence",
                                 presence_counts=name == "presence_counts"))
    return torch.stack(out)


_PENALTIES = {"repetition_penalty", "frequency_penalty", "presence_penalty"}
_SHIPPED = {  # a recognised mistake -> (how surface.LoopSpec writes the bug that shipped it, how near it is)
    "round_start": (lambda spec: getattr(spec, "penalties", None) == "last_commit", "its shipped form, worse, is"),
    "bonus_only": (lambda spec: getattr(spec, "processors", None) == "bonus_only_all"
                   or _PENALTIES <= set(getattr(spec, "judged_without", ())), "that is"),
    "ignored": (lambda spec: getattr(spec, "penalties", None) == "ignored", "that is"),
}


def shipped(mistake: str) -> str:
    """The field guide's registered variant that ships this mistake (the first, registry order), in words; ''."""
    match, relation = _SHIPPED.get(mistake, (None, ""))
    for v in registry.loop_variants(exact=False) if match else ():
        if match(v.spec):
            return f"{relation} the field guide's {v.name}: {v.description} ({v.reference}){_tv_text(v.name)}"
    return ""


@functools.cache
def _tv_text(name: str) -> str:
    """'; exact TV ... on ...' of a variant on a small case with a frequency penalty, or '' when it is exact there."""
    s = Settings(frequency_penalty=1.5, max_new_tokens=3)
    draft = lambda context: table_model(context) * 0.5  # noqa: E731 (a flatter draft of the same target)
    tv = registry.variant_error(name, table_model, draft, (0,), s, k=2)
    return f"; its output law is TV {tv:.3f} from plain decoding's on the checker's chain, frequency 1.5, k = 2" \
        if tv > 1e-12 else ""


PENALTY_MISTAKES = {
    "round_start": ("every row penalised with the state at the round's start (prompt + generated): the drafted "
                    "tokens before a row never reach its penalties, as if the block were position-invariant"),
    "ignored": "no penalty on any row: the settings' repetition, frequency and presence penalties never ran",
    "block_end": ("every row penalised with the state after the whole block: row j must not count drafted[j:] "
                  "(the tokens at and after the position it judges)"),
    "own_token": ("row j counts drafted[:j + 1]: the token it judges is counted before it was accepted; the text "
                  "before row j is prompt + generated + drafted[:j]"),
    "bonus_only": ("penalties only on the bonus row (and with the round-start state there): the rows judging the "
                   "drafts, and every residual drawn from them, are unpenalised"),
    "bonus_raw": ("the bonus row (row k, after the last draft) left unpenalised: it is a position like the others, "
                  "after prompt + generated + all k drafts"),
    "prompt_counted": ("the frequency and presence penalties counted the prompt: they count only the generated "
                       "tokens (OpenAI's and vLLM's rule); the repetition penalty is the one that sees the prompt"),
    "prompt_unseen": ("the repetition penalty ignored the prompt: in the CTRL/HF rule it scales every token of "
                      "prompt + generated (sglang's own penaliser counts only the output, a different plain law)"),
    "sign": ("the repetition penalty divided every logit by r: a negative logit must be multiplied by r, else a "
             "seen token with a negative logit gets likelier"),
    "per_occurrence": ("the repetition penalty applied once per occurrence (r to the count): it scales each "
                       "distinct seen token once"),
    "presence_counts": ("the presence penalty multiplied by the count: it is subtracted once for a token that "
                        "occurred at all, [count > 0]"),
}


def _probs(rows: torch.Tensor) -> torch.Tensor:
    return torch.softmax(rows.double(), dim=-1)  # temperature 1, no truncation: next_probs is the softmax


def _want(case) -> torch.Tensor:
    _, prompt, generated, drafted, s = case
    return torch.stack([next_probs(table_model, prompt, generated + drafted[:j], s) for j in range(len(drafted) + 1)])


def _raw(case) -> torch.Tensor:
    _, prompt, generated, drafted, _ = case
    return torch.stack([table_model(prompt + generated + drafted[:j]) for j in range(len(drafted) + 1)])


def _as_rows(got, k: int, on: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise Stop(f"penalised_rows must return a torch.Tensor of shape ({k + 1}, 5), got {type(got).__name__} ({on})")
    if tuple(got.shape) != (k + 1, 5):
        hint = " (one row per drafted token and the bonus row: k + 1 rows)" if got.dim() == 2 else ""
        raise Stop(f"penalised_rows must return shape ({k + 1}, 5), got {tuple(got.shape)}{hint} ({on})")
    if not got.is_floating_point() or torch.isnan(got).any():
        raise Stop(f"penalised_rows must return float logits without NaN ({on})")
    return got.detach().double()


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((_probs(a) - b).abs().max() <= TOL)


def _diagnose(outputs: dict[int, torch.Tensor], first: int) -> str:
    """Name the mistakes that give the learner's rows on every case (else on the first case it got wrong)."""
    def matches(name, i):
        _, prompt, generated, drafted, s = CASES[i]
        return _close(outputs[i], _probs(penalty_mistake(name, _raw(CASES[i]), prompt, generated, drafted, s)))

    everywhere = [n for n in PENALTY_MISTAKES if all(matches(n, i) for i in outputs)]
    hits = everywhere or [n for n in PENALTY_MISTAKES if matches(n, first)]
    what, prompt, generated, drafted, _ = CASES[first]
    bad = next(j for j in range(len(drafted) + 1) if not _close(outputs[first][j:j + 1], _want(CASES[first])[j:j + 1]))
    where = (f"on {what} (prompt {prompt}, generated {generated}, drafted {drafted}): row {bad} gives p = "
             f"{fmt(_probs(outputs[first])[bad])}, expected {fmt(_want(CASES[first])[bad])}")
    if not hits:
        return (f"{where}. Row j follows prompt + generated + drafted[:j]: repetition over all of it (each distinct "
                "token once, logit > 0 -> logit / r, else logit * r), frequency and presence over generated + "
                "drafted[:j]")
    texts = []
    for name in hits:
        story = shipped(name)
        texts.append(PENALTY_MISTAKES[name] + (f"; {story}" if story else ""))
    return f"{'; or '.join(texts)} ({where})"


def grade_penalised_rows(penalised_rows, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 2d.1: penalised_rows(logits_rows (k+1, V), prompt, generated, drafted, settings) -> (k+1, V) logits,
    row j penalised as plain decoding would penalise the position after prompt + generated + drafted[:j]."""
    def body(fn, report):
        outputs, first = {}, None
        for i, case in enumerate(CASES):
            what, prompt, generated, drafted, s = case
            got = call(fn, _raw(case), prompt, generated, drafted, s, on=what)
            outputs[i] = _as_rows(got, len(drafted), what)
            if first is None and not _close(outputs[i], _want(case)):
                first = i
        if first is not None:
            raise Stop(_diagnose(outputs, first))
        report.note(f"every row of {len(CASES)} drafted blocks equals plain decoding's processed distribution at "
                    "its position (surface.next_probs): frequency, presence and repetition penalties, alone and "
                    "together, k = 1 to 4")
    return run("penalised_rows", body, penalised_rows, raise_on_failure=raise_on_failure, verbose=verbose)
