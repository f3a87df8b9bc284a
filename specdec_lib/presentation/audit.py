"""Audit figures (notebook 02c): a conformance report as bars against thresholds, and the kit's power curve.

The power curve is the kit's own calculation (conformance.battery.power) read as a function of the TV: a verifier
whose completed law is d off on a case of n blocks is caught with probability at least 1 - exp(-2 n (d - m)^2)
once d exceeds m = tau(n) + sqrt(M - 1) / (2 sqrt n), the threshold plus the worst noise of its own estimate.
"""
from __future__ import annotations

import torch

from .._checks import check_choice, check_real
from ..conformance import (
    BETA,
    DELTA,
    EPSILON,
    Promise,
    VerifierReport,
    audit_verifier,
    battery,
    committed_block_law,
    complete,
    known_verifiers,
    power,
    target_law,
)
from ..sampling import total_variation
from ..verification import verify_blocks
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = [
    "CASES", "catch_probability", "bug_tvs", "plot_report", "worst_cases", "plot_power", "power_text",
    "power_explorer", "FIGURES"
]

CASES = tuple(c.name for c in battery())


def _case(name: str):
    check_choice("case", name, CASES)
    return next(c for c in battery() if c.name == name)


def catch_probability(tv: float, *, case: str = "post_pair", epsilon: float = EPSILON, beta: float = BETA,
                      delta: float = DELTA) -> float:
    """The kit's guaranteed chance of failing a verifier whose completed law is `tv` off on `case` (0 below m)."""
    tv = check_real("tv", tv, low=0.0, high=1.0)
    pw = power(_case(case), cases=len(CASES), promise=Promise(epsilon, beta, delta))
    return pw.catch_probability(tv, beta)


def bug_tvs(case: str = "post_pair") -> dict[str, float]:
    """Every known verifier's exact TV from the target on one case (completed laws, no sampling)."""
    c = _case(case)
    want = target_law(c.p_rows)
    return {kv.name: total_variation(complete(committed_block_law(kv.spec, c.p_rows, c.q_rows), c.p_rows), want)
            for kv in known_verifiers()}


def plot_report(*reports: VerifierReport):
    """One panel per report: each case's measured TV as a bar (blue pass, red fail), its threshold as a black tick."""
    if not reports or not all(isinstance(r, VerifierReport) for r in reports):
        raise TypeError("plot_report takes one or more conformance Reports")
    fig, axes = new_figure(len(reports), width=3.4 * len(reports) + 1.0, height=3.4)
    axes = list(axes) if len(reports) > 1 else [axes]
    for ax, report in zip(axes, reports):
        y = list(range(len(report.cases)))[::-1]  # the battery's order, top to bottom
        ax.barh(y, [c.tv for c in report.cases], color=[COLORS["target"] if c.passed else COLORS["wrong"]
                                                           for c in report.cases])
        ax.scatter([c.threshold for c in report.cases], y, marker="|", s=300, color="black", zorder=3,
                   label="threshold")
        ax.set_yticks(y, [c.name for c in report.cases] if ax is axes[0] else [], fontsize=8)
        verdict = "PASSED" if report.passed else f"FAILED {sum(not c.passed for c in report.cases)} of {len(y)}"
        ax.set_title(f"{report.subject}\n{verdict}", fontsize=9)
        ax.set_xlabel("TV of what it commits (completed law)")
        ax.set_xlim(0, max(0.5, max(c.tv for c in report.cases) * 1.1))
    axes[0].legend(fontsize=8, loc="lower right")
    return fig


def worst_cases() -> dict[str, tuple[str, float]]:
    """Each known bug -> (the case where its exact TV is largest, that TV): where the kit catches it most surely."""
    tvs = {c: bug_tvs(c) for c in CASES}
    out = {}
    for kv in known_verifiers():
        if not kv.exact:
            case = max(CASES, key=lambda c: tvs[c][kv.name])
            out[kv.name] = (case, tvs[case][kv.name])
    return out


def plot_power(*, epsilon: float = EPSILON, beta: float = BETA, delta: float = DELTA):
    """The guaranteed catch probability against TV, one curve per case; each bug at its worst case's exact TV."""
    fig, ax = new_figure(height=3.6)
    d = torch.linspace(0, 1, 401).tolist()
    kw = {"epsilon": epsilon, "beta": beta, "delta": delta}
    for i, case in enumerate(battery()):
        pw = power(case, cases=len(CASES), promise=Promise(**kw))
        ax.plot(d, [pw.catch_probability(x, beta) for x in d], color=COLORS["target"], lw=1, alpha=0.6,
                label="one curve per case (the kit's bound)" if i == 0 else None)
    ax.axvline(epsilon, ls=":", color="black", label=f"promise: TV >= {epsilon:g} caught, P >= {1 - beta:g}")
    bugs = sorted(worst_cases().items(), key=lambda item: item[1][1])
    for i, (name, (case, tv)) in enumerate(bugs):  # labels staggered down the plot, each on a thread to its dot
        y = 0.9 - 0.65 * i / max(1, len(bugs) - 1)
        ax.plot([tv], [catch_probability(tv, case=case, **kw)], "o", color=COLORS["wrong"], ms=4)
        ax.plot([tv, tv], [y, 1.0], color=COLORS["wrong"], lw=0.5, alpha=0.5)
        ax.text(tv + 0.005, y, f"{name} ({case})", fontsize=6, va="center")
    ax.set_xlabel("TV of the verifier's completed law from the target, on one case")
    ax.set_ylabel("guaranteed chance of failing it")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.05)
    ax.set_title("The kit's power; red dots: each known bug at its worst case's exact TV", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def power_text(*, epsilon: float = EPSILON, beta: float = BETA) -> str:
    """One line: the blocks per case and in all at this epsilon and beta, and the thresholds' range."""
    pw = [power(c, cases=len(CASES), promise=Promise(epsilon, beta)) for c in battery()]
    sizes = [p.num_blocks for p in pw]
    return (f"epsilon {epsilon:.2f}, beta {beta:g}: {min(sizes)} to {max(sizes)} blocks per case, "
            f"{sum(sizes)} in all; thresholds {min(p.threshold for p in pw):.3f} to "
            f"{max(p.threshold for p in pw):.3f}")


def power_explorer(epsilon: float = EPSILON, beta: float = BETA):
    """An epsilon slider and a beta menu over the power curves: a smaller or surer promise costs more blocks."""
    import ipywidgets as widgets

    controls = {"epsilon": widgets.FloatSlider(value=epsilon, min=0.05, max=0.4, step=0.05, description="epsilon",
                                               readout_format=".2f"),
                "beta": widgets.Dropdown(options=[1e-2, 1e-3, 1e-6], value=beta, description="beta")}
    return explorer(lambda epsilon, beta: (plot_power(epsilon=epsilon, beta=beta),
                                           power_text(epsilon=epsilon, beta=beta)), controls)


def _reports() -> tuple[VerifierReport, VerifierReport]:
    """The library's batched verifier and the softmax-residual bug, through the kit at its defaults."""
    bug = next(kv for kv in known_verifiers() if kv.name == "softmax_residual")
    return (audit_verifier(verify_blocks, convention="batched", subject="sd.verify_blocks"),
            audit_verifier(bug.verify, convention="batched", subject="softmax_residual"))


FIGURES = {
    "audit_report": lambda: plot_report(*_reports()),
    "audit_power": plot_power,
}
