"""Act V, transformers' assisted generation on the chain as 5.24.0 runs it: k, the confidence stop, its re-tuning.

Read in huggingface/transformers 5.24.0 (src/transformers/generation/): configuration_utils.py
(GenerationConfig._get_default_generation_params), candidate_generator.py (AssistedCandidateGenerator:
update_candidate_strategy, _generate_candidates), stopping_criteria.py (ConfidenceCriteria), utils.py
(_assisted_decoding). By default the assistant drafts num_assistant_tokens = 20 tokens a round (schedule
"constant"); "heuristic" is opt-in (k + 2 after a round whose drafts were all accepted, else max(1, k - 1),
with no upper bound). Whenever assistant_confidence_threshold > 0 (default 0.4) the assistant stops after a
token whose probability under its own distribution is below the threshold, keeping that token. With
scikit-learn installed the threshold is re-tuned after every round: each drafted token up to the first
rejection is recorded with its probability and whether it was accepted, and once more than 5 are recorded
with both outcomes present, the threshold becomes the ROC threshold of least fpr + 3 fnr
(sklearn.metrics.roc_curve; np.argmin keeps the first, highest, of equal costs). Without scikit-learn the
threshold stays at 0.4.

roc_threshold is that choice from counts per probability value; settled_threshold applies it to the exact
long-run records of a frozen threshold and repeats until the threshold maps to itself (where a long text's
threshold settles); assisted_text runs one long text with the rule as transformers writes it, re-tuning
included, for the check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_choice, check_generator, check_int, check_real
from ..cost import round_cost
from ..sampling import inverse_cdf
from .long_run import PolicyResult, costed_chain, long_run_result, round_law, stationary

__all__ = [
    "AssistedDefaults", "TRANSFORMERS", "roc_threshold", "SettledThreshold", "settled_threshold", "AssistedText",
    "AssistedSettings", "assisted_text"
]


@dataclass(frozen=True)
class AssistedDefaults:
    """What transformers 5.24.0 does when the caller sets nothing (the test reads them off the installed package)."""

    num_assistant_tokens: int = 20
    schedule: str = "constant"  # | "heuristic" | "heuristic_transient" (opt-in)
    confidence: float = 0.4  # assistant_confidence_threshold, the starting threshold
    fnr_weight: float = 3.0  # the re-tuning's cost: fpr + 3 * fnr
    min_records: int = 5  # re-tune once more than this many tokens are recorded, both outcomes among them
    source: str = ("huggingface/transformers 5.24.0, src/transformers/generation/configuration_utils.py "
                   "(_get_default_generation_params), candidate_generator.py (AssistedCandidateGenerator."
                   "update_candidate_strategy), stopping_criteria.py (ConfidenceCriteria)")


TRANSFORMERS = AssistedDefaults()


def roc_threshold(scores, accepted, rejected, *, fnr_weight: float = TRANSFORMERS.fnr_weight) -> float:
    """The threshold of least fpr + fnr_weight * fnr over the ROC of recorded counts per distinct score.

    scores: distinct probabilities; accepted[i], rejected[i]: how often a token of probability scores[i] was
    recorded accepted or rejected. A token is predicted accepted when its score is >= the threshold; the
    candidates are inf and every score, highest first, and the first of equal costs wins, as np.argmin does.
    """
    total_pos, total_neg = sum(accepted), sum(rejected)
    if total_pos <= 0 or total_neg <= 0:
        raise ValueError("accepted and rejected must each hold at least one recorded token")
    best_cost, best, tp, fp = fnr_weight, math.inf, 0.0, 0.0  # at the threshold inf: fpr 0, fnr 1
    for score, pos, neg in sorted(zip(scores, accepted, rejected), reverse=True):
        tp, fp = tp + pos, fp + neg
        cost = fp / total_neg + fnr_weight * (1 - tp / total_pos)
        if cost < best_cost:
            best_cost, best = cost, float(score)
    return best


@dataclass(frozen=True)
class SettledThreshold:
    """Where the re-tuned threshold settles, the thresholds on the way, and the long run at the settled one."""

    threshold: float
    path: tuple[float, ...]
    result: PolicyResult


def settled_threshold(P, Q, *, c_d: float, c_v: float, k: int = TRANSFORMERS.num_assistant_tokens,
                      start: float = TRANSFORMERS.confidence, max_iterations: int = 50) -> SettledThreshold:
    """Iterate threshold -> roc_threshold(the long-run records under that frozen threshold) until it repeats."""
    c = costed_chain(P, Q, c_d=c_d, c_v=c_v)
    t, path = check_real("start", start, low=0.0, high=1.0), []
    values = sorted(set(c.Q.flatten().tolist()))  # the scores a drafted token can have
    for _ in range(check_int("max_iterations", max_iterations, minimum=1)):
        law = round_law(c, k=k, confidence=t)
        mu = stationary(law.next_start)
        pos = torch.einsum("s,sby->by", mu, law.accepted).flatten()  # (V * V,) per round, by (b, y)
        neg = torch.einsum("s,sby->by", mu, law.first_rejected).flatten()
        q = c.Q.flatten()
        path.append(t)
        t_next = roc_threshold(values, [float(pos[q == v].sum()) for v in values],
                               [float(neg[q == v].sum()) for v in values])
        if t_next == t:
            result = long_run_result(f"re-tuned confidence stop, settled at {t:.4f}", mu, n=law.n, cost=law.cost,
                                     m=law.m)
            return SettledThreshold(threshold=t, path=tuple(path), result=result)
        t = t_next
    raise ValueError(f"the threshold did not settle within max_iterations = {max_iterations}: {path[-4:]}")


@dataclass(frozen=True)
class AssistedText:
    """One long sampled text: per round its tokens, its proposals and their q, and the next round's threshold."""

    tokens: list[int]  # N_r
    drafted: list[int]  # m_r
    thresholds: list[float]
    draft_q: list[list[float]]  # per round, the draft's probability of each token it drafted
    c_d: float
    c_v: float

    def costs(self) -> list[float]:
        """C_r: 1 for a round that drafted nothing, m_r c_d + c_v otherwise."""
        return [1.0 if m == 0 else round_cost(draft_steps=m, c_d=self.c_d, c_v=self.c_v) for m in self.drafted]

    @property
    def speedup(self) -> float:
        """Tokens over cost for the whole text: sum N_r / sum C_r."""
        return sum(self.tokens) / sum(self.costs())

    @property
    def mean_of_ratios(self) -> float:
        """The per-round N_r / C_r averaged over rounds (not the text's speedup)."""
        return sum(n / c for n, c in zip(self.tokens, self.costs())) / len(self.tokens)


@dataclass(frozen=True)
class AssistedSettings:
    """How assisted_text's assistant runs: k to start from, the starting threshold, whether it is re-tuned,
    and the k schedule (transformers' defaults: 20 tokens, 0.4, re-tuned, constant)."""

    k: int = TRANSFORMERS.num_assistant_tokens
    confidence: float = TRANSFORMERS.confidence
    retune: bool = True
    schedule: str = "constant"  # | "heuristic": k + 2 after a fully accepted round, else max(1, k - 1)

    def __post_init__(self):
        check_int("k", self.k, minimum=1)
        check_real("confidence", self.confidence, low=0.0, high=1.0)
        if not isinstance(self.retune, bool):
            raise TypeError(f"retune must be a bool, got {type(self.retune).__name__}")
        check_choice("schedule", self.schedule, ("constant", "heuristic"))


def assisted_text(P, Q, *, c_d: float, c_v: float, rounds: int, generator: torch.Generator | None,
                  settings: AssistedSettings = AssistedSettings(), start: int = 0) -> AssistedText:  # noqa: B008
    """One text of `rounds` rounds decoded the way transformers does: draft up to k, stop after a token with
    q < threshold, verify with the token rule, re-tune the threshold (settings.retune) and k (settings.schedule)
    after each round."""
    c = costed_chain(P, Q, c_d=c_d, c_v=c_v)
    rounds = check_int("rounds", rounds, minimum=1)
    if not isinstance(settings, AssistedSettings):
        raise TypeError(f"settings must be an AssistedSettings, got {type(settings).__name__}")
    k, t, retune, schedule = settings.k, settings.confidence, settings.retune, settings.schedule
    Q_, A_ = c.Q.tolist(), c.A.tolist()
    rows = {"P": c.P.double(), "Q": c.Q.double(), "R": c.res.double()}

    def draw(table: str, row: int, u: float) -> int:
        return int(inverse_cdf(rows[table][row], u))

    g = check_generator(generator)
    pos, neg = {}, {}  # recorded tokens by probability: accepted, and first rejections
    s, tokens, drafted, thresholds, draft_q = start, [], [], [], []
    for _ in range(rounds):
        u = iter(torch.rand(2 * k + 1, dtype=torch.float64, generator=g).tolist())
        drafts = []  # (b, y): y drafted after b
        while len(drafts) < k and (not drafts or Q_[drafts[-1][0]][drafts[-1][1]] >= t):
            b = drafts[-1][1] if drafts else s
            drafts.append((b, draw("Q", b, next(u))))
        accepted, s = 0, None
        for b, y in drafts:
            if next(u) >= A_[b][y]:  # rejected: the residual token ends the round
                s = draw("R", b, next(u))
                break
            accepted += 1
        s = draw("P", drafts[-1][1], next(u)) if s is None else s  # all accepted: the bonus token
        for j, (b, y) in enumerate(drafts[:accepted + 1]):  # the accepted ones, then the first rejection
            book = pos if j < accepted else neg
            book[Q_[b][y]] = book.get(Q_[b][y], 0) + 1
        if retune and sum(pos.values()) + sum(neg.values()) > TRANSFORMERS.min_records and pos and neg:
            scores = sorted(set(pos) | set(neg))
            t = roc_threshold(scores, [pos.get(v, 0) for v in scores], [neg.get(v, 0) for v in scores])
        if schedule == "heuristic":
            k = k + 2 if accepted == len(drafts) else max(1, k - 1)
        tokens.append(accepted + 1)
        drafted.append(len(drafts))
        thresholds.append(t)
        draft_q.append([Q_[b][y] for b, y in drafts])
    return AssistedText(tokens=tokens, drafted=drafted, thresholds=thresholds, draft_q=draft_q, c_d=c.c_d, c_v=c.c_v)
