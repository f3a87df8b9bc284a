"""Act III figures: tokens retired per block, and acceptance by position as a survivor statistic.

Pure plotting functions (keyword arguments, defaults = the post's parameters, a fresh Figure each call)
and slider views that redraw the same functions. The math lives in specdec_lib.accounting.
"""
from __future__ import annotations

import torch

from .. import accounting
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = [
    "ALPHA", "K_MARK", "K_MAX", "BETAS", "WEIGHTS", "K_MIX", "N_MIX", "SEED_MIX", "plot_tokens_per_block",
    "plot_survivor_curves", "accounting_explorer", "survivor_explorer", "FIGURES"
]

ALPHA, K_MARK, K_MAX = 0.8, 8, 16  # the post's headline block: alpha = 0.8, k = 8
BETAS, WEIGHTS, K_MIX, N_MIX, SEED_MIX = (0.95, 0.45), (0.5, 0.5), 4, 200_000, 1  # the easy/hard mixture


# ---- tokens per block --------------------------------------------------------------------------------

def plot_tokens_per_block(*, alpha: float = ALPHA, k_max: int = K_MAX, k_mark: int = K_MARK):
    """Left: E[N] against the naive 1 + k*alpha over k = 0..k_max. Right: P(all k accepted) = alpha**k."""
    ks = list(range(k_max + 1))
    e_n = [accounting.expected_tokens(alpha, k) for k in ks]
    naive = [1 + k * alpha for k in ks]
    p_all = [accounting.full_block_probability(alpha, k) for k in ks]
    fig, (ax, ax_p) = new_figure(2, width=9.0)

    ax.plot(ks, naive, "--", color=COLORS["wrong"], label=r"naive $1 + k\alpha$")
    ax.plot(ks, e_n, "o-", color=COLORS["target"], ms=3, label=r"$E[N]$ (prefix-structured)")
    if alpha < 1:  # E[N] -> 1 / (1 - alpha) as k grows: the ceiling no block length can beat
        ax.axhline(1 / (1 - alpha), color=COLORS["neutral"], lw=1, ls=":", label=r"ceiling $1/(1-\alpha)$")
    if 0 <= k_mark <= k_max:
        ax.axvline(k_mark, color=COLORS["neutral"], lw=1)
        ax.annotate(f"k={k_mark}: {e_n[k_mark]:.2f} vs {naive[k_mark]:.2f}", (k_mark, e_n[k_mark]),
                    textcoords="offset points", xytext=(6, -14), fontsize=9)
    ax.set(xlabel="draft length k", ylabel="tokens retired per target call",
           title=rf"Tokens per block, $\alpha$ = {alpha:.2f}")
    ax.legend(loc="upper left", fontsize=8)

    ax_p.plot(ks, p_all, "o-", color=COLORS["overlap"], ms=3)
    if 0 <= k_mark <= k_max:
        ax_p.axvline(k_mark, color=COLORS["neutral"], lw=1)
        ax_p.annotate(f"{p_all[k_mark]:.3f}", (k_mark, p_all[k_mark]), textcoords="offset points",
                      xytext=(6, 4), fontsize=9)
    ax_p.set(xlabel="draft length k", ylabel=r"P(A = k) = $\alpha^k$", ylim=(0, 1.05),
             title="Fully accepted blocks")
    return fig


# ---- survivor curves -----------------------------------------------------------------------------------

def _default_stats(betas, weights, k, n, seed) -> accounting.SurvivorStats:
    """Survivor statistics of a seeded mixture simulation."""
    generator = torch.Generator().manual_seed(seed)
    flags = accounting.simulate_mixture(betas, weights, k, num_samples=n, generator=generator)
    return accounting.survivor_statistics(flags)


def plot_survivor_curves(*, stats: accounting.SurvivorStats | None = None,
                         bayes: accounting.BayesCurve | None = None,
                         betas=BETAS, weights=WEIGHTS, k: int = K_MIX, n: int = N_MIX, seed: int = SEED_MIX):
    """Left: population vs conditional acceptance by position. Right: P(A >= j) from the two products.

    stats defaults to a seeded simulation of the mixture (betas, weights, k, n); bayes, when given, adds the
    exact conditional curve (markers) on the left.
    """
    if stats is None:
        stats = _default_stats(betas, weights, k, n, seed)
    pos = list(range(1, len(stats.reach) + 1))
    fig, (ax, ax_r) = new_figure(2, width=9.0)

    ax.plot(pos, stats.population_rate, "s--", color=COLORS["neutral"], label="population average")
    ax.plot(pos, stats.conditional_rate, "o-", color=COLORS["target"], label="conditional among survivors")
    if bayes is not None:
        ax.plot(pos, bayes.alpha[:len(pos)], "x", color="black", ms=8, label="Bayes prediction")
    ax.set(xlabel="position j", ylabel="acceptance rate", ylim=(0, 1.05), xticks=pos,
           title="Acceptance by position")
    ax.legend(loc="lower right", fontsize=8)

    ax_r.plot(pos, stats.reach, "o", color="black", ms=7, mfc="none", label=r"measured $P(A \geq j)$")
    ax_r.plot(pos, stats.product_of_population, "s--", color=COLORS["wrong"],
              label="product of population averages (wrong)")
    ax_r.plot(pos, stats.product_of_conditional, ".-", color=COLORS["overlap"],
              label="product of conditionals (right)")
    ax_r.set(xlabel="position j", ylabel=r"$P(A \geq j)$", ylim=(0, 1.05), xticks=pos,
             title="Reaching position j")
    ax_r.legend(loc="upper right", fontsize=8)
    return fig


# ---- slider views ------------------------------------------------------------------------------------------

def accounting_explorer(*, alpha: float = ALPHA, k_mark: int = K_MARK, k_max: int = K_MAX):
    """Sliders for alpha and the marked k over plot_tokens_per_block."""
    import ipywidgets as widgets

    sliders = {
        "alpha": widgets.FloatSlider(value=alpha, min=0.05, max=1.0, step=0.05, description="alpha",
                                     readout_format=".2f", continuous_update=False),
        "k_mark": widgets.IntSlider(value=k_mark, min=0, max=32, step=1, description="k",
                                    continuous_update=False),
    }
    return explorer(lambda alpha, k_mark: plot_tokens_per_block(alpha=alpha, k_mark=k_mark,
                                                                 k_max=max(k_max, k_mark)), sliders)


def survivor_explorer(*, beta_easy: float = BETAS[0], beta_hard: float = BETAS[1], w_easy: float = WEIGHTS[0],
                      k: int = 6, n: int = 20_000, seed: int = SEED_MIX):
    """Sliders for the easy/hard mixture; redraws plot_survivor_curves with the exact Bayes curve."""
    import ipywidgets as widgets

    sliders = {
        "beta_easy": widgets.FloatSlider(value=beta_easy, min=0.0, max=1.0, step=0.05, description="beta easy",
                                         readout_format=".2f", continuous_update=False),
        "beta_hard": widgets.FloatSlider(value=beta_hard, min=0.0, max=1.0, step=0.05, description="beta hard",
                                         readout_format=".2f", continuous_update=False),
        "w_easy": widgets.FloatSlider(value=w_easy, min=0.0, max=1.0, step=0.05, description="P(easy)",
                                      readout_format=".2f", continuous_update=False),
    }

    def plot(beta_easy, beta_hard, w_easy):
        betas, weights = (beta_easy, beta_hard), (w_easy, 1.0 - w_easy)
        return plot_survivor_curves(stats=_default_stats(betas, weights, k, n, seed),
                                    bayes=accounting.bayes_conditional_acceptance(betas, weights, k))

    return explorer(plot, sliders)


FIGURES = {
    "act3_tokens_per_block": plot_tokens_per_block,
    "act3_survivor_curves": lambda: plot_survivor_curves(
        bayes=accounting.bayes_conditional_acceptance(BETAS, WEIGHTS, K_MIX)),
}
