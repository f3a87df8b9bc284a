"""The field guide's engines, run live: the kit's verdicts on llama-cpp-python, llama-server and vLLM's CPU build
(lab.recordings.recorded("audit-engines"), written by `make audit-engines`), a bug's reproduction counts, and one
case's samples against its exact law.

Text tables a notebook prints and one figure; every number is read from the recording, never typed in.
"""
from __future__ import annotations

from ..lab.engines_recording import EnginesRecording
from ..lab.recordings import recorded
from .style import COLORS, new_figure

__all__ = ["MARKS", "engines_table", "verdict_table", "left_out_table", "reproduction_table", "failures",
           "plot_engine_law", "FIGURES"]

MARKS = {"pass": "pass", "FAIL": "FAIL", "left out": "-"}


def engines_table(rec: EnginesRecording | None = None) -> str:
    """Each engine: version, modes, and how long its install took (first, then from the caches)."""
    rec = rec or recorded("audit-engines")

    def secs(x):
        return "-" if x is None else f"{x:.0f} s"

    lines = [f"{'engine':<18}{'version':<10}{'install':>9}{'cached':>8}  modes"]
    lines += [f"{e.engine:<18}{e.version:<10}{secs(e.first_seconds):>9}{secs(e.cached_seconds):>8}  "
              f"{', '.join(e.modes)}" for e in rec.engines]
    return "\n".join(lines)


def verdict_table(engine: str, rec: EnginesRecording | None = None) -> str:
    """One engine: a row per case, a column per mode, each cell the verdict and the TV against its threshold."""
    rec = rec or recorded("audit-engines")
    table = rec.table(engine)
    modes = list(table)
    cases = list(dict.fromkeys(c for m in modes for c in table[m]))
    width = max(19, *(len(m) + 2 for m in modes))  # "FAIL 0.301/0.072" and a gap
    lines = [f"{engine}: TV / threshold per case ('-': left out)", f"{'case':<14}" + "".join(f"{m:>{width}}"
                                                                                               for m in modes)]
    for case in cases:
        cells = []
        for m in modes:
            v = table[m].get(case)
            cells.append("" if v is None else "-" if v.tv is None else
                         f"{MARKS[v.verdict]} {v.tv:.3f}/{v.threshold:.3f}")
        lines.append(f"{case:<14}" + "".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def left_out_table(engine: str, rec: EnginesRecording | None = None) -> str:
    """Why each left-out case was left out, once per reason, with the modes it applies to."""
    rec = rec or recorded("audit-engines")
    why: dict[str, list[str]] = {}
    for v in rec.verdicts:
        if v.engine == engine and v.verdict == "left out":
            why.setdefault(v.note, []).append(f"{v.case} ({v.mode})")
    return "\n".join(f"- {', '.join(dict.fromkeys(where))}: {note}" for note, where in why.items()) or "- none"


def failures(rec: EnginesRecording | None = None) -> list:
    """Every failing verdict, in the recorded order."""
    rec = rec or recorded("audit-engines")
    return [v for v in rec.verdicts if v.verdict == "FAIL"]


def reproduction_table(engine: str, rec: EnginesRecording | None = None) -> str:
    """A bug's reproduction: what was counted, one column per mode, and where the modes differ."""
    rec = rec or recorded("audit-engines")
    r = next((r for r in rec.reproductions if r.engine == engine), None)
    if r is None:
        raise ValueError(f"engine must be one of {[r.engine for r in rec.reproductions]}; got {engine!r}")
    lines = [f"{r.engine}: {r.title} ({r.script})", f"{'':46}" + "".join(f"{m:>15}" for m in r.modes)]
    lines += [f"{what:<46}" + "".join(f"{c:>15}" for c in per_mode) for what, per_mode in r.counts.items()]
    lines.append(f"differs between the modes: {', '.join(r.shows) or 'nothing'}")
    return "\n".join(lines)


def plot_engine_law(engine: str = "vllm-cpu", mode: str = "ngram", case: str = "plain", *,
                    rec: EnginesRecording | None = None, most: int = 12):
    """One case's samples in one mode against the exact law (the engine's own plain rows through the kit's
    processors), over its most likely outcomes, and the engine's plain samples beside them."""
    rec = rec or recorded("audit-engines")
    v, plain = rec.verdict(engine, mode, case), rec.verdict(engine, "plain", case)
    if v.verdict == "left out":
        raise ValueError(f"case {case!r} was left out in {engine} {mode}: {v.note}")
    exact = {tuple(t): m for t, m, _ in v.law}
    seen = {tuple(t): s / v.n for t, _, s in v.law}
    base = {tuple(t): s / plain.n for t, _, s in plain.law}
    outcomes = sorted(set(exact) | set(seen), key=lambda t: -max(exact.get(t, 0), seen.get(t, 0)))[:most]
    fig, ax = new_figure(width=7.2)
    x = range(len(outcomes))
    w = 0.27
    ax.bar([i - w for i in x], [exact.get(t, 0) for t in outcomes], w, color=COLORS["target"], label="exact law")
    ax.bar(list(x), [base.get(t, 0) for t in outcomes], w, color=COLORS["neutral"], label=f"plain (n = {plain.n})")
    ax.bar([i + w for i in x], [seen.get(t, 0) for t in outcomes], w,
           color=COLORS["wrong" if v.verdict == "FAIL" else "overlap"], label=f"{mode} (n = {v.n})")
    ax.set_xticks(list(x), [",".join(map(str, t)) for t in outcomes], rotation=45, fontsize=8)
    ax.set_xlabel("new tokens")
    ax.set_ylabel("probability")
    ax.set_title(f"{engine}, {case}: {mode} {v.verdict} (TV {v.tv:.3f}, threshold {v.threshold:.3f})")
    ax.legend()
    return fig


FIGURES = {"engines_vllm_ngram_law": lambda: plot_engine_law()}
