"""Lab: the CPU anchor for speed (kind "measure-engines", specdec_lib/data/engine_speed_reference.json): the real pair
through llama.cpp's llama-server on the three tasks of `make measure-real`, plain and speculative, greedy, one thread,
each run's time and counts as the server reported them, and the cost equation on terms the server measured.

One generation (ServerPass) gives n tokens in ms milliseconds of decoding (the server's predicted_n and predicted_ms:
the prompt's pass, which yields the first token, is timed apart), how many tokens were drafted and accepted, and how
many verification passes ran (/metrics). Its n - 1 later tokens came from target passes of two kinds: a
verification (a draft of k_i tokens scored at once, 1 + accepted_i tokens kept) or a plain step (no draft matched).

The terms, per weights and task (SpeedTerms): T_1 the plain run's milliseconds per token; c_d the draft model's own
plain milliseconds per token over T_1; c_v(k) a (k+1)-token pass over the cached prompt over T_1 (the server's
prompt timing: it scores one row of logits where a verification scores k + 1, so it is a floor on the verifier), and
the draft model's c_v_d(k), the same pass on the draft over its own step. draft-simple re-evaluates every verified
batch on the draft too (tools/server/server-context.cpp L4069-4076 at b11434, "for now, always re-evaluate"): an
overhead of c_d c_v_d(k) per round. predicted() puts the terms into the cost equation (cost.py) over the whole run,
one round of all its target passes.
benchmarks/measure_engines.py (`make measure-engines`) writes the file; recordings.py registers and reads it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .._checks import check_choice
from ..cost import cost_equation
from .model_manifest import ModelManifest
from .schema import find_row

__all__ = ["SPEED_CHOICES", "ServerPass", "SpeedTerms", "SpeedRun", "EngineSpeedRecording", "c_v_between",
           "redraft", "predicted", "c_v_implied", "speed_run", "check_engine_speed"]

SPEED_CHOICES = {"weights": ("Q4_K_M", "F32"), "mode": ("plain", "draft", "ngram"), "task": ("code", "prose", "edit")}


@dataclass(frozen=True)
class ServerPass:
    """One timed generation as llama-server reported it."""

    ms: float  # predicted_ms: decoding after the first token
    n: int  # predicted_n: tokens generated, the first (from the prompt's pass) included
    drafted: int  # draft_n
    accepted: int  # draft_n_accepted
    verified: int  # verification passes (/metrics spec_decode_num_drafts_total, this request's share)

    @property
    def steps(self) -> int:
        """Tokens after the first: what ms paid for."""
        return self.n - 1

    @property
    def plain_steps(self) -> int:
        """Target passes with no draft: each gives one token, a verification 1 + its accepted tokens."""
        return self.steps - self.accepted - self.verified


@dataclass(frozen=True)
class SpeedTerms:
    """The cost equation's terms for one weights and task, in the server's milliseconds (medians over reps)."""

    weights: str
    task: str
    T_1_ms: float  # the plain run's milliseconds per token
    draft_ms: float  # the draft model's own plain milliseconds per token
    c_d: float  # draft_ms / T_1_ms
    c_v: list[float]  # c_v(k) for k = 1, 2, ..., len(c_v): a (k+1)-token pass over the cached prompt / T_1
    c_v_d: list[float]  # the draft model's c_v_d(k): the same pass on the draft / its own step (draft_ms)


@dataclass(frozen=True)
class SpeedRun:
    """One mode on one weights and task: its repeats and what follows from them."""

    weights: str
    task: str
    mode: str  # SPEED_CHOICES
    k: int  # tokens drafted at most per round (0: plain)
    c_d: float  # the drafter's cost per drafted token over T_1: the draft model's c_d, 0 for n-gram lookup
    overhead: float  # per verification pass, over T_1: the draft's re-evaluation c_d c_v_d(k-bar) (0 for lookup)
    passes: list[ServerPass]  # one per repeat
    equal_to_plain: bool  # every repeat's tokens are plain's (greedy): a sample-and-match engine's promise
    first_divergence: int | None  # the first position where a repeat's tokens leave plain's (None: equal)
    ms_per_token: float  # median over repeats of ms / steps
    speedup: float  # median over repeats of plain's ms per token in the same repeat over this run's
    speedup_range: list[float]  # [min, max] over repeats
    e_n: float  # tokens per verification pass, 1 + accepted / verified (1 where none ran)
    alpha: float  # accepted / drafted (0 where nothing was drafted)
    predicted: float  # the cost equation on SpeedTerms and this run's counts (predicted())
    c_v_implied: float | None  # a verification pass and its overhead here, over T_1 (c_v_implied(); None: none ran)


@dataclass(frozen=True)
class EngineSpeedRecording:
    """llama-server on the real pair: provenance, machine, the engine, the weights it ran, terms and runs."""

    source: str
    machine: dict  # processor, cpus, threads, date, seconds, loadavg
    engine: dict  # name, version, command (the plain server's flags)
    models: list[ModelManifest]  # role "target" / "draft", one per weights
    prompts: dict[str, int]  # task -> prompt tokens
    n_new: int
    terms: list[SpeedTerms]
    runs: list[SpeedRun]
    notes: dict[str, str]

    def run(self, weights: str, task: str, mode: str) -> SpeedRun:
        """The run of mode on weights and task (ValueError listing the recorded triples otherwise)."""
        return find_row(self.runs, ("weights", "task", "mode"), (weights, task, mode))

    def terms_of(self, weights: str, task: str) -> SpeedTerms:
        """The terms measured for weights and task (ValueError listing the recorded pairs otherwise)."""
        return find_row(self.terms, ("weights", "task"), (weights, task))


def c_v_between(c_v: list[float], k: float) -> float:
    """c_v at a mean draft length k, linear between the measured c_v(1), ..., c_v(K); 1 <= k <= K, else ValueError."""
    if not 1 <= k <= len(c_v):
        raise ValueError(f"k must be within the measured 1..{len(c_v)}, got {k:g}")
    if len(c_v) == 1:
        return c_v[0]
    i = min(int(k), len(c_v) - 1)  # k on the segment from c_v(i) to c_v(i + 1)
    return c_v[i - 1] + (k - i) * (c_v[i] - c_v[i - 1])


def redraft(p: ServerPass, terms: SpeedTerms, *, model: bool) -> float:
    """The overhead O per verification pass, over T_1: a draft model re-evaluates the verified batch,
    c_d c_v_d(k-bar); a lookup has nothing to re-evaluate (0)."""
    return terms.c_d * c_v_between(terms.c_v_d, p.drafted / p.verified) if model and p.verified else 0.0


def predicted(p: ServerPass, terms: SpeedTerms, *, c_d: float, overhead: float) -> float:
    """The cost equation over one run as a single round: E[N] the run's steps; the draft's steps are its drafted
    tokens (c_d each: the drafter's cost); the verifier is every verification pass at the mean draft length
    (c_v(k-bar) each) plus the plain steps (1 each); the overhead O per verification pass. With a draft every
    round of k it is E[N(k)] / (k c_d + c_v(k) + O)."""
    verify = p.plain_steps + (p.verified * c_v_between(terms.c_v, p.drafted / p.verified) if p.verified else 0.0)
    return float(cost_equation(p.steps, draft_steps=p.drafted, c_d=c_d, c_v=verify, overhead=p.verified * overhead))


def c_v_implied(p: ServerPass, terms: SpeedTerms, *, c_d: float) -> float | None:
    """A verification pass's cost in this run with its overhead, over T_1: the time left after the plain steps and
    the drafting (drafted c_d T_1), per verification pass (c_v(k-bar) + O by the terms); None where none ran."""
    if not p.verified:
        return None
    return (p.ms / terms.T_1_ms - p.plain_steps - p.drafted * c_d) / p.verified


def speed_run(*, weights: str, task: str, mode: str, k: int, passes: list[ServerPass], plain: list[ServerPass],
              first_divergence: int | None, terms: SpeedTerms) -> SpeedRun:
    """A SpeedRun from its repeats and plain's (repeat i against plain's repeat i), terms from the plain runs; mode
    "draft" drafts with the draft model (c_d, and its re-evaluation as overhead), "ngram" by lookup (free)."""
    model = check_choice("mode", mode, SPEED_CHOICES["mode"]) == "draft"
    c_d = terms.c_d if model else 0.0
    if len(passes) != len(plain) or not passes:
        raise ValueError(f"passes and plain must hold one ServerPass per repeat, got {len(passes)} and {len(plain)}")
    per_token = [p.ms / p.steps for p in passes]
    ratios = [(b.ms / b.steps) / t for b, t in zip(plain, per_token)]
    drafted, accepted, verified = (sum(getattr(p, f) for p in passes) for f in ("drafted", "accepted", "verified"))
    implied = [c_v_implied(p, terms, c_d=c_d) for p in passes]
    overheads = [redraft(p, terms, model=model) for p in passes]
    return SpeedRun(weights=weights, task=task, mode=mode, k=k, c_d=c_d, overhead=statistics.median(overheads),
                    passes=passes,
                    equal_to_plain=first_divergence is None, first_divergence=first_divergence,
                    ms_per_token=statistics.median(per_token), speedup=statistics.median(ratios),
                    speedup_range=[min(ratios), max(ratios)], e_n=1 + accepted / verified if verified else 1.0,
                    alpha=accepted / drafted if drafted else 0.0,
                    predicted=statistics.median(predicted(p, terms, c_d=c_d, overhead=o)
                                                for p, o in zip(passes, overheads)),
                    c_v_implied=None if None in implied else statistics.median(implied))


def check_engine_speed(rec: EngineSpeedRecording) -> None:
    """Counts add up in every pass; plain drafts nothing and has k 0; each run's weights and task have terms; the
    medians lie within their repeats' range; no (weights, task, mode) twice."""
    terms = {(t.weights, t.task) for t in rec.terms}
    seen = set()
    for i, r in enumerate(rec.runs):
        where = f"runs[{i}] ({r.weights}, {r.task}, {r.mode})"
        if (r.weights, r.task) not in terms:
            raise ValueError(f"{where}: no terms recorded for its weights and task")
        if (r.weights, r.task, r.mode) in seen:
            raise ValueError(f"{where}: recorded twice")
        seen.add((r.weights, r.task, r.mode))
        if (r.mode == "plain") != (r.k == 0) or r.k < 0:
            raise ValueError(f"{where}: k must be 0 for plain and >= 1 for a speculative mode, got {r.k}")
        for j, p in enumerate(r.passes):
            if p.steps < 1 or min(p.accepted, p.verified, p.plain_steps) < 0 or p.accepted > p.drafted or \
                    p.drafted > r.k * p.verified or (r.mode == "plain" and p.drafted):
                raise ValueError(f"{where}.passes[{j}]: counts must add up (n {p.n}, drafted {p.drafted}, accepted "
                                 f"{p.accepted}, verified {p.verified}, at most k = {r.k} drafted per pass)")
        if r.equal_to_plain != (r.first_divergence is None):
            raise ValueError(f"{where}: equal_to_plain must say whether first_divergence is None")
        if min(r.c_d, r.overhead) < 0 or (r.mode != "draft" and (r.c_d or r.overhead)):
            raise ValueError(f"{where}: c_d and overhead must be >= 0, and 0 without a draft model")
        lo, hi = r.speedup_range
        if not lo <= r.speedup <= hi:
            raise ValueError(f"{where}: speedup {r.speedup} must lie within its range {r.speedup_range}")
    for i, t in enumerate(rec.terms):
        if min(t.T_1_ms, t.draft_ms, t.c_d) <= 0 or not t.c_v or min(t.c_v) <= 0 or not t.c_v_d or min(t.c_v_d) <= 0:
            raise ValueError(f"terms[{i}] ({t.weights}, {t.task}): T_1, the draft's time, c_d, c_v and c_v_d must "
                             f"be > 0")
