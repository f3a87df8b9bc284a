"""Field-guide figures: every registered decoder's exact distance from the target, and one bug up close.

Everything here is exact (no sampling): `sd.decoder_law` gives each decoder's output law on the
reference chain. Defaults use k = 2 and horizon 3, so that a full block's bonus token lands inside the horizon.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..markov import chain as chain_mod
from ..markov import exact
from ..markov.registry import MODES, failure_modes
from ..sampling import total_variation
from ..variant import Variant
from .block_decoder import plot_sequence_distributions
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = [
    "K", "HORIZON", "GuideRow", "law_and_target", "guide_rows", "guide_table", "plot_guide_tv", "plot_bug", "bug_card",
    "field_guide_explorer", "FIGURES"
]

K, HORIZON = 2, 3


@dataclass(frozen=True)
class GuideRow(Variant):
    """One registered decoder (a `Variant`): its exact TV from the target it should sample; `exact`: it is meant to
    be exact."""

    exact_tv: float


def law_and_target(mode: str, *, k: int = K, horizon: int = HORIZON) -> tuple[torch.Tensor, torch.Tensor]:
    """(decoder's exact output law, the target it should match), both (V,) * horizon, on the reference chain."""
    ch = chain_mod.reference_chain()
    law = exact.decoder_law(ch.P, ch.Q, start=ch.start, horizon=horizon, k=k, mode=mode, Q_bad=ch.Q_bad)
    return law, chain_mod.sequence_law(MODES[mode].target(ch.P), start=ch.start, horizon=horizon)


def guide_rows(*, k: int = K, horizon: int = HORIZON) -> list[GuideRow]:
    """One GuideRow per registered decoder, in registry order."""
    rows = []
    for m in failure_modes(chapter="field guide"):
        law, want = law_and_target(m.name, k=k, horizon=horizon)
        rows.append(GuideRow(m.name, m.description, m.reference, total_variation(law, want), exact=m.exact,
                             chapter=m.chapter))
    return rows


def guide_table(rows: list[GuideRow]) -> str:
    """The summary table as fixed-width text: name, exact TV, what the bug costs, reference."""
    lines = [f"{'decoder':<24}{'exact TV':>9}  {'costs':<12}reference"]
    for r in rows:
        cost = "nothing" if r.name == "correct" else "speed only" if r.exact else "correctness"
        lines.append(f"{r.name:<24}{r.exact_tv:>9.4f}  {cost:<12}{r.reference}")
    return "\n".join(lines)


def plot_guide_tv(rows: list[GuideRow] | None = None, *, threshold: float | None = None):
    """Horizontal bars of every decoder's exact TV; correctness bugs red, speed-only ones at zero in blue."""
    rows = guide_rows() if rows is None else rows
    fig, ax = new_figure(height=5.2)
    y = list(range(len(rows)))[::-1]  # the registry's order, top to bottom
    colors = [COLORS["target"] if r.exact else COLORS["wrong"] for r in rows]
    ax.barh(y, [r.exact_tv for r in rows], color=colors)
    ax.set_yticks(y, [r.name for r in rows], fontsize=8)
    for yi, r in zip(y, rows):
        ax.text(r.exact_tv + 0.01, yi, "exact" if r.exact_tv < 1e-9 else f"{r.exact_tv:.3f}", va="center", fontsize=7)
    if threshold is not None:
        ax.axvline(threshold, ls="--", color=COLORS["neutral"], label=f"noise bound {threshold:.4f}")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel("exact TV from the target, no sampling")
    ax.set_title("Every registered decoder on the reference chain (k = 2, horizon 3)", fontsize=10)
    return fig


def plot_bug(mode: str = "greedy_draft_softmax_q", *, k: int = K, horizon: int = HORIZON):
    """The decoder's exact probability of every sequence against the target's, sorted by the target."""
    law, want = law_and_target(mode, k=k, horizon=horizon)
    fig = plot_sequence_distributions(exact=want, empirical_by_label={mode: law})
    fig.axes[0].set_title(f"{mode}: exact output law against the target", fontsize=10)
    return fig


def bug_card(mode: str) -> str:
    """A few lines on one registered decoder: what it does wrong, where it was reported, and its exact TV."""
    m = MODES[mode]
    law, want = law_and_target(mode)
    tv = total_variation(law, want)
    verdict = "exact: costs only speed" if m.exact else f"wrong: exact TV {tv:.4f} from the target"
    return f"{mode}: {m.description}\nreference: {m.reference}\n{verdict}"


def field_guide_explorer(mode: str = "greedy_draft_softmax_q"):
    """A dropdown over every registered decoder: its card and its exact law against the target."""
    import ipywidgets as widgets

    names = [m.name for m in failure_modes(chapter="field guide")]
    dropdown = widgets.Dropdown(options=names, value=mode, description="bug", layout=widgets.Layout(width="60%"))
    return explorer(lambda mode: (plot_bug(mode), bug_card(mode)), {"mode": dropdown})


FIGURES = {
    "act2b_field_guide_tv": plot_guide_tv,
    "act2b_greedy_draft_softmax_q": plot_bug,
}
