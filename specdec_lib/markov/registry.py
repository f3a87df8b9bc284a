"""The registry of decoders: the correct one and every registered bug, each a DecoderSpec with its story.

The field guide (02b) reads it: a mode's name, what it gets wrong, where it was reported (public code, the
post, or the course), and whether it costs correctness or only speed. `make_decoder` turns a mode and its
tables into the validated `Decoder` that every Markov engine (reference, batched, exact) runs.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, replace
from typing import ClassVar, Literal

import torch

from .._checks import check_choice, check_int
from ..policy import policy_table
from ..variant import Variant
from .chain import check_start, check_table
from .spec import Decoder, DecoderSpec, spec_tables

__all__ = ["Origin", "Chapter", "RESAMPLE", "FailureMode", "MODES", "failure_modes", "mode_spec", "make_decoder"]

Origin = Literal["paper", "public code", "the post", "the course"]
ORIGINS: tuple[str, ...] = Origin.__args__  # where a registered decoder comes from
Chapter = Literal["field guide", "bending the rules", "sampling surface", "optimal verification"]
# the part of the course an entry belongs to: 02b | 07 | the sampling surface (issue 25; no notebook yet) | 08
CHAPTERS: tuple[str, ...] = Chapter.__args__
RESAMPLE = ("argmax", "typical")  # typical acceptance's token after the prefix: Medusa fast=True | fast=False


@dataclass(frozen=True)
class FailureMode(Variant):
    """A registered decoder (a `Variant`): its spec, where it comes from, what a caller may set; `exact`: only speed
    is lost."""

    chapters: ClassVar[tuple[str, ...]] = CHAPTERS

    spec: DecoderSpec = field(default_factory=DecoderSpec)
    _: KW_ONLY
    origin: Origin = "public code"  # paper (the correct decoder) | public code | the post | the course
    chapter: Chapter = "field guide"  # field guide (02b) | bending the rules (07) | sampling surface | optimal ... (08)
    options: tuple[str, ...] = ()  # what a caller may set by name (make_decoder's options=)

    def __post_init__(self) -> None:
        super().__post_init__()
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
                "vllm-ascend PR #16370 / #16920; a related coupling, the draft's noise reused by the recovery draw: "
                "vLLM PR #54282, after #47386", DecoderSpec(residual_uniform="reused")),
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
_SGLANG = "sgl-project/sglang"
_TRANSFORMERS = "huggingface/transformers src/transformers/generation/candidate_generator.py @ 00a11b6"
_BENDING = [
    FailureMode("typical_acceptance", "keep y while p(y) > min(epsilon, delta exp(-H(p))); then argmax p (Medusa)",
                "FasterDecoding/Medusa medusa/model/utils.py evaluate_posterior, generate_candidates @ 2b89814 "
                "(fast=True; resample='typical' is get_typical_one_token), defaults 0.09, 0.3 in medusa_generate "
                "(medusa/model/medusa_model.py @ 60eeab9); vLLM PR #5131",
                DecoderSpec(acceptance="typical", residual="argmax", bonus="argmax"), chapter="bending the rules",
                options=("epsilon", "delta", "resample")),
    FailureMode("hf_schedule", "k + 2 after a fully accepted block, k - 1 after a rejection, within [k_min, k_max]",
                f"{_TRANSFORMERS}, update_candidate_strategy (schedule 'heuristic'); PR #28759",
                DecoderSpec(schedule="hf"), exact=True, chapter="bending the rules", options=("k_min", "k_max")),
    FailureMode("confidence_stop", "drafting stops after a token whose draft probability q(y) is below a threshold",
                f"{_TRANSFORMERS}, assistant_confidence_threshold (ConfidenceCriteria); PR #33258",
                DecoderSpec(stop="confidence"), exact=True, chapter="bending the rules", options=("confidence",)),
    FailureMode("coin_peeking", "drafting stops just before a proposal that would be rejected (it reads the coin)",
                "constructed for the course: a negative control (no public decoder found doing it)",
                DecoderSpec(stop="coin"), origin="the course", chapter="bending the rules"),
    FailureMode("ngram_lookup", "propose what followed the latest earlier occurrence of the current token, one-hot",
                f"{_TRANSFORMERS}, PromptLookupCandidateGenerator (it takes the earliest match: "
                "ngram_match='earliest'); PR #27775", DecoderSpec(proposer="ngram", acceptance="match"), exact=True,
                chapter="bending the rules", options=("ngram_match",)),
    FailureMode("sglang_threshold", "a greedy draft is kept when p(y) >= threshold_single or u <= p(y) / "
                "threshold_acc; a rejection samples p without y (SGLang; exact at its defaults 1.0, 1.0)",
                f"{_SGLANG} sgl-kernel/csrc/speculative/speculative_sampling.cuh TreeSpeculativeSamplingTargetOnly "
                "@ 120affb (the same loop @ b227f63), called by python/sglang/srt/speculative/eagle_info.py "
                "EagleVerifyInput.verify @ 0007d13 (draft_probs zeros); drafts: fast_topk of the draft softmax in "
                "eagle_worker.py draft_forward @ 00559ea; threshold arguments since PR #4383",
                DecoderSpec(propose="argmax_Q", acceptance="threshold", residual="single_token"), exact=True,
                chapter="bending the rules", options=("threshold_single", "threshold_acc")),
]
_SURFACE = [
    FailureMode("bonus_only_processors", "min_p = 0.3 reaches the draft and the bonus token, but the target rows that "
                "judge proposals (and so the residual) are scored without it",
                "vLLM #42744 / PR #42802 (open): vllm/v1/sample/rejection_sampler.py RejectionSampler.forward "
                "@ 7f6fc1c (apply_logits_processors and apply_sampling_constraints never run "
                "logitsprocs.argmax_invariant, where min_p lives; the bonus row goes through Sampler in "
                "vllm/v1/sample/sampler.py @ 3e34265); a later guard (_validate_spec_decode; its commit not pinned "
                "here) refuses min_p and logit_bias with speculative decoding",
                DecoderSpec(policy=(("min_p", 0.3),), policy_on_target=False, bonus="processed_target"),
                chapter="sampling surface"),
]
_ASCEND = "vllm-project/vllm-ascend"
_OPTIMAL = [
    FailureMode("block_verification", "the k proposals judged together: row i passes with h_i, the last passing row "
                "wins, then max(p_tau P - Q, 0) (never fewer tokens than the token rule, still exact)",
                "Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, Block Verification Accelerates Speculative "
                "Decoding (ICLR 2025, arXiv 2403.10444); public implementation: vllm-project/vllm "
                "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py @ 02e318b (Model Runner V2, "
                "rejection_sample_method='block', PR #46781)", DecoderSpec(verifier="block"), exact=True,
                origin="paper", chapter="optimal verification"),
    FailureMode("block_verification_naive", "vllm-ascend's wrong port as its kernel reads a sampled draft (the "
                "NO_DRAFT_PROBS=False branch, which no caller reached): the running weight pi_i kept, but row i "
                "passes iff the running product of the uniforms is <= pi_i (no h_i), then the ordinary residual "
                "max(P - Q, 0)",
                f"{_ASCEND} vllm_ascend/ops/triton/reject_sample.py rejection_random_sample_block_verify_kernel "
                "@ 8763953 (PR #5542; unchanged @ 66d966b; fixed by PR #7808 @ 2f4d55e, issue #7807; first proposed "
                "in PR #3794): what the kernel would do if a caller passed draft probabilities; every caller passed "
                "draft_probs=None (vllm_ascend/worker/model_runner_v1.py _sample @ 8763953 and @ 66d966b), so the "
                "shipped form is block_verification_naive_argmax", DecoderSpec(verifier="block_naive"),
                chapter="optimal verification"),
    FailureMode("block_verification_naive_argmax", "vllm-ascend's wrong port as it ran: a one-hot draft (the draft's "
                "argmax) read with draft probability 1, so pi_i is the product of P_j(X_j); row i passes iff "
                "eta_1 ... eta_i <= pi_i, the last passing row wins, and a stop draws P without the rejected draft",
                f"{_ASCEND} vllm_ascend/ops/triton/reject_sample.py rejection_random_sample_block_verify_kernel "
                "NO_DRAFT_PROBS branch and sample_recovered_tokens_kernel @ 8763953 (PR #5542), called with "
                "draft_probs=None by vllm_ascend/worker/model_runner_v1.py _sample @ 8763953; drafts logits.argmax in "
                "vllm_ascend/spec_decode/eagle_proposer.py and mtp_proposer.py @ 8763953; reached for non-greedy "
                "requests when max_spec_len >= 3 (vllm_ascend/sample/rejection_sampler.py) until PR #7603 "
                "@ 7be6291c (2026-03-31) required draft_probs is not None",
                DecoderSpec(verifier="block_naive", propose="argmax_Q", ratio="argmax_Q"),
                chapter="optimal verification"),
]
MODES: dict[str, FailureMode] = {m.name: m for m in _MODES + _BENDING + _SURFACE + _OPTIMAL}


def failure_modes(chapter: str | None = "field guide") -> list[FailureMode]:
    """The registered decoders of one chapter (None: every chapter), the correct one first."""
    if chapter is not None:
        check_choice("chapter", chapter, CHAPTERS)
    return [m for m in MODES.values() if chapter is None or m.chapter == chapter]


def mode_spec(mode: str, options: dict | None = None) -> DecoderSpec:
    """A registered mode's spec with the caller's options set; an option the mode does not take raises."""
    m = MODES[check_choice("mode", mode, tuple(MODES))]
    if options is None:
        return m.spec
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict of option name -> value, got {type(options).__name__}")
    changes = {}
    for name, value in options.items():
        if name not in m.options:
            valid = ", ".join(map(repr, m.options)) or "none"
            raise ValueError(f"mode {mode!r} takes the options {valid}; got {name!r}")
        if name == "resample":  # one option, two fields: the token after a rejection and after a full block
            changes.update(residual=check_choice("resample", value, RESAMPLE), bonus=value)
        else:
            changes[name] = value
    return replace(m.spec, **changes)


def make_decoder(P, Q, *, start, horizon, k, mode, Q_bad=None, temperature=1.0, top_k=None,  # noqa: PLR0913 (the Markov engines' one shared signature)
                 top_p=None, options: dict | None = None) -> Decoder:
    """Validate a decoder's arguments and build its tables: the one entry point of every Markov engine."""
    P, Q = check_table("P", P), check_table("Q", Q)
    if Q.shape != P.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    spec = mode_spec(mode, options)
    if "Q_bad" in (spec.propose, spec.ratio):
        if Q_bad is None:
            raise ValueError(f"mode {mode!r} needs Q_bad, the second draft table")
        Q_bad = check_table("Q_bad", Q_bad)
        if Q_bad.shape != P.shape:
            raise ValueError(f"Q_bad must have the shape of P {tuple(P.shape)}, got {tuple(Q_bad.shape)}")
    start = check_start(start, P.shape[0])
    horizon = check_int("horizon", horizon, minimum=1)
    k = check_int("k", k, minimum=0)
    if spec.schedule == "hf" and not spec.k_min <= k <= spec.k_max:
        raise ValueError(f"k (the schedule's first k) must lie in [k_min, k_max] = [{spec.k_min}, {spec.k_max}], "
                         f"got {k}")
    policy = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    P, Q, Q_bad = (None if t is None else policy_table(t, **policy) for t in (P, Q, Q_bad))
    return Decoder(spec, *spec_tables(spec, P, Q, Q_bad), start=start, horizon=horizon, k=k)
