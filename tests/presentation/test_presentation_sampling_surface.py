"""Sampling-surface figures (02d): the state table, a block's rows, the variants' errors, two laws, the explorer."""
import pytest
import torch
from matplotlib.figure import Figure

from specdec_lib.conformance.generation_battery import generation_cases
from specdec_lib.presentation import sampling_surface as views
from specdec_lib.surface import registry


def test_the_state_table_lists_every_feature_once():
    text = views.state_table()
    for name in ("repetition_penalty", "frequency_penalty", "presence_penalty", "no_repeat_ngram_size", "bad_words",
                 "logit_bias", "grammar", "eos", "max_new_tokens", "logprobs"):
        assert sum(line.startswith(name) for line in text.splitlines()) == 1, name


def test_block_rows_draws_each_row_set_per_position():
    right = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), -1)
    fig = views.plot_block_rows({"right": right, "stale": right.flip(-1)}, (2, 2), title="t")
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    for j, ax in enumerate(fig.axes):
        heights = [p.get_height() for p in ax.patches]
        assert heights[:4] == pytest.approx(right[j].tolist())  # the first set's bars are its row
        assert heights[4:] == pytest.approx(right[j].flip(-1).tolist())
    assert "bonus" in fig.axes[2].get_title() and "judges 2" in fig.axes[0].get_title()
    with pytest.raises(TypeError, match=r"\(k\+1, V\) tensors"):
        views.plot_block_rows({"a": right[0]}, (2,))


def test_variant_errors_are_the_given_numbers():
    names = [v.name for v in registry.loop_variants(exact=False)][:3]
    errors = {n: ("frequency", 0.1 * (i + 1)) for i, n in enumerate(names)}
    ax = views.plot_variant_errors(errors).axes[0]
    assert sorted(p.get_width() for p in ax.patches) == pytest.approx([0.1 * (i + 1) for i in range(len(names))])
    text = views.variant_text({**errors, names[0]: ("plain", 0.0)})
    assert "< 1e-12" in text and all(n in text for n in names)


def test_laws_side_by_side_over_the_first_laws_likeliest_outcomes():
    a, b = {(0,): 0.6, (1,): 0.3, (2,): 0.1}, {(0,): 0.2, (3,): 0.8}
    ax = views.plot_laws({"a": a, "b": b}, top=3).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]  # a's order; b's 3 beyond the top
    assert [p.get_height() for p in ax.patches] == pytest.approx([0.6, 0.3, 0.1, 0.2, 0.0, 0.0])
    with pytest.raises(TypeError):
        views.plot_laws({})


@pytest.mark.heavy
def test_the_explorer_shows_a_variant_beside_plain_decoding():
    case = next(c for c in generation_cases() if c.name == "penalties_rounds")
    tv = registry.variant_error("penalties_last_commit", case.target, case.draft, case.prompt, case.settings, k=case.k)
    box = views.variant_explorer("penalties_last_commit", "penalties_rounds")
    out = box.children[-1]
    assert out.outputs[0]["data"]["image/png"] and f"TV {tv:.3f}" in out.outputs[1]["text"] and tv > 0.1
    box.children[0].children[0].value = "correct"  # the correct loop: exact on the case
    assert "TV < 1e-12" in box.children[-1].outputs[1]["text"]
    with pytest.raises(ValueError, match="case must be one of"):
        views.variant_explorer(case="nope")


@pytest.mark.heavy
def test_the_registered_figures_build():
    assert set(views.FIGURES) == {"surface_block_rows", "surface_variants"}
    for build in views.FIGURES.values():
        assert isinstance(build(), Figure)
