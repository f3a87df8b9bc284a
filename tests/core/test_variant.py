"""One registry entry type: every registry's entries are `Variant`s, and a wrong entry raises on construction."""
import dataclasses

import pytest

from specdec_lib.conformance.bugs import KnownVerifier, known_verifiers
from specdec_lib.markov.registry import MODES, FailureMode
from specdec_lib.multidraft import RULES, MultiDraftRule
from specdec_lib.multidraft_rules import Stages
from specdec_lib.presentation.field_guide import GuideRow
from specdec_lib.surface.registry import VARIANTS, LoopVariant
from specdec_lib.variant import COURSE_CHAPTERS, Variant

SHARED = ["name", "description", "reference", "exact", "chapter"]
ENTRY_TYPES = [FailureMode, MultiDraftRule, LoopVariant, KnownVerifier, GuideRow]


def test_every_registry_holds_variants():
    registries = {FailureMode: MODES.values(), MultiDraftRule: RULES.values(), LoopVariant: VARIANTS.values(),
                  KnownVerifier: known_verifiers()}
    for kind, entries in registries.items():
        entries = list(entries)
        assert entries and all(type(e) is kind and isinstance(e, Variant) for e in entries), kind
        assert all(e.name and e.description and e.reference for e in entries), kind
        assert all(e.chapter in (None, *COURSE_CHAPTERS) for e in entries), kind


@pytest.mark.parametrize("kind", ENTRY_TYPES)
def test_the_shared_fields_come_first_and_exact_and_chapter_are_keywords(kind):
    assert issubclass(kind, Variant)
    fields = dataclasses.fields(kind)
    assert [f.name for f in fields][:5] == SHARED
    assert [f.name for f in fields if f.kw_only][:2] == ["exact", "chapter"]
    assert kind.__dataclass_params__.frozen


def test_the_kit_knows_which_of_its_verifiers_are_exact():
    known = {kv.name: kv for kv in known_verifiers()}
    assert {n for n, kv in known.items() if kv.exact} == {"correct", "match_acceptance", "block_verification"}
    assert known["softmax_residual"].chapter == "field guide" and known["tempting"].chapter is None


def _wrong_entries():
    """One broken construction per rule of the shared checks, in each registry's own type."""
    spec_of = {FailureMode: {}, MultiDraftRule: {"verifier": Stages("iid", ratio="q", residual="q")},
               LoopVariant: {}, KnownVerifier: {"spec": MODES["correct"].spec}, GuideRow: {"exact_tv": 0.0},
               Variant: {}}
    ref = "a/b f.py @ abcdef1"
    for kind, own in spec_of.items():
        yield kind, dict(name="", description="d", reference=ref, **own), ValueError, "name must be a non-empty"
        yield kind, dict(name="x", description=" ", reference=ref, **own), ValueError, "description must be a non-empty"
        yield kind, dict(name="x", description="d", reference="", **own), ValueError, "reference must"
        yield kind, dict(name=3, description="d", reference=ref, **own), TypeError, "name must be a str"
        yield kind, dict(name="x", description="d", reference=ref, exact=1, **own), TypeError, "exact must be a bool"
        yield kind, dict(name="x", description="d", reference=ref, chapter="act v", **own), ValueError, "chapter must"


@pytest.mark.parametrize(("kind", "kwargs", "error", "message"), list(_wrong_entries()))
def test_a_wrong_entry_raises(kind, kwargs, error, message):
    with pytest.raises(error, match=message):
        kind(**kwargs)


def test_each_registry_keeps_to_its_own_chapters():
    with pytest.raises(ValueError, match="chapter must be one of 'many drafts', 'optimal verification'"):
        MultiDraftRule("x", "d", "r", Stages("iid", ratio="q", residual="q"), chapter="field guide")
    with pytest.raises(ValueError, match="chapter must be one of 'field guide'"):
        FailureMode("x", "d", "r", chapter="many drafts")
    with pytest.raises(ValueError, match="chapter must be one of 'sampling surface'"):
        LoopVariant("x", "d", "a/b f.py @ abcdef1", chapter="field guide")
    # negative control: a correct entry of each kind constructs, and the plain type takes no chapter at all
    assert MultiDraftRule("x", "d", "r", Stages("iid", ratio="q", residual="q"), chapter="optimal verification")
    assert Variant("x", "d", "r").chapter is None and not Variant("x", "d", "r").exact


def test_only_the_loop_registry_demands_a_citation_at_a_commit():
    with pytest.raises(ValueError, match="@ sha"):
        LoopVariant("x", "d", "a/b f.py (PR #1)")
    assert LoopVariant("x", "d", "the course's loop", exact=True).exact  # an exact variant need not cite code
    assert FailureMode("x", "d", "the post, Act II").reference == "the post, Act II"
