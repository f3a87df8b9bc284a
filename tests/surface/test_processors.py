"""surface.processors, settings, grammar: each processor's rule, the View, and the validation of every knob."""
import math

import pytest
import torch

from specdec_lib.surface import (
    FEATURES,
    PROCESSORS,
    Grammar,
    LoopSpec,
    Settings,
    View,
    alternating,
    logprob,
    next_probs,
    no_immediate_repeat,
)
from specdec_lib.surface.processors import bad_word_bans, ngram_bans

V = 5
LOGITS = torch.tensor([1.0, -0.5, 0.3, 2.0, -1.0], dtype=torch.float64)


def flat(ctx):
    """A history-free model: the same logits after any text (the processors alone make it history-dependent)."""
    return LOGITS.clone()


def logits_after(settings, prompt=(0,), generated=(), view=None):
    """The processed distribution as logits (log p), so each rule can be read off additively."""
    return next_probs(flat, prompt, generated, settings, view=view).log()


def shift(a, b):
    """a - b up to the common normalising constant (both log-probability vectors, finite entries only)."""
    d = a - b
    return d - d[torch.isfinite(d)][0]


def test_default_settings_are_the_models_softmax():
    p = next_probs(flat, (0,), (), Settings())
    assert torch.allclose(p, torch.softmax(LOGITS, -1), atol=1e-15) and p.dtype == torch.float64


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits_of_seen_tokens():
    r = 2.0
    p = next_probs(flat, (3,), (1,), Settings(repetition_penalty=r))  # prompt sees 3 (logit 2 > 0), generated 1 (< 0)
    want = LOGITS.clone()
    want[3], want[1] = 2.0 / r, -0.5 * r
    assert torch.allclose(p, torch.softmax(want, -1), atol=1e-15)


def test_frequency_and_presence_count_the_generated_tokens_only():
    s = Settings(frequency_penalty=0.5, presence_penalty=0.25)
    p = next_probs(flat, (2, 2), (0, 0, 4), s)  # the prompt's 2s are not counted
    want = LOGITS - torch.tensor([2 * 0.5 + 0.25, 0, 0, 0, 0.5 + 0.25], dtype=torch.float64)
    assert torch.allclose(p, torch.softmax(want, -1), atol=1e-15)


def test_no_repeat_ngram_follows_hf():
    assert ngram_bans((1, 2, 3, 1), 2) == {2}  # "1 2" occurred: after a 1, 2 is banned
    assert ngram_bans((1, 2, 1, 3, 1), 2) == {2, 3}
    assert ngram_bans((1, 2), 3) == set() and ngram_bans((4, 0, 4), 1) == {0, 4}  # n = 1 bans every seen token
    p = next_probs(flat, (1, 2), (1,), Settings(no_repeat_ngram_size=2))  # prompt + generated = 1 2 1
    assert p[2] == 0 and (p[[0, 1, 3, 4]] > 0).all()


def test_bad_words_ban_a_single_token_always_and_a_longer_word_after_its_prefix():
    words = ((4,), (1, 3))
    assert bad_word_bans((0, 1), words) == {4, 3} and bad_word_bans((1, 0), words) == {4}
    p = next_probs(flat, (0,), (1,), Settings(bad_words=words))
    assert p[4] == 0 and p[3] == 0 and p[0] > 0


def test_logit_bias_adds_to_the_logit():
    a = logits_after(Settings(logit_bias=((1, 1.5), (3, -0.5))))
    assert torch.allclose(shift(a, logits_after(Settings())), torch.tensor([0, 1.5, 0, -0.5, 0.0],
                                                                          dtype=torch.float64), atol=1e-12)


def test_grammar_masks_and_ties_eos_to_the_accepting_states():
    g = alternating(V)
    s = Settings(grammar=g, eos=4)
    start = next_probs(flat, (0,), (), s)  # state 0: any token but EOS (not accepting)
    assert start[4] == 0 and (start[:4] > 0).all()
    after_even = next_probs(flat, (0,), (2,), s)  # must be odd; EOS allowed (accepting)
    assert after_even[0] == after_even[2] == 0 and (after_even[[1, 3, 4]] > 0).all()
    no_eos = next_probs(flat, (0,), (2,), Settings(grammar=g))  # without an EOS the grammar only masks: 4 is even
    assert no_eos[4] == 0
    assert g.state_after((0, 1, 2)) == 1 and g.step(1, 2) == -1 and g.allowed(-1).all()


def test_no_immediate_repeat_grammar():
    g = no_immediate_repeat(V)
    p = next_probs(flat, (0,), (3,), Settings(grammar=g))
    assert p[3] == 0 and (p[[0, 1, 2, 4]] > 0).all()


def test_policy_comes_last_and_temperature_zero_is_greedy():
    s = Settings(logit_bias=((0, 5.0),), temperature=0.0)
    assert next_probs(flat, (0,), (), s).tolist() == [1.0, 0, 0, 0, 0]  # the bias moved the argmax from 3 to 0
    p = next_probs(flat, (0,), (), Settings(top_k=2))
    assert (p > 0).sum() == 2 and p[3] > 0 and p[0] > 0


def test_the_order_penalty_then_bias_is_the_documented_one():
    # repetition penalty first (2 / 2 = 1), then bias (+1): logit 2.0 for token 3; the other order would give 1.5
    s = Settings(repetition_penalty=2.0, logit_bias=((3, 1.0),))
    got = logits_after(s, prompt=(3,))
    want = LOGITS.clone()
    want[3] = 2.0 / 2.0 + 1.0
    assert torch.allclose(shift(got, want.log_softmax(-1)), torch.zeros(V, dtype=torch.float64), atol=1e-12)


def test_view_feeds_a_stale_history_and_switches_processors_off():
    s = Settings(frequency_penalty=1.0)
    true = next_probs(flat, (0,), (3, 1, 3), s)
    stale = next_probs(flat, (0,), (3, 1, 3), s, view=View(penalty_tokens=()))
    assert not torch.equal(true, stale) and torch.equal(stale, next_probs(flat, (0,), (3, 1, 3), Settings()))
    s = Settings(no_repeat_ngram_size=2)
    assert next_probs(flat, (0,), (3, 1, 3), s)[1] == 0  # "3 1" occurred: 1 is banned after a 3
    assert next_probs(flat, (0,), (3, 1, 3), s, view=View(ban_tokens=(2,)))[1] > 0  # the bans read 0 2: none
    s = Settings(min_p=0.2, top_k=4)
    true = next_probs(flat, (0,), (), s)
    no_min_p = next_probs(flat, (0,), (), s, view=View(processors=set(PROCESSORS) - {"min_p"}))
    assert (no_min_p > 0).sum() == 4 > (true > 0).sum()
    with pytest.raises(ValueError, match="processors must be one of"):
        View(processors={"nope"})


def test_logprob_is_the_log_of_next_probs():
    s = Settings(temperature=0.7, top_k=3)
    p = next_probs(flat, (0,), (2,), s)
    assert logprob(flat, (0,), (2,), 3, s) == math.log(float(p[3]))
    assert logprob(flat, (0,), (2,), 4, s) == float("-inf")  # cut by top_k


def test_every_token_banned_is_a_clear_error():
    with pytest.raises(ValueError, match="every token is banned"):
        next_probs(flat, (0,), (), Settings(bad_words=tuple((t,) for t in range(V))))


def test_model_must_return_float_logits():
    with pytest.raises(TypeError, match="model\\(context\\) must return"):
        next_probs(lambda ctx: [0.0] * V, (0,), (), Settings())
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        next_probs(lambda ctx: torch.tensor([0.0, float("nan")]), (0,), (), Settings())
    with pytest.raises(ValueError, match="logit_bias names token 7"):
        next_probs(flat, (0,), (), Settings(logit_bias=((7, 1.0),)))


@pytest.mark.parametrize("kwargs, error, field", [
    ({"temperature": -1.0}, ValueError, "temperature"),
    ({"temperature": "hot"}, TypeError, "temperature"),
    ({"top_k": 0}, ValueError, "top_k"),
    ({"top_k": 1.5}, TypeError, "top_k"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"min_p": 1.5}, ValueError, "min_p"),
    ({"repetition_penalty": 0.0}, ValueError, "repetition_penalty"),
    ({"frequency_penalty": float("inf")}, ValueError, "frequency_penalty"),
    ({"presence_penalty": float("nan")}, ValueError, "presence_penalty"),
    ({"no_repeat_ngram_size": -1}, ValueError, "no_repeat_ngram_size"),
    ({"bad_words": ((),)}, ValueError, "bad_words"),
    ({"bad_words": (1, 2)}, TypeError, "bad_words"),
    ({"logit_bias": ((1,),)}, TypeError, "logit_bias"),
    ({"logit_bias": ((1, 1.0), (1, 2.0))}, ValueError, "logit_bias"),
    ({"logit_bias": ((1, float("-inf")),)}, ValueError, "logit_bias"),
    ({"grammar": "a|b"}, TypeError, "grammar"),
    ({"eos": -1}, ValueError, "eos"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"grammar": alternating(V), "eos": 5}, ValueError, "eos"),
])
def test_bad_settings_name_the_field(kwargs, error, field):
    with pytest.raises(error, match=field):
        Settings(**kwargs)


def test_grammar_validation():
    with pytest.raises(ValueError, match="state 1 allows no token"):
        Grammar(((1, 1), (-1, -1)))
    with pytest.raises(ValueError, match="start"):
        Grammar(((0, 0),), start=3)
    with pytest.raises(ValueError, match="rectangular"):
        Grammar(((0, 0), (0,)))
    with pytest.raises(ValueError, match="accepting"):
        Grammar(((0, 0),), accepting=frozenset({2}))
    # state 0 allows only token 1; once token 1 is the EOS and state 0 does not accept, nothing is left there
    with pytest.raises(ValueError, match="state 0 allows no token"):
        Settings(grammar=Grammar(((-1, 0),), accepting=frozenset()), eos=1)


def test_settings_normalise_lists_and_are_hashable():
    s = Settings(bad_words=[[1, 2]], logit_bias={3: 1})
    assert s.bad_words == ((1, 2),) and s.logit_bias == ((3, 1.0),) and hash(s) == hash(Settings(**{
        "bad_words": ((1, 2),), "logit_bias": ((3, 1.0),)}))


def test_features_name_what_is_on():
    assert Settings().features == ("max_new_tokens",)
    s = Settings(temperature=0.5, top_k=2, grammar=alternating(V), eos=4, presence_penalty=0.1)
    assert s.features == ("presence_penalty", "grammar", "temperature", "top_k", "eos", "max_new_tokens")
    assert set(FEATURES) >= set(PROCESSORS)


def test_unknown_loop_options_list_the_valid_ones():
    with pytest.raises(ValueError, match="penalties must be one of 'per_position', 'round_start'"):
        LoopSpec(penalties="stale")
    with pytest.raises(ValueError, match="verifier must be one of 'token', 'block'"):
        LoopSpec(verifier="tree")


def test_repetition_counts_a_token_once_however_often_it_was_seen():
    # 3 in the prompt and twice in the generated text: 2 / 2 = 1 (per occurrence would give 0.25)
    got = logits_after(Settings(repetition_penalty=2.0), prompt=(3,), generated=(3, 3))
    want = LOGITS.clone()
    want[3] = 1.0
    assert torch.allclose(shift(got, want.log_softmax(-1)), torch.zeros(V, dtype=torch.float64), atol=1e-12)


def test_repetition_comes_before_frequency():
    # logit 2, r = 2, f = 1 on token 3 generated once: 2 / 2 - 1 = 0 (the other order: (2 - 1) / 2 = 0.5)
    got = logits_after(Settings(repetition_penalty=2.0, frequency_penalty=1.0), prompt=(3,), generated=(3,))
    want = LOGITS.clone()
    want[3] = 0.0
    assert torch.allclose(shift(got, want.log_softmax(-1)), torch.zeros(V, dtype=torch.float64), atol=1e-12)


def test_bad_words_and_ngrams_read_the_prompt_too():
    assert next_probs(flat, (1,), (), Settings(bad_words=((1, 3),)))[3] == 0  # the prefix lies in the prompt
    assert next_probs(flat, (0, 1), (2,), Settings(bad_words=((1, 2, 3),)))[3] == 0  # straddling the boundary
    assert ngram_bans((1, 1), 2) == {1} and ngram_bans((2, 1, 2), 2) == {1}  # the last n-gram counts too
    assert next_probs(flat, (0,), (1, 1), Settings(no_repeat_ngram_size=2))[1] == 0


def test_the_grammar_reads_the_generated_text_only():
    s = Settings(grammar=alternating(V), eos=4)
    assert torch.equal(next_probs(flat, (0, 2), (), s), next_probs(flat, (1,), (), s))


def test_token_ids_outside_the_vocabulary_are_named():
    for kwargs, name in (({"bad_words": ((7,),)}, "bad_words"), ({"eos": 9}, "eos")):
        with pytest.raises(ValueError, match=f"{name} names token"):
            next_probs(flat, (0,), (), Settings(**kwargs))


def test_the_verifier_choices_are_the_cores():
    from specdec_lib.surface.loop import SPEC_CHOICES
    from specdec_lib.verification import METHODS
    assert SPEC_CHOICES["verifier"] == METHODS
