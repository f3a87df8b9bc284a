"""The verification bugs of the field guide, each as a verifier of one block, with the spec behind its exact law.

Each `KnownVerifier` pairs a batched sampler (what the buggy code does, draw by draw) with the `DecoderSpec` that
laws.committed_block_law enumerates: the kit diagnoses a failure by the nearest of these laws, and tests that each
sampler lands on its own law. The field guide's bugs are the registry's specs, picked by name (markov.registry.MODES);
the post's tempting rule and match acceptance are the kit's own, DecoderSpec values too; block verification
(optimal among exact verifiers of one draft block) and its naive port are the registry's, by name. Every sampler
takes p (n, k+1, V), q (n, k, V), proposals (n, k) and a generator, and returns (accepted (n,), tokens (n, k+1)
padded with -1), as sd.verify_blocks. What each spec value means is markov/semantics.py's, shared with every engine.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..markov.registry import MODES
from ..markov.semantics import acceptance, block_round, fix_uniform, match_law, rejection_weights
from ..markov.spec import DecoderSpec
from ..sampling import inverse_cdf, sample_rows
from ..variant import Variant
from ..verification import accepted_prefix, commit_tokens
from .laws import block_rule, bonus_rows, judge_rows, ratio_rows

__all__ = ["KnownVerifier", "FIELD_GUIDE", "BLOCK_VERIFIERS", "EXACT", "known_verifiers", "rule_verifier"]


def _kept_chance(spec: DecoderSpec, pj: torch.Tensor, qj: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
    """(n, k) the chance each proposal is kept: semantics' acceptance at y_j, the first slot as verify_first says."""
    a = torch.cat([acceptance(spec, pj[:, :1], qj[:, :1], first=True), acceptance(spec, pj[:, 1:], qj[:, 1:])], 1)
    return a.gather(-1, proposals[..., None]).squeeze(-1)  # (n, k)


def _rejection_draw(spec: DecoderSpec, p: torch.Tensor, q: torch.Tensor, y: torch.Tensor, u_test: torch.Tensor,
                    generator) -> torch.Tensor:
    """Tokens (n,) a rejection of y (n,) emits from rows p, q (n, V): under match the target's own sample given
    that it differs from y; else the residual, drawn at the uniform semantics names (fresh, or the rejected test's
    u_test (n,), which a reused uniform reads)."""
    y_hot = torch.nn.functional.one_hot(y, p.shape[-1]).double()  # (n, V)
    if spec.acceptance == "match":
        return sample_rows(match_law(p, y_hot), generator)
    fresh = torch.rand(y.shape[0], dtype=torch.float64, generator=generator) if spec.residual_uniform == "fresh" \
        else None  # drawn only when read: a reused uniform leaves the generator's stream as the bug does
    return inverse_cdf(rejection_weights(spec, p, q, y_hot), fix_uniform(spec, u_test, fresh))


def rule_verifier(spec: DecoderSpec) -> Callable:
    """A batched verifier that does what `spec` says, with the randomness a real implementation would use."""
    spec = block_rule(spec)
    if spec.verifier != "token":  # block verification, or its naive port: semantics' round, as the engines run it

        def verify_jointly(p: torch.Tensor, q: torch.Tensor, proposals: torch.Tensor, generator=None):
            n, k = proposals.shape
            eta = torch.rand(n, k, dtype=torch.float64, generator=generator)  # (n, k) one uniform per row
            accepted, w = block_round(spec, p, ratio_rows(spec, q), proposals, eta)  # (n,), (n, V)
            return accepted, commit_tokens(proposals, accepted, sample_rows(w, generator))

        return verify_jointly

    def verify(p: torch.Tensor, q: torch.Tensor, proposals: torch.Tensor, generator=None):
        n, k = proposals.shape
        rows = torch.arange(n)
        pj, qj = judge_rows(spec, p), ratio_rows(spec, q)  # (n, k, V) the rows judging / believed for each proposal
        a = _kept_chance(spec, pj, qj, proposals)  # (n, k)
        u = torch.rand(n, k, dtype=torch.float64, generator=generator)  # (n, k)
        accepted = accepted_prefix(u < a)  # (n,)
        slot = accepted.clamp(max=k - 1)  # (n,) the rejected slot (meaningless after a full block)
        p_at, q_at, y_at = pj[rows, slot].double(), qj[rows, slot].double(), proposals[rows, slot]  # (n, V) (n, V) (n,)
        fix = _rejection_draw(spec, p_at, q_at, y_at, u[rows, slot], generator)  # (n,)
        bonus = sample_rows(bonus_rows(spec, p, q), generator)  # (n,)
        nxt = torch.where(accepted < k, fix, bonus)  # (n,)
        kept = accepted + ((accepted < k) & spec.keep_rejected).long()  # (n,) proposals written before nxt
        return accepted, commit_tokens(proposals, kept, nxt)

    return verify


@dataclass(frozen=True)
class KnownVerifier(Variant):
    """A verifier the kit knows (a `Variant`): its spec; `verify` samples it (batched); `exact`: its name is in
    EXACT."""

    spec: DecoderSpec

    def __post_init__(self) -> None:
        super().__post_init__()
        block_rule(self.spec)

    @property
    def verify(self) -> Callable:
        return rule_verifier(self.spec)


# the field guide's verification bugs, read from the registry by name (new registry entries do not appear here)
FIELD_GUIDE = ("softmax_residual", "target_on_reject", "reused_uniform", "single_token_residual", "off_by_one",
               "bonus_from_draft", "mismatched_q", "rejected_kept", "first_unverified")
_OWN = [
    ("tempting", "the tempting rule: keep a proposal as often as the target would pick it (p(y)), else draw from p",
     "the post, Act I (as the course reads it)", DecoderSpec(acceptance="target_prob", residual="target")),
    ("match_acceptance",
     "keep y with probability p(y), else draw from p without y: the one-hot path; exact, and it accepts less",
     "vLLM #40149 (q passed as None); course notes: match-based acceptance", MODES["match_acceptance"].spec),
]
# optimal verification (Sun et al. 2025): block verification and the port that shipped it wrong, from the registry
BLOCK_VERIFIERS = ("block_verification", "block_verification_naive")
EXACT = ("correct", "match_acceptance", "block_verification")


def _known(name: str, description: str, reference: str, spec: DecoderSpec, chapter: str | None = None) -> KnownVerifier:
    return KnownVerifier(name, description, reference, spec, exact=name in EXACT, chapter=chapter)


def _registered(name: str) -> KnownVerifier:
    m = MODES[name]
    return _known(name, m.description, m.reference, m.spec, m.chapter)


def known_verifiers() -> list[KnownVerifier]:
    """The correct rule first, then every verification bug (field guide, then the post's), then match acceptance,
    then block verification and its naive port."""
    return ([_registered(name) for name in ("correct", *FIELD_GUIDE)] + [_known(*row) for row in _OWN]
            + [_registered(name) for name in BLOCK_VERIFIERS])
