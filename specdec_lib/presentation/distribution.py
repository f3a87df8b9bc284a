"""Act I figures: the shared mass min(p, q), three samplers against p, overlap against temperature and by state.

Every plotting function takes keyword arguments whose defaults are the post's parameters and returns a
fresh matplotlib Figure (no pyplot). `temperature_explorer` wraps the same drawing code in sliders.
"""
from __future__ import annotations

import torch

from .. import sampling
from .._checks import check_int, check_real
from ..markov.chain import check_table, reference_chain
from ..policy import apply_policy, policy_table
from ..sampling import post_pair
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = [
    "POST_DRAWS", "POST_TEMPERATURES", "POST_LOGIT_PAIRS", "PAIR_COLORS", "SAMPLER_COLORS", "T_RANGE", "N_GRID",
    "STATE_TEMPERATURES", "TEMPERATURE_COLORS", "logit_pairs", "overlap_at", "check_view_policy", "truncation_label",
    "beta_by_state", "sampler_frequencies", "overlap_curve", "plot_shared_mass", "plot_sampler_frequencies",
    "plot_overlap_vs_temperature", "plot_pair_at_temperature", "plot_temperature_view", "temperature_explorer",
    "plot_beta_by_state", "FIGURES"
]

# The post's parameters.
POST_DRAWS = 400_000
POST_TEMPERATURES = (0.1, 0.3, 0.7, 1.0, 2.0, 5.0, 20.0)
POST_LOGIT_PAIRS = {  # name -> (target logits, draft logits)
    "same argmax": ((4.0, 2.0, 1.0, 0.5), (4.0, 0.5, 1.0, 2.0)),
    "different argmax": ((4.0, 3.6, 1.0, 0.5), (3.6, 4.0, 1.0, 0.5)),
}
PAIR_COLORS = {"same argmax": "#9467bd", "different argmax": "#8c564b"}
SAMPLER_COLORS = {"direct sampling from p": COLORS["neutral"], "speculative, residual on reject": COLORS["overlap"],
                  "speculative, p on reject": COLORS["wrong"]}
T_RANGE = (0.05, 50.0)  # the temperature axis of the overlap curve (log scale)
N_GRID = 200  # points of each overlap curve over T_RANGE
STATE_TEMPERATURES = (1.0, 0.5)  # beta(h) by state of the reference chain, at these temperatures
TEMPERATURE_COLORS = ("#1f77b4", "#17becf", "#9467bd", "#8c564b")


def logit_pairs() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The post's two logit pairs as tensors: name -> (target logits, draft logits)."""
    return {name: (torch.tensor(lp), torch.tensor(lq)) for name, (lp, lq) in POST_LOGIT_PAIRS.items()}


def overlap_at(logits_p: torch.Tensor, logits_q: torch.Tensor, temperature: float, *, top_k: int | None = None,
               top_p: float | None = None) -> float:
    """Shared mass of the two post-policy distributions (temperature, then top-k, then top-p, on each model)."""
    policy = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    return sampling.overlap(apply_policy(logits_p, **policy), apply_policy(logits_q, **policy))


def check_view_policy(temperature, top_k, top_p) -> tuple[float, int | None, float | None]:
    """Validate a view's policy: temperature > 0 (a log axis), top_k None or >= 1, top_p None or in (0, 1]."""
    temperature = check_real("temperature", temperature, low=0.0, low_open=True)
    top_k = None if top_k is None else check_int("top_k", top_k, minimum=1)
    top_p = None if top_p is None else check_real("top_p", top_p, low=0.0, high=1.0, low_open=True)
    return temperature, top_k, top_p


def truncation_label(top_k: int | None = None, top_p: float | None = None) -> str:
    """', top-k 2, top-p 0.9' as a title shows it; '' without truncation (top-p 1 truncates nothing)."""
    parts = ([f"top-k {top_k}"] if top_k is not None else []) + (
        [f"top-p {top_p:.3g}"] if top_p is not None and top_p < 1.0 else [])
    return "".join(f", {part}" for part in parts)


def beta_by_state(P: torch.Tensor, Q: torch.Tensor, *, temperature: float = 1.0) -> list[float]:
    """beta(h) = sum_x min(P_T[h, x], Q_T[h, x]) for every state h of a chain, both tables under temperature T."""
    P, Q = check_table("P", P), check_table("Q", Q)
    if P.shape != Q.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    temperature = check_real("temperature", temperature, low=0.0)
    P_T = policy_table(P, temperature=temperature)  # (V, V), row h = p(. | h) after the policy
    Q_T = policy_table(Q, temperature=temperature)  # (V, V)
    return [sampling.overlap(P_T[h], Q_T[h]) for h in range(P.shape[0])]


def sampler_frequencies(p: torch.Tensor | None = None, q: torch.Tensor | None = None, *, n: int = POST_DRAWS,
                        seed: int = 1) -> dict[str, torch.Tensor]:
    """Empirical distributions of the post's three samplers (direct from p, correct, p on reject), n draws each."""
    if p is None or q is None:
        p, q = post_pair()
    g = torch.Generator().manual_seed(seed)
    vocab = p.shape[-1]
    return {
        "direct sampling from p": sampling.empirical(sampling.sample_from(p, num_samples=n, generator=g), vocab),
        "speculative, residual on reject": sampling.empirical(
            sampling.speculative_sample(p, q, num_samples=n, generator=g, mode="correct"), vocab),
        "speculative, p on reject": sampling.empirical(
            sampling.speculative_sample(p, q, num_samples=n, generator=g, mode="target_on_reject"), vocab),
    }


# Drawing helpers (one axes each); the public plot functions and the explorer share them.

def _draw_triple_bars(ax, p: torch.Tensor, q: torch.Tensor, *, labels=("p (target)", "q (draft)")) -> float:
    """Bars of p, q and min(p, q) per token; returns the shared mass."""
    shared = torch.minimum(p, q)
    tokens = torch.arange(p.shape[-1]).tolist()
    w = 0.27
    ax.bar([t - w for t in tokens], p.tolist(), w, color=COLORS["target"], label=labels[0])
    ax.bar(tokens, q.tolist(), w, color=COLORS["draft"], label=labels[1])
    ax.bar([t + w for t in tokens], shared.tolist(), w, color=COLORS["overlap"], label="min(p, q)")
    ax.set_xticks(tokens)
    ax.set_xlabel("token")
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="upper right", fontsize=8)
    return float(shared.double().sum())


def overlap_curve(logits_p: torch.Tensor, logits_q: torch.Tensor, temps, *, top_k: int | None = None,
                  top_p: float | None = None) -> list[float]:
    """Overlap at each temperature in `temps` (all > 0), batched: policy(l, T) is policy(l / T, 1)."""
    t = torch.as_tensor(list(temps), dtype=torch.float64)[:, None]  # (n, 1)
    p_t = apply_policy(logits_p.double()[None] / t, temperature=1.0, top_k=top_k, top_p=top_p)  # (n, V)
    q_t = apply_policy(logits_q.double()[None] / t, temperature=1.0, top_k=top_k, top_p=top_p)  # (n, V)
    return torch.minimum(p_t, q_t).sum(-1).tolist()


def _draw_overlap_curves(ax, pairs: dict, temps, *, mark_T: float | None = None, highlight: str | None = None,
                         top_k: int | None = None, top_p: float | None = None) -> None:
    """Overlap against T (log axis, N_GRID points over T_RANGE) per pair under top_k/top_p: curve, dots at `temps`,
    marker at `mark_T`."""
    lo, hi = (float(torch.log10(torch.tensor(t))) for t in T_RANGE)
    grid = torch.logspace(lo, hi, N_GRID, dtype=torch.float64).tolist()
    truncated = truncation_label(top_k, top_p) != ""
    for name, (lp, lq) in pairs.items():
        color = PAIR_COLORS.get(name, COLORS["neutral"])
        if truncated:  # the untruncated curve stays as a faint line
            ax.plot(grid, overlap_curve(lp, lq, grid), color=color, lw=1.0, alpha=0.35)
        ax.plot(grid, overlap_curve(lp, lq, grid, top_k=top_k, top_p=top_p), color=color, label=name,
                lw=3.0 if name == highlight else 1.5)
        ax.plot(list(temps), overlap_curve(lp, lq, temps, top_k=top_k, top_p=top_p), "o", color=color, ms=4)
        if mark_T is not None:
            ax.plot([mark_T], [overlap_at(lp, lq, mark_T, top_k=top_k, top_p=top_p)], "D", color=color, ms=8,
                    mec="black", zorder=5)
    if mark_T is not None:
        ax.axvline(mark_T, color=COLORS["neutral"], ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("temperature T")
    ax.set_ylabel("overlap  sum min(p, q)")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower right", fontsize=8)


# Public plotting functions.

def plot_shared_mass(p: torch.Tensor | None = None, q: torch.Tensor | None = None):
    """Bars of p, q and min(p, q) per token, the shared mass in the title; defaults to the post's pair."""
    if p is None or q is None:
        p, q = post_pair()
    fig, ax = new_figure()
    shared = _draw_triple_bars(ax, p, q)
    ax.set_title(f"what acceptance passes: min(p, q), shared mass {shared:.4f}")
    return fig


def plot_sampler_frequencies(p: torch.Tensor | None = None, freqs: dict | None = None):
    """Empirical frequency of each token under each sampler (bars) against the target p (black ticks).

    `freqs` maps a sampler name to its empirical distribution (V,) or to its raw token samples (1-D integer tensor).
    """
    if p is None:
        p, _ = post_pair()
    if freqs is None:
        freqs = sampler_frequencies(*post_pair())
    vocab = p.shape[-1]
    freqs = {name: (f if f.is_floating_point() else sampling.empirical(f, vocab)) for name, f in freqs.items()}
    fig, ax = new_figure()
    tokens = torch.arange(vocab).tolist()
    w = 0.8 / max(len(freqs), 1)
    for i, (name, f) in enumerate(freqs.items()):
        shift = (i - (len(freqs) - 1) / 2) * w
        tv = sampling.total_variation(f, p)
        ax.bar([t + shift for t in tokens], f.tolist(), w, color=SAMPLER_COLORS.get(name, COLORS["neutral"]),
               label=f"{name} (TV {tv:.4f})")
    ax.hlines(p.tolist(), [t - 0.45 for t in tokens], [t + 0.45 for t in tokens], colors="black", lw=1.5,
              label="target p")
    ax.set_xticks(tokens)
    ax.set_xlabel("token")
    ax.set_ylabel("frequency")
    ax.set_ylim(0, 1.05)
    ax.set_title("which sampler reproduces p?")
    ax.legend(loc="upper right", fontsize=8)
    return fig


def plot_overlap_vs_temperature(pairs: dict | None = None, temps=POST_TEMPERATURES, *, mark_T: float | None = None):
    """Overlap sum min(p_T, q_T) against temperature for each logit pair; optional marker at mark_T."""
    pairs = logit_pairs() if pairs is None else pairs
    fig, ax = new_figure()
    _draw_overlap_curves(ax, pairs, temps, mark_T=mark_T)
    ax.set_title("temperature moves overlap either way")
    return fig


def plot_pair_at_temperature(pair: str = "same argmax", temperature: float = 1.0, *, pairs: dict | None = None):
    """Bars of p_T, q_T and min(p_T, q_T) for one logit pair at one temperature; the overlap in the title."""
    pairs = logit_pairs() if pairs is None else pairs
    lp, lq = pairs[pair]
    fig, ax = new_figure()
    shared = _draw_triple_bars(ax, apply_policy(lp, temperature=temperature), apply_policy(lq, temperature=temperature))
    ax.set_title(f"{pair}, T = {temperature:.3g}: overlap {shared:.3f}")
    return fig


def plot_temperature_view(pair: str = "same argmax", temperature: float = 1.0, *, top_k: int | None = None,
                          top_p: float | None = None, pairs: dict | None = None, temps=POST_TEMPERATURES):
    """Left: the pair's post-policy p, q, min(p, q). Right: overlap against T under the same top_k/top_p, at T."""
    pairs = logit_pairs() if pairs is None else pairs
    if pair not in pairs:
        raise ValueError(f"pair must be one of {sorted(pairs)}, got {pair!r}")
    temperature, top_k, top_p = check_view_policy(temperature, top_k, top_p)
    lp, lq = pairs[pair]
    policy = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    fig, (left, right) = new_figure(2, width=10.0, height=3.6)
    shared = _draw_triple_bars(left, apply_policy(lp, **policy), apply_policy(lq, **policy))
    label = truncation_label(top_k, top_p)
    left.set_title(f"{pair}, T = {temperature:.3g}{label}: overlap {shared:.3f}")
    _draw_overlap_curves(right, pairs, temps, mark_T=temperature, highlight=pair, top_k=top_k, top_p=top_p)
    right.set_title(f"overlap against temperature{label}")
    return fig


def temperature_explorer(pair: str = "same argmax", temperature: float = 1.0, *, top_k: int = 0,
                         top_p: float = 1.0):
    """Pair, log-scale T, top-k (0 = off) and top-p (1 = off) controls over `plot_temperature_view`."""
    import ipywidgets as widgets

    vocab = len(next(iter(POST_LOGIT_PAIRS.values()))[0])
    controls = {
        "pair": widgets.Dropdown(options=list(POST_LOGIT_PAIRS), value=pair, description="pair"),
        "temperature": widgets.FloatLogSlider(value=temperature, base=10, min=-1.3, max=1.7, step=0.02,
                                              description="T", readout_format=".3g", continuous_update=False),
        "top_k": widgets.IntSlider(value=top_k, min=0, max=vocab, description="top-k (0 off)",
                                   continuous_update=False),
        "top_p": widgets.FloatSlider(value=top_p, min=0.05, max=1.0, step=0.05, description="top-p (1 off)",
                                     readout_format=".2f", continuous_update=False),
    }

    def render(pair, temperature, top_k, top_p):
        return plot_temperature_view(pair, temperature, top_k=top_k or None, top_p=top_p)

    return explorer(render, controls, rows=[["pair", "temperature"], ["top_k", "top_p"]])


def plot_beta_by_state(*, P: torch.Tensor | None = None, Q: torch.Tensor | None = None,
                       temperatures=STATE_TEMPERATURES):
    """Bars of beta(h) per state h of a chain (default: the reference chain), one bar per temperature."""
    if (P is None) != (Q is None):
        raise ValueError("pass both P and Q, or neither (the reference chain)")
    if P is None:
        chain = reference_chain()
        P, Q = chain.P, chain.Q
    temperatures = list(temperatures)
    if not temperatures or len(temperatures) > len(TEMPERATURE_COLORS):
        raise ValueError(f"temperatures must hold 1 to {len(TEMPERATURE_COLORS)} values, got {len(temperatures)}")
    fig, ax = new_figure()
    states = list(range(check_table("P", P).shape[0]))
    w = 0.8 / len(temperatures)
    for i, (t, color) in enumerate(zip(temperatures, TEMPERATURE_COLORS)):
        betas = beta_by_state(P, Q, temperature=t)
        shift = (i - (len(temperatures) - 1) / 2) * w
        ax.bar([h + shift for h in states], betas, w, color=color,
               label=f"T = {t:.3g} (min {min(betas):.3f}, max {max(betas):.3f})")
    ax.set_xticks(states)
    ax.set_xlabel("state h (the last token)")
    ax.set_ylabel("beta(h) = sum min(p, q)")
    ax.set_ylim(0, 1.2)  # headroom for the legend above the bars
    ax.set_yticks([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_title("acceptance depends on the context: beta(h) by state")
    ax.legend(loc="upper center", ncols=len(temperatures), fontsize=8)
    return fig


FIGURES = {
    "act1_shared_mass": plot_shared_mass,
    "act1_sampler_frequencies": plot_sampler_frequencies,
    "act1_overlap_vs_temperature": plot_overlap_vs_temperature,
    "act1_temperature_view": plot_temperature_view,
    "act1_beta_by_state": plot_beta_by_state,
}
