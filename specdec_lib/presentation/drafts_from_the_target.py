"""Notebook 09 figures: drafts from the target itself beside the lab's separate drafts on the (c_d, alpha) plane,
early exit by exit layer, Medusa's heads by how many are used, and lookahead's settings.

Everything is read off a SelfRecording (lab/recordings.py: `make measure-self`'s JSON, the committed one by
default); nothing here times or computes a number the notebook asserts on.
"""
from __future__ import annotations

from .._checks import check_choice, check_int
from ..accounting import alpha_from_tokens
from ..lab.recordings import SelfRecording, recorded
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = ["SELF", "SEPARATE", "LABELS", "SELF_GID", "SEPARATE_GID", "MEASURED_GID", "PREDICTED_GID",
           "plane_points", "plot_self_plane", "plot_exit_layer", "exit_explorer", "plot_heads", "heads_explorer",
           "plot_lookahead", "FIGURES"]

SELF = ("exit1", "exit2", "exit3", "medusa", "eagle")  # chain drafts that come from the target itself
SEPARATE = ("draft", "draft_deep", "lookup")  # the lab's separate drafts (notebook 05), beside them
LABELS = {"exit1": "exit after layer 1", "exit2": "exit after layer 2", "exit3": "exit after layer 3",
          "medusa": "Medusa heads", "eagle": "EAGLE feature draft", "draft": "1-layer draft",
          "draft_deep": "2-layer draft", "lookup": "prompt lookup"}
SHORT = {"exit1": "L1", "exit2": "L2", "exit3": "L3", "medusa": "Medusa", "eagle": "EAGLE", "draft": "1-layer",
         "draft_deep": "2-layer", "lookup": "lookup"}
SELF_GID, SEPARATE_GID = "self_drafts", "separate_drafts"
MEASURED_GID, PREDICTED_GID = "measured", "predicted"
TARGETS = {"target": "the trained target", "target_ee": "its early-exit fine-tune"}


def _rec(recording: SelfRecording | None) -> SelfRecording:
    return recorded("measure-self") if recording is None else recording


def plane_points(recording: SelfRecording | None = None, *, temperature: float = 1.0) -> list[dict]:
    """Each chain run at its best measured k: draft, target, k, c_d, alpha (fitted to E[N]), E[N], measured S and
    its range over the repeats there (smallest, largest)."""
    out = []
    for run in _rec(recording).chains:
        if run.temperature != temperature:
            continue
        t, i = run.table, run.best
        out.append({"draft": t.draft, "target": run.target, "k": t.ks[i], "c_d": t.c_d[i], "e_n": t.e_n[i],
                    "alpha": alpha_from_tokens(t.e_n[i], t.ks[i]), "measured": t.measured[i],
                    "range": tuple(t.measured_range[i]), "predicted": t.predicted[i]})
    return out


def plot_self_plane(recording: SelfRecording | None = None, *, temperature: float = 1.0):
    """c_d against alpha at each draft's best k: the target's own drafts in colour (hollow: on the fine-tune), the
    separate drafts in grey; each labelled with its measured speedup and k."""
    points = plane_points(recording, temperature=temperature)
    fig, ax = new_figure(width=7.2, height=4.4)
    for p in points:
        own = p["draft"] in SELF
        tuned = p["target"] == "target_ee"
        color = COLORS["draft"] if own else COLORS["neutral"]
        ax.plot(p["c_d"], p["alpha"], marker="o" if own else "s", markersize=8, linestyle="none",
                color="white" if tuned else color, markeredgecolor=color if tuned else "black",
                markeredgewidth=1.5, gid=f"{SELF_GID if own else SEPARATE_GID}:{p['draft']}:{p['target']}")
        name = SHORT.get(p["draft"], p["draft"]) + (" ft" if tuned else "")
        ax.annotate(f"{name} {p['measured']:.2f} (k={p['k']})", (p["c_d"], p["alpha"]), xytext=(6, 2),
                    textcoords="offset points", fontsize=7)
    ax.set_xlabel("c_d: one draft step / one target step")
    ax.set_ylabel("α (constant rate fitted to E[N])")
    ax.set_xlim(0, 1.05 * max([1.0] + [p["c_d"] for p in points]))
    ax.set_ylim(0, 1)
    policy = "greedy" if temperature == 0 else f"temperature {temperature:g}"
    ax.set_title(f"measured S at each draft's best k, {policy}; orange: from the target (hollow, ft: fine-tuned)",
                 fontsize=8)
    return fig


def plot_exit_layer(layer: int = 3, *, target: str = "target_ee", temperature: float = 0.0,
                    recording: SelfRecording | None = None):
    """Early exit after `layer` on one target: measured and predicted S against k, and E[N] against k, beside the
    best separate draft (the 1-layer draft); returns (figure, one line of text)."""
    layer = check_int("layer", layer, minimum=1)
    check_choice("target", target, tuple(TARGETS))
    rec = _rec(recording)
    run = rec.chain(f"exit{layer}", target=target, temperature=temperature)
    base = rec.chain("draft", target="target", temperature=temperature)
    t, b = run.table, base.table
    fig, (left, right) = new_figure(2, width=8.8, height=3.6)
    left.plot(t.ks, t.measured, marker="o", color=COLORS["draft"], gid=MEASURED_GID, label="exit: measured S")
    left.plot(t.ks, t.predicted, marker="x", linestyle="--", color=COLORS["draft"], gid=PREDICTED_GID,
              label="exit: E[N] / (k c_d + c_v)")
    left.plot(b.ks, b.measured, marker="s", color=COLORS["neutral"], label="1-layer draft: measured S")
    left.axhline(1.0, color="black", linewidth=0.8)
    left.set_xlabel("k")
    left.set_ylabel("speedup S")
    left.legend(fontsize=7)
    right.plot(t.ks, t.e_n, marker="o", color=COLORS["draft"], label=f"exit after layer {layer}")
    right.plot(b.ks, b.e_n, marker="s", color=COLORS["neutral"], label="1-layer draft")
    right.set_xlabel("k")
    right.set_ylabel("E[N] (tokens per round)")
    right.legend(fontsize=7)
    fig.suptitle(f"exit after layer {layer} of 4, {TARGETS[target]}", fontsize=9)
    i = run.best
    text = (f"exit after layer {layer} on {TARGETS[target]}: c_d {t.c_d[i]:.2f}, E[N] {t.e_n[i]:.2f} at its best "
            f"k = {t.ks[i]}, measured S {t.measured[i]:.2f}; the 1-layer draft's best: "
            f"{b.measured[base.best]:.2f} at k = {b.ks[base.best]}")
    return fig, text


def exit_explorer(recording: SelfRecording | None = None):
    """A slider over the exit layer and toggles for the target and the policy, over plot_exit_layer."""
    import ipywidgets as widgets

    controls = {"layer": widgets.IntSlider(value=3, min=1, max=3, description="exit layer L"),
                "target": widgets.ToggleButtons(options=[("trained", "target"), ("fine-tuned", "target_ee")],
                                                value="target_ee", description="target"),
                "temperature": widgets.ToggleButtons(options=[("greedy", 0.0), ("T = 1", 1.0)], value=0.0,
                                                     description="policy")}
    return explorer(lambda layer, target, temperature: plot_exit_layer(layer, target=target, temperature=temperature,
                                                                       recording=recording),
                    controls, rows=[["layer"], ["target", "temperature"]])


def plot_heads(num_heads: int = 4, *, temperature: float = 1.0, recording: SelfRecording | None = None):
    """Medusa with its first num_heads heads: the chain (k = num_heads) and every recorded tree no deeper, E[N]
    against the nodes a pass scores, labelled with the measured speedup; returns (figure, text)."""
    num_heads = check_int("num_heads", num_heads, minimum=1)
    rec = _rec(recording)
    chain = rec.chain("medusa", temperature=temperature).table
    if num_heads > max(chain.ks):
        raise ValueError(f"num_heads must be at most the {max(chain.ks)} recorded heads, got {num_heads}")
    fig, ax = new_figure(width=7.2, height=4.0)
    ks = [k for k in chain.ks if k <= num_heads]
    ax.plot(ks, [chain.e_n[chain.ks.index(k)] for k in ks], marker="o", color=COLORS["neutral"],
            label="chain: k proposals, one per head")
    lines = []
    for run in rec.trees:
        t = run.table
        if t.draft != "medusa" or run.temperature != temperature:
            continue
        keep = [i for i, w in enumerate(t.trees) if len(w) <= num_heads]
        ax.plot([t.nodes[i] for i in keep], [t.e_n[i] for i in keep], marker="^", linestyle="none",
                label=f"trees, {t.rule}", gid=f"tree:{t.rule}")
        for i in keep:
            ax.annotate(f"{','.join(map(str, t.trees[i]))}: S {t.measured[i]:.2f}", (t.nodes[i], t.e_n[i]),
                        xytext=(4, 2), textcoords="offset points", fontsize=7)
        best = max(keep, key=lambda i: t.measured[i])
        lines.append(f"{t.rule}: best tree {','.join(map(str, t.trees[best]))}, E[N] {t.e_n[best]:.2f}, "
                     f"c_v {t.c_v[best]:.2f}, S {t.measured[best]:.2f}")
    ax.set_xscale("log")
    ax.set_xlabel("nodes a verification pass scores (log)")
    ax.set_ylabel("E[N] (tokens per round)")
    ax.legend(fontsize=7, loc="lower right")
    j = max(range(len(ks)), key=lambda i: chain.measured[i])
    lo, hi = chain.measured_range[j]
    text = (f"{num_heads} head(s): the chain's best k = {ks[j]}, E[N] {chain.e_n[j]:.2f}, c_v {chain.c_v[j]:.2f}, "
            f"S {chain.measured[j]:.2f} [{lo:.2f}, {hi:.2f}]; " + "; ".join(lines))
    return fig, text


def heads_explorer(recording: SelfRecording | None = None):
    """A slider over the number of heads and a toggle for the policy, over plot_heads."""
    import ipywidgets as widgets

    controls = {"num_heads": widgets.IntSlider(value=4, min=1, max=4, description="heads"),
                "temperature": widgets.ToggleButtons(options=[("greedy", 0.0), ("T = 1", 1.0)], value=0.0,
                                                     description="policy")}
    return explorer(lambda num_heads, temperature: plot_heads(num_heads, temperature=temperature,
                                                              recording=recording), controls)


def plot_lookahead(recording: SelfRecording | None = None, *, temperature: float = 0.0):
    """Lookahead's settings beside prompt lookup's best k: E[N] and measured S as bars."""
    rec = _rec(recording)
    runs = [r for r in rec.trees if r.table.draft.startswith("lookahead") and r.temperature == temperature]
    lookup = rec.chain("lookup", temperature=temperature)
    names = [r.table.draft.removeprefix("lookahead ") for r in runs]
    names.append(f"prompt lookup k={lookup.table.ks[lookup.best]}")
    e_n = [r.table.e_n[0] for r in runs] + [lookup.table.e_n[lookup.best]]
    s = [r.table.measured[0] for r in runs] + [lookup.table.measured[lookup.best]]
    fig, (left, right) = new_figure(2, width=8.8, height=3.4)
    colors = [COLORS["draft"]] * len(runs) + [COLORS["neutral"]]
    left.bar(names, e_n, color=colors)
    left.set_ylabel("E[N]")
    right.bar(names, s, color=colors, gid=MEASURED_GID)
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set_ylabel("measured S")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=7, rotation=20)
    return fig


FIGURES = {  # builders read the committed recording when called, never at import
    "self_plane": lambda: plot_self_plane(temperature=0.0),
    "self_exit_layer": lambda: plot_exit_layer(3)[0],
    "self_heads": lambda: plot_heads(4, temperature=0.0)[0],
    "self_lookahead": lambda: plot_lookahead(),
}
