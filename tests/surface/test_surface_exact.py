"""surface.exact: speculative decoding's exact law is plain decoding's under every feature of the sampling surface,
and every other LoopSpec value changes the law (or the reported logprobs) where its feature is on, and only there.

The target is an order-2 chain over V = 5 tokens with EOS = 4 (its logits depend on the last two tokens); the draft
an order-1 chain. Penalties, bans and the grammar make the processed process depend on the whole history, which
is what a multi-token commit must carry. Exact means floating-point equal: 1e-12 in total variation (the laws
have <= 341 outcomes, each a product of <= 4 factors; rounding leaves ~1e-16).
"""
import functools
import time

import pytest
import torch
from surface_support import DRAFT, EOS, PROMPT, TARGET, V, single_thread

from specdec_lib.surface import (
    Grammar,
    LoopSpec,
    Settings,
    alternating,
    law_tv,
    logprob_error,
    no_immediate_repeat,
    plain_law,
    speculate,
    speculative_law,
)
from specdec_lib.surface.exact import plain_logprob, verify_law
from specdec_lib.surface.loop import SPEC_CHOICES

EXACT = 1e-12
one_thread = pytest.fixture(autouse=True, scope="module")(single_thread)

FEATURES = {  # each feature alone, then combinations
    "temperature": Settings(temperature=0.6, eos=EOS, max_new_tokens=3),
    "greedy": Settings(temperature=0.0, eos=EOS, max_new_tokens=4),
    "top_k": Settings(top_k=2, eos=EOS, max_new_tokens=4),
    "top_p": Settings(top_p=0.8, eos=EOS, max_new_tokens=4),
    "min_p": Settings(min_p=0.15, eos=EOS, max_new_tokens=4),
    "repetition": Settings(repetition_penalty=1.8, eos=EOS, max_new_tokens=3),
    "frequency": Settings(frequency_penalty=0.9, eos=EOS, max_new_tokens=3),
    "presence": Settings(presence_penalty=0.9, eos=EOS, max_new_tokens=3),
    "no_repeat_ngram": Settings(no_repeat_ngram_size=2, eos=EOS, max_new_tokens=3),
    "bad_words": Settings(bad_words=((1,), (2, 3), (3, 0, 2)), eos=EOS, max_new_tokens=3),
    "logit_bias": Settings(logit_bias=((1, 1.2), (3, -0.7)), eos=EOS, max_new_tokens=3),
    "grammar": Settings(grammar=alternating(V), eos=EOS, max_new_tokens=4),
    "grammar_no_eos": Settings(grammar=no_immediate_repeat(V), max_new_tokens=3),
    "no_eos": Settings(max_new_tokens=3),
    "one_token": Settings(repetition_penalty=1.8, eos=EOS, max_new_tokens=1),
    "greedy+penalties": Settings(temperature=0.0, repetition_penalty=2.0, presence_penalty=1.0, eos=EOS,
                                 max_new_tokens=4),
    "penalties+top_k": Settings(repetition_penalty=1.5, frequency_penalty=0.5, presence_penalty=0.3, top_k=3,
                                eos=EOS, max_new_tokens=3),
    "grammar+penalties+bias": Settings(grammar=no_immediate_repeat(V), frequency_penalty=0.7,
                                       logit_bias=((2, 0.8),), eos=EOS, max_new_tokens=3),
    "everything": Settings(temperature=0.8, top_p=0.95, min_p=0.05, repetition_penalty=1.3, presence_penalty=0.4,
                           no_repeat_ngram_size=2, bad_words=((3, 1),), logit_bias=((0, 0.5),),
                           grammar=alternating(V), eos=EOS, max_new_tokens=3),
}
PLAIN = {name: plain_law(TARGET, PROMPT, s) for name, s in FEATURES.items()}


def test_plain_law_is_a_distribution_over_finished_texts():
    for name, law in PLAIN.items():
        s = FEATURES[name]
        assert abs(sum(law.values()) - 1) < 1e-12 and min(law.values()) > 0, name
        for text in law:
            ends = text[-1] == s.eos or len(text) == s.max_new_tokens
            assert ends and s.eos not in text[:-1] and len(text) <= s.max_new_tokens, (name, text)
    assert len(PLAIN["no_eos"]) == V ** 3 and list(PLAIN["greedy"].values()) == [1.0]


@pytest.mark.heavy
@pytest.mark.parametrize("verifier", ["token", "block"])
@pytest.mark.parametrize("name", list(FEATURES))
def test_the_correct_loop_is_exactly_plain_decoding(name, verifier):
    spec = LoopSpec(verifier=verifier)
    for k in (1, 2, 3):
        law = speculative_law(TARGET, DRAFT, PROMPT, FEATURES[name], k=k, spec=spec)
        assert law_tv(law, PLAIN[name]) < EXACT, (name, verifier, k)
    assert logprob_error(TARGET, DRAFT, PROMPT, FEATURES[name], k=2, spec=spec) == 0.0


def test_a_draft_equal_to_the_target_and_a_first_plain_token_change_nothing():
    s = FEATURES["penalties+top_k"]
    assert law_tv(speculative_law(TARGET, TARGET, PROMPT, s, k=2), PLAIN["penalties+top_k"]) < EXACT
    law = speculative_law(TARGET, DRAFT, PROMPT, s, k=2, spec=LoopSpec(first_token="plain"))
    assert law_tv(law, PLAIN["penalties+top_k"]) < EXACT


def test_verify_law_is_a_distribution_per_block_and_token_equals_block_at_k_1():
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(6, 3, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(6, 2, V, generator=g, dtype=torch.float64), -1)
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(6, 2)
    for method in ("token", "block"):
        law = verify_law(p, q, x, method)
        assert law.shape == (6, 3, V) and torch.allclose(law.sum((1, 2)), torch.ones(6, dtype=torch.float64))
    assert torch.allclose(verify_law(p[:, :2], q[:, :1], x[:, :1], "token"),
                          verify_law(p[:, :2], q[:, :1], x[:, :1], "block"), atol=1e-15)


# Each LoopSpec value but the correct one: the settings that switch its feature on (where it must change the law,
# or only the logprobs) and a setting with that feature off (where it must not).
PEN = Settings(repetition_penalty=1.8, frequency_penalty=0.8, presence_penalty=0.5, eos=EOS, max_new_tokens=3)
PROC = Settings(min_p=0.2, logit_bias=((1, 1.5),), eos=EOS, max_new_tokens=3)
BANS = Settings(no_repeat_ngram_size=1, bad_words=((1, 3),), eos=EOS, max_new_tokens=3)
GRAM = Settings(grammar=alternating(V), eos=EOS, max_new_tokens=3)
OFF = Settings(eos=EOS, max_new_tokens=3)
VALUES = {  # value: (what it changes, settings with its feature on, settings with it off)
    ("penalties", "round_start"): ("law", PEN, OFF),
    ("penalties", "last_commit"): ("law", PEN, OFF),
    ("penalties", "bonus_only"): ("law", PEN, OFF),
    ("penalties", "ignored"): ("law", PEN, OFF),
    ("processors", "bonus_only"): ("law", PROC, PEN),
    ("processors", "bonus_only_all"): ("law", BANS, OFF),
    ("processors", "ignored"): ("law", PROC, PEN),
    ("grammar", "unmasked_drafts"): ("law", GRAM, PEN),
    ("grammar", "ignored"): ("law", GRAM, PEN),
    ("eos", "run_past"): ("law", OFF, Settings(max_new_tokens=3)),
    ("eos", "finish_round"): ("law", OFF, Settings(max_new_tokens=3)),
    ("length", "checked_first"): ("law", OFF, Settings(max_new_tokens=3)),
    ("logprobs", "zero"): ("logprobs", OFF, Settings(temperature=0.0, max_new_tokens=3)),  # greedy: log 1 = 0
    ("logprobs", "raw_bonus"): ("logprobs", Settings(temperature=0.5, max_new_tokens=3), OFF),
}
CONTROLS = {("grammar", "unmasked_after_illegal"), ("first_token", "plain"), ("verifier", "block")}  # exact values


def error(what, settings, spec, k=2):
    if what == "logprobs":
        return logprob_error(TARGET, DRAFT, PROMPT, settings, k=k, spec=spec)
    return law_tv(speculative_law(TARGET, DRAFT, PROMPT, settings, k=k, spec=spec), plain_law(TARGET, PROMPT, settings))


def test_every_value_is_registered_here():
    values = {(f, v) for f, choices in SPEC_CHOICES.items() for v in choices if v != choices[0]}
    assert values == set(VALUES) | CONTROLS


@pytest.mark.heavy
@pytest.mark.parametrize("field, value", list(VALUES))
def test_every_wrong_value_changes_the_law_where_its_feature_is_on_and_nowhere_else(field, value):
    what, on, off = VALUES[(field, value)]
    for verifier in ("token", "block"):
        spec = LoopSpec(verifier=verifier, **{field: value})
        assert error(what, on, spec) > 1e-3, (field, value, verifier)
        assert error(what, off, spec) < EXACT, (field, value, verifier)


def test_the_controls_are_exact_where_the_bugs_are_not():
    spec = LoopSpec(grammar="unmasked_after_illegal")  # a row after an illegal draft is never read
    assert error("law", GRAM, spec) < EXACT and error("logprobs", GRAM, spec) == 0.0
    # the first plain token fixes logprobs="zero" on the first token only: still wrong later
    zero_first = LoopSpec(logprobs="zero", first_token="plain")
    assert 0 < logprob_error(TARGET, DRAFT, PROMPT, OFF, k=2, spec=zero_first) < \
        logprob_error(TARGET, DRAFT, PROMPT, OFF, k=2, spec=LoopSpec(logprobs="zero"))


def test_penalty_variants_are_the_plain_law_of_their_reading():
    # "ignored" never penalises: its law is plain decoding with the penalties off
    s = Settings(repetition_penalty=1.8, frequency_penalty=0.8, eos=EOS, max_new_tokens=3)
    law = speculative_law(TARGET, DRAFT, PROMPT, s, k=2, spec=LoopSpec(penalties="ignored"))
    assert law_tv(law, plain_law(TARGET, PROMPT, Settings(eos=EOS, max_new_tokens=3))) < EXACT
    # even at k = 1 last_commit is not round_start: a full block commits two tokens and only the last one reaches
    # the last_commit tracker
    a = speculative_law(TARGET, DRAFT, PROMPT, s, k=1, spec=LoopSpec(penalties="last_commit"))
    b = speculative_law(TARGET, DRAFT, PROMPT, s, k=1, spec=LoopSpec(penalties="round_start"))
    assert law_tv(a, b) > 1e-3
    # grammar "ignored" is plain decoding without the grammar
    law = speculative_law(TARGET, DRAFT, PROMPT, GRAM, k=2, spec=LoopSpec(grammar="ignored"))
    assert law_tv(law, plain_law(TARGET, PROMPT, OFF)) < EXACT


def test_law_tv():
    assert law_tv({(1,): 0.5, (2,): 0.5}, {(1,): 1.0}) == 0.5 and law_tv({}, {}) == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="k must be >= 1"):
        speculative_law(TARGET, DRAFT, PROMPT, OFF, k=0)
    with pytest.raises(TypeError, match="spec must be a LoopSpec"):
        speculative_law(TARGET, DRAFT, PROMPT, OFF, k=1, spec="correct")
    with pytest.raises(TypeError, match="settings must be a Settings"):
        plain_law(TARGET, PROMPT, {"eos": 4})
    with pytest.raises(TypeError, match="prompt"):
        plain_law(TARGET, "ab", OFF)


def test_one_law_takes_well_under_a_second():
    s = FEATURES["penalties+top_k"]
    t = time.perf_counter()
    speculative_law(TARGET, DRAFT, PROMPT, s, k=3, spec=LoopSpec(verifier="block"))
    assert time.perf_counter() - t < 2.0  # ~0.05 s here; 2 s leaves room for a loaded CI machine


def lab_models():
    """The lab's trained pair as context -> logits callables (a tiny random lab transformer if no weights)."""
    from specdec_lib import lab
    try:
        target, draft = lab.load_pair()
    except FileNotFoundError:
        target, draft = lab.CachedLM(lab.LMConfig(vocab=256, d_model=32, n_head=2, n_layer=1, max_len=64), seed=1), \
            lab.CachedLM(lab.LMConfig(vocab=256, d_model=16, n_head=2, n_layer=1, max_len=64), seed=2)

    def wrap(model):
        @functools.cache  # the laws below ask for the same texts: one forward pass each
        @torch.no_grad()
        def logits(ctx):
            return model(torch.tensor([ctx]))[0, -1]
        return logits
    return wrap(target), wrap(draft)


@pytest.mark.heavy
def test_on_the_labs_pair_speculation_is_exactly_plain_decoding():
    target, draft = lab_models()
    prompt = tuple(b"def main(")
    s = Settings(top_k=3, repetition_penalty=1.3, max_new_tokens=3, eos=ord(")"))
    plain = plain_law(target, prompt, s)
    assert 3 < len(plain) <= 27
    for verifier in ("token", "block"):
        law = speculative_law(target, draft, prompt, s, k=2, spec=LoopSpec(verifier=verifier))
        assert law_tv(law, plain) < EXACT


def test_laws_with_the_stop_reason():
    s = FEATURES["bad_words"]
    plain = plain_law(TARGET, PROMPT, s, with_stop=True)
    assert all(stop == ("eos" if text[-1] == EOS else "length") for text, stop in plain)
    assert law_tv(speculative_law(TARGET, DRAFT, PROMPT, s, k=2, with_stop=True), plain) < EXACT
    # sglang's length-first check also mislabels an EOS at the cap's last position: seen only with the stop
    spec = LoopSpec(length="checked_first")
    tokens_only = law_tv(speculative_law(TARGET, DRAFT, PROMPT, OFF, k=2, spec=spec), PLAIN_OFF)
    with_stop = law_tv(speculative_law(TARGET, DRAFT, PROMPT, OFF, k=2, spec=spec, with_stop=True),
                       plain_law(TARGET, PROMPT, OFF, with_stop=True))
    assert with_stop > tokens_only + 1e-3


def test_run_past_drafts_through_an_eos_and_keeps_what_follows():
    s = Settings(eos=EOS, max_new_tokens=4)
    law = speculative_law(TARGET, DRAFT, PROMPT, s, k=3, spec=LoopSpec(eos="run_past"))
    assert any(EOS in text[:-1] for text in law)  # an EOS inside the text: generation ran past it
    assert all(text[-1] == EOS or len(text) == s.max_new_tokens for text in law)
    # finish_round keeps the rest of the round after an EOS, then stops: a text may end after an inner EOS
    law = speculative_law(TARGET, DRAFT, PROMPT, s, k=3, spec=LoopSpec(eos="finish_round"))
    ends_late = [t for t in law if EOS in t[:-1] and t[-1] != EOS and len(t) < s.max_new_tokens]
    assert ends_late and abs(sum(law.values()) - 1) < 1e-12


PLAIN_OFF = plain_law(TARGET, PROMPT, OFF)


def test_a_draft_that_bans_every_token_ends_its_block():
    # the draft proposes 1, which top_k = 1 leaves the target no chance of; after it the bans and the grammar leave
    # the draft nothing: drafting stops there, and the law is still plain's (plain never reaches that text)
    target = lambda ctx: torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64)  # noqa: E731
    draft = lambda ctx: torch.tensor([0.0, 2.0, 0.0], dtype=torch.float64)  # noqa: E731
    s = Settings(grammar=Grammar(((1, 2, 1), (1, -1, 1), (-1, 2, -1))), bad_words=((1, 1),), top_k=1, max_new_tokens=3)
    plain = plain_law(target, (0,), s)
    assert plain == {(0, 0, 0): 1.0}
    for verifier in ("token", "block"):
        for k in (1, 2, 3):
            assert law_tv(speculative_law(target, draft, (0,), s, k=k, spec=LoopSpec(verifier=verifier)), plain) < EXACT
            out = speculate(target, draft, (0,), s, k=k, spec=LoopSpec(verifier=verifier),
                            generator=torch.Generator().manual_seed(k))
            assert out.tokens == (0, 0, 0)


def test_a_logprob_after_an_eos_is_never_plains():
    # plain decoding stops at an EOS, so any value reported for a token after one is wrong
    s = Settings(eos=EOS, max_new_tokens=4)
    assert plain_logprob(TARGET, PROMPT, (1, EOS, 2), 2, s) == float("-inf")
    spec = LoopSpec(eos="run_past")
    past = sum(p for text, p in speculative_law(TARGET, DRAFT, PROMPT, s, k=3, spec=spec).items() if EOS in text[:-1])
    assert past > 0.01 and abs(logprob_error(TARGET, DRAFT, PROMPT, s, k=3, spec=spec) - past) < 1e-12
