"""The field guide: decoder bugs from public code, the post and the course, each a switch on the Markov decoders.

A decoder is described by a `DecoderSpec`: which table the draft samples, which one the verifier believes,
which state each model conditions on, how acceptance, the residual and the bonus are computed. The correct
decoder is the default spec; every registered mode changes one or two fields, the way each bug changed one
or two lines of a real implementation. `decode_markov` and `exact_decoder_distribution` both read the spec.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from ._checks import check_choice
from .policy import policy_table


@dataclass(frozen=True)
class DecoderSpec:
    """How one block decoder on the Markov chain drafts, verifies and commits."""

    propose: str = "Q"  # what the draft samples: Q | Q_bad | argmax_Q (greedy) | top2_Q (top-k = 2)
    ratio: str = "Q"  # the q the verifier puts in p/q and [p - q]_+: Q | Q_bad
    draft_context: str = "committed"  # the draft's state for proposal 1: committed | own_last_proposal | one_too_far
    ratio_context: str = "draft"  # where the verifier evaluates q for proposal 1: draft (where it sampled) | committed
    judge: str = "aligned"  # target row for proposal j: aligned (before y_j) | off_by_one (at y_j)
    acceptance: str = "ratio"  # ratio: u < min(1, p/q) | match: a target sample t equals y
    verify_first: bool = True  # False: proposal 1 is committed unverified
    residual: str = "normalised"  # normalised [p - q]_+ | softmax of [p - q]_+ | target (p) | single_token (p minus y)
    residual_uniform: str = "fresh"  # fresh | reused (the acceptance uniform of the rejected slot)
    bonus: str = "target"  # the bonus after a full block: target P | draft Q
    keep_rejected: bool = False  # the rejected proposal stays in the output before the correction
    phantom: bool = False  # an unverified draft token is appended after every round
    policy: tuple = ()  # the request's sampling policy, e.g. (("top_p", 0.8),)
    policy_on_target: bool = True  # False: the policy reaches the draft but not the target


Origin = Literal["paper", "public code", "the post", "the course"]
ORIGINS: tuple[str, ...] = Origin.__args__  # where a registered decoder comes from


@dataclass(frozen=True)
class FailureMode:
    """A registered decoder: its spec, a one-line description, its reference, where it comes from, what it costs."""

    name: str
    description: str
    reference: str
    spec: DecoderSpec = field(default_factory=DecoderSpec)
    exact: bool = False  # True: only speed is lost (the output distribution stays the target's)
    origin: Origin = "public code"  # paper (the correct decoder) | public code | the post | the course

    def __post_init__(self) -> None:
        check_choice("origin", self.origin, ORIGINS)

    def target(self, P: torch.Tensor) -> torch.Tensor:
        """The chain the user asked for: P under the request's policy (what an exact decoder samples)."""
        return policy_table(P, **dict(self.spec.policy))


_TOP_P = (("top_p", 0.8),)

_MODES = [
    FailureMode("correct", "everything consistent: propose from Q, ratio with Q, target at the committed prefix",
                "Leviathan et al. 2023; Chen et al. 2023", exact=True, origin="paper"),
    FailureMode("bad_draft", "a badly wrong draft Q_bad, and the verifier uses that same Q_bad",
                "the post, Act II", DecoderSpec(propose="Q_bad", ratio="Q_bad"), exact=True, origin="the post"),
    FailureMode("mismatched_q", "proposals come from Q but the ratio is computed with Q_bad",
                "the post, Act II", DecoderSpec(ratio="Q_bad"), origin="the post"),
    FailureMode("phantom_history", "after each round an unverified draft token is appended to the history",
                "the post, Act II", DecoderSpec(phantom=True), origin="the post"),
    FailureMode("off_by_one", "each proposal is judged by the target row one position too late",
                "the post, Act II; transformers PR #28166 (logit indexing)", DecoderSpec(judge="off_by_one")),
    FailureMode("target_on_reject", "a rejection resamples from p instead of the residual [p - q]_+",
                "the post, Act I", DecoderSpec(residual="target"), origin="the post"),
    FailureMode("greedy_draft_softmax_q", "the draft proposes its argmax but the full softmax is used as q",
                "transformers #32867 / PR #33534; jaymody/speculative-sampling #3; romsto/Speculative-Decoding",
                DecoderSpec(propose="argmax_Q")),
    FailureMode("draft_policy_not_in_q", "the draft samples top-k = 2 logits but reports the raw softmax as q",
                "transformers #47932", DecoderSpec(propose="top2_Q")),
    FailureMode("target_policy_missing", "top-p = 0.8 reaches the draft but the target is scored at top_p = 1",
                "vLLM #9834 / PR #10198", DecoderSpec(policy=_TOP_P, policy_on_target=False)),
    FailureMode("softmax_residual", "the residual is softmax([p - q]_+) instead of [p - q]_+ / sum",
                "transformers PR #28508", DecoderSpec(residual="softmax")),
    FailureMode("single_token_residual", "a rejection removes only the rejected token from p, not q everywhere",
                "SafeAILab/EAGLE #20", DecoderSpec(residual="single_token")),
    FailureMode("reused_uniform", "the residual draw reuses the acceptance uniform, which is U(a, 1) after a rejection",
                "vLLM PR #47386 / #54282; vllm-ascend PR #16370", DecoderSpec(residual_uniform="reused")),
    FailureMode("rejected_kept", "the rejected proposal is left in the output before the correction",
                "lucidrains/speculative-decoding #3", DecoderSpec(keep_rejected=True)),
    FailureMode("first_unverified", "the first proposal of every block is committed without verification",
                "ohdearquant/lattice #243 / PR #258", DecoderSpec(verify_first=False)),
    FailureMode("bonus_from_draft", "after a full block the bonus token is drawn from the draft, not the target",
                "constructed for the course (no public report found)", DecoderSpec(bonus="draft"),
                origin="the course"),
    FailureMode("stale_draft_fresh_q", "the draft samples from a stale state but q is recomputed at the true prefix",
                "the post, Act II (a stale draft cache read with the wrong q)", DecoderSpec(
                    draft_context="own_last_proposal", ratio_context="committed"), origin="the post"),
    FailureMode("stale_draft_cache", "the draft cache is not trimmed after a rejection, and q is recorded as sampled",
                "mlx-lm PR #1109; vLLM #4212 / PR #5765", DecoderSpec(draft_context="own_last_proposal"),
                exact=True),
    FailureMode("draft_rewound_too_far", "the draft cache is rewound one token too far, and q is recorded as sampled",
                "lablup/mlxcel #994 / PR #1002", DecoderSpec(draft_context="one_too_far"), exact=True),
    FailureMode("match_acceptance", "accept while a target sample equals the proposal, emit the sample at a mismatch",
                "course notes: match-based acceptance of a sampled draft", DecoderSpec(acceptance="match"),
                exact=True, origin="the course"),
]
MODES: dict[str, FailureMode] = {m.name: m for m in _MODES}


def failure_modes() -> list[FailureMode]:
    """Every registered decoder mode, the correct one first."""
    return list(_MODES)


def spec_tables(spec: DecoderSpec, P: torch.Tensor, Q: torch.Tensor, Q_bad: torch.Tensor | None):
    """(target, propose, ratio, draft) tables for a spec: the policy applied as the spec says, then the draft's bug."""
    policy = dict(spec.policy)
    target = policy_table(P, **policy) if spec.policy_on_target else P
    Q = policy_table(Q, **policy)
    Q_bad = None if Q_bad is None else policy_table(Q_bad, **policy)
    tables = {"Q": Q, "Q_bad": Q_bad,
              "argmax_Q": None if Q is None else torch.nn.functional.one_hot(Q.argmax(-1), Q.shape[-1]).to(Q.dtype),
              "top2_Q": None if Q is None else policy_table(Q, top_k=2)}
    return target, tables[spec.propose], tables[spec.ratio], Q


@dataclass(frozen=True)
class QContract:
    """Does a drafter's empirical output match the q it reports? Worst state's TV against the noise bound."""

    tv: float
    bound: float
    state: int  # the draft state with the largest TV

    @property
    def holds(self) -> bool:
        return self.tv <= self.bound


def check_q_contract(sample_proposals, reported_q: torch.Tensor, n: int,
                     generator: torch.Generator | None = None) -> QContract:
    """Draw n proposals per draft state with sample_proposals(states (n,), generator) -> tokens (n,) and compare
    their frequencies with reported_q[state] (V, V); the bound keeps the false-alarm rate below 1e-6 overall."""
    from .noise import tv_noise_bound
    from .sampling import empirical

    V = reported_q.shape[0]
    worst = QContract(tv=-1.0, bound=0.0, state=0)
    for state in range(V):
        tokens = sample_proposals(torch.full((n,), state, dtype=torch.long), generator)
        tv = 0.5 * (empirical(tokens, V) - reported_q[state].double()).abs().sum().item()
        bound = tv_noise_bound(reported_q[state].double() / reported_q[state].double().sum(), n, delta=1e-6 / V)
        if tv - bound > worst.tv - worst.bound:
            worst = QContract(tv=tv, bound=bound, state=state)
    return worst
