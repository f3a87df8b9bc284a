"""The verification bugs of the field guide, each as a verifier of one block, with the rule behind its exact law.

Each `KnownVerifier` pairs a batched sampler (what the buggy code does, draw by draw) with the `Rule` that
laws.block_law enumerates: the kit diagnoses a failure by the nearest of these laws, and tests that each sampler
lands on its own law. The field guide's bugs are picked by name from the registry (sd.failure_modes()); the
post's tempting rule and match acceptance are the kit's own. Every sampler takes p (n, k+1, V), q (n, k, V),
proposals (n, k) and a generator, and returns (accepted (n,), tokens (n, k+1) padded with -1), as sd.verify_blocks.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..markov.registry import failure_modes
from ..sampling import accept_ratio, residual_weights, sample_rows
from ..verification import accepted_prefix, commit_tokens
from .laws import Rule


def rule_verifier(rule: Rule) -> Callable:
    """A batched verifier that does what `rule` says, with the randomness a real implementation would use."""

    def verify(p: torch.Tensor, q: torch.Tensor, proposals: torch.Tensor, generator=None):
        n, k = proposals.shape
        rows = torch.arange(n)
        pj = p[:, 1:] if rule.judge == "off_by_one" else p[:, :k]  # (n, k) target row judging each proposal
        qj = q.roll(1, dims=1) if rule.q_row == "rolled" else q  # (n, k, V) draft row the verifier believes
        p_x = pj.gather(-1, proposals[..., None]).squeeze(-1).double()  # (n, k)
        q_x = qj.gather(-1, proposals[..., None]).squeeze(-1).double()  # (n, k)
        a = p_x if rule.accept == "target_prob" else accept_ratio(p_x, q_x)  # (n, k) acceptance probabilities
        if rule.accept == "always_first":
            a[:, 0] = 1.0
        u = torch.rand(n, k, dtype=torch.float64, generator=generator)  # (n, k)
        accepted = accepted_prefix(u < a)  # (n,)
        slot = accepted.clamp(max=k - 1)  # (n,) the rejected slot (meaningless after a full block)
        p_at, q_at, y_at = pj[rows, slot].double(), qj[rows, slot].double(), proposals[rows, slot]  # (n, V) (n, V) (n,)
        w = {"normalised": lambda: residual_weights(p_at, q_at),
             "softmax": lambda: torch.exp(torch.clamp(p_at - q_at, min=0)),
             "target": lambda: p_at,
             "single_token": lambda: p_at.scatter(1, y_at[:, None], 0.0)}[rule.residual]()  # (n, V)
        w = torch.where(w.sum(-1, keepdim=True) > 0, w, p_at)
        if rule.uniform == "reused":  # inverse CDF at the acceptance uniform, which is U(a, 1) given the rejection
            cdf = (w / w.sum(-1, keepdim=True)).cumsum(-1)  # (n, V)
            last = (w > 0).long().cumsum(-1).argmax(-1)  # (n,) the last token with weight
            fix = torch.searchsorted(cdf, u[rows, slot][:, None], right=True).squeeze(-1).minimum(last)  # (n,)
        else:
            fix = sample_rows(w, generator)  # (n,)
        bonus = sample_rows(p[:, k] if rule.bonus == "target" else q[:, k - 1], generator)  # (n,)
        nxt = torch.where(accepted < k, fix, bonus)  # (n,)
        kept = accepted + ((accepted < k) & rule.keep_rejected).long()  # (n,) proposals written before nxt
        return accepted, commit_tokens(proposals, kept, nxt)

    return verify


@dataclass(frozen=True)
class KnownVerifier:
    """A verifier the kit knows: its name, rule, one-line story and reference; `verify` samples it (batched)."""

    name: str
    rule: Rule
    description: str
    reference: str

    @property
    def verify(self) -> Callable:
        return rule_verifier(self.rule)

    @property
    def exact(self) -> bool:
        return self.name in EXACT


# field-guide mode -> the rule of its one-block version (selected by name: new registry entries do not appear here)
_FIELD_GUIDE = {
    "softmax_residual": Rule(residual="softmax"),
    "target_on_reject": Rule(residual="target"),
    "reused_uniform": Rule(uniform="reused"),
    "single_token_residual": Rule(residual="single_token"),
    "off_by_one": Rule(judge="off_by_one"),
    "bonus_from_draft": Rule(bonus="draft"),
    "mismatched_q": Rule(q_row="rolled"),
    "rejected_kept": Rule(keep_rejected=True),
    "first_unverified": Rule(accept="always_first"),
}
_OWN = [
    ("tempting", Rule(accept="target_prob", residual="target"),
     "the tempting rule: keep a proposal as often as the target would pick it (p(y)), else draw from p",
     "the post, Act I (as the course reads it)"),
    ("match_acceptance", Rule(accept="target_prob", residual="single_token"),
     "keep y with probability p(y), else draw from p without y: the one-hot path; exact, and it accepts less",
     "vLLM #40149 (q passed as None); course notes: match-based acceptance"),
]
EXACT = ("correct", "match_acceptance")


def known_verifiers() -> list[KnownVerifier]:
    """The correct rule first, then every verification bug (field guide, then the post's), then match acceptance."""
    modes = {m.name: m for m in failure_modes()}
    out = [KnownVerifier("correct", Rule(), modes["correct"].description, modes["correct"].reference)]
    out += [KnownVerifier(name, rule, modes[name].description, modes[name].reference)
            for name, rule in _FIELD_GUIDE.items()]
    return out + [KnownVerifier(*row) for row in _OWN]
