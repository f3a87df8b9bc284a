"""The decoder spec: how one block decoder on the Markov chain drafts, verifies and commits, and its tables.

The correct decoder is the default `DecoderSpec`; every registered bug (registry.py) changes one or two
fields, the way each bug changed one or two lines of a real implementation. Every field is a `Literal` (or a
bool) checked on construction, so a typo such as residual="normalized" fails loudly instead of silently
meaning something else. The reference decoder, the batched decoder and the exact engine all read the spec.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, get_args, get_type_hints

import torch

from .._checks import check_choice, check_int, check_real
from ..policy import policy_table
from . import semantics
from .semantics import TARGET_ONLY

__all__ = ["DecoderSpec", "Decoder", "spec_tables", "Table", "TARGET_ONLY", "BLOCK_NEEDS"]

Table = Literal["Q", "Q_bad", "argmax_Q", "top2_Q"]
# the fields whose values semantics.py defines: their types are its dicts' keys (add a value there, once)
DraftContext = Literal[tuple(semantics.DRAFT_CONTEXTS)]
RatioContext = Literal[tuple(semantics.RATIO_CONTEXTS)]
Judge = Literal[tuple(semantics.JUDGES)]
Acceptance = Literal[tuple(semantics.ACCEPTANCES)]
Residual = Literal[tuple(semantics.RESIDUALS)]
ResidualUniform = Literal[tuple(semantics.RESIDUAL_UNIFORMS)]
Bonus = Literal[tuple(semantics.BONUSES)]
Schedule = Literal[tuple(semantics.SCHEDULES)]
Verifier = Literal[tuple(semantics.VERIFIERS)]
Stop = Literal[tuple(semantics.STOPS)]
# what a block verifier replaces: the token rule's tests, residual, bonus and an unchanged one-model draft of k
BLOCK_NEEDS = {"acceptance": "ratio", "judge": "aligned", "residual": "normalised", "residual_uniform": "fresh",
               "bonus": "target", "keep_rejected": False, "verify_first": True, "phantom": False, "schedule": "fixed",
               "stop": "never", "proposer": "model", "draft_context": "committed"}


@dataclass(frozen=True)
class DecoderSpec:
    """How one block decoder on the Markov chain drafts, verifies and commits."""

    propose: Table = "Q"  # what the draft samples: Q | Q_bad | argmax_Q (greedy) | top2_Q (top-k = 2)
    # the q the verifier puts in p/q and [p - q]_+: Q | Q_bad | argmax_Q (one-hot at the draft's argmax: a kernel
    # that gets no draft probabilities and reads q(y) = 1 at every proposal)
    ratio: Literal["Q", "Q_bad", "argmax_Q"] = "Q"
    # the draft's state for proposal 1: the committed text | where its cache was left | one token too far back
    draft_context: DraftContext = "committed"
    ratio_context: RatioContext = "draft"  # where the verifier evaluates q for proposal 1
    judge: Judge = "aligned"  # target row for proposal j: before y_j | at y_j
    # u < min(1, p/q) | a target sample equals y | u < p(y) (the tempting rule) | p(y) > min(epsilon, delta exp(-H(p)))
    # (Medusa's typical test) | p(y) >= threshold_single or u <= p(y) / threshold_acc (SGLang's target-only kernel)
    acceptance: Acceptance = "ratio"
    verify_first: bool = True  # False: proposal 1 is committed unverified
    # what a rejection samples: [p - q]_+ normalised | softmax of [p - q]_+ | p | p without the rejected y |
    # argmax p | p restricted to p >= the typical threshold (Medusa's two ways to pick the token after a prefix)
    residual: Residual = "normalised"
    residual_uniform: ResidualUniform = "fresh"  # reused: the rejected slot's acceptance uniform
    bonus: Bonus = "target"  # after a full block: P | Q | argmax P | typical
    # token: each proposal tested in turn | block: block verification | block_naive: vllm-ascend's wrong port
    verifier: Verifier = "token"
    keep_rejected: bool = False  # the rejected proposal stays in the output before the correction
    phantom: bool = False  # an unverified draft token is appended after every round
    policy: tuple = ()  # the request's sampling policy, e.g. (("top_p", 0.8),)
    policy_on_target: bool = True  # False: the policy reaches the draft but not the target
    # Act V, bending the rules (draft_rules.py): where proposals come from, how many a round drafts
    proposer: Literal["model", "ngram"] = "model"  # ngram: copy what followed an earlier occurrence, one-hot
    ngram_match: Literal["latest", "earliest"] = "latest"  # which earlier occurrence (transformers takes the first)
    schedule: Schedule = "fixed"  # hf: k + 2 after a full block, k - 1 otherwise, in [k_min, k_max]
    stop: Stop = "never"  # confidence: after a token with q < confidence; coin: just before a rejected proposal
    epsilon: float = 0.09  # typical acceptance: Medusa's posterior_threshold
    delta: float = 0.3  # typical acceptance: Medusa's posterior_alpha
    confidence: float = 0.4  # transformers' assistant_confidence_threshold
    threshold_single: float = 1.0  # SGLang's --speculative-accept-threshold-single (1.0: exact)
    threshold_acc: float = 1.0  # SGLang's --speculative-accept-threshold-acc (1.0: exact)
    k_min: int = 1
    k_max: int = 8

    def __post_init__(self) -> None:
        hints = get_type_hints(DecoderSpec)
        for f in fields(self):
            value, kind = getattr(self, f.name), hints[f.name]
            if kind is bool and not isinstance(value, bool):
                raise TypeError(f"DecoderSpec.{f.name} must be a bool, got {value!r}")
            if get_args(kind):
                check_choice(f"DecoderSpec.{f.name}", value, get_args(kind))
        if not isinstance(self.policy, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in self.policy):
            raise TypeError(f"DecoderSpec.policy must be a tuple of (name, value) pairs, got {self.policy!r}")
        check_real("DecoderSpec.epsilon", self.epsilon, low=0.0, high=1.0)
        check_real("DecoderSpec.delta", self.delta, low=0.0, high=1.0)
        check_real("DecoderSpec.confidence", self.confidence, low=0.0, high=1.0)
        check_real("DecoderSpec.threshold_single", self.threshold_single, low=0.0, high=1.0)
        check_real("DecoderSpec.threshold_acc", self.threshold_acc, low=0.0, high=1.0)
        k_min = check_int("DecoderSpec.k_min", self.k_min, minimum=0)
        if check_int("DecoderSpec.k_max", self.k_max, minimum=1) < k_min:
            raise ValueError(f"DecoderSpec.k_max must be >= k_min = {k_min}, got {self.k_max}")
        if self.adaptive and (self.draft_context != "committed" or self.phantom):
            raise ValueError("an adaptive or n-gram draft needs draft_context='committed' and phantom=False")
        if self.verifier != "token":
            _check_block_spec(self)

    @property
    def bent(self) -> bool:
        """True when the spec uses an Act V rule: adaptive drafting, a target-only test, or typical resamples."""
        resamples = {self.residual, self.bonus} & {"argmax", "typical"}
        return self.adaptive or self.acceptance in TARGET_ONLY or bool(resamples)

    @property
    def adaptive(self) -> bool:
        """True when a round's proposals are not k draws from a table: a schedule, a stopping rule or a lookup."""
        return (self.schedule, self.stop, self.proposer) != ("fixed", "never", "model")


def _check_block_spec(spec: DecoderSpec) -> None:
    """A block verifier judges the whole block itself: the fields it replaces must keep the token rule's defaults."""
    for name, value in BLOCK_NEEDS.items():
        if getattr(spec, name) != value:
            raise ValueError(f"DecoderSpec.{name} must be {value!r} with verifier={spec.verifier!r} (a block verifier "
                             f"replaces the token rule's test, residual and bonus); got {getattr(spec, name)!r}")


def spec_tables(spec: DecoderSpec, P: torch.Tensor, Q: torch.Tensor, Q_bad: torch.Tensor | None):
    """(target, propose, ratio, draft) tables for a spec: the policy applied as the spec says, then the draft's bug."""
    policy = dict(spec.policy)
    target = policy_table(P, **policy) if spec.policy_on_target else P
    Q = policy_table(Q, **policy)
    Q_bad = None if Q_bad is None else policy_table(Q_bad, **policy)
    tables = {"Q": Q, "Q_bad": Q_bad,
              "argmax_Q": torch.nn.functional.one_hot(Q.argmax(-1), Q.shape[-1]).to(Q.dtype),
              "top2_Q": policy_table(Q, top_k=2)}
    return target, tables[spec.propose], tables[spec.ratio], Q


@dataclass(frozen=True)
class Decoder:
    """A validated decoder: its spec, its four (V, V) tables, and where and how far it runs."""

    spec: DecoderSpec
    target: torch.Tensor  # P under the policy (the target's own table), or raw P when the policy misses it
    propose: torch.Tensor  # the table that really samples proposals
    ratio: torch.Tensor  # the table the verifier believes produced them
    draft: torch.Tensor  # the draft model's own (post-policy) table
    start: int
    horizon: int
    k: int

    @property
    def max_k(self) -> int:
        """The most proposals one round can draft: k, or k_max under a schedule that grows it."""
        return max(self.k, self.spec.k_max) if self.spec.schedule == "hf" else self.k
