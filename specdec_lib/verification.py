"""Act II: walking the accept/reject test down a block of k proposals scored in one target pass."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_choice, check_distribution, check_generator, check_token_ids
from .block_verification import verify_batch_block, verify_one_block
from .sampling import accept_ratio, residual_weights, sample_rows

__all__ = ["METHODS", "Verdict", "BlockVerdicts", "accepted_prefix", "verify_batch", "verify_one", "commit_tokens",
           "verify_block",
           "verify_blocks", "greedy_batch", "greedy_one", "verify_greedy"]


METHODS = ("token", "block")  # token: the first failing test ends the block; block: the last passing row wins


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one block: `accepted` proposals kept, then one target token (correction or bonus)."""

    accepted: int
    tokens: torch.Tensor  # (accepted + 1,) committed tokens


@dataclass(frozen=True)
class BlockVerdicts:
    """Outcome of verifying n blocks at once: proposals kept per block, and the committed tokens of each."""

    accepted: torch.Tensor  # (n,) accepted proposals per block
    tokens: torch.Tensor  # (n, k+1) committed tokens, padded with -1 after the accepted + 1 committed ones


def accepted_prefix(ok: torch.Tensor) -> torch.Tensor:
    """A for each row of test outcomes ok (..., k): the leading run of passes, the slots before the first failure."""
    return ok.long().cumprod(-1).sum(-1)


def verify_batch(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Unchecked batched verification: (accepted (n,), next token (n,)) for p_rows (n, k+1, V), q_rows (n, k, V)."""
    n, k = proposals.shape
    accepted = accepted_prefix(_tests(p_rows, q_rows, proposals, generator))  # (n,)
    rows = torch.arange(n, device=p_rows.device)
    p_at = p_rows[rows, accepted]  # (n, V) target row at the first rejection, or the bonus row
    q_at = q_rows[rows, accepted.clamp(max=k - 1)] if k else torch.zeros_like(p_at)  # (n, V) the draft's row there
    q_at.masked_fill_((accepted == k)[:, None], 0.0)  # (n, V); no draft at the bonus slot
    # [p - q]_+ is the residual on rejection, and p itself at the bonus slot, where q is zero
    nxt = sample_rows(residual_weights(p_at, q_at), generator)  # (n,), its own uniforms: never the acceptance one
    return accepted, nxt


def verify_one(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor,
               generator: torch.Generator | None = None) -> tuple[int, torch.Tensor]:
    """verify_batch on one block, read on the host: (accepted, next token 0-d) for p_rows (k+1, V), q_rows (k, V)."""
    k = proposals.shape[0]
    ok = _tests(p_rows, q_rows, proposals, generator).tolist()  # k outcomes, one transfer
    a = next((j for j, passed in enumerate(ok) if not passed), k)
    r = p_rows[k] if a == k else residual_weights(p_rows[a], q_rows[a])  # (V,) the bonus row is p itself
    return a, sample_rows(r, generator)  # 0-d; its own uniform, after the k acceptance ones


def _tests(p_rows, q_rows, proposals, generator) -> torch.Tensor:
    """The token rule's tests (..., k): u < min(1, p(x) / q(x)), one uniform u per proposal, drawn in order."""
    k = proposals.shape[-1]
    p_x = p_rows[..., :k, :].gather(-1, proposals[..., None]).squeeze(-1)  # (..., k) target prob of each proposal
    q_x = q_rows.gather(-1, proposals[..., None]).squeeze(-1)  # (..., k) draft prob of each proposal
    u = torch.rand(proposals.shape, dtype=torch.float64, generator=generator, device=p_rows.device)  # (..., k)
    return u < accept_ratio(p_x, q_x).double()


def commit_tokens(proposals: torch.Tensor, accepted: torch.Tensor, nxt: torch.Tensor, pad: int = -1) -> torch.Tensor:
    """Rows (n, k+1): the accepted proposals, then the target token, then `pad`."""
    n, k = proposals.shape
    cols = torch.arange(k + 1, device=proposals.device)  # (k+1,)
    out = torch.cat([proposals, proposals.new_full((n, 1), pad)], dim=1)  # (n, k+1)
    out = torch.where(cols < accepted[:, None], out, torch.full_like(out, pad))
    return out.scatter(1, accepted[:, None], nxt[:, None])


def _check_block(p_rows, q_rows, proposals, *, batched: bool):
    """Validate shapes and contents of a block (or a batch of blocks)."""
    lead = 1 if batched else 0
    p_rows = check_distribution("p_rows", p_rows, min_dim=2 + lead)
    q_rows = check_distribution("q_rows", q_rows, min_dim=2 + lead)
    if p_rows.dim() != 2 + lead or q_rows.dim() != 2 + lead:
        want = "(n, k+1, V) and (n, k, V)" if batched else "(k+1, V) and (k, V)"
        raise ValueError(f"p_rows and q_rows must have shapes {want}, "
                         f"got {tuple(p_rows.shape)} and {tuple(q_rows.shape)}")
    k = q_rows.shape[-2]
    if p_rows.shape[-2] != k + 1 or p_rows.shape[-1] != q_rows.shape[-1] or p_rows.shape[:lead] != q_rows.shape[:lead]:
        raise ValueError(f"p_rows must hold k+1 rows for the k = {k} rows of q_rows (one per proposal plus the bonus) "
                         f"over the same vocabulary; got {tuple(p_rows.shape)} and {tuple(q_rows.shape)}")
    proposals = check_token_ids("proposals", proposals, p_rows.shape[-1])
    if tuple(proposals.shape) != tuple(q_rows.shape[:-1]):
        raise ValueError(f"proposals must have shape {tuple(q_rows.shape[:-1])} (one token per q row), "
                         f"got {tuple(proposals.shape)}")
    if (q_rows.gather(-1, proposals[..., None]) <= 0).any():
        raise ValueError("q_rows must give every proposal positive probability: "
                         "q must be the distribution that actually produced the proposal")
    return p_rows, q_rows, proposals


def _verifier(method: str, *, one: bool = False):
    """A method's verifier: token by token or the whole block, for n blocks or (one=True) one read on the host."""
    token = check_choice("method", method, METHODS) == "token"
    if one:
        return verify_one if token else verify_one_block
    return verify_batch if token else verify_batch_block


def verify_block(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor,
                 generator: torch.Generator | None = None, *, method: str = "token") -> Verdict:
    """Verify one block: p_rows (k+1, V) target rows, q_rows (k, V) draft rows that produced proposals (k,);
    method "token" (test each proposal in turn) or "block" (block verification, sd.block_verification)."""
    verify = _verifier(method, one=True)
    p_rows, q_rows, proposals = _check_block(p_rows, q_rows, proposals, batched=False)
    generator = check_generator(generator)
    a, nxt = verify(p_rows, q_rows, proposals, generator)
    return Verdict(accepted=a, tokens=torch.cat([proposals[:a], nxt[None]]))


def verify_blocks(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: torch.Tensor,
                  generator: torch.Generator | None = None, *, method: str = "token") -> BlockVerdicts:
    """Verify n blocks at once: BlockVerdicts(accepted (n,), tokens (n, k+1) padded with -1 after the committed);
    method "token" or "block" as for verify_block."""
    verify = _verifier(method)
    p_rows, q_rows, proposals = _check_block(p_rows, q_rows, proposals, batched=True)
    generator = check_generator(generator)
    accepted, nxt = verify(p_rows, q_rows, proposals, generator)
    return BlockVerdicts(accepted=accepted, tokens=commit_tokens(proposals, accepted, nxt))


def greedy_batch(p_rows: torch.Tensor, proposals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unchecked greedy verification: accept while the target's argmax agrees; (accepted (n,), next token (n,))."""
    n, k = proposals.shape
    best = p_rows.argmax(-1)  # (n, k+1) the target's greedy choice at every slot
    accepted = accepted_prefix(best[:, :k] == proposals)  # (n,)
    return accepted, best.gather(1, accepted[:, None]).squeeze(1)


def greedy_one(p_rows: torch.Tensor, proposals: torch.Tensor) -> tuple[int, torch.Tensor]:
    """greedy_batch on one block, read on the host: (accepted, next token 0-d) for p_rows (k+1, V), proposals (k,)."""
    k = proposals.shape[0]
    best = p_rows.argmax(-1)  # (k+1,) the target's greedy choice at every slot
    both = torch.cat([best[:k], proposals]).tolist()  # one transfer: argmaxes, then proposals
    a = next((j for j in range(k) if both[j] != both[k + j]), k)
    return a, best[a]


def verify_greedy(p_rows: torch.Tensor, proposals: torch.Tensor) -> Verdict:
    """Greedy verification of one block: keep proposals while they equal the target's argmax, then emit its argmax."""
    p_rows = check_distribution("p_rows", p_rows, min_dim=2)
    if p_rows.dim() != 2:
        raise ValueError(f"p_rows must have shape (k+1, V), got {tuple(p_rows.shape)}")
    proposals = check_token_ids("proposals", proposals, p_rows.shape[-1])
    if proposals.dim() != 1 or proposals.shape[0] != p_rows.shape[0] - 1:
        raise ValueError(f"proposals must have shape ({p_rows.shape[0] - 1},): one fewer than the rows of p_rows, "
                         f"got {tuple(proposals.shape)}")
    a, nxt = greedy_one(p_rows, proposals)
    return Verdict(accepted=a, tokens=torch.cat([proposals[:a], nxt[None]]))
