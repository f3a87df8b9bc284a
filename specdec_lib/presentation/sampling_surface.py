"""Sampling-surface figures (notebook 02d): the per-token state of each feature, a drafted block's rows under the
right and a stale state, the shipped bugs' exact errors, and a law explorer over the field guide's variants.

Everything drawn here is handed in, or read from the library (surface.next_probs, surface.exact, surface.registry,
the kit's battery) for the figures `make figures` writes and for the explorer; the notebook computes every number
it asserts on itself.
"""
from __future__ import annotations

import torch

from .._checks import check_choice
from ..conformance.generation_battery import generation_cases
from ..surface import View, next_probs, plain_law, speculative_law
from ..surface.exact import law_tv
from ..surface.registry import loop_variants, variant, variant_error
from .style import COLORS, new_figure
from .widgets import explorer

__all__ = ["STATE", "state_table", "plot_block_rows", "variant_text", "plot_variant_errors",
           "plot_laws", "variant_explorer", "FIGURES"]

# feature -> (the state it reads, what a multi-token commit must carry to each drafted position)
STATE = {
    "temperature, top_k, top_p, min_p": ("the row's own logits", "nothing: but every row, the judging ones too"),
    "logit_bias": ("nothing (a fixed vector)", "nothing: but every row, the judging ones too"),
    "repetition_penalty": ("the set of tokens in prompt + generated", "the drafts before the position, added"),
    "frequency_penalty": ("the count of each token in generated", "the drafts before the position, counted"),
    "presence_penalty": ("the set of tokens in generated", "the drafts before the position, added"),
    "no_repeat_ngram_size": ("the n-grams of prompt + generated", "the n-grams the drafts before it close"),
    "bad_words": ("the last tokens of the text", "the drafts before the position as the text's end"),
    "grammar": ("the automaton's state after generated", "the state after the drafts before the position"),
    "eos": ("whether the last token was EOS", "stop the block at an accepted EOS: later drafts are not text"),
    "max_new_tokens": ("how many tokens were generated", "no more drafts than tokens left, a cut inside a block"),
    "logprobs": ("the processed target row at the position", "the target's value, not the draft's, not 0"),
}


def state_table() -> str:
    """The features, the state each reads, and what a drafted position needs of it, as aligned text."""
    lines = [f"{'feature':<34}{'reads':<42}a drafted position needs", "-" * 112]
    lines += [f"{name:<34}{reads:<42}{needs}" for name, (reads, needs) in STATE.items()]
    return "\n".join(lines)


def _block_rows(model, prompt, generated, drafted, settings, *, stale: tuple[int, ...] | None = None) -> torch.Tensor:
    """(k+1, V) the processed rows at each drafted position; with `stale`, the penalties count `stale` instead."""
    view = None if stale is None else View(penalty_tokens=tuple(stale))
    return torch.stack([next_probs(model, prompt, tuple(generated) + tuple(drafted[:j]), settings, view=view)
                        for j in range(len(drafted) + 1)])


def plot_block_rows(rows: dict[str, torch.Tensor], drafted: tuple[int, ...], *, title: str = ""):
    """One panel per position of a drafted block: each labelled set of rows (k+1, V) as bars side by side."""
    if not rows or not all(isinstance(r, torch.Tensor) and r.dim() == 2 for r in rows.values()):
        raise TypeError("rows must map labels to (k+1, V) tensors")
    n, V = next(iter(rows.values())).shape
    fig, axes = new_figure(n, width=2.0 * n + 1.0, height=2.8)
    axes = list(axes) if n > 1 else [axes]
    width = 0.8 / len(rows)
    colors = [COLORS["target"], COLORS["wrong"], COLORS["draft"], COLORS["neutral"]]
    for j, ax in enumerate(axes):
        for i, (label, r) in enumerate(rows.items()):
            ax.bar([x + (i - (len(rows) - 1) / 2) * width for x in range(V)], r[j].tolist(), width,
                   color=colors[i % len(colors)], label=label if j == 0 else None)
        judged = f"judges {drafted[j]}" if j < len(drafted) else "the bonus row"
        ax.set_title(f"row {j}: {judged}", fontsize=8)
        ax.set_xticks(range(V))
        ax.set_xlabel("token", fontsize=8)
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("processed probability")
    fig.legend(fontsize=7, loc="outside lower center", ncols=len(rows))
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def variant_text(errors: dict[str, tuple[str, float]]) -> str:
    """Per variant: its largest exact error on the battery ((case, error)) and what it corrupts, then its source."""
    lines = [f"{'variant':<24}{'corrupts':<10}{'worst case':<20}{'exact error':>11}", "-" * 65]
    for name, (case, err) in errors.items():
        v = variant(name)
        shown = "< 1e-12" if err < 1e-12 else f"{err:.3f}"
        lines += [f"{name:<24}{v.what:<10}{case:<20}{shown:>11}", f"    {v.reference}"]
    return "\n".join(lines)


def plot_variant_errors(errors: dict[str, tuple[str, float]]):
    """Each variant's largest exact error on the battery as a bar: TV of the law (red), or P(wrong logprob)."""
    names = list(errors)[::-1]
    fig, ax = new_figure(height=0.32 * len(names) + 1.2)
    ax.barh(range(len(names)), [errors[n][1] for n in names],
            color=[COLORS["wrong"] if variant(n).what == "law" else COLORS["draft"] for n in names])
    ax.set_yticks(range(len(names)), [f"{n} ({errors[n][0]})" for n in names], fontsize=7)
    ax.set_xlabel("exact error on its worst case: TV to plain decoding (red), P(a logprob reported wrong) (orange)",
                  fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_title("The shipped sampling-surface bugs, measured exactly", fontsize=9)
    return fig


def _fmt(t: tuple[int, ...]) -> str:
    return "".join(map(str, t)) or "-"


def plot_laws(laws: dict[str, dict[tuple[int, ...], float]], *, top: int = 16, title: str = ""):
    """The laws (token tuple -> probability) side by side over the outcomes the first law finds likeliest."""
    if not laws:
        raise TypeError("laws must map labels to laws (dicts of token tuples)")
    first = next(iter(laws.values()))
    keys = sorted(set().union(*laws.values()), key=lambda t: (-first.get(t, 0.0), t))[:top]
    fig, ax = new_figure(height=3.2)
    width = 0.8 / len(laws)
    colors = [COLORS["target"], COLORS["wrong"], COLORS["draft"]]
    for i, (label, law) in enumerate(laws.items()):
        ax.bar([x + (i - (len(laws) - 1) / 2) * width for x in range(len(keys))], [law.get(t, 0.0) for t in keys],
               width, color=colors[i % len(colors)], label=label)
    ax.set_xticks(range(len(keys)), [_fmt(t) for t in keys], fontsize=7, rotation=60)
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("probability")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def _variant_view(name: str, case: str):
    """Plain decoding's exact law beside the variant's speculative one, on a battery case, with their TV."""
    c = next(c for c in generation_cases() if c.name == case)
    v = variant(name)
    plain = plain_law(c.target, c.prompt, c.settings)
    law = speculative_law(c.target, c.draft, c.prompt, c.settings, k=c.k, spec=v.spec)
    tv = law_tv(law, plain)
    text = f"{name} on {case} (k = {c.k}): TV {'< 1e-12' if tv < 1e-12 else f'{tv:.3f}'} from plain decoding"
    if v.what == "logprobs":
        text += "; it corrupts the reported logprobs, not the law"
    return plot_laws({"plain decoding": plain, name: law}, title=f"{name}, case {case}"), text


def variant_explorer(name: str | None = None, case: str = "frequency"):
    """Menus over the field guide's loop variants and the kit's battery cases: the two exact laws, drawn."""
    import ipywidgets as widgets

    names = [v.name for v in loop_variants()]
    cases = [c.name for c in generation_cases()]
    check_choice("case", case, cases)
    name = name or (names[1] if len(names) > 1 else names[0])
    controls = {"name": widgets.Dropdown(options=names, value=check_choice("name", name, names), description="variant"),
                "case": widgets.Dropdown(options=cases, value=case, description="case")}
    return explorer(_variant_view, controls)


def _example_rows():
    """The frequency case's first round, drafted (2, 2): its rows at the right state and at the round's start."""
    c = next(c for c in generation_cases() if c.name == "frequency")
    drafted = (2, 2)
    rows = {"the state its prefix produces": _block_rows(c.target, c.prompt, (), drafted, c.settings),
            "the state at the round's start": _block_rows(c.target, c.prompt, (), drafted, c.settings, stale=())}
    return rows, drafted


def _worst_errors() -> dict[str, tuple[str, float]]:
    """Each buggy variant's largest exact error over the battery's cases (for `make figures`)."""
    out = {}
    for v in loop_variants(exact=False):
        scores = [(c.name, variant_error(v, c.target, c.draft, c.prompt, c.settings, k=c.k))
                  for c in generation_cases() if v.matters(c.settings)]
        out[v.name] = max(scores, key=lambda s: s[1]) if scores else ("-", 0.0)
    return out


FIGURES = {
    "surface_block_rows": lambda: plot_block_rows(*_example_rows(), title="frequency penalty 2.0, drafted (2, 2)"),
    "surface_variants": lambda: plot_variant_errors(_worst_errors()),
}
