"""Many drafts at one position: every registered rule, its exact output law and its sampler (Act V), and the most any
exact verifier can keep of the drafts, every rule beside it (Act VI).

A rule draws num_drafts drafts from q and tests them against the target p. The exact ones (SpecInfer's multi-step
speculative sampling, recursive rejection sampling without replacement, the two forms of EAGLE-2 / SGLang one-hot
verification, SpecTr's K-SEQ and SpecHub) emit exactly p; the wrong ones are mistakes a careful reader could make, or
a public code's departure from its own rule, each with its story.
`multidraft_law` computes the emitted token's law with no sampling, by enumerating the drafts' outcomes
(multidraft_rules, the one definition of how each verifier tests its drafts).

The optimum: an exact verifier couples the draft tuple X = (X_1..X_n), drawn by its scheme, with an output Y ~ p; it
keeps a draft at most when Y is one of them, so its acceptance is at most max P(Y in X) over all couplings (Hu et al.
2025, arXiv 2502.18779, study this linear programme). That maximum is a max-flow from the tuples (capacity P(X = x))
through "token y is in x" (unbounded) to the tokens (capacity p(y)), and by max-flow / min-cut it equals

    min over token sets A of  p(A) + 1 - P(every draft lies in A),

the cut that severs the tokens in A and the tuples with a draft outside A. Every one of the 2^V sets is enumerated,
so the vocabulary is capped (MAX_VOCAB). P(every draft in A) is q(A)^n for i.i.d. drafts, a recursion over the sets
already drawn for drafts without replacement, 1[q's top n lie in A] for "top", and for SpecHub's hub pair
1[a in A] q(A - a) / (1 - q(a)).
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import ClassVar

import torch

from ._checks import check_choice, check_generator, check_int, check_pair
from .multidraft_draws import MAX_DRAFTS, check_draws, top_order
from .multidraft_rules import Hub, KSeq, Stages, StepLaw, Verifier, Walk, count_outcomes, step_law, step_sample
from .variant import Variant

__all__ = ["MAX_TABLE", "CHUNK", "CHAPTERS", "MultiDraftRule", "RULES", "multidraft_rules", "multidraft_law",
           "multidraft_accept_probability", "acceptance_table", "sample_multidraft", "MAX_VOCAB", "token_sets",
           "all_drafts_in", "multidraft_optimum", "OptimumRow", "optimum_table"]

MAX_TABLE = 4_000_000  # the exact law holds (draft tuples) x (vocabulary) numbers at most
CHUNK = 1 << 22  # the sampler holds at most about this many numbers per row block


CHAPTERS = ("many drafts", "optimal verification")  # Act V (notebook 06) | Act VI (notebook 08)
ACT6 = CHAPTERS[1]


@dataclass(frozen=True)
class MultiDraftRule(Variant):
    """A registered rule (a `Variant`): how it drafts and tests; `exact`: it emits exactly p."""

    chapters: ClassVar[tuple[str, ...]] = CHAPTERS

    verifier: Verifier
    _: KW_ONLY
    chapter: str = "many drafts"

    @property
    def max_drafts(self) -> int | None:
        """The most drafts the rule's scheme draws (SpecHub's pair: 2), None when any number works."""
        return MAX_DRAFTS.get(self.verifier.draws)

    @property
    def nested(self) -> bool:
        """True when stage i reads drafts 1..i only, whatever num_drafts is (what a tree of any shape needs)."""
        return not isinstance(self.verifier, (KSeq, Hub))


_EAGLE1 = "SafeAILab/EAGLE model/utils.py evaluate_posterior @38d5327fc33af3bed46914fce5b88932fcaa9a26"
_EAGLE2 = "SafeAILab/EAGLE eagle/model/utils.py evaluate_posterior @8009b6d89d725ff8322728390f049c0f1fd7e04b"
_SPECTR = ("Sun, Suresh, Ro, Beirami, Jain, Yu, SpecTr (NeurIPS 2023, arXiv 2310.15141), K-SEQ (the paper's p is "
           "the draft, q the target): rho* in [1, n] solves 1 - (1 - beta(rho))^n = rho beta(rho), beta(rho) = "
           "sum min(q, p / rho); restated in mylittleriver/fairness-spec-decoding SpecTr.md "
           "@ebf8d112f76cb9e7b03c505c7d86aa5ffe08c73c (the algorithm box itself not read; no public implementation "
           "found; the leftover law is the one that makes the output p)")
_SPECHUB = ("Sun, Zhou, Chen, Sun, SpecHub (EMNLP 2024, arXiv 2411.05289): MasterGodzilla/Speculative_decoding_OT "
            "EAGLE/eagle/model/cnets.py sample and EAGLE/eagle/model/utils.py evaluate_posterior, mode 'spechub' "
            "@7d592b70e954bb1fb48516a5628f9c3439645464")
_SGLANG = ("sgl-project/sglang sgl-kernel/csrc/speculative/speculative_sampling.cuh "
           "TreeSpeculativeSamplingTargetOnly @120affb9613cc3f5bcd055ec09c7621d3ced0ebc")

_RULES = [
    MultiDraftRule("mss", "n i.i.d. drafts from q; keep x_i with min(1, p_i/q), else p_{i+1} = norm([p_i - q]_+)",
                   "SpecInfer multi-step speculative sampling (Miao et al. 2023, arXiv 2305.09781)",
                   Stages("iid", ratio="q", residual="q"), exact=True),
    MultiDraftRule("rrs", "drafts without replacement; stage i divides by and subtracts q_i (q without earlier drafts)",
                   "Jeon et al. 2024 (arXiv 2402.14160); Sequoia (arXiv 2402.12374); EAGLE-1: " + _EAGLE1
                   + " (the node rule: the residual subtracts q with the earlier siblings, b_indices, masked and "
                   "renormalised; the tree walk around it is modelled at three commits of main in markov/tree_bugs); "
                   "SafeAILab/EAGLE #74 (the drafts' q is renormalised: they are drawn without replacement)",
                   Stages("without_replacement", ratio="q_i", residual="q_i"), exact=True),
    MultiDraftRule("onehot_sequential", "q's top-n tokens as point masses; keep x_i with p_i(x_i), else drop it from p",
                   "EAGLE-2 (arXiv 2406.16858): " + _EAGLE2 + " (qx = 1.0; gtp[xi] = 0 and renormalise after a "
                   "rejection); SafeAILab/EAGLE #93, #183", Stages("top", ratio="onehot", residual="onehot"),
                   exact=True),
    MultiDraftRule("onehot_walk", "q's top-n tokens; one uniform walked along their cumulative target mass, "
                   "beyond it p without them", _SGLANG + " (one coin per depth against the running sum of the "
                   "children's target probabilities, at its default thresholds of 1; at the end relu(target - draft) "
                   "with the tried children's draft entries set to their target probabilities)", Walk("top"),
                   exact=True),
    MultiDraftRule("walk_duplicate_siblings", "SGLang's walk fed n i.i.d. drafts: a repeated token owns two slices",
                   "constructed: " + _SGLANG + " adds each sibling's target probability with no duplicate check, "
                   "which is safe for its distinct top-k siblings; " + _EAGLE2 + " skips repeats "
                   "(`if xi in candidates_set`)", Walk("iid")),
    MultiDraftRule("rrs_residual_next_q", "rrs, but the rejected draft is removed from q before the residual is taken",
                   "constructed (an ordering mistake a careful reader could make); " + _EAGLE1 + " masks only the "
                   "earlier siblings (b_indices[j][i]) before `gtp = gtp - q`",
                   Stages("without_replacement", ratio="q_i", residual="q_next")),
    MultiDraftRule("rrs_original_q", "drafts without replacement, but divided by and subtracted as the original q",
                   "constructed: the question of SafeAILab/EAGLE #74 (top-k drafts with the unadjusted softmax q); "
                   "the maintainer's answer: the actual distribution each draft is drawn from is needed",
                   Stages("without_replacement", ratio="q", residual="q")),
    MultiDraftRule("accept_first_pass", "n i.i.d. drafts each judged against the original p; first pass kept, "
                   "else one residual norm([p - q]_+)", "constructed (a mistake a careful reader could make)",
                   Stages("iid", ratio="q", residual="none", final="first_residual")),
    MultiDraftRule("kseq", "n i.i.d. drafts; keep x_i with min(1, p/(rho q)), the same p at every test; all rejected: "
                   "norm(p - c min(q, p/rho))", _SPECTR, KSeq(), exact=True, chapter=ACT6),
    MultiDraftRule("spechub", "two drafts, the hub pair (x, a) or (a, x) around a = argmax q; the docstring's coupling "
                   "of pairs to tokens", _SPECHUB + " (the docstring's rule)", Hub(), exact=True, chapter=ACT6),
    MultiDraftRule("spechub_code", "spechub as its code runs: the hub is kept outright when p(a) > 1 - 1e-3",
                   _SPECHUB + " (`if gtp[a] > 1- 1e-3`: 'directly accept a', a line its docstring does not have)",
                   Hub(shortcut=1e-3), chapter=ACT6),
]
RULES: dict[str, MultiDraftRule] = {r.name: r for r in _RULES}


def multidraft_rules(chapter: str | None = "many drafts") -> list[MultiDraftRule]:
    """The registered multi-draft rules of one chapter (None: every chapter, in course order), the exact ones first."""
    if chapter is not None:
        check_choice("chapter", chapter, CHAPTERS)
    return [r for r in _RULES if chapter is None or r.chapter == chapter]


def _pair(p, q, num_drafts) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Validate (p, q, num_drafts); return p and q in float64, renormalised, with num_drafts."""
    p, q = check_pair(p, q)
    num_drafts = check_int("num_drafts", num_drafts, minimum=1)
    p, q = p.double(), q.double()
    return p / p.sum(), q / q.sum(), num_drafts


def _check(p, q, num_drafts, rule) -> tuple[torch.Tensor, torch.Tensor, int, MultiDraftRule]:
    """Validate (p, q, num_drafts, rule); return p and q in float64, renormalised, with num_drafts and the rule."""
    p, q, num_drafts = _pair(p, q, num_drafts)
    check_choice("rule", rule, tuple(RULES))
    r = RULES[rule]
    if r.max_drafts is not None and num_drafts > r.max_drafts:
        raise ValueError(f"rule {rule!r} draws at most {r.max_drafts} drafts (its scheme {r.verifier.draws!r}), "
                         f"got num_drafts = {num_drafts}")
    return p, q, num_drafts, r


def _exact(p, q, num_drafts, rule) -> StepLaw:
    """The kept child's and the fallback's law of a validated rule, by enumeration."""
    p, q, num_drafts, r = _check(p, q, num_drafts, rule)
    count = count_outcomes(q, num_drafts, r.verifier.draws)
    if count * p.numel() > MAX_TABLE:
        raise ValueError(f"num_drafts = {num_drafts} gives {count} draft outcomes over q's {int((q > 0).sum())} "
                         f"tokens, a table of {count * p.numel()} numbers; the exact law holds at most {MAX_TABLE}: "
                         "use a smaller num_drafts or V")
    return step_law(p, q, num_drafts=num_drafts, verifier=r.verifier)


def multidraft_law(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, rule: str) -> torch.Tensor:
    """Exact law (V,) float64 of the token one multi-draft step emits, for target p, draft q and num_drafts drafts."""
    return _exact(p, q, num_drafts, rule).law


def multidraft_accept_probability(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, rule: str) -> float:
    """Exact probability that one of the num_drafts drafts is kept (the emitted token is not a fallback draw)."""
    return _exact(p, q, num_drafts, rule).accept


def acceptance_table(p: torch.Tensor, q: torch.Tensor, *, max_drafts: int = 5,
                     chapter: str | None = "many drafts") -> dict[str, list[float]]:
    """{rule: [P(a draft kept) for num_drafts = 1..max_drafts]} for the rules of a chapter (None: all), exactly; a
    rule's row stops at its own max_drafts."""
    max_drafts = check_int("max_drafts", max_drafts, minimum=1)
    return {r.name: [multidraft_accept_probability(p, q, num_drafts=n, rule=r.name)
                     for n in range(1, min(max_drafts, r.max_drafts or max_drafts) + 1)]
            for r in multidraft_rules(chapter)}


def sample_multidraft(p: torch.Tensor, q: torch.Tensor, *, num_drafts: int, num_samples: int, rule: str,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """num_samples tokens (num_samples,) from independent multi-draft steps: num_drafts drafts from q each, tested."""
    p, q, num_drafts, r = _check(p, q, num_drafts, rule)
    num_samples = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator)
    block = max(1, CHUNK // (p.numel() * (num_drafts + 1)))  # rows per block: i.i.d. drafts take (V,) cumsums each
    return torch.cat([step_sample(p, q, num_drafts=num_drafts, verifier=r.verifier, size=min(block, num_samples - s),
                                  generator=generator).token for s in range(0, num_samples, block)])



# --- the optimum: the most any exact verifier keeps of a draft scheme (see the module docstring) ----------------------

MAX_VOCAB = 16  # 2^16 token sets


def token_sets(V: int) -> torch.Tensor:
    """Every subset of V tokens as a row of membership flags (2^V, V): set s holds token x when bit x of s is 1."""
    return (torch.arange(1 << V)[:, None] >> torch.arange(V)) & 1 == 1


def _subset_sums(h: torch.Tensor, V: int) -> torch.Tensor:
    """f(A) = sum of h(S) over the sets S inside A, for every A (the zeta transform: a cumulative sum per token)."""
    f = h.reshape((2,) * V) if V else h
    for axis in range(V):
        f = f.cumsum(axis)
    return f.reshape(-1)


def _without_replacement(q: torch.Tensor, num_drafts: int, sets: torch.Tensor) -> torch.Tensor:
    """P(the drafts are exactly the set S) for every S (2^V,): h_j(S + x) += h_{j-1}(S) q(x) / q(not S)."""
    V, k = q.numel(), min(num_drafts, int((q > 0).sum()))
    rest = (~sets).double() @ q  # (2^V,) the mass not yet drawn: a sum, never 1 - q(S)
    h = torch.zeros(1 << V, dtype=torch.float64)
    h[0] = 1.0
    for _ in range(k):
        step = torch.where(rest > 0, h / torch.where(rest > 0, rest, 1.0), 0.0)  # (2^V,) h(S) / q(not S)
        new = torch.zeros_like(h)
        for x in range(V):
            src = (~sets[:, x]).nonzero().squeeze(1)  # the sets without x
            new.index_add_(0, src | (1 << x), step[src] * q[x])
        h = new
    return _subset_sums(h, V)


def all_drafts_in(q: torch.Tensor, num_drafts: int, draws: str) -> torch.Tensor:
    """P(every draft lies in A) for every token set A (2^V,), in the order of token_sets; q validated, float64."""
    sets = token_sets(q.numel())
    q_A = sets.double() @ q  # (2^V,)
    if draws == "iid" or (draws == "hub" and num_drafts == 1):
        return q_A ** num_drafts
    if draws == "top":
        return sets[:, top_order(q)[:num_drafts]].all(1).double()
    if draws == "without_replacement":
        return _without_replacement(q, num_drafts, sets)
    a = top_order(q)[0]  # hub pair: P(both in A) = 1[a in A] (q(A - a) + q(a) q(A - a) / q(not a))
    off = sets.clone()
    off[:, a] = False
    others = q[torch.arange(q.numel()) != a].sum()  # 1 - q(a), as the sum of the others
    if others <= 0:  # q a point mass on a: one draft
        return sets[:, a].double()
    return sets[:, a].double() * (off.double() @ q) / others


def multidraft_optimum(p: torch.Tensor, q: torch.Tensor, num_drafts: int, *, draws: str = "iid") -> float:
    """The largest P(a draft is kept) of any exact verifier of num_drafts drafts drawn from q by `draws`, target p."""
    p, q, num_drafts = _pair(p, q, num_drafts)
    check_draws(draws, num_drafts)
    V = p.numel()
    if V > MAX_VOCAB:
        raise ValueError(f"p and q have V = {V} tokens; multidraft_optimum enumerates the 2^V token sets and holds "
                         f"at most MAX_VOCAB = {MAX_VOCAB} tokens")
    p_A = token_sets(V).double() @ p
    return float((p_A + 1 - all_drafts_in(q, num_drafts, draws)).min())


@dataclass(frozen=True)
class OptimumRow:
    """One rule at one num_drafts: its scheme, whether it is exact, P(a draft kept), and the optimum for its scheme."""

    rule: str
    draws: str
    num_drafts: int
    exact: bool
    accept: float
    optimum: float


def optimum_table(p: torch.Tensor, q: torch.Tensor, *, max_drafts: int = 4,
                  chapter: str | None = None) -> list[OptimumRow]:
    """The rules of a chapter (None: every registered rule) at num_drafts = 1..max_drafts (a rule's own max_drafts at
    most), each beside the optimum for its draft scheme."""
    max_drafts = check_int("max_drafts", max_drafts, minimum=1)
    best: dict[tuple[str, int], float] = {}
    rows = []
    for r in multidraft_rules(chapter):
        for n in range(1, min(max_drafts, r.max_drafts or max_drafts) + 1):
            key = (r.verifier.draws, n)
            if key not in best:
                best[key] = multidraft_optimum(p, q, n, draws=key[0])
            rows.append(OptimumRow(rule=r.name, draws=key[0], num_drafts=n, exact=r.exact,
                                   accept=multidraft_accept_probability(p, q, num_drafts=n, rule=r.name),
                                   optimum=best[key]))
    return rows
