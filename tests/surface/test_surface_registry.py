"""The sampling-surface chapter of the field guide: every registered loop variant against plain decoding, exactly.

Each bug is wrong (exact error > 1e-3) on at least one small case with one of its features on, and exact
(< 1e-12) on every case where none of them is on; the correct loop is exact everywhere. The cases are tiny chain
models (V = 4 with EOS = 3, three new tokens, k = 2, and k = 1 for a few), so every law is enumerated exactly.
"""
import re

import pytest
import torch

from specdec_lib.markov.registry import CHAPTERS
from specdec_lib.surface import grammar as grammars
from specdec_lib.surface.exact import law_tv, plain_law, speculative_law
from specdec_lib.surface.registry import VARIANTS, LoopVariant, loop_variants, variant, variant_error, variant_table
from specdec_lib.surface.settings import FEATURES, Settings

V, EOS, K = 4, 3, 2
_g = torch.Generator().manual_seed(7)
TARGET_LOGITS = torch.randn(V, V, generator=_g, dtype=torch.float64)  # (V, V) row = last token
DRAFT_LOGITS = TARGET_LOGITS + 0.8 * torch.randn(V, V, generator=_g, dtype=torch.float64)


def chain(logits: torch.Tensor):
    def model(context: tuple[int, ...]) -> torch.Tensor:
        return logits[context[-1]].clone()  # (V,)
    return model


TARGET, DRAFT, PROMPT = chain(TARGET_LOGITS), chain(DRAFT_LOGITS), (0,)
ONE_AT_A_TIME = {  # each feature alone (and plain settings), at values where it changes the law a lot
    "plain": {},
    "temperature": {"temperature": 0.7},
    "top_k": {"top_k": 2},
    "top_p": {"top_p": 0.7},
    "min_p": {"min_p": 0.3},
    "repetition_penalty": {"repetition_penalty": 3.0},
    "frequency_penalty": {"frequency_penalty": 1.5},
    "presence_penalty": {"presence_penalty": 1.5},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 2},
    "bad_words": {"bad_words": ((1, 2),)},
    "logit_bias": {"logit_bias": ((2, 2.0),)},
    "grammar": {"grammar": grammars.no_immediate_repeat(V)},
    "eos": {"eos": EOS},
}
CASES = {name: (TARGET, DRAFT, PROMPT, Settings(max_new_tokens=3, **kw), K) for name, kw in ONE_AT_A_TIME.items()}
# with k = 1 a bonus token lands inside the cap (a plain first token, one draft, the bonus): it tells the variants
# that process the bonus row from those that process no row
CASES |= {f"{name}, k=1": (*CASES[name][:4], 1) for name in ("min_p", "logit_bias", "repetition_penalty")}
BUGS = loop_variants(exact=False)
LAWS, PLAIN, TABLE = {}, {}, {}


def law(v: LoopVariant, case: str) -> dict:
    if (v.name, case) not in LAWS:
        target, draft, prompt, settings, k = CASES[case]
        LAWS[v.name, case] = speculative_law(target, draft, prompt, settings, k=k, spec=v.spec, with_stop=True)
    return LAWS[v.name, case]


def errors(v: LoopVariant) -> dict[str, float]:
    """The variant's exact error on every case: its law's TV to plain's, or P(a wrong logprob)."""
    if v.name not in TABLE:
        if v.what == "logprobs":
            TABLE[v.name] = {case: variant_error(v, *CASES[case][:4], k=CASES[case][4]) for case in CASES}
        else:
            for case, (target, _, prompt, settings, _) in CASES.items():
                PLAIN.setdefault(case, plain_law(target, prompt, settings, with_stop=True))
            TABLE[v.name] = {case: law_tv(law(v, case), PLAIN[case]) for case in CASES}
    return TABLE[v.name]


def test_names_are_unique_and_the_correct_loop_comes_first():
    names = [v.name for v in loop_variants()]
    assert names[0] == "correct" and len(set(names)) == len(names) == len(VARIANTS)
    assert loop_variants(exact=True)[0].name == "correct" and all(not v.exact for v in BUGS)
    assert all(v.chapter == "sampling surface" for v in loop_variants()) and "sampling surface" in CHAPTERS


def test_every_bug_cites_its_source_at_a_commit():
    cited = re.compile(r"^[\w.-]+/[\w.-]+ \S+.*? @ ([0-9a-f]{7,40}|v\d+(\.\d+)+)\b")  # owner/repo path ... @ sha|tag
    for v in BUGS:
        assert cited.match(v.reference), (v.name, v.reference)
        assert v.description and v.needs and v.what in ("law", "logprobs")
        assert set(v.needs) <= set(FEATURES), (v.name, v.needs)


def test_an_unknown_name_lists_the_valid_ones():
    assert variant("correct") is VARIANTS["correct"]
    with pytest.raises(ValueError, match="'correct'"):
        variant("corect")
    with pytest.raises(TypeError, match="exact"):
        loop_variants(exact="yes")


def test_a_variant_is_validated_on_construction():
    with pytest.raises(ValueError, match="needs"):
        LoopVariant("x", "a typo in a need", "a/b f.py @ abcdef1", needs=("minp",))
    with pytest.raises(ValueError, match="@ sha"):
        LoopVariant("x", "a bug with no commit", "a/b f.py (PR #1)")
    with pytest.raises(ValueError, match="what"):
        LoopVariant("x", "an unknown kind", "a/b f.py @ abcdef1", what="tokens")
    with pytest.raises(TypeError, match="spec"):
        LoopVariant("x", "not a spec", "a/b f.py @ abcdef1", spec="correct")


def test_the_correct_loop_is_exact_on_every_case():
    assert max(errors(VARIANTS["correct"]).values()) < 1e-12


@pytest.mark.parametrize("v", BUGS, ids=lambda v: v.name)
def test_each_bug_is_wrong_with_its_feature_on_and_exact_with_it_off(v: LoopVariant):
    err = errors(v)
    on = {case: e for case, e in err.items() if v.matters(CASES[case][3])}
    off = {case: e for case, e in err.items() if not v.matters(CASES[case][3])}
    assert on and max(on.values()) > 1e-3, (v.name, on)
    assert max(off.values(), default=0.0) < 1e-12, (v.name, off)
    assert off or v.needs == ("max_new_tokens",)  # only a variant that matters in every run has no off case


def test_reported_zeros_are_right_when_no_speculative_round_commits_or_every_token_is_certain():
    # logprobs_zero matters in every run with a round: its controls are a cap of 1 (the plain first step only)
    # and greedy decoding (every processed p is 1, so 0.0 is the right value)
    v = variant("logprobs_zero")
    for kw in ({"max_new_tokens": 1}, {"temperature": 0.0, "max_new_tokens": 3}):
        assert variant_error(v, TARGET, DRAFT, PROMPT, Settings(**kw), k=K) < 1e-12
    assert errors(v)["plain"] > 1e-3


def test_the_table_agrees_with_one_variant_at_a_time():
    v = BUGS[0]
    case = next(c for c in CASES if v.matters(CASES[c][3]))
    rows = variant_table([CASES["plain"], CASES[case]], variants=("correct", v.name))
    assert [(r.variant, r.case) for r in rows] == [("correct", 0), (v.name, 0), ("correct", 1), (v.name, 1)]
    for r, c in zip(rows, ("plain", "plain", case, case)):
        assert abs(r.error - errors(VARIANTS[r.variant])[c]) < 1e-12 and r.features == CASES[c][3].features
    assert abs(variant_error(v.name, *CASES[case][:4], k=CASES[case][4]) - errors(v)[case]) < 1e-12
    with pytest.raises(TypeError, match="case"):
        variant_table([object()])


def test_every_two_law_variants_differ_on_some_case():
    # the kit names a failing loop after the nearest variant's law: no two registered laws may coincide
    laws = [v for v in BUGS if v.what == "law"]
    for i, a in enumerate(laws):
        for b in laws[i + 1:]:
            either = [c for c in CASES if a.matters(CASES[c][3]) or b.matters(CASES[c][3])]
            assert max(law_tv(law(a, c), law(b, c)) for c in either) > 1e-3, (a.name, b.name)
