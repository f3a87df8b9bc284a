"""Act V, bending the rules: typical acceptance's TV against its tokens, adaptive draft lengths, n-gram lookup.

Every number is exact (no sampling): decoder_stats and typical_sweep walk the exact engine (tokens per target call
over a horizon, H / E[R]); the policies come from markov/long_run.py and markov/adaptive.py in the long run (tokens
per round N̄, cost per round C̄, S = N̄ / C̄); lookup_vs_model compares prompt lookup with the model draft, and the
lab's recorded lookup and table drafts come from measure_it's recording. Results are cached, because a slider
revisits the same settings.
"""
from __future__ import annotations

import functools

from .._checks import check_choice, check_int, check_real
from ..lab.recordings import recorded
from ..markov.adaptive import optimal_stopping, policy_speedup
from ..markov.chain import reference_chain
from ..markov.draft_rules import typical_threshold
from ..markov.lookup import lookup_vs_model
from ..markov.lossy import typical_sweep
from ..markov.measures import decoder_stats
from ..markov.registry import failure_modes
from .many_drafts_and_trees import EXACT_TV, tv_text
from .style import COLORS, new_figure
from .widgets import explorer

CH = reference_chain()
K, HORIZON = 4, 3  # the lossy section's block and horizon (the registry's entries are compared at k = 4)
EPSILONS = tuple(round(0.01 * i, 2) for i in range(31))  # 0, 0.01, ..., 0.30: Medusa's default 0.09 inside
DELTAS = (0.1, 0.3, 1.0)  # 0.3 is Medusa's posterior_alpha
C_D, C_V, K_MAX = 0.15, 1.0, 8  # Act IV's draft step, a flat verification pass, the longest draft a policy may use
LOOKUP_HORIZON = 5  # lookup needs some committed text to find a match in
POLICIES = ("fixed k", "transformers' schedule", "confidence stop", "oracle stopping")
STAR_GID, EXACT_GID = "chosen", "exact_decoder"


@functools.cache
def bending_stats(k: int = K, horizon: int = HORIZON) -> dict:
    """{mode: DecoderStats} for the correct decoder and every decoder of the chapter, on the reference chain."""
    modes = ["correct"] + [m.name for m in failure_modes(chapter="bending the rules")]
    return {m: decoder_stats(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=m) for m in modes}


def exact_tokens() -> float:
    """H / E[R] (tokens per target call over the horizon) of the exact decoder at K, HORIZON: every gain's zero."""
    return bending_stats()["correct"].tokens_per_call


@functools.cache
def sweep(delta: float, epsilons: tuple = EPSILONS) -> tuple:
    """typical_sweep on the reference chain at K, HORIZON, one delta: (TypicalPoint, ...) in epsilon order."""
    return tuple(typical_sweep(CH.P, CH.Q, start=CH.start, horizon=HORIZON, k=K, epsilons=list(epsilons),
                               delta=delta))


def _draw_front(ax, delta: float, what: str, color: str, *, width: float = 1.2, marker: str = "o") -> None:
    """One delta's sweep: `what` ('tv' or 'kl') against the gain in H/E[R] over the exact decoder."""
    points = sweep(delta)
    gain = [p.tokens_per_call - exact_tokens() for p in points]
    ax.plot(gain, [getattr(p, what) for p in points], marker=marker, markersize=3 + width, color=color,
            linewidth=width, label=f"δ = {delta:g}", gid=f"delta_{delta:g}")


def _draw_exact(ax) -> None:
    ax.plot([0.0], [0.0], marker="*", markersize=13, color="black", linestyle="none", label="exact decoder",
            gid=EXACT_GID)
    ax.axvline(0.0, color=COLORS["neutral"], linewidth=0.8, linestyle=":")


def plot_pareto(deltas=DELTAS):
    """TV (left) and KL (right) to the target chain against the gain in H/E[R] over the exact decoder, over epsilon."""
    palette = [COLORS["draft"], COLORS["wrong"], "#9467bd", COLORS["overlap"]]
    if not 1 <= len(deltas) <= len(palette):
        raise ValueError(f"deltas must hold 1 to {len(palette)} values, got {len(deltas)}")
    fig, axes = new_figure(2, width=11.0, height=3.8)
    for ax, what, label in zip(axes, ("tv", "kl"), ("exact TV to the target", "exact KL(decoder || target), nats")):
        for i, (color, delta) in enumerate(zip(palette, deltas)):  # wider lines first: equal fronts stay visible
            _draw_front(ax, check_real("delta", delta, low=0.0, high=1.0), what, color, width=3.0 - 0.9 * i,
                        marker="os^v"[i % 4])
        medusa = sweep(0.3)[EPSILONS.index(0.09)]
        ax.plot([medusa.tokens_per_call - exact_tokens()], [getattr(medusa, what)], marker="o", markersize=11,
                markerfacecolor="none", color="black", linestyle="none", label="Medusa's defaults", gid="medusa")
        _draw_exact(ax)
        ax.set_xlabel("gain in tokens per target call H/E[R] over the exact decoder")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"Typical acceptance over ε = 0 .. {EPSILONS[-1]:g}, k = {K}, horizon {HORIZON}, reference chain "
                 f"(exact decoder: H/E[R] = {exact_tokens():.3f}, TV 0)", fontsize=10)
    return fig


@functools.cache
def typical_point(epsilon: float, delta: float):
    """The TypicalPoint of one (epsilon, delta) on the reference chain at K, HORIZON."""
    return typical_sweep(CH.P, CH.Q, start=CH.start, horizon=HORIZON, k=K, epsilons=[epsilon], delta=delta)[0]


def plot_typical_view(*, epsilon: float = 0.09, delta: float = 0.3):
    """TV against the H/E[R] gain for delta's sweep, (epsilon, delta) starred (left); each state's threshold (right)."""
    epsilon = check_real("epsilon", epsilon, low=0.0, high=1.0)
    delta = check_real("delta", delta, low=0.0, high=1.0)
    point, base = typical_point(epsilon, delta), exact_tokens()
    fig, (left, right) = new_figure(2, width=11.0, height=3.8)
    _draw_front(left, delta, "tv", COLORS["draft"])
    _draw_exact(left)
    left.plot([point.tokens_per_call - base], [point.tv], marker="*", markersize=15, color=COLORS["wrong"],
              linestyle="none", gid=STAR_GID, label=f"ε = {epsilon:.2f}")
    left.set_xlabel("gain in H/E[R] over the exact decoder")
    left.set_ylabel("exact TV to the target")
    left.legend(fontsize=8, loc="center right")
    left.set_title(f"ε = {epsilon:.2f}, δ = {delta:.2f}: TV {tv_text(point.tv)}, H/E[R] {point.tokens_per_call:.3f}",
                   fontsize=10)
    t = typical_threshold(CH.P, epsilon=epsilon, delta=delta)  # (V,) each state's threshold
    cap = typical_threshold(CH.P, epsilon=1.0, delta=delta)  # (V,) delta exp(-H)
    V = CH.P.shape[0]
    for s in range(V):
        p = CH.P[s].double()
        kept, cut = p[p > t[s]].tolist(), p[p <= t[s]].tolist()
        right.plot([s] * len(kept), kept, marker="o", linestyle="none", color=COLORS["target"], gid=f"kept_{s}")
        right.plot([s] * len(cut), cut, marker="x", linestyle="none", color=COLORS["wrong"], gid=f"cut_{s}")
        right.plot([s - 0.35, s + 0.35], [t[s].item()] * 2, color="black", linewidth=1.6, gid=f"threshold_{s}")
        right.plot([s - 0.35, s + 0.35], [cap[s].item()] * 2, color=COLORS["neutral"], linestyle=":", linewidth=1.0)
    right.set_yscale("log")
    right.set_xticks(range(V))
    right.set_xlabel("state s (the last committed token)")
    right.set_ylabel("p(y | s), log scale")
    capped = int((cap < epsilon).sum())
    right.set_title(f"kept (o) above the threshold min(ε, δ exp(-H)) (black), cut (x);\n"
                    f"δ exp(-H) dotted: it sets the threshold in {capped} of {V} states", fontsize=9)
    text = (f"epsilon = {epsilon:.2f}, delta = {delta:.2f}: TV {tv_text(point.tv)}, KL {point.kl:.4f}, "
            f"H/E[R] {point.tokens_per_call:.3f} against the exact decoder's {base:.3f} "
            f"({point.tokens_per_call - base:+.3f}); delta exp(-H) sets the threshold in {capped} of {V} states")
    return fig, text


def typical_explorer(*, epsilon: float = 0.09, delta: float = 0.3):
    """Sliders for epsilon and delta over plot_typical_view."""
    import ipywidgets as widgets

    controls = {"epsilon": widgets.FloatSlider(value=epsilon, min=0.0, max=0.3, step=0.01, description="ε"),
                "delta": widgets.FloatSlider(value=delta, min=0.05, max=1.0, step=0.05, description="δ")}
    return explorer(lambda **kw: plot_typical_view(**kw), controls)


@functools.cache
def _fixed(c_d: float, c_v: float, k_max: int) -> tuple:
    return tuple(policy_speedup(CH.P, CH.Q, c_d=c_d, c_v=c_v, policy="fixed", k=k) for k in range(k_max + 1))


@functools.cache
def _optimal(c_d: float, c_v: float, k_max: int):
    return optimal_stopping(CH.P, CH.Q, c_d=c_d, c_v=c_v, k_max=k_max).result


def policy_results(*, k: int = 4, c_d: float = C_D, confidence: float = 0.4, c_v: float = C_V,
                   k_max: int = K_MAX) -> dict:
    """{policy: PolicyResult} for POLICIES (fixed k, the schedule in [1, k_max], confidence stop at most k, oracle)
    and "best fixed k", in the long run on the reference chain."""
    k_max = check_int("k_max", k_max, minimum=1)
    if not 0 <= check_int("k", k, minimum=0) <= k_max:
        raise ValueError(f"k must lie in [0, k_max = {k_max}], got {k}")
    c_d, c_v = round(float(c_d), 6), round(float(c_v), 6)  # slider floats: one cache entry per setting
    fixed = _fixed(c_d, c_v, k_max)
    return {"fixed k": fixed[k],
            "transformers' schedule": policy_speedup(CH.P, CH.Q, c_d=c_d, c_v=c_v, policy="hf_schedule", k_max=k_max),
            "confidence stop": policy_speedup(CH.P, CH.Q, c_d=c_d, c_v=c_v, policy="confidence", confidence=confidence,
                                              k=k, k_max=k_max),
            "oracle stopping": _optimal(c_d, c_v, k_max),
            "best fixed k": max(fixed, key=lambda r: r.speedup)}


def plot_policy_view(*, policy: str = "oracle stopping", k: int = 4, c_d: float = C_D, confidence: float = 0.4,
                     c_v: float = C_V, k_max: int = K_MAX):
    """S (left) and N̄ (right) against proposals drafted per round m̄: the fixed-k curve and each adaptive policy."""
    check_choice("policy", policy, POLICIES)
    res = policy_results(k=k, c_d=c_d, confidence=confidence, c_v=c_v, k_max=k_max)
    fixed = _fixed(round(float(c_d), 6), round(float(c_v), 6), k_max)
    fig, axes = new_figure(2, width=11.0, height=3.8)
    marks = {"fixed k": "D", "transformers' schedule": "s", "confidence stop": "^", "oracle stopping": "P"}
    colors = dict(zip(POLICIES, (COLORS["target"], COLORS["draft"], COLORS["overlap"], COLORS["wrong"])))
    for ax, what, label in zip(axes, ("speedup", "tokens_per_round"), ("S = N̄ / C̄ (long run)",
                                                                       "tokens per round N̄ (long run)")):
        ax.plot(range(k_max + 1), [getattr(r, what) for r in fixed], color=COLORS["neutral"], marker=".",
                linewidth=1.0, label="fixed k = 0 .. k_max", gid="fixed_curve")
        for name in POLICIES:
            r = res[name]
            ax.plot([r.drafted_per_round], [getattr(r, what)], marker=marks[name], markersize=8, color=colors[name],
                    linestyle="none", label=name if name != "fixed k" else f"fixed k = {k}", gid=name)
        chosen = res[policy]
        ax.plot([chosen.drafted_per_round], [getattr(chosen, what)], marker="*", markersize=18, color="gold",
                markeredgecolor="black", linestyle="none", gid=STAR_GID, zorder=0)
        ax.set_xlabel("proposals drafted per round, m̄")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="lower right")
    best = res["best fixed k"]
    axes[0].axhline(best.speedup, color=COLORS["neutral"], linestyle=":", linewidth=1.0)
    fig.suptitle(f"{policy}: S = {res[policy].speedup:.3f}, N̄ = {res[policy].tokens_per_round:.3f} "
                 f"(best {best.name}: S = {best.speedup:.3f}); c_d = {c_d:.2f}, c_v = {c_v:g}, k_max = {k_max}",
                 fontsize=10)
    r = res[policy]
    text = (f"{policy} ({r.name}): N̄ = {r.tokens_per_round:.3f} tokens per round, m̄ = {r.drafted_per_round:.3f} "
            f"drafted, C̄ = {r.cost_per_round:.3f}, S = {r.speedup:.3f}; best {best.name}: S = {best.speedup:.3f}")
    return fig, text


def policy_explorer(*, policy: str = "oracle stopping", k: int = 4, c_d: float = C_D, confidence: float = 0.4,
                    k_max: int = K_MAX):
    """A policy dropdown and sliders for k (fixed k, and the cap of the confidence stop), c_d and the confidence."""
    import ipywidgets as widgets

    controls = {"policy": widgets.Dropdown(options=list(POLICIES), value=policy, description="policy"),
                "k": widgets.IntSlider(value=k, min=0, max=k_max, description="k"),
                "c_d": widgets.FloatSlider(value=c_d, min=0.0, max=0.5, step=0.01, description="c_d"),
                "confidence": widgets.FloatSlider(value=confidence, min=0.0, max=0.9, step=0.05,
                                                  description="confidence")}
    return explorer(lambda **kw: plot_policy_view(k_max=k_max, **kw), controls,
                    rows=[["policy", "k"], ["c_d", "confidence"]])


@functools.cache
def lookup_rows(k: int = K, horizon: int = LOOKUP_HORIZON, c_d_model: float = C_D, c_v: float = C_V) -> tuple:
    """(n-gram lookup at c_d = 0, the model draft at c_d_model): lookup_vs_model on the reference chain."""
    return tuple(lookup_vs_model(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, c_d_model=c_d_model, c_v=c_v))


def speedup_at(stats, *, c_d: float, c_v: float = C_V) -> float:
    """A DecoderStats' speedup at another draft cost: horizon / (plain rounds + verified rounds c_v + drafted c_d)."""
    return stats.speedup(c_d=c_d, c_v=c_v)


def break_even_c_d(rows=None, *, c_v: float = C_V) -> float:
    """The model draft's c_d at which its S equals lookup's (the cost is linear in c_d, so solve it)."""
    lookup, model = lookup_rows() if rows is None else rows
    s = model.stats
    return (s.horizon / lookup.speedup - s.plain_rounds - (s.rounds - s.plain_rounds) * c_v) / s.drafted


def plot_lookup(rows=None):
    """S against the model draft's c_d, against n-gram lookup's flat S at c_d = 0, break-even marked."""
    lookup, model = lookup_rows() if rows is None else rows
    c_ds = [0.01 * i for i in range(81)]
    fig, ax = new_figure(height=3.6)
    ax.plot(c_ds, [speedup_at(model.stats, c_d=c) for c in c_ds], color=COLORS["draft"], linewidth=1.8,
            label=f"model draft (H/E[R] {model.stats.tokens_per_call:.2f})", gid="model")
    ax.plot(c_ds, [lookup.speedup] * len(c_ds), color=COLORS["target"], linewidth=1.8,
            label=f"n-gram lookup, c_d = 0 (H/E[R] {lookup.stats.tokens_per_call:.2f})", gid="lookup")
    even = break_even_c_d((lookup, model))
    ax.axvline(even, color=COLORS["neutral"], linestyle=":", linewidth=1.0)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.text(even + 0.01, lookup.speedup + 0.05, f"break-even c_d = {even:.2f}", fontsize=8)
    ax.set_xlabel("the model draft's cost per step, c_d")
    ax.set_ylabel("S")
    ax.legend(fontsize=8)
    ax.set_title(f"Lookup against a model draft on the reference chain, k = {lookup.stats.k}, "
                 f"{lookup.stats.horizon} tokens, c_v = {C_V:g}", fontsize=10)
    return fig


def lab_drafts(names=("table", "lookup")) -> dict:
    """{draft: SpeedupTable} of the lab's recorded `make measure` run (notebook 05) for the named drafts."""
    recording = recorded("measure")
    return {name: recording.table(name) for name in names}


FIGURES = {
    "act5b_pareto": lambda: plot_pareto(),
    "act5b_typical_view": lambda: plot_typical_view()[0],
    "act5b_policies": lambda: plot_policy_view()[0],
    "act5b_lookup": lambda: plot_lookup(),
}

__all__ = ["EXACT_TV", "plot_pareto", "plot_typical_view", "typical_explorer", "plot_policy_view", "policy_explorer",
           "plot_lookup", "policy_results", "bending_stats", "sweep", "lookup_rows", "break_even_c_d", "lab_drafts"]
