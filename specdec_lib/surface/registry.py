"""The field guide's sampling-surface chapter: the reference loop's variants, the correct one and each shipped bug.

Each `LoopVariant` is one `LoopSpec` (the reference loop, `loop.speculate`, with one or two of its per-token
states handled as a serving stack shipped them) and its story: what it gets wrong, where it was read (repository,
file and commit, or a release read in its published wheel), and which settings must be on for it to matter
(`needs`: at least one of these `Settings.features` names on, or the variant's law is plain's). `what` says what it
corrupts: the output law (`"law"`: the exact TV of `exact.speculative_law` to `exact.plain_law`, texts with their
stop reasons) or only the reported logprobs (`"logprobs"`: `exact.logprob_error`, the exact chance that a reported
value is wrong). Most pair their bug with first_token="plain": those stacks sample the first token at prefill.
`variant_table(cases)` gives every variant's exact error on given cases; the kit's battery supplies them, but this
module never imports the kit.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import ClassVar, Literal

from .._checks import check_choice, check_int
from ..variant import Variant
from .exact import law_tv, logprob_error, plain_law, speculative_law
from .loop import LoopSpec
from .settings import FEATURES

__all__ = ["LoopVariant", "VariantScore", "VARIANTS", "loop_variants", "variant", "variant_error", "variant_table"]

What = Literal["law", "logprobs"]
WHATS: tuple[str, ...] = What.__args__
CHAPTER = "sampling surface"  # markov.registry.CHAPTERS' name for this chapter


@dataclass(frozen=True)
class LoopVariant(Variant):
    """A registered variant of the reference loop (a `Variant` whose reference, unless exact, cites "owner/repo path
    @ sha (PR #N)": the code read, at the commit or release tag read): its spec, what it corrupts, what it needs;
    `exact`: the output law and the reported logprobs are plain decoding's."""

    chapters: ClassVar[tuple[str, ...]] = (CHAPTER,)
    must_cite: ClassVar[bool] = True

    spec: LoopSpec = field(default_factory=LoopSpec)
    _: KW_ONLY
    what: What = "law"  # what it corrupts: the output law, or only the reported logprobs
    needs: tuple[str, ...] = ()  # Settings.features names; with none on it is exact ("max_new_tokens": always on)
    chapter: str = CHAPTER

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("what", self.what, WHATS)
        for name in self.needs:
            check_choice("needs", name, FEATURES)
        if not isinstance(self.spec, LoopSpec):
            raise TypeError(f"spec must be a LoopSpec, got {type(self.spec).__name__}")

    def matters(self, settings) -> bool:
        """Whether `settings` switch on a feature this variant needs (when not, its law is plain's)."""
        return bool(set(self.needs) & set(settings.features))


_PENALTIES = ("repetition_penalty", "frequency_penalty", "presence_penalty")
_SGLANG, _VLLM = "sgl-project/sglang", "vllm-project/vllm"
_VLLM_SAMPLER = f"{_VLLM} vllm/v1/sample/rejection_sampler.py"
_PLAIN_FIRST = "the first token comes from the plain prefill step"
_VARIANTS: list[LoopVariant] = [
    LoopVariant("correct", "each drafted position judged with the state its own prefix produces (penalty counts, "
                "processors, automaton state, EOS and length), logprobs the target's processed values",
                "the course's reference loop (specdec_lib/surface/loop.py); Leviathan et al. 2023", exact=True),
    LoopVariant("penalties_last_commit", "penalty counts as of the round start, fed only the last committed token "
                "of each round: accepted drafts never reach the penalisers and no row sees the drafts before it "
                f"({_PLAIN_FIRST})",
                f"{_SGLANG} python/sglang/srt/speculative/eagle_utils.py eagle_prepare_for_decode + eagle_sample "
                "@ 003ddbce039cd49b05c84568b7b357031366abf7 (one penalty vector repeat_interleaved to every verify "
                "row; ScheduleBatch.cumulate_penalty_output_tokens feeds req.output_ids[-1]; the same relaxed rule in "
                "spec v1, eagle_worker.py @ 00559ea; PR #33643, open)",
                LoopSpec(first_token="plain", penalties="last_commit"), needs=_PENALTIES),
    LoopVariant("sampler_on_bonus_only", "the rows that judge drafts see only temperature, top_k and top_p: "
                "penalties, bans, logit_bias and min_p reach only the bonus token, whose penalties and bans count "
                f"the text before the round ({_PLAIN_FIRST}; frequency penalty silently ignored with EAGLE)",
                f"{_VLLM_SAMPLER} compute_probs @ 0097a7bbf1d91c71f03e35dc6c6fe978b88181f5 (temperature, "
                "apply_top_k_top_p, softmax; the bonus drawn by the Sampler with the committed output only; "
                "the same path in the v0.11.0 wheel; issue #18902, fixed by PR #19482)",
                LoopSpec(first_token="plain", processors="bonus_only_all"),
                needs=(*_PENALTIES, "no_repeat_ngram_size", "bad_words", "logit_bias", "min_p")),
    LoopVariant("bonus_only_processors", "min_p and logit_bias reach only the bonus token: the target rows that "
                f"judge the proposals (and so the residual) are scored without them ({_PLAIN_FIRST})",
                f"{_VLLM_SAMPLER} RejectionSampler.forward @ 7f6fc1c5ce8d02f473b1b923debbfef3fa0b7a6a "
                "(apply_logits_processors runs penalties, allowed ids and bad words but no logitsprocs; "
                "apply_sampling_constraints: temperature, top_k, top_p; the same in the v0.12.0 wheel, with no "
                "spec-decode guard in sampling_params.py; issue #42744, PR #42802 open)",
                LoopSpec(first_token="plain", processors="bonus_only"), needs=("min_p", "logit_bias")),
    LoopVariant("penalties_ignored", "the speculative path never applies repetition, presence or frequency "
                "penalties: every drafted position, residual and bonus token is drawn from the unpenalised target",
                "NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/one_model_sampler.py "
                "sampling_batch_spec_dec_one_model @ 79b81f8e62384c26977212115a6332b223aaac0c (temperature, top_k, "
                "top_p only; greedy path mtp.py @ 23ee85e; fixed by PR #17701, penalty_ops.py @ a7c5ad6)",
                LoopSpec(penalties="ignored"), needs=_PENALTIES),
    LoopVariant("bias_min_p_ignored", "logit_bias and min_p never reach the verify rows: only the first token "
                "(sampled at prefill) honours them",
                f"{_SGLANG} python/sglang/srt/speculative/eagle_info.py EagleVerifyInput.verify "
                "@ 0007d13b0099d8b0b42b74b19fc4b16b8ce1dd3a (softmax / top_k_renorm / top_p_renorm; logit_bias only "
                "inside the penalty branch; issue #10617, logit_bias fixed by PR #11555)",
                LoopSpec(first_token="plain", processors="ignored"), needs=("min_p", "logit_bias")),
    LoopVariant("grammar_ignored", "with speculation on, the grammar masks no row (draft, judged, residual, bonus, "
                "first token) and its matcher never advances",
                "InternLM/lmdeploy lmdeploy/pytorch/spec_decode/spec_agent.py _rejection_sampling "
                "@ 99c215fb005263031198824ad83bcd902c9d05ec (FusedLogitsProcessor built without the guided "
                "decoding manager; agent.py returns to the spec agent before accept_guided_tokens; issue #4551, "
                "fixed by PR #4559 @ 850fc5a)",
                LoopSpec(grammar="ignored"), needs=("grammar",)),
    LoopVariant("eos_run_past", "a block drafter that does not stop at EOS, and a stop check that reads only the "
                "last committed token: an EOS accepted mid-block stays in the text and generation runs on past it "
                f"({_PLAIN_FIRST})",
                "huggingface/transformers src/transformers/generation/utils.py GenerationMixin._assisted_decoding "
                "@ v5.15.0 (PyPI wheel: the whole block is committed, then stopping_criteria(input_ids, scores) "
                "with EosTokenCriteria's default new_token_length=1; is_done_candidate drops the bonus only after "
                "a final EOS draft; MTPCandidateGenerator.get_candidates in candidate_generator.py drafts "
                "num_mtp_layers tokens with no EOS check; issue #47912, fixed by PR #47931: 5.24.0 crops at the "
                "first EOS)",
                LoopSpec(first_token="plain", eos="run_past"), needs=("eos",)),
    LoopVariant("length_checked_first", "the length cap is checked before the stop token: a round that reaches "
                "max_new_tokens is cut at the cap and stops as 'length', an EOS accepted inside it and the tokens "
                f"after it included ({_PLAIN_FIRST})",
                f"{_SGLANG} python/sglang/srt/managers/schedule_batch.py Req.check_finished "
                "@ fd3907ee4618e96b73ee94d9a836db78efb5d046 (len(output_ids) >= max_new_tokens returns "
                "FINISH_LENGTH before _check_token_based_finish scans the accepted run; issue #31599, fixed by "
                "PR #33758)",
                LoopSpec(first_token="plain", length="checked_first"), needs=("eos",)),
    LoopVariant("logprobs_zero", "every token a speculative round commits reports logprob 0.0 (p = 1); only the "
                "first token, from the plain prefill step, reports its value",
                "ggml-org/llama.cpp tools/server/server-context.cpp update_slots "
                "@ fb4026604c67c682f552337ec9b91eced0abd35a (result.prob = 1.0f; // set later, never set on the "
                "speculative path; issue #27972); the same in vllm-project/vllm vllm/spec_decode/"
                "spec_decode_worker.py _create_dummy_logprob_lists @ a4aeba173c6b5f488684d738c41ca7ea4e66d4cf "
                "(issue #17876)",
                LoopSpec(first_token="plain", logprobs="zero"), what="logprobs", needs=("max_new_tokens",)),
    LoopVariant("logprobs_raw_bonus", "accepted drafts and residuals report the processed target's logprobs, the "
                "bonus token the raw model's: two distributions in one text (vLLM's default raw_logprobs mode got "
                "in-place processed rows at drafted positions; read here against the processed reference, so the "
                f"bonus is the wrong one; {_PLAIN_FIRST})",
                f"{_VLLM_SAMPLER} RejectionSampler.forward, _get_logprobs_tensors @ v0.12.0 (PyPI wheel: "
                "raw_target_logits goes through apply_logits_processors and apply_sampling_constraints, which "
                "write in place (div_ temperature, masked_fill_ top-k), with no clone; the bonus Sampler returns "
                "raw_logits; fixed by PR #30846, the clone @ 7f6fc1c5ce8d02f473b1b923debbfef3fa0b7a6a)",
                LoopSpec(first_token="plain", logprobs="raw_bonus"), what="logprobs",
                needs=tuple(f for f in FEATURES if f not in ("eos", "max_new_tokens"))),
]
VARIANTS: dict[str, LoopVariant] = {v.name: v for v in _VARIANTS}
if len(VARIANTS) != len(_VARIANTS):
    raise ValueError("registered loop variants must have unique names")


def loop_variants(*, exact: bool | None = None) -> tuple[LoopVariant, ...]:
    """The registered variants, the correct loop first; exact=True / False keeps only the exact / the buggy ones."""
    if exact is not None and not isinstance(exact, bool):
        raise TypeError(f"exact must be None or a bool, got {type(exact).__name__}")
    return tuple(v for v in VARIANTS.values() if exact is None or v.exact == exact)


def variant(name: str) -> LoopVariant:
    """The variant registered as `name`; an unknown name raises ValueError listing the valid ones."""
    return VARIANTS[check_choice("name", name, tuple(VARIANTS))]


def _error(v: LoopVariant, target, draft, prompt, settings, k: int, plain: dict | None) -> float:  # noqa: PLR0913 (a case's five parts)
    if v.what == "logprobs":
        return float(logprob_error(target, draft, prompt, settings, k=k, spec=v.spec))
    plain = plain_law(target, prompt, settings, with_stop=True) if plain is None else plain
    return float(law_tv(speculative_law(target, draft, prompt, settings, k=k, spec=v.spec, with_stop=True), plain))


def _as_variant(v) -> LoopVariant:
    if isinstance(v, str):
        return variant(v)
    if not isinstance(v, LoopVariant):
        raise TypeError(f"a variant must be a LoopVariant or a registered name, got {type(v).__name__}")
    return v


def variant_error(v: LoopVariant | str, target, draft, prompt, settings, *, k: int) -> float:  # noqa: PLR0913 (a case's five parts, as the kit's fn contract)
    """The variant's exact error on one case: TV of its output law to plain's, or P(a logprob is reported wrong)."""
    return _error(_as_variant(v), target, draft, prompt, settings, check_int("k", k, minimum=1), None)


@dataclass(frozen=True)
class VariantScore:
    """One variant on one case: the case's index and features, and the exact error (TV, or P(wrong logprob))."""

    variant: str
    case: int
    features: tuple[str, ...]
    what: What
    error: float


def _parts(case) -> tuple:
    """A case's (target, draft, prompt, settings, k): a 5-tuple, or an object with those attributes."""
    if isinstance(case, tuple) and len(case) == 5:
        return case
    try:
        return case.target, case.draft, case.prompt, case.settings, case.k
    except AttributeError:
        raise TypeError("a case must be a tuple (target, draft, prompt, settings, k) or have those attributes, "
                        f"got {type(case).__name__}") from None


def variant_table(cases: Iterable, *, variants: Iterable[LoopVariant | str] | None = None) -> tuple[VariantScore, ...]:
    """Every variant's (default: every registered one, the correct first) exact error on every case, case by case."""
    chosen = loop_variants() if variants is None else tuple(_as_variant(v) for v in variants)
    rows = []
    for i, case in enumerate(cases):
        target, draft, prompt, settings, k = _parts(case)
        k = check_int(f"cases[{i}].k", k, minimum=1)
        plain = plain_law(target, prompt, settings, with_stop=True) if any(v.what == "law" for v in chosen) else None
        rows += [VariantScore(v.name, i, tuple(settings.features), v.what,
                              _error(v, target, draft, prompt, settings, k, plain)) for v in chosen]
    return tuple(rows)
