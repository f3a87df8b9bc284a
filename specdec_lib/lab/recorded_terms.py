"""Lab: what a recording's terms can and cannot say: repeats, rankings within the noise, T_1 outliers, traffic, rounds.

Pure arithmetic on recorded fields (recordings.py reads them); nothing here times anything. `make measure-real
--repeats R` runs each greedy fp32 configuration R times; a run then stores each repeat's terms (RunRepeat), the
medians of T_1, c_d, c_v, E[N] and the measured speedup, the prediction from the median terms, and each field's
[min, max] (summarise_repeats, checked on reading by check_repeats). A recording from before --repeats holds one run
per configuration (no repeats). The best k of a table is a best-of over k and leans high: best_speed keeps its range
over the repeats, BestSpeed ranks two only outside it, and split_best_k chooses k on some repeats and reports the
others. t1_spread flags a configuration whose T_1, a plain step of the same target, sits more than a factor from the
median of its dtype and path: the clock, not the equation, moved there. step_traffic turns T_1 into the bytes and the
arithmetic one plain step does per second; round_counts recovers the rounds and accepted drafts behind E[N]
(committed tokens, the last round cut at n_new) and alpha (every draft the target accepted, the last round's in
full). The text tables print a real recording's runs, transformers beside our loop, numerics, and exits.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .._checks import check_int, check_real
from ..cost import cost_equation

__all__ = ["REPEATED", "RunRepeat", "median", "summarise_repeats", "check_repeats", "repeats_table", "BestSpeed",
           "best_speed", "SplitChoice", "split_best_k", "T1Spread", "t1_spread", "StepTraffic", "step_traffic",
           "RoundCounts", "round_counts", "runs_table", "hf_table", "numerics_table", "exits_table"]

REPEATED = ("T_1", "c_d", "c_v", "e_n", "predicted", "measured")  # what each repeat records, and has a range of
MEDIANS = ("T_1", "c_d", "c_v", "e_n", "measured")  # the run's own fields that hold the repeats' medians


@dataclass(frozen=True)
class RunRepeat:
    """One repeat of a configuration: its own terms, E[N], the equation's speedup from them and the clock's."""

    T_1: float
    c_d: float
    c_v: float
    e_n: float
    predicted: float
    measured: float
    equal_to_plain: bool | None


def median(values) -> float:
    """The median of a non-empty list of numbers (the mean of the middle two for an even count)."""
    values = list(values)
    if not values:
        raise ValueError("values must hold at least one number, got none")
    return float(statistics.median(values))


def summarise_repeats(repeats: list[RunRepeat], k: int) -> dict:
    """The run's fields from its repeats: the medians (MEDIANS), predicted = E[N] / (k c_d + c_v) of the median
    terms, and ranges {field: [min, max]} for every REPEATED field."""
    if not repeats:
        raise ValueError("repeats must hold at least one RunRepeat, got none")
    out = {f: median(getattr(r, f) for r in repeats) for f in MEDIANS}
    out["predicted"] = cost_equation(out["e_n"], draft_steps=k, c_d=out["c_d"], c_v=out["c_v"])
    out["ranges"] = {f: [min(getattr(r, f) for r in repeats), max(getattr(r, f) for r in repeats)] for f in REPEATED}
    return out


def check_repeats(run, where: str) -> None:
    """Raise unless run's medians, prediction and ranges follow from its repeats (a run without repeats has none)."""
    if not run.repeats:
        if run.ranges:
            raise ValueError(f"{where}.ranges must be empty without repeats, got {sorted(run.ranges)}")
        return
    want = summarise_repeats(run.repeats, run.k)
    for f in (*MEDIANS, "predicted"):
        if abs(getattr(run, f) - want[f]) > 1e-9 * max(1.0, abs(want[f])):
            raise ValueError(f"{where}.{f} must be the median of its {len(run.repeats)} repeats ({want[f]!r}), "
                             f"got {getattr(run, f)!r}")
    if run.ranges != want["ranges"]:
        raise ValueError(f"{where}.ranges must be each field's [min, max] over its repeats, {want['ranges']}; "
                         f"got {run.ranges}")


def repeats_table(runs) -> str:
    """One line per run with repeats: how many, then T_1, c_v, E[N], predicted and measured S as median [min, max]."""
    lines = [f"{'task':<6}{'draft':<7}{'k':>3}{'n':>3}" + "".join(f"{f:>22}" for f in ("T_1 (s)", "c_v", "E[N]",
                                                                                         "pred", "meas"))]
    for r in runs:
        if r.repeats:
            cells = "".join(f"{getattr(r, f):>7.3f} [{r.ranges[f][0]:.3f}, {r.ranges[f][1]:.3f}]"
                            for f in ("T_1", "c_v", "e_n", "predicted", "measured"))
            lines.append(f"{r.task:<6}{r.draft:<7}{r.k:>3}{len(r.repeats):>3}{cells}")
    return "\n".join(lines)


@dataclass(frozen=True)
class BestSpeed:
    """One chain run at its best k: the median measured speedup over the repeats and its range [low, high]."""

    draft: str
    target: str
    temperature: float
    k: int
    median: float
    low: float
    high: float

    def within_noise(self, other: BestSpeed) -> bool:
        """True when the two ranges overlap: the recording cannot rank the two."""
        return self.low <= other.high and other.low <= self.high

    def beats(self, other: BestSpeed) -> bool:
        """True when every repeat of self ran faster than every repeat of other (the ranges do not overlap)."""
        return self.low > other.high


def best_speed(run) -> BestSpeed:
    """A ChainRun's measured S at its best k (run.best), with its range over the repeats."""
    t, i = run.table, run.best
    low, high = t.measured_range[i]
    return BestSpeed(draft=t.draft, target=run.target, temperature=run.temperature, k=t.ks[i], median=t.measured[i],
                     low=low, high=high)


@dataclass(frozen=True)
class SplitChoice:
    """k chosen on some repeats, its speedup reported on the others: an estimate the choice did not inflate."""

    k: int
    chosen: float  # the median S at k over the repeats that chose it (biased upward, like any best-of)
    reported: float  # the median S at k over the other repeats
    reported_range: tuple[float, float]


def split_best_k(ks: list[int], repeat_speeds: list[list[float]], *, choose: tuple[int, ...] = (0, 2, 4),
                 report: tuple[int, ...] = (1, 3)) -> SplitChoice:
    """The k with the largest median S over the repeats `choose`, and its S over the repeats `report`.

    repeat_speeds[i][r] is repeat r's measured speedup at ks[i] (a SpeedupTable's ks and repeat_speeds). Choosing k as
    the argmax over every repeat and then reporting those same repeats favours a k that was lucky; the repeats that
    report never voted."""
    if len(ks) and not repeat_speeds:
        raise ValueError("repeat_speeds is empty: the table keeps no per-repeat speedups (only medians and ranges); "
                         "re-record with `make measure-self` to choose k on some repeats and report others")
    if len(ks) == 0 or len(repeat_speeds) != len(ks):
        raise ValueError(f"repeat_speeds must hold one list per k ({len(ks)}), got {len(repeat_speeds)}")
    n = len(repeat_speeds[0])
    if any(len(row) != n for row in repeat_speeds):
        raise ValueError("repeat_speeds must hold the same number of repeats at every k")
    for name, rs in (("choose", choose), ("report", report)):
        if not rs:
            raise ValueError(f"{name} must name at least one repeat")
        for r in rs:
            check_int(f"{name}[...]", r, minimum=0)
            if r >= n:
                raise ValueError(f"{name} must name repeats 0 .. {n - 1}, got {r}")
    if set(choose) & set(report):
        raise ValueError(f"choose and report must not share a repeat, got {sorted(set(choose) & set(report))}")
    med = statistics.median
    i = max(range(len(ks)), key=lambda j: med(repeat_speeds[j][r] for r in choose))  # ties: the smaller index
    shown = [repeat_speeds[i][r] for r in report]
    return SplitChoice(k=ks[i], chosen=med(repeat_speeds[i][r] for r in choose), reported=med(shown),
                       reported_range=(min(shown), max(shown)))


@dataclass(frozen=True)
class T1Spread:
    """T_1 of one target across configurations of one dtype and path: median, range, and the outliers flagged."""

    dtype: str
    matmul: str
    configurations: int
    median: float
    low: float
    high: float
    factor: float  # an outlier is more than factor x the median, or less than the median / factor
    outliers: list[tuple[str, str, float]]  # (task, draft, T_1)


def t1_spread(runs, *, factor: float = 1.25) -> list[T1Spread]:
    """Per (dtype, matmul): the T_1 of each configuration (task, draft; a sampled run reusing its greedy run's
    terms counts once) against their median, and those more than factor from it."""
    factor = check_real("factor", factor, low=1.0, low_open=True)
    groups: dict[tuple[str, str], dict[tuple[str, str], float]] = {}
    for r in runs:
        groups.setdefault((r.dtype, r.matmul), {}).setdefault((r.task, r.draft), r.T_1)
    out = []
    for (dtype, matmul), t1 in groups.items():
        mid = median(t1.values())
        flagged = [(task, draft, t) for (task, draft), t in t1.items() if t > factor * mid or t < mid / factor]
        out.append(T1Spread(dtype=dtype, matmul=matmul, configurations=len(t1), median=mid, low=min(t1.values()),
                            high=max(t1.values()), factor=factor, outliers=flagged))
    return out


@dataclass(frozen=True)
class StepTraffic:
    """What one plain step of a model does, from its manifest and T_1: bytes of weights read, multiply-adds."""

    weight_bytes: int  # the safetensors files: every parameter
    embedding_bytes: int  # the input embedding (vocab x width): a step reads one row of it, not all
    read_bytes: float  # weight_bytes - embedding_bytes
    flops: float  # 2 multiply-add flops per parameter a step multiplies by (all but the input embedding)
    T_1: float

    @property
    def gb_per_s(self) -> float:
        return self.read_bytes / self.T_1 / 1e9

    @property
    def gflop_per_s(self) -> float:
        return self.flops / self.T_1 / 1e9


def step_traffic(manifest, T_1: float) -> StepTraffic:
    """StepTraffic of a ModelManifest (its safetensors files, params, header n_vocab and embedding_length) at T_1 s.

    Assumes an untied head (params counts the embedding and the head apart), as the real pair's files hold."""
    T_1 = check_real("T_1", T_1, low=0.0, low_open=True)
    weight_bytes = sum(f.bytes for f in manifest.files if f.path.endswith(".safetensors"))
    if not weight_bytes:
        raise ValueError(f"manifest must list a .safetensors file, got {[f.path for f in manifest.files]}")
    embedding = manifest.header["n_vocab"] * manifest.header["embedding_length"]
    embedding_bytes = round(weight_bytes * embedding / manifest.params)
    return StepTraffic(weight_bytes=weight_bytes, embedding_bytes=embedding_bytes,
                       read_bytes=weight_bytes - embedding_bytes, flops=2.0 * (manifest.params - embedding), T_1=T_1)


@dataclass(frozen=True)
class RoundCounts:
    """The rounds of one recorded run: E[N] = committed / rounds, alpha's counts include the last round in full."""

    rounds: int
    accepted: int  # draft tokens the target accepted, over every round (alpha's numerators, summed)
    committed: int  # tokens the run kept: n_new (the last round cut at n_new)
    untruncated: int  # accepted + rounds: what the rounds would have committed uncut

    @property
    def e_n_untruncated(self) -> float:
        return self.untruncated / self.rounds


def round_counts(run) -> RoundCounts:
    """RoundCounts of a run's n_new, e_n and alpha (conditional rates by position; None: never reached)."""
    rounds = round(run.n_new / run.e_n)
    if rounds < 1 or abs(rounds * run.e_n - run.n_new) > 1e-6 * run.n_new:
        raise ValueError(f"run.e_n must be n_new / rounds for a whole number of rounds; got {run.e_n} "
                         f"with n_new = {run.n_new}")
    reaching, accepted = rounds, 0
    for a in run.alpha:
        if a is None or not reaching:
            break
        reaching = round(reaching * a)  # rounds that accepted this position: the next position's reach
        accepted += reaching
    return RoundCounts(rounds=rounds, accepted=accepted, committed=run.n_new, untruncated=accepted + rounds)


def runs_table(runs) -> str:
    """RealRuns as text, one line each: the setting, c_d, c_v, E[N], predicted, measured, rel. error, exact."""
    lines = [f"{'task':<6}{'draft':<7}{'k':>3}{'temp':>5} {'dtype':<9}{'matmul':<8}{'c_d':>7}{'c_v':>7}"
             f"{'E[N]':>7}{'pred':>7}{'meas':>7}{'rel.err':>8}  exact"]
    for r in runs:
        err = abs(r.predicted - r.measured) / r.measured
        exact = {True: "equal", False: f"left at {r.first_divergence}", None: "-"}[r.equal_to_plain]
        lines.append(f"{r.task:<6}{r.draft:<7}{r.k:>3}{r.temperature:>5.1f} {r.dtype:<9}{r.matmul:<8}"
                     f"{r.c_d:>7.3f}{r.c_v:>7.3f}{r.e_n:>7.3f}{r.predicted:>7.3f}{r.measured:>7.3f}{err:>8.3f}"
                     f"  {exact}")
    return "\n".join(lines)


def hf_table(hf) -> str:
    """HFRuns as text: transformers' generate beside our loop, one line per task and mode."""
    lines = [f"{'task':<6}{'mode':<10}{'k':>3}{'HF spec/plain':>15}{'ours spec/plain':>17}{'ours/HF':>9}  equal"]
    for h in hf:
        lines.append(f"{h.task:<6}{h.mode:<10}{h.k:>3}{h.hf_speedup:>15.3f}{h.ours_speedup:>17.3f}"
                     f"{h.ours_over_hf:>9.3f}  {h.equal_to_plain}")
    return "\n".join(lines)


def numerics_table(numerics) -> str:
    """NumericsRows as text: block against incremental logits, one line per task and dtype."""
    lines = [f"{'task':<6}{'dtype':<10}{'positions':>10}{'max|diff|':>11}{'flips':>6}{'first':>7}{'min gap':>9}"
             f"{'gap at first':>13}"]
    for n in numerics:
        first = "-" if n.first_flip is None else str(n.first_flip)
        gap = "-" if n.gap_at_first_flip is None else f"{n.gap_at_first_flip:.2e}"
        lines.append(f"{n.task:<6}{n.dtype:<10}{n.positions:>10}{n.max_abs_diff:>11.2e}{n.flips:>6}{first:>7}"
                     f"{n.min_gap:>9.2e}{gap:>13}")
    return "\n".join(lines)


def exits_table(exits, lookahead) -> str:
    """ExitRuns and LookaheadRuns as text, one line each: the draft, c_d, c_v, E[N], alpha_1, predicted, measured."""
    lines = [f"{'task':<6}{'draft':<28}{'k':>3}{'c_d':>7}{'c_v':>7}{'E[N]':>7}{'alpha1':>8}{'pred':>7}{'meas':>7}"
             "  greedy = plain"]
    for r in exits:
        a1 = "-" if r.alpha[0] is None else f"{r.alpha[0]:.3f}"
        name = f"exit {r.exit_layer}/{r.layers}, {r.cache} cache"
        lines.append(f"{r.task:<6}{name:<28}{r.k:>3}{r.c_d:>7.3f}{r.c_v:>7.3f}{r.e_n:>7.2f}{a1:>8}"
                     f"{r.predicted:>7.2f}{r.measured:>7.2f}  {r.equal_to_plain}")
    for r in lookahead:
        name = f"lookahead W{r.window} n{r.ngram} G{r.guesses}"
        lines.append(f"{r.task:<6}{name:<28}{'-':>3}{r.c_d:>7.3f}{r.c_v:>7.3f}{r.e_n:>7.2f}{'-':>8}"
                     f"{r.predicted:>7.2f}{r.measured:>7.2f}  {r.equal_to_plain}")
    return "\n".join(lines)
