"""Act V on the chain, one level of a draft tree for many sequences at once: each node a multi-draft step.

A node's children are the drafts of a registered multi-draft rule, drawn and tested by the rule itself
(multidraft_rules.step_sample), which keeps the kept child and the fallback apart: a tree descends into a kept
child, and a fallback ends the round. The exact side is multidraft_rules.step_law, read by tree.node_tables.
"""
from __future__ import annotations

import torch

from ..multidraft_rules import Stages, StepDraw, Walk, step_sample

__all__ = ["step_by_state"]


def step_by_state(P: torch.Tensor, Q: torch.Tensor, states: torch.Tensor, *, num_drafts: int, verifier: Stages | Walk,
                  generator) -> StepDraw:
    """token (m,) and kept (m,) for m nodes at Markov states (m,): one step_sample call per distinct state."""
    token, kept = torch.empty_like(states), torch.empty_like(states, dtype=torch.bool)
    present = torch.bincount(states, minlength=P.shape[0]).nonzero().squeeze(1)  # the states that occur
    for s in present.tolist():  # at most V groups; every node of a group shares the rows P[s], Q[s]
        at = (states == s).nonzero().squeeze(1)  # (m_s,)
        draw = step_sample(P[s], Q[s], num_drafts=num_drafts, verifier=verifier, size=at.numel(), generator=generator)
        token[at], kept[at] = draw.token, draw.kept
    return StepDraw(token=token, kept=kept)
