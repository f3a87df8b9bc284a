"""Act II figures: the five block decoders against the exact target distribution over every sequence.

Pure plotting functions (keyword arguments, defaults = the post's reference chain: V = 5, horizon 3,
start 0, k = 4) and a dropdown view that redraws the same functions. The math lives in
specdec_lib.markov (chain, batched, exact).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..markov import batched
from ..markov import chain as chain_mod
from ..markov.exact import exact_decoder_distribution
from ..noise import tv_noise_bound, tv_noise_mean
from ..sampling import total_variation
from .style import COLORS, new_figure
from .widgets import explorer

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
        return chain_mod.direct_sample(ch.P, ch.start, ch.horizon, n, generator=g)
    return batched.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=ch.k, n=n, mode=mode, generator=g,
                                 Q_bad=ch.Q_bad)


def _exact() -> torch.Tensor:
    ch = chain_mod.reference_chain()
    return chain_mod.exact_sequence_distribution(ch.P, ch.start, ch.horizon)  # (V, V, V)


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
    (from exact_decoder_distribution). Defaults: every mode of the reference chain at n sequences.
    """
    ch = chain_mod.reference_chain()
    target = _exact()
    if runs is None:
        runs = {m: sample_sequences(m, n=n, seed=seed) for m in batched.DECODER_MODES}
    if exact_tv is None:
        exact_tv = {m: total_variation(exact_decoder_distribution(ch.P, ch.Q, start=ch.start, horizon=ch.horizon,
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


FIGURES = {
    "act2_decoder_tv": lambda: plot_decoder_tv(n=N),  # N read at call time
    "act2_sequence_distributions": lambda: plot_sequence_distributions(n=N),
    "act2_tv_convergence": lambda: plot_tv_convergence(n=N),
}
