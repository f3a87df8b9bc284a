"""A registry's entry: the fields every registry of named variants shares, and their checks.

The course names its variants in four registries: the Markov decoders of the field guide and the chapters after it
(`markov.registry.FailureMode`), the multi-draft rules (`multidraft.MultiDraftRule`), the generation loop's
variants (`surface.registry.LoopVariant`) and the kit's known verifiers (`conformance.bugs.KnownVerifier`); the
field guide's table rows (`presentation.field_guide.GuideRow`) carry the same fields. Each is a `Variant`: a name,
a one-line description, the reference it is modelled on, whether it is exact, and the chapter that tells it. A
registry's own type extends it with what that registry alone needs (a spec, a verifier, options); the shared
fields come first and `exact` and `chapter` are keyword-only, so an entry reads `Entry(name, description,
reference, <its own field>, exact=..., chapter=...)` in every registry.
"""
from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass
from typing import ClassVar

from ._checks import check_choice

__all__ = ["COURSE_CHAPTERS", "CITED", "Variant"]

# the chapters that register variants: 02b | 07 | 02d (the sampling surface) | 06 | 08
COURSE_CHAPTERS = ("field guide", "bending the rules", "sampling surface", "many drafts", "optimal verification")
CITED = re.compile(r"^[\w.-]+/[\w.-]+ \S+.*? @ ([0-9a-f]{7,40}|v\d+(\.\d+)+)\b")  # owner/repo path ... @ sha | vX.Y.Z


@dataclass(frozen=True)
class Variant:
    """A registered variant: its name, a one-line description, its reference, whether it is exact, its chapter."""

    chapters: ClassVar[tuple[str | None, ...]] = (None, *COURSE_CHAPTERS)  # what `chapter` may be in this registry
    must_cite: ClassVar[bool] = False  # True: a non-exact entry's reference must cite code at a commit (CITED)

    name: str
    description: str
    reference: str  # where it comes from: a paper, the post, or "owner/repo path @ sha" for code read at a commit
    _: KW_ONLY
    exact: bool = False  # True: only speed is lost (the output law stays the target's)
    chapter: str | None = None  # the chapter that tells it (None: no one chapter)

    def __post_init__(self) -> None:
        for field_name in ("name", "description", "reference"):
            value = getattr(self, field_name)
            if not isinstance(value, str):
                raise TypeError(f"{field_name} must be a str, got {type(value).__name__}")
            if not value.strip():
                raise ValueError(f"{field_name} must be a non-empty string")
        if not isinstance(self.exact, bool):
            raise TypeError(f"exact must be a bool, got {type(self.exact).__name__}")
        check_choice("chapter", self.chapter, self.chapters)
        if self.must_cite and not self.exact and not CITED.match(self.reference):
            raise ValueError(f"variant {self.name!r}: reference must cite 'owner/repo path @ sha (or release tag)', "
                             f"got {self.reference!r}")
