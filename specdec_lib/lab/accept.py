"""Lab: the acceptance test of one block on the decode loop's hot path, the same arithmetic as sd's verify_batch.

verify_batch is written for n blocks at once on the device; a decode loop verifies one block and needs the
accepted count on the host anyway (to crop the caches). accept_block takes the target's logits, computes the
policy's rows once, tests the k proposals in one vectorised comparison, reads the outcomes to the host in
one transfer, and builds the residual of the one row it needs (verify_batch builds a padded q for all
rows). It draws the same uniforms in the same order, so for the same generator state it returns the same
tokens as greedy_batch or verify_batch (tests/test_accept.py checks both, draw for draw).
"""
from __future__ import annotations

import torch

from ..sampling import accept_ratio, residual_weights, sample_rows
from .steps import policy_probs


def accept_block(p_logits: torch.Tensor, proposals: torch.Tensor, q_rows: torch.Tensor | None, *,
                 temperature: float, top_k, generator, one_hot: bool = False) -> tuple[int, torch.Tensor]:
    """(A, the token after the A accepted proposals, 0-d) for target logits (k+1, V) and proposals (k,).

    Greedy (temperature 0) keeps proposals while they equal the target's argmax; otherwise q_rows (k, V) are
    the rows that drew the proposals, and one_hot=True says each is one-hot at its proposal (the residual
    is then p with the proposal removed, computed without q).
    """
    k = proposals.shape[0]
    if temperature == 0.0:
        best = p_logits.argmax(-1)  # (k+1,) the target's greedy choice at every slot
        both = torch.cat([best[:k], proposals]).tolist()  # one transfer: argmaxes, then proposals
        a = next((j for j in range(k) if both[j] != both[k + j]), k)
        return a, best[a]
    p_rows = policy_probs(p_logits, temperature, top_k)  # (k+1, V)
    idx = proposals[:, None]  # (k, 1)
    p_x = p_rows[:k].gather(1, idx).T  # (1, k) target prob of each proposal
    q_x = torch.ones_like(p_x) if one_hot else q_rows.gather(1, idx).T  # (1, k) draft prob of each proposal
    u = torch.rand(1, k, dtype=torch.float64, generator=generator, device=p_rows.device)  # (1, k), verify_batch's
    ok = (u < accept_ratio(p_x, q_x).double())[0].tolist()  # k outcomes, one transfer
    a = next((j for j, passed in enumerate(ok) if not passed), k)
    if a == k:
        r = p_rows[k]  # (V,) the bonus row: no draft there, the residual is p itself
    elif one_hot:
        r = p_rows[a].clone()  # (V,) [p - onehot(x)]_+: p with x removed (a rejection needs p(x) < 1)
        r[proposals[a]] = 0.0
    else:
        r = residual_weights(p_rows[a], q_rows[a])  # (V,)
    return a, sample_rows(r, generator)  # 0-d; its own uniform, after the k acceptance ones
