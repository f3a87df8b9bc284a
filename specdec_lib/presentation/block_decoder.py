"""Act II figures: the five block decoders against the exact target distribution over every sequence.

Pure plotting functions (keyword arguments, defaults = the post's reference chain: V = 5, horizon 3,
start 0, k = 4), a dropdown view that redraws the same functions, and a detectability view: how many
sequences the end-to-end test needs to catch a registered bug, and where it never can. The math lives in
specdec_lib.markov (chain, batched, exact, registry).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from .._checks import check_choice, check_int
from ..markov import batched
from ..markov import chain as chain_mod
from ..markov.exact import decoder_law
from ..markov.registry import MODES, failure_modes
from ..noise import tv_noise_bound, tv_noise_mean
from ..sampling import total_variation
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = ["N", "SEED", "BROKEN", "SHORT", "sample_sequences", "plot_decoder_tv", "plot_sequence_distributions",
           "tv_by_sample_size", "plot_tv_convergence", "decoder_explorer", "SIZES", "HORIZON", "Detectability",
           "detectability", "detectability_text", "plot_detectability", "detectability_explorer", "FIGURES"]

N, SEED = 200_000, 2024  # sequences per decoder, one generator seed per run
BROKEN = ("mismatched_q", "phantom_history", "off_by_one")  # the decoders that are wrong end to end
SHORT = {"direct": "direct p", "correct": "correct", "bad_draft": "bad draft", "mismatched_q": "mismatched q",
         "phantom_history": "phantom history", "off_by_one": "off by one"}


# ---- the experiment behind the defaults ----------------------------------------------------------------

def sample_sequences(mode: str, *, n: int = N, seed: int = SEED) -> torch.Tensor:
    """n sequences (n, horizon) from the reference chain: mode "direct" samples p, else decode_markov(mode)."""
    ch = chain_mod.reference_chain()
    g = torch.Generator().manual_seed(seed)
    if mode == "direct":
        return chain_mod.direct_sample(ch.P, start=ch.start, horizon=ch.horizon, num_samples=n, generator=g)
    return batched.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=ch.k, num_samples=n, mode=mode,
                                 generator=g, Q_bad=ch.Q_bad)


def _exact() -> torch.Tensor:
    ch = chain_mod.reference_chain()
    return chain_mod.sequence_law(ch.P, start=ch.start, horizon=ch.horizon)  # (V, V, V)


# ---- TV by decoder --------------------------------------------------------------------------------------

def plot_decoder_tv(*, labels: Sequence[str] | None = None, tvs: Sequence[float] | None = None,
                    threshold: float | None = None, broken: Sequence[bool] | None = None, n: int = N,
                    seed: int = SEED):
    """Bars of TV from the exact target per decoder (log scale), the noise threshold as a line, broken ones red.

    With labels/tvs omitted, runs direct sampling and the five decoders at n sequences each (broken ones:
    BROKEN); with them given, `broken` defaults to "TV above the threshold".
    """
    if labels is None or tvs is None:
        modes = ["direct", *batched.DECODER_MODES]
        exact = _exact()
        labels = [SHORT[m] for m in modes]
        tvs = [chain_mod.sequence_tv(sample_sequences(m, n=n, seed=seed), exact) for m in modes]
        threshold = tv_noise_bound(exact, n) if threshold is None else threshold
        broken = [m in BROKEN for m in modes] if broken is None else broken
    if len(labels) != len(tvs):
        raise ValueError(f"labels and tvs must have the same length, got {len(labels)} and {len(tvs)}")
    if broken is None:
        broken = [threshold is not None and tv > threshold for tv in tvs]
    fig, ax = new_figure()
    colors = [COLORS["wrong"] if b else COLORS["target"] for b in broken]
    bars = ax.bar(range(len(tvs)), tvs, color=colors)
    for bar, tv in zip(bars, tvs):
        ax.annotate(f"{tv:.4f}", (bar.get_x() + bar.get_width() / 2, tv), textcoords="offset points",
                    xytext=(0, 2), ha="center", fontsize=8)
    if threshold is not None:
        ax.axhline(threshold, color=COLORS["neutral"], ls="--", lw=1.2, label=f"noise threshold {threshold:.4f}")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xticks(range(len(tvs)), labels, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylim(min(min(tvs), threshold or 1.0) / 2, 2.0)
    ax.set(ylabel="TV from the exact target", title="Sequence-level TV by decoder")
    return fig


# ---- exact against empirical over all sequences -----------------------------------------------------------

def plot_sequence_distributions(*, exact: torch.Tensor | None = None,
                                empirical_by_label: Mapping[str, torch.Tensor] | None = None,
                                n: int = N, seed: int = SEED):
    """Exact target probability of every sequence (grey bars, sorted) with one marker line per empirical one.

    Defaults: the reference chain's 125 sequences, and the correct and off-by-one decoders at n each.
    """
    if exact is None:
        exact = _exact()
    if empirical_by_label is None:
        vocab = exact.shape[0]
        empirical_by_label = {SHORT[m]: chain_mod.empirical_sequences(sample_sequences(m, n=n, seed=seed), vocab)
                              for m in ("correct", "off_by_one")}
    flat = exact.double().reshape(-1)
    order = torch.argsort(flat, descending=True)  # most likely sequence first
    fig, ax = new_figure(width=8.0)
    x = list(range(flat.numel()))
    ax.bar(x, flat[order].tolist(), width=1.0, color=COLORS["neutral"], alpha=0.45, label="exact target")
    palette = [COLORS["target"], COLORS["wrong"], COLORS["draft"], COLORS["overlap"]]
    for i, (label, emp) in enumerate(empirical_by_label.items()):
        if emp.shape != exact.shape:
            raise ValueError(f"empirical {label!r} has shape {tuple(emp.shape)}, exact has {tuple(exact.shape)}")
        e = emp.double().reshape(-1)
        tv = total_variation(e, flat)
        ax.plot(x, e[order].tolist(), ".", ms=4, color=palette[i % len(palette)], label=f"{label} (TV {tv:.4f})")
    ax.set(xlabel=f"the {flat.numel()} sequences, most likely first", ylabel="probability",
           title="Exact target vs decoder output, sequence by sequence")
    ax.legend(fontsize=8)
    return fig


# ---- measured TV = exact TV + noise -----------------------------------------------------------------------

def tv_by_sample_size(samples: torch.Tensor, exact: torch.Tensor, sizes: Sequence[int]) -> list[float]:
    """TV of the first m samples for each m in sizes: one run, read at growing sample sizes."""
    return [chain_mod.sequence_tv(samples[:m], exact) for m in sizes]


def plot_tv_convergence(*, runs: Mapping[str, torch.Tensor] | None = None,
                        exact_tv: Mapping[str, float] | None = None, sizes: Sequence[int] | None = None,
                        n: int = N, seed: int = SEED):
    """Measured TV against M (log-log) per decoder, its exact TV as a dashed line, and the noise floor ~ 1/sqrt(M).

    runs maps decoder modes to samples (M, horizon); exact_tv maps them to the exact TV of the decoder's output
    (from decoder_law). Defaults: every mode of the reference chain at n sequences.
    """
    ch = chain_mod.reference_chain()
    target = _exact()
    if runs is None:
        runs = {m: sample_sequences(m, n=n, seed=seed) for m in batched.DECODER_MODES}
    if exact_tv is None:
        exact_tv = {m: total_variation(decoder_law(ch.P, ch.Q, start=ch.start, horizon=ch.horizon,
                                                                  k=ch.k, mode=m, Q_bad=ch.Q_bad), target)
                    for m in runs}
    m_max = min(r.shape[0] for r in runs.values())
    sizes = sizes or [s for s in (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000,
                                  1_000_000) if s <= m_max]
    fig, ax = new_figure()
    palette = [COLORS["target"], COLORS["overlap"], COLORS["wrong"], COLORS["draft"], "#9467bd"]
    for color, (mode, samples) in zip(palette, runs.items()):
        ax.plot(sizes, tv_by_sample_size(samples, target, sizes), "o-", ms=3, color=color, label=SHORT[mode])
        if exact_tv[mode] > 1e-9:  # an exact decoder's line would sit at zero, off a log axis
            ax.axhline(exact_tv[mode], ls="--", lw=1, color=color)
    ax.plot(sizes, [tv_noise_mean(target, m) for m in sizes], color=COLORS["neutral"], lw=2, alpha=0.6,
            label="noise floor (bound on E[TV])")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sequences M")
    ax.set_ylabel("TV from the exact target")
    ax.set_title("measured TV = exact TV (dashed) + noise that falls like 1/sqrt(M)")
    ax.legend(fontsize=8, ncols=2)
    return fig


# ---- dropdown view ----------------------------------------------------------------------------------------

def decoder_explorer(*, mode: str = "off_by_one", n: int = 60_000, seed: int = SEED):
    """A dropdown over DECODER_MODES; shows plot_sequence_distributions for the chosen decoder (n: the post's M)."""
    import ipywidgets as widgets

    exact = _exact()
    cache: dict[str, torch.Tensor] = {}
    options = [(f"{m}: {d}", m) for m, d in batched.DECODER_MODES.items()]
    dropdown = widgets.Dropdown(options=options, value=mode, description="decoder", layout=widgets.Layout(width="95%"))

    def render(mode: str):
        if mode not in cache:
            cache[mode] = chain_mod.empirical_sequences(sample_sequences(mode, n=n, seed=seed), exact.shape[0])
        return plot_sequence_distributions(exact=exact, empirical_by_label={SHORT[mode]: cache[mode]})

    return explorer(render, {"mode": dropdown})

# ---- detectability: exact TV, measured TV and the noise bound, at one k and M ------------------------------

SIZES = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000)  # the M choices, log-spaced
HORIZON = 3  # the detectability view's horizon: a bonus token lands inside it only when k + 1 <= 3


@dataclass(frozen=True)
class Detectability:
    """One bug at one k and M: its exact TV from the target it should sample, a run's measured TV, the bound."""

    mode: str
    k: int
    M: int
    exact_tv: float
    measured_tv: float
    bound: float  # tv_noise_bound(target, M)
    caught: bool  # the end-to-end test flags the decoder: measured TV above the bound
    blind: bool  # a registered bug whose law over the horizon is the target's: no M can catch it


@lru_cache(maxsize=8)
def _laws(mode: str, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(decoder's exact law, the target it should sample: bug.target(P)), both (V,) * HORIZON."""
    ch = chain_mod.reference_chain()
    law = decoder_law(ch.P, ch.Q, start=ch.start, horizon=HORIZON, k=k, mode=mode, Q_bad=ch.Q_bad)
    return law, chain_mod.sequence_law(MODES[mode].target(ch.P), start=ch.start, horizon=HORIZON)


@lru_cache(maxsize=8)
def _run(mode: str, k: int, n: int, seed: int) -> torch.Tensor:
    """n sequences (n, HORIZON) of decode_markov(mode) on the reference chain: one run, read at every M."""
    ch = chain_mod.reference_chain()
    return batched.decode_markov(ch.P, ch.Q, start=ch.start, horizon=HORIZON, k=k, num_samples=n, mode=mode,
                                 generator=torch.Generator().manual_seed(seed), Q_bad=ch.Q_bad)


def detectability(*, mode: str = "bonus_from_draft", k: int = 2, M: int = N, seed: int = SEED) -> Detectability:
    """Exact TV, the measured TV of the first M sequences of one seeded run, and tv_noise_bound(target, M)."""
    mode, k = check_choice("mode", mode, tuple(MODES)), check_int("k", k, minimum=0)
    M, seed = check_int("M", M, minimum=1), check_int("seed", seed, minimum=0)
    law, target = _laws(mode, k)
    samples = _run(mode, k, max(M, SIZES[-1]), seed)[:M]  # (M, HORIZON)
    exact_tv, measured = total_variation(law, target), chain_mod.sequence_tv(samples, target)
    bound = tv_noise_bound(target, M)
    return Detectability(mode, k, M, exact_tv, measured, bound, caught=measured > bound,
                         blind=not MODES[mode].exact and exact_tv < 1e-12)


def detectability_text(d: Detectability) -> str:
    """The verdict in words: does the end-to-end test catch this bug at this M and k, and why not when it cannot."""
    exact = "0 (< 1e-12)" if d.exact_tv < 1e-12 else f"{d.exact_tv:.4f}"
    head = (f"{d.mode}, k = {d.k}, horizon {HORIZON}, M = {d.M:,}: exact TV {exact}, measured TV {d.measured_tv:.4f},"
            f" noise bound {d.bound:.4f}")
    if d.blind:
        why = (f"blind spot: a full block's bonus is token k + 1 = {d.k + 1} or later, past the horizon {HORIZON}, so "
               f"it never lands inside it;\nthe exact TV is 0 and no M catches the bug (test with k + 1 <= {HORIZON})"
               if d.mode == "bonus_from_draft" and d.k + 1 > HORIZON else
               f"blind spot: at k = {d.k} the bug leaves the first {HORIZON} tokens' law unchanged; no M catches it")
    elif MODES[d.mode].exact:
        why = "exact decoder: nothing to catch" + (" (a false alarm)" if d.caught else ", and the test passes it")
    elif d.caught:
        why = "caught: the measured TV is above the noise bound"
    else:
        why = "missed: the measured TV is under the noise bound, so the test passes this broken decoder"
    return f"{head}\n{why}"


def plot_detectability(*, mode: str = "bonus_from_draft", k: int = 2, M: int = N, seed: int = SEED):
    """Measured TV against M (one run), the noise bound, the exact TV (dashed), and the verdict at the chosen M."""
    d = detectability(mode=mode, k=k, M=M, seed=seed)
    target = _laws(d.mode, d.k)[1]
    samples = _run(d.mode, d.k, max(d.M, SIZES[-1]), seed)
    sizes = sorted({*SIZES, d.M})
    fig, ax = new_figure()
    ax.plot(sizes, tv_by_sample_size(samples, target, sizes), "o-", ms=3, color=COLORS["target"],
            label="measured TV, one run")
    ax.plot(sizes, [tv_noise_bound(target, m) for m in sizes], color=COLORS["neutral"], lw=2, alpha=0.6,
            label="noise bound (the test flags above it)")
    if d.exact_tv > 1e-9:
        ax.axhline(d.exact_tv, ls="--", lw=1, color=COLORS["wrong"], label=f"exact TV {d.exact_tv:.4f}")
    else:  # zero sits off a log axis: say it instead
        ax.text(0.02, 0.04, "exact TV 0: nothing to find at any M", transform=ax.transAxes, fontsize=9,
                color=COLORS["wrong"])
    verdict = "blind spot" if d.blind else "caught" if d.caught else "not flagged"
    ax.plot([d.M], [d.measured_tv], "o", ms=9, mfc="none", color="black", label=f"M = {d.M:,}: {verdict}")
    ax.axvline(d.M, color=COLORS["neutral"], lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="sequences M", ylabel="TV from the target it should sample")
    ax.set_title(f"{d.mode}, k = {d.k}, horizon {HORIZON}: {verdict} at M = {d.M:,}", fontsize=10)
    ax.legend(fontsize=8, loc="lower left" if d.exact_tv > 1e-9 else "upper right")  # where the curves leave room
    return fig


def detectability_explorer(*, mode: str = "phantom_history", k: int = 2, M: int = 10_000, seed: int = SEED):
    """A dropdown of registered modes, sliders for k (1..6) and M (SIZES): plot_detectability and its verdict."""
    import ipywidgets as widgets

    M = check_choice("M", M, SIZES)
    controls = {
        "mode": widgets.Dropdown(options=[m.name for m in failure_modes()], value=mode, description="decoder"),
        "k": widgets.IntSlider(value=k, min=1, max=6, step=1, description="k"),
        "M": widgets.SelectionSlider(options=[(f"{m:,}", m) for m in SIZES], value=M, description="M"),
    }

    def render(mode: str, k: int, M: int):
        return plot_detectability(mode=mode, k=k, M=M, seed=seed), detectability_text(
            detectability(mode=mode, k=k, M=M, seed=seed))

    return explorer(render, controls, rows=[["mode"], ["k", "M"]])


FIGURES = {
    "act2_decoder_tv": lambda: plot_decoder_tv(n=N),  # N read at call time
    "act2_sequence_distributions": lambda: plot_sequence_distributions(n=N),
    "act2_tv_convergence": lambda: plot_tv_convergence(n=N),
    "act2_detectability": lambda: plot_detectability(mode="bonus_from_draft", k=2, M=N),
}
