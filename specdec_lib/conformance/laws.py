"""Exact laws of one verified block: what a verifier commits, enumerated over every proposal and every outcome.

A verifier gets target rows p_1..p_{k+1}, draft rows q_1..q_k and proposals y_j ~ q_j, and commits a string
t = (y_1..y_a, z). The battery's targets are history-free (row i is the target at position i, whatever came
before), so a correct decoder's output over the block's k+1 positions is p_1 x ... x p_{k+1}: t, completed
by the target rows after it (what the next blocks would draw), must have that law. This completed law is what
the kit compares; any exact rule passes (match acceptance too), any inexact one moves it.

A verifier's rule is a `DecoderSpec` (markov/spec.py), read for one block by `block_rule`; what each of its
choices means (the acceptance probability, the residual, the reused uniform, the bonus) is markov/semantics.py's,
and `committed_block_law` walks the branches exactly as markov/exact.py walks a decoder's:

  propose y from q_j:                 q_j(y)
  accept it:                          a = semantics' acceptance probability of y (min(1, p(y) / q(y)) if correct)
  reject it, then emit z:             (1 - a) fix(z)             fix = semantics' law of the token after a rejection
  after k acceptances, the bonus z:   semantics' bonus row (p_{k+1}; q_k for bonus="draft")

A block verifier (spec.verifier "block", or "block_naive" for the port that shipped wrong) judges the k proposals
together, so its law is enumerated over whole proposal rows y ~ q_1 x ... x q_k instead: semantics.block_law gives,
for each row, the law of tau (the drafts kept) and of the token after them, from sd.block_verification's weights,
as every engine reads them.
"""
from __future__ import annotations

import torch

from ..markov import semantics  # semantics.block_law: a block verifier's round given its proposals (not this one)
from ..markov.semantics import acceptance, bonus_row, rejection_law
from ..markov.spec import DecoderSpec

__all__ = ["Law", "block_rule", "judge_rows", "ratio_rows", "bonus_rows", "committed_block_law", "mean_accepted",
           "complete", "target_law"]

Law = dict[tuple[int, ...], float]  # committed tokens -> probability

# fields a one-block verifier cannot express: the only value the kit reads each at (the battery draws the proposals
# from the true q, at the committed text, with no sampling policy, a fixed k and no extra tokens)
_FIXED = {"propose": "Q", "draft_context": "committed", "phantom": False, "policy": (), "policy_on_target": True,
          "proposer": "model", "schedule": "fixed", "stop": "never"}


def block_rule(spec: DecoderSpec) -> DecoderSpec:
    """The spec, checked to be one a verifier of one block can follow; ValueError naming the field otherwise.

    The block-level reading of the fields that a one-block verifier sees (judge_rows, ratio_rows, bonus_rows):
      judge="off_by_one"   proposal j is judged by p_{j+1} (the target row one position too late)
      ratio="Q_bad"        the verifier uses the wrong slot's draft row: q_{j-1} for proposal j (q_k for the first)
      ratio="argmax_Q"     the verifier reads q_j as one-hot at its argmax (it was given no draft probabilities)
      bonus="draft"        after a full block the bonus comes from q_k
    acceptance, verify_first, residual, residual_uniform, keep_rejected and the bonus law mean what
    markov/semantics.py says, as in every engine; ratio_context is moot here (the draft's state is the committed
    text), and so are the options of the fields fixed above. A block verifier (verifier="block" or "block_naive";
    DecoderSpec keeps the token rule's fields at their defaults for it) reads ratio as the token rule does.
    """
    if not isinstance(spec, DecoderSpec):
        raise TypeError(f"spec must be a DecoderSpec, got {type(spec).__name__}")
    for name, value in _FIXED.items():
        if getattr(spec, name) != value:
            raise ValueError(f"DecoderSpec.{name}={getattr(spec, name)!r} is not something a one-block verifier can "
                             f"do: the kit reads {name}={value!r} only")
    return spec


def judge_rows(spec: DecoderSpec, p_rows: torch.Tensor) -> torch.Tensor:
    """(..., k, V) the target row judging each proposal: p_j, or p_{j+1} under judge="off_by_one"."""
    return p_rows[..., 1:, :] if spec.judge == "off_by_one" else p_rows[..., :-1, :]


def ratio_rows(spec: DecoderSpec, q_rows: torch.Tensor) -> torch.Tensor:
    """(..., k, V) the draft row the verifier believes drew each proposal: q_j, q_{j-1} under ratio="Q_bad", or
    one-hot at q_j's argmax under ratio="argmax_Q"."""
    if spec.ratio == "argmax_Q":
        return torch.nn.functional.one_hot(q_rows.argmax(-1), q_rows.shape[-1]).to(q_rows.dtype)
    return q_rows.roll(1, dims=-2) if spec.ratio == "Q_bad" else q_rows


def bonus_rows(spec: DecoderSpec, p_rows: torch.Tensor, q_rows: torch.Tensor) -> torch.Tensor:
    """(..., V) the rows a full block's bonus token is drawn from (p_{k+1}, or q_k under bonus="draft")."""
    return bonus_row(spec, p_rows[..., -1, :], q_rows[..., -1, :])


def _rows(rows: torch.Tensor) -> torch.Tensor:
    rows = rows.double()
    return rows / rows.sum(-1, keepdim=True)


def _slot(spec: DecoderSpec, p: torch.Tensor, q: torch.Tensor, *, first: bool) -> tuple[list, list]:
    """One slot's (a[y], fix[y][z]) for every proposal y: target row p (V,), believed draft row q (V,)."""
    V = p.shape[-1]
    a = acceptance(spec, p, q, first=first)  # (V,) the chance of keeping each y
    fix = rejection_law(spec, p, q, torch.eye(V, dtype=torch.float64), a)  # (V, V) row y: the law given y rejected
    return a.tolist(), fix.tolist()


def _joint_law(spec: DecoderSpec, P: torch.Tensor, Q: torch.Tensor) -> Law:
    """A block verifier's law: every proposal row y ~ q_1 x ... x q_k (V^k of them), then semantics.block_law's
    law of tau (the drafts kept) and of the token after them, judged with the believed rows ratio_rows (P (k+1, V),
    Q (k, V) in float64)."""
    k, V = Q.shape
    ys = torch.cartesian_prod(*[torch.arange(V)] * k).reshape(-1, k)  # (V^k, k) every proposal row
    mass = Q[torch.arange(k), ys].prod(-1)  # (V^k,) q_1(y_1) ... q_k(y_k)
    rows_p, rows_q = P.expand(ys.shape[0], k + 1, V), ratio_rows(spec, Q).expand(ys.shape[0], k, V)
    taus, nxt = semantics.block_law(spec, rows_p, rows_q, ys)  # (V^k, k+1), (V^k, k+1, V)
    out = mass[:, None, None] * taus[..., None] * nxt  # (V^k, k+1, V) P(y, tau = i, then z)
    law: Law = {}
    for r, i, z in (out > 0).nonzero().tolist():
        t = (*ys[r, :i].tolist(), z)
        law[t] = law.get(t, 0.0) + out[r, i, z].item()
    return law


def committed_block_law(spec: DecoderSpec, p_rows: torch.Tensor, q_rows: torch.Tensor) -> Law:
    """Exact law of the committed tokens of one block, proposals y_j ~ q_j (rows taken in float64, renormalised)."""
    spec = block_rule(spec)
    P, Q = _rows(p_rows), _rows(q_rows)  # (k+1, V) (k, V)
    return _token_law(spec, P, Q) if spec.verifier == "token" else _joint_law(spec, P, Q)


def _token_law(spec: DecoderSpec, P: torch.Tensor, Q: torch.Tensor) -> Law:
    """The token rule's law, slot by slot, as the module's docstring walks it (rows P (k+1, V), Q (k, V))."""
    k = Q.shape[0]
    judge, believed = judge_rows(spec, P), ratio_rows(spec, Q)  # (k, V) each
    slots = [_slot(spec, judge[j], believed[j], first=j == 0) for j in range(k)]
    bonus, drafts, law = bonus_rows(spec, P, Q).tolist(), Q.tolist(), {}

    def add(t: tuple, mass: float) -> None:
        law[t] = law.get(t, 0.0) + mass

    def walk(j: int, prefix: tuple, mass: float) -> None:
        if j == k:  # a full block: the bonus token
            for z, w in enumerate(bonus):
                if w > 0:
                    add(prefix + (z,), mass * w)
            return
        accept, fix = slots[j]
        for y, d in enumerate(drafts[j]):  # the proposal is drawn from the true q_j
            if d <= 0:
                continue
            a = accept[y]
            if a > 0:
                walk(j + 1, prefix + (y,), mass * d * a)
            if a < 1:
                base = prefix + (y,) if spec.keep_rejected else prefix
                for z, w in enumerate(fix[y]):
                    if w > 0:
                        add(base + (z,), mass * d * (1 - a) * w)

    walk(0, (), 1.0)
    return law


def mean_accepted(law: Law) -> float:
    """E[accepted] of a block law whose strings are the kept proposals then one target token: E[len(t)] - 1."""
    return sum(mass * (len(t) - 1) for t, mass in law.items())


def complete(law: Law, p_rows: torch.Tensor) -> torch.Tensor:
    """The law (V,) * (k+1) of t followed by target draws at the positions after it (t cut at k + 1 tokens)."""
    k1, V = p_rows.shape
    P = _rows(p_rows)  # (k+1, V)
    out = torch.zeros((V,) * k1, dtype=torch.float64)
    for t, mass in law.items():
        t = t[:k1]
        tail = torch.ones((), dtype=torch.float64)
        for row in P[len(t):]:
            tail = torch.tensordot(tail, row, dims=0)  # (V,) * (k+1 - len(t)) product of the remaining rows
        out[t] += mass * tail
    return out


def target_law(p_rows: torch.Tensor) -> torch.Tensor:
    """p_1 x ... x p_{k+1}: what an exact decoder emits over the block's positions, shape (V,) * (k+1)."""
    return complete({(): 1.0}, p_rows)
