"""What every choice of a `DecoderSpec` means: the one definition every engine and the kit calls.

Each table below is a dict keyed by the spec's `Literal` values (spec.py derives its field types from these keys,
so adding a value is one entry here). Functions are tensor functions in float64 that broadcast over leading axes:
batched.py builds its (V, V, V) acceptance and (V, V, V, V) residual tables by calling them on broadcast rows, the
exact engine reads tables built by them once per decoder, the reference decoder calls them on single rows, and the
conformance kit calls them on a block's rows p_j, q_j. `spec` is any object with the DecoderSpec fields.

field              value              meaning
-----------------  -----------------  -------------------------------------------------------------------------
draft_context      committed          the draft's state for proposal 1 is the last committed token
                   own_last_proposal  ... where its untrimmed cache was left: its own last proposal
                   one_too_far        ... the committed token before the last one (a cache rewound one too far)
judge              aligned            proposal y_j is judged by the target row at the committed state before it
                   off_by_one         ... by the row at y_j itself (one position too late)
ratio_context      draft              q for proposal 1 is read at the draft's state
                   committed          ... at the committed state
acceptance         ratio              keep y with probability min(1, p(y) / q(y)); p/0 = inf -> 1, 0/0 -> 0
                   match              a target sample must equal y: probability p(y); a rejection emits p without y
                   target_prob        keep y with probability p(y) (the post's tempting rule); then the residual
                   typical            keep y iff p(y) > min(epsilon, delta exp(-H(p))) (Medusa)
                   threshold          1 if p(y) >= threshold_single else min(1, p(y) / threshold_acc) (SGLang)
verify_first       True / False       False: proposal 1 is kept without a test (probability 1)
stop               never              the draft drafts its k proposals
                   confidence         ... and stops after a proposal y with q(y) < confidence, keeping it
                   coin               ... and stops just before one that would be rejected (its token: the bonus row)
keep_rejected      True / False       True: a rejected proposal is committed before the target's token
residual           normalised         a rejection samples [p - q]_+ normalised (p where it is empty)
                   softmax            softmax of [p - q]_+
                   target             p
                   single_token       p without the rejected y (p where that leaves nothing)
                   argmax             argmax p (one-hot)
                   typical            p restricted to p >= the typical threshold, renormalised
residual_uniform   fresh              the residual draw reads its own uniform u ~ U(0, 1)
                   reused             ... the rejected test's uniform, which given a rejection is U(a, 1)
bonus              target|draft       after a full block the bonus is drawn from the target's | the draft's row
                   argmax|typical     ... argmax of the target row | its typical restriction
                   processed_target   ... the target row with spec.policy applied (when the rows that judge lack it)
schedule           fixed | hf         next k: unchanged | k + 2 after a full block, k - 1 otherwise, in [k_min, k_max]
verifier           token              each proposal is tested in turn (the fields above); the first failure ends it
                   block              block verification (block_verification.py): the k proposals judged together
                   block_naive        ... vllm-ascend's wrong port: running-product coins, the ordinary residual
"""
from __future__ import annotations

import torch

from ..block_verification import BlockWeights, block_residual, block_tau, block_weights, tau_law
from ..policy import policy_table
from ..sampling import residual_weights
from .draft_rules import typical_threshold

__all__ = ["DRAFT_CONTEXTS", "JUDGES", "RATIO_CONTEXTS", "ACCEPTANCES", "TARGET_ONLY", "SAMPLED_TESTS", "RESIDUALS",
           "RESIDUAL_UNIFORMS", "BONUSES", "SCHEDULES", "VERIFIERS", "STOPS", "PEEKING_STOPS", "SGLANG_ACC_FLOOR",
           "draft_state", "judge_row", "ratio_state", "acceptance", "threshold_accept", "typical_keep", "keeps",
           "stops_after", "draft_count", "peeks", "rejection_row", "rejection_weights", "match_law", "reused_law",
           "rejection_law", "bonus_row", "fix_uniform", "fix_uniforms", "kept_rejected", "next_k", "argmax_rows",
           "typical_rows", "block_pass", "block_tokens", "block_round", "block_law"]

SGLANG_ACC_FLOOR = 1e-9  # SGLang's launcher divides by max(threshold_acc, 1e-9)

# --- where things are read: functions of token ids (ints or tensors) -------------------------------------------
DRAFT_CONTEXTS = {  # (last committed, the committed token before it, the draft's own last proposal) -> state
    "committed": lambda last, before, draft_last: last,
    "own_last_proposal": lambda last, before, draft_last: draft_last,
    "one_too_far": lambda last, before, draft_last: before,
}
JUDGES = {  # (committed state before y, y) -> the target row that judges y
    "aligned": lambda committed, y: committed,
    "off_by_one": lambda committed, y: y,
}
RATIO_CONTEXTS = {  # (the draft's state before y, committed state before y) -> where q is read
    "draft": lambda draft, committed: draft,
    "committed": lambda draft, committed: committed,
}


def draft_state(spec, last, before, draft_last):
    """The draft's state for a round's first proposal (spec.draft_context)."""
    return DRAFT_CONTEXTS[spec.draft_context](last, before, draft_last)


def judge_row(spec, committed, y):
    """The target row (a state) that judges proposal y (spec.judge)."""
    return JUDGES[spec.judge](committed, y)


def ratio_state(spec, draft, committed):
    """The state at which the verifier reads q (spec.ratio_context)."""
    return RATIO_CONTEXTS[spec.ratio_context](draft, committed)


# --- target-only laws of a row p (..., V) ------------------------------------------------------------------------
def argmax_rows(p: torch.Tensor) -> torch.Tensor:
    """One-hot rows at each row's argmax (the first on a tie), float64 (..., V)."""
    return torch.nn.functional.one_hot(p.double().argmax(-1), p.shape[-1]).double()


def typical_rows(p: torch.Tensor, spec) -> torch.Tensor:
    """Rows restricted to p >= their typical threshold (Medusa's get_typical_one_token), unnormalised (..., V)."""
    p = p.double()
    kept = p * (p >= typical_threshold(p, epsilon=spec.epsilon, delta=spec.delta)[..., None])
    if (kept.sum(-1) <= 0).any():
        raise ValueError(f"delta = {spec.delta:g} puts the typical threshold above every token of a row; lower delta")
    return kept


def typical_keep(p: torch.Tensor, spec) -> torch.Tensor:
    """(..., V) 0.0 / 1.0: does the typical test keep each token of row p? p(y) > threshold(p)."""
    p = p.double()
    return (p > typical_threshold(p, epsilon=spec.epsilon, delta=spec.delta)[..., None]).double()


def threshold_accept(p: torch.Tensor, *, threshold_single: float, threshold_acc: float) -> torch.Tensor:
    """SGLang's chance of keeping each token of row p (..., V): 1 where p >= threshold_single, else
    min(1, p / max(threshold_acc, 1e-9)). On a chain one proposal is tried per depth, so prob_acc is p(y)."""
    p = p.double()
    return torch.where(p >= threshold_single, 1.0, (p / max(threshold_acc, SGLANG_ACC_FLOOR)).clamp(max=1.0))


# --- acceptance: chance of keeping each token y of the last axis, rows p (target) and q (believed draft) ---------
def _ratio(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return torch.where(q > 0, p / torch.where(q > 0, q, 1.0), (p > 0).double()).clamp(max=1.0)  # p/0 -> 1, 0/0 -> 0


ACCEPTANCES = {  # (p (..., V), q (..., V), spec) -> (..., V) the chance of keeping y, for every y
    "ratio": lambda p, q, spec: _ratio(p, q),
    "match": lambda p, q, spec: p.clone(),
    "target_prob": lambda p, q, spec: p.clone(),
    "typical": lambda p, q, spec: typical_keep(p, spec),
    "threshold": lambda p, q, spec: threshold_accept(p, threshold_single=spec.threshold_single,
                                                     threshold_acc=spec.threshold_acc),
}
TARGET_ONLY = ("typical", "threshold")  # tests that read p alone and compare a coin with a table of chances


def acceptance(spec, p: torch.Tensor, q: torch.Tensor, *, first: bool = False) -> torch.Tensor:
    """(..., V) the chance the verifier keeps each proposal y; 1 for the first slot when verify_first is False.
    Broadcasts: p (V, 1, V) and q (1, V, V) give the table acc[r, c, y]."""
    p, q = p.double(), q.double()
    if first and not spec.verify_first:
        return torch.ones(torch.broadcast_shapes(p.shape, q.shape), dtype=torch.float64)
    return ACCEPTANCES[spec.acceptance](p, q, spec).expand(torch.broadcast_shapes(p.shape, q.shape))


SAMPLED_TESTS = ("match",)  # tests that draw the target's own sample with the test's uniform and keep y iff it is y


def keeps(spec, y, u, *, chance, sample, first: bool = False):
    """The verifier's test of proposal y with uniform u: (kept, a bool or (m,) bools; the target's sample or None).

    chance() is the chance of keeping y (a coin keeps it iff u < chance()); sample(u) is the target's inverse-CDF
    draw at the judging row, which a match test compares with y and which is then the token a mismatch emits. A first
    slot under verify_first=False keeps y untested (its uniform is read all the same)."""
    drawn = sample(u) if spec.acceptance in SAMPLED_TESTS else None
    ok = u < chance() if drawn is None else drawn == y
    if first and not spec.verify_first:
        ok = ok | True
    return ok, drawn


# --- when the draft stops before k proposals: spec.stop ---------------------------------------------------------
STOPS = {  # (spec, q(y) of the proposal just drafted) -> does the draft stop after it, keeping it? None: never
    "never": None,
    "confidence": lambda spec, q_y: q_y < spec.confidence,  # transformers' assistant_confidence_threshold
    "coin": None,  # it stops before a proposal instead, the one that would be rejected: see rejection_row
}
PEEKING_STOPS = ("coin",)  # stops that read the verifier's coin: a "rejection" is the draft stopping before y


def stops_after(spec, q_y):
    """Does the draft stop after a proposal it drew with probability q_y (a float or (m,))? Keeping that proposal."""
    rule = STOPS[spec.stop]
    return False if rule is None else rule(spec, q_y)


def draft_count(spec, count, q_ys):
    """(m,) how many proposals each row drafts: count, cut after the first proposal j < count with stops_after.
    q_ys: an iterable of (m,) q(y_j) at the state y_j was drawn from, read only under a stop that reads it."""
    if STOPS[spec.stop] is None:
        return count
    done = torch.zeros_like(count, dtype=torch.bool)
    for j, q_y in enumerate(q_ys):
        low = stops_after(spec, q_y) & ~done & (j < count)
        count, done = torch.where(low, j + 1, count), done | low
    return count


def peeks(spec) -> bool:
    """Does the draft peek at the coin, so that a rejection of y is the draft stopping before it (spec.stop)?"""
    return spec.stop in PEEKING_STOPS


def rejection_row(spec, residual, committed, *, bonus_base=0):
    """The row a rejection's token is drawn from: the rejected y's residual row, or, when the draft peeks and stops
    before y, the bonus row at the committed state (bonus_base + committed, where a table keeps its bonus rows)."""
    return bonus_base + committed if peeks(spec) else residual


# --- what a rejection of y samples: rows p, q (..., V) and y one-hot (..., V) -> unnormalised weights (..., V) ----
RESIDUALS = {
    "normalised": lambda p, q, y_hot, spec: residual_weights(p, q),  # [p - q]_+, the sampler's own
    "softmax": lambda p, q, y_hot, spec: torch.exp((p - q).clamp(min=0)),  # every token gets e^0 = 1 at least
    "target": lambda p, q, y_hot, spec: p.clone(),
    "single_token": lambda p, q, y_hot, spec: p * (1 - y_hot),
    "argmax": lambda p, q, y_hot, spec: argmax_rows(p),
    "typical": lambda p, q, y_hot, spec: typical_rows(p, spec),
}


def rejection_weights(spec, p: torch.Tensor, q: torch.Tensor, y_hot: torch.Tensor, kind: str | None = None):
    """Unnormalised weights (broadcast shape) of what a rejection of y samples, by spec.residual (or `kind`);
    p itself where they are empty (p == q leaves nothing: no rejection can happen there)."""
    p, q, y_hot = p.double(), q.double(), y_hot.double()
    w = RESIDUALS[kind or spec.residual](p, q, y_hot, spec)
    shape = torch.broadcast_shapes(p.shape, q.shape, y_hot.shape)
    return torch.where(w.sum(-1, keepdim=True) > 0, w, p).expand(shape)


def match_law(p: torch.Tensor, y_hot: torch.Tensor) -> torch.Tensor:
    """The law of a target sample given that it differs from y: p without y, normalised (p if nothing is left)."""
    p = p.double()
    w = p * (1 - y_hot.double())
    w = torch.where(w.sum(-1, keepdim=True) > 0, w, p)
    return w / w.sum(-1, keepdim=True)


def reused_law(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Law (..., V) of the inverse-CDF draw from weights w (..., V) when u ~ U(a, 1), a (...,) < 1: the rejected
    test's uniform reused. The last token with weight owns the top of [0, 1) (rounding never skips past it)."""
    w = w.double()
    V = w.shape[-1]
    z = torch.arange(V)
    last = V - 1 - (w > 0).flip(-1).double().argmax(-1, keepdim=True)  # (..., 1)
    hi = torch.where(z >= last, 1.0, (w / w.sum(-1, keepdim=True)).cumsum(-1).clamp(max=1.0))
    lo = torch.cat([torch.zeros_like(hi[..., :1]), hi[..., :-1]], -1)
    a = torch.as_tensor(a, dtype=torch.float64)[..., None]
    law = (hi - torch.maximum(lo, a)).clamp(min=0) / torch.where(a < 1, 1 - a, 1.0)
    return torch.where(z <= last, law, 0.0)


def rejection_law(spec, p: torch.Tensor, q: torch.Tensor, y_hot: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Law (..., V) of the token a rejection of y emits, given the rejection (acceptance probability a (...,)):
    match: p without y; a fresh uniform: the residual normalised; a reused one: reused_law."""
    if spec.acceptance == "match":
        return match_law(p, y_hot).expand(torch.broadcast_shapes(p.shape, q.shape, y_hot.shape))
    w = rejection_weights(spec, p, q, y_hot)
    if spec.residual_uniform == "reused":
        return reused_law(w, a)
    return w / w.sum(-1, keepdim=True)


RESIDUAL_UNIFORMS = {  # (the rejected test's uniform, the round's residual uniform) -> the one the draw reads
    "fresh": lambda u_test, u_fix: u_fix,
    "reused": lambda u_test, u_fix: u_test,
}


def fix_uniform(spec, u_test, u_fix):
    """The uniform a rejection's residual draw reads (spec.residual_uniform)."""
    return RESIDUAL_UNIFORMS[spec.residual_uniform](u_test, u_fix)


def fix_uniforms(spec, rejected, u_test, u_fix):
    """(m,) the uniform each row's residual draw reads, u_fix updated by fix_uniform where this slot rejects (a
    fresh uniform is one slot whatever slot rejects: u_fix comes back untouched, with no gather)."""
    chosen = fix_uniform(spec, u_test, u_fix)
    return u_fix if chosen is u_fix else torch.where(rejected, chosen, u_fix)


def kept_rejected(spec, rejected):
    """Is a rejected proposal committed before the target's token (a bool or (m,) bools)? keep_rejected: wrong."""
    return rejected & spec.keep_rejected


# --- after a full block: the bonus law, from the target row and the draft row after the last proposal ------------
BONUSES = {  # (target row(s), draft row(s), spec) -> unnormalised weights
    "target": lambda p, d, spec: p.double(),
    "draft": lambda p, d, spec: d.double(),
    "argmax": lambda p, d, spec: argmax_rows(p),
    "typical": lambda p, d, spec: typical_rows(p, spec),
    "processed_target": lambda p, d, spec: policy_table(p, **dict(spec.policy)),  # the policy reaches the bonus only
}


def bonus_row(spec, p: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Weights (..., V) the bonus token is drawn from (spec.bonus): p = target row(s), d = draft row(s)."""
    return BONUSES[spec.bonus](p, d, spec)


# --- the next round's k -----------------------------------------------------------------------------------------
def _hf(spec, k, full):
    if isinstance(k, torch.Tensor):
        return torch.where(full, (k + 2).clamp(max=spec.k_max), (k - 1).clamp(min=spec.k_min))
    return min(k + 2, spec.k_max) if full else max(k - 1, spec.k_min)


SCHEDULES = {  # (spec, k, accepted, drafted) -> next k; ints or tensors (a fixed k compares nothing)
    "fixed": lambda spec, k, accepted, drafted: k,
    "hf": lambda spec, k, accepted, drafted: _hf(spec, k, accepted == drafted),
}


def next_k(spec, k, *, accepted, drafted):
    """The next round's k: unchanged for a fixed schedule; transformers' heuristic within [k_min, k_max]."""
    return SCHEDULES[spec.schedule](spec, k, accepted, drafted)


# --- how a block is verified: token by token (everything above), or jointly ----------------------------------------
VERIFIERS = {  # (p_rows (..., k+1, V), q_rows (..., k, V), proposals (..., k)) -> BlockWeights; None: token by token
    "token": None,
    "block": lambda p_rows, q_rows, x: block_weights(p_rows, q_rows, x),
    "block_naive": lambda p_rows, q_rows, x: block_weights(p_rows, q_rows, x, naive=True),
}


def block_pass(spec, weights: BlockWeights, eta: torch.Tensor) -> torch.Tensor:
    """tau (...,) from the uniforms eta (..., k): the last row of the block that passes spec.verifier's test."""
    return block_tau(weights, eta, naive=spec.verifier == "block_naive")


def block_tokens(spec, p_rows: torch.Tensor, q_rows: torch.Tensor, weights: BlockWeights) -> torch.Tensor:
    """Unnormalised weights (..., k+1, V) of the token after tau = 0 .. k kept drafts, one row per tau."""
    every = BlockWeights(p=weights.p[..., None, :], h=weights.h[..., None, :])  # one copy per value of tau
    return block_residual(p_rows[..., None, :, :], q_rows[..., None, :, :], every, torch.arange(q_rows.shape[-2] + 1),
                          naive=spec.verifier == "block_naive")


def block_round(spec, p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor, eta: torch.Tensor):
    """A block round read off its uniforms eta (..., k): (tau (...,) the drafts kept, weights (..., V) of the token
    after them, unnormalised). p_rows: the target's rows before each proposal and after the last; q_rows: the q's."""
    weights = VERIFIERS[spec.verifier](p_rows, q_rows, proposals)
    tau = block_pass(spec, weights, eta)
    return tau, block_residual(p_rows, q_rows, weights, tau, naive=spec.verifier == "block_naive")


def block_law(spec, p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor):
    """The exact law of a block round given its proposals: (P(tau = i) (..., k+1), the law (..., k+1, V) of the
    token after i kept drafts)."""
    weights = VERIFIERS[spec.verifier](p_rows, q_rows, proposals)
    tokens = block_tokens(spec, p_rows, q_rows, weights)
    return tau_law(weights.h), tokens / tokens.sum(-1, keepdim=True)
