"""Act VI, the best exact verifier: the paper's toy, block verification against the token rule and the oracle,
its gain over k and temperature, and every multi-draft rule against the optimum for its draft scheme.

Every number is exact and comes from below: markov.verifier_map (the toy's path masses, the long-run N̄ and S of
each verifier at fixed k, the oracle stopping rule, the gain grid) and multidraft.optimum_table. This module
only draws and formats them; results are cached, because a slider revisits the same settings.
"""
from __future__ import annotations

import functools

import torch

from .._checks import check_choice, check_int
from ..markov.chain import reference_chain
from ..markov.verifier_map import against_k, gain_grid, path_mass, verifier_speedup
from ..multidraft import optimum_table
from ..sampling import post_pair
from .many_drafts_and_trees import EXACT_TV, tv_text
from .many_drafts_and_trees import PAIRS as ACT5_PAIRS
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = ["EXACT_TV", "tv_text", "CH", "C_D", "C_V", "KS", "TEMPERATURES", "TOY", "PAIRS", "MAX_DRAFTS", "STAR_GID",
           "k_rows", "naive_rows", "grid", "optimum_rows", "plot_toy", "plot_against_k", "plot_gain_view",
           "gain_explorer", "plot_optimum_view", "optimum_explorer", "FIGURES"]

CH = reference_chain()
C_D, C_V = 0.15, 1.0  # notebook 07's draft step and flat verification pass
KS = (1, 2, 3, 4, 5, 6)  # block lengths on the figures (V^6 = 15625 drafted paths per start state)
TEMPERATURES = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)  # applied to target and draft alike
TOY = (torch.tensor([[1 / 3, 2 / 3], [1 / 3, 2 / 3]]), torch.tensor([[2 / 3, 1 / 3], [2 / 3, 1 / 3]]))  # the paper's


def _random_pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.softmax(1.4 * torch.randn(5, generator=g), 0) for _ in range(2))


PAIRS = {"the post's pair": post_pair(), "under-confident draft": ACT5_PAIRS["under-confident draft"],
         "random pair (seed 1)": _random_pair(1), "random pair (seed 2)": _random_pair(2)}
MAX_DRAFTS = 4  # drafts per position in the optimum table
STAR_GID = "chosen"


@functools.cache
def k_rows() -> tuple:
    """verifier_map.against_k on the reference chain over KS at C_D, C_V: token, block, oracle per k."""
    return against_k(CH.P, CH.Q, ks=list(KS), c_d=C_D, c_v=C_V)


@functools.cache
def naive_rows() -> tuple:
    """The naive port's long-run PolicyResult at each k of KS (it is not exact: its N̄ is not attainable)."""
    return tuple(verifier_speedup(CH.P, CH.Q, k=k, verifier="block_naive", c_d=C_D, c_v=C_V) for k in KS)


@functools.cache
def grid():
    """verifier_map.gain_grid on the reference chain over TEMPERATURES x KS."""
    return gain_grid(CH.P, CH.Q, ks=list(KS), temperatures=list(TEMPERATURES))


@functools.cache
def optimum_rows(pair: str) -> tuple:
    """multidraft.optimum_table of one pair of PAIRS, up to MAX_DRAFTS drafts."""
    p, q = PAIRS[check_choice("pair", pair, tuple(PAIRS))]
    return tuple(optimum_table(p, q, max_drafts=MAX_DRAFTS))


def plot_toy():
    """The paper's toy at k = 2: each drafted path's draft and target mass, and what each rule keeps of it."""
    m = path_mass(*TOY, k=2)
    names = ["aa", "ab", "ba", "bb"]
    fig, ax = new_figure(height=3.6)
    x = torch.arange(4).double()
    for i, (what, label, color) in enumerate([(m.draft, "draft Q(x1 x2)", COLORS["draft"]),
                                              (m.target, "target P(x1 x2)", COLORS["target"]),
                                              (m.token, "token rule keeps", COLORS["neutral"]),
                                              (m.block, "block verification keeps", COLORS["overlap"])]):
        ax.bar((x + 0.2 * i - 0.3).tolist(), what.tolist(), width=0.2, color=color, label=label, gid=label)
    ax.set_xticks(range(4), names)
    ax.set_xlabel("drafted path x1 x2 (a = token 0, b = token 1)")
    ax.set_ylabel("probability")
    ax.legend(fontsize=8)
    ax.set_title(f"The paper's toy: p = (1/3, 2/3), q = (2/3, 1/3), k = 2\nmass kept through both drafts: "
                 f"{m.token.sum():.4f} (token rule) against {m.block.sum():.4f} (block verification)", fontsize=9)
    return fig


def plot_against_k():
    """N̄ (left) and S (right) against k: the token rule, block verification, the oracle with at most k; the port."""
    rows, naive = k_rows(), naive_rows()
    fig, axes = new_figure(2, width=11.0, height=3.8)
    for ax, what, label in zip(axes, ("tokens_per_round", "speedup"), ("tokens per round N̄ (long run)",
                                                                     f"S = N̄ / C̄ (c_d = {C_D}, c_v = {C_V:g})")):
        for key, name, color, marker in [("token", "token rule, fixed k", COLORS["target"], "o"),
                                         ("block", "block verification, fixed k", COLORS["overlap"], "s"),
                                         ("oracle", "oracle stopping (token rule), at most k", COLORS["draft"], "^")]:
            ax.plot(KS, [getattr(getattr(r, key), what) for r in rows], marker=marker, color=color, label=name,
                    gid=key)
        ax.plot(KS, [getattr(r, what) for r in naive], linestyle="--", marker=".", color=COLORS["wrong"],
                label="the naive port on a sampled draft (not exact)", gid="naive")
        ax.set_xlabel("k (the most proposals a round drafts)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper left")
    best = max(rows, key=lambda r: r.block.speedup)
    fig.suptitle(f"Reference chain, long run: block verification's best S = {best.block.speedup:.3f} at k = {best.k}",
                 fontsize=10)
    return fig


def plot_gain_view(*, k: int = 4, temperature: float = 1.0):
    """Block verification's gain in N̄ over (temperature, k) (left, the setting starred); N̄ against k (right)."""
    g = grid()
    i = TEMPERATURES.index(check_choice("temperature", temperature, TEMPERATURES))
    j = KS.index(check_choice("k", check_int("k", k, minimum=1), KS))
    fig, (left, right) = new_figure(2, width=11.0, height=3.8)
    image = left.imshow((100 * g.gain).tolist(), origin="lower", aspect="auto", cmap="Greens",
                        extent=(0.5, len(KS) + 0.5, -0.5, len(TEMPERATURES) - 0.5))
    fig.colorbar(image, ax=left, label="gain in N̄, %")
    left.plot([KS[j]], [i], marker="*", markersize=16, color="gold", markeredgecolor="black", gid=STAR_GID)
    left.set_yticks(range(len(TEMPERATURES)), [f"{t:g}" for t in TEMPERATURES])
    left.set_xticks(KS)
    left.grid(False)
    left.set_xlabel("k")
    left.set_ylabel("temperature (target and draft)")
    right.plot(KS, g.token[i].tolist(), marker="o", color=COLORS["target"], label="token rule", gid="token")
    right.plot(KS, g.block[i].tolist(), marker="s", color=COLORS["overlap"], label="block verification", gid="block")
    right.plot([KS[j]], [g.block[i, j].item()], marker="*", markersize=16, color="gold", markeredgecolor="black",
               linestyle="none")
    right.set_xlabel("k")
    right.set_ylabel("tokens per round N̄ (long run)")
    right.legend(fontsize=8, loc="upper left")
    text = (f"k = {k}, temperature {temperature:g}: N̄ {g.token[i, j]:.3f} with the token rule, "
            f"{g.block[i, j]:.3f} with block verification ({100 * g.gain[i, j]:+.1f}%)")
    right.set_title(text.split(": ")[1], fontsize=9)
    left.set_title(f"block verification over the token rule, reference chain; star: k = {k}, T = {temperature:g}",
                   fontsize=9)
    return fig, text


def gain_explorer(*, k: int = 4, temperature: float = 1.0):
    """Sliders for k and the temperature over plot_gain_view."""
    import ipywidgets as widgets

    controls = {"k": widgets.IntSlider(value=k, min=KS[0], max=KS[-1], description="k"),
                "temperature": widgets.SelectionSlider(options=list(TEMPERATURES), value=temperature,
                                                       description="T")}
    return explorer(lambda **kw: plot_gain_view(**kw), controls)


def plot_optimum_view(*, pair: str = "the post's pair", num_drafts: int = 3):
    """Each exact multi-draft rule's P(a draft kept) at num_drafts, with the optimum for its draft scheme above it."""
    n = check_int("num_drafts", num_drafts, minimum=1)
    if n > MAX_DRAFTS:
        raise ValueError(f"num_drafts must lie in [1, {MAX_DRAFTS}], got {n}")
    rows = [r for r in optimum_rows(pair) if r.exact and r.num_drafts == n]
    fig, ax = new_figure(width=8.0, height=3.8)
    x = list(range(len(rows)))
    ax.bar(x, [r.accept for r in rows], color=COLORS["target"], label="the rule keeps", gid="accept")
    ax.plot(x, [r.optimum for r in rows], linestyle="none", marker="_", markersize=28, markeredgewidth=2.5,
            color="black", label="optimum for its scheme", gid="optimum")
    for xi, r in zip(x, rows):
        gap = r.optimum - r.accept
        ax.text(xi, r.optimum + 0.01, "optimal" if gap < 1e-12 else f"-{gap:.3f}", ha="center", fontsize=8)
    ax.set_xticks(x, [f"{r.rule}\n({r.draws})" for r in rows], fontsize=7)
    ax.set_ylabel("P(a draft is kept)")
    ax.set_ylim(0, max(r.optimum for r in rows) * 1.12 + 0.03)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax.set_title(f"{pair}, n = {n}: what each exact rule leaves below the optimum (above each bar)", fontsize=10)
    worst = max(rows, key=lambda r: r.optimum - r.accept)
    text = (f"{pair}, n = {n}: " + "; ".join(f"{r.rule} {r.accept:.3f} of {r.optimum:.3f}" for r in rows)
            + f"; the largest gap: {worst.rule}, {worst.optimum - worst.accept:.3f}")
    return fig, text


def optimum_explorer(*, pair: str = "the post's pair", num_drafts: int = 3):
    """A dropdown for the pair and a slider for the drafts per position over plot_optimum_view."""
    import ipywidgets as widgets

    controls = {"pair": widgets.Dropdown(options=list(PAIRS), value=pair, description="pair"),
                "num_drafts": widgets.IntSlider(value=num_drafts, min=1, max=MAX_DRAFTS, description="n")}
    return explorer(lambda **kw: plot_optimum_view(**kw), controls)


FIGURES = {
    "act6_toy": lambda: plot_toy(),
    "act6_against_k": lambda: plot_against_k(),
    "act6_gain": lambda: plot_gain_view()[0],
    "act6_optimum": lambda: plot_optimum_view()[0],
}
