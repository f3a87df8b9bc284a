"""Act I: one speculative step. Accepting with min(1, p/q) passes min(p, q); the residual [p - q]_+ gives the rest."""
from __future__ import annotations

import torch

from ._checks import (
    check_choice,
    check_distribution,
    check_generator,
    check_int,
    check_pair,
    check_same_shape,
    check_tensor,
    check_token_ids,
)

__all__ = ["SAMPLER_MODES", "inverse_cdf", "cdf_table", "sample_rows", "sample_from", "residual_weights", "residual",
           "accept_ratio", "acceptance_probability", "speculative_sample", "empirical", "total_variation", "overlap",
           "post_pair"]

# Single-position samplers: the honest one and the negative controls a test must reject.
SAMPLER_MODES = {
    "correct": "accept with min(1, p/q), resample from the normalised residual [p - q]_+",
    "target_on_reject": "accept with min(1, p/q), resample from p itself (double-counts the overlap)",
    "always_accept": "keep every proposal (the output is q, not p)",
}


def _weights(weights) -> torch.Tensor:
    """weights as a floating tensor with a non-empty last axis, or TypeError / ValueError naming it."""
    weights = check_tensor("weights", weights)
    if weights.dim() < 1 or weights.shape[-1] == 0:
        raise ValueError(f"weights must have a non-empty last axis, got shape {tuple(weights.shape)}")
    return weights


def inverse_cdf(weights: torch.Tensor, u) -> torch.Tensor:
    """Tokens (...) drawn from non-negative weights (..., V) at uniforms u (...) in [0, 1); one row (V,) takes u of
    any shape, or a float. Rows need not be normalised; a row's total must be positive.

    Token i owns [c_{i-1}, c_i) of [0, total), c the cumulative sums in float64: the token is #{i : c_i <= u total}.
    A zero-weight token owns nothing, and u < 1 keeps u total < total, so none past the last weight is ever drawn.
    The library's one inverse-CDF draw: the samplers, the Markov engines and the kit call it or read its cdf_table."""
    c = _weights(weights).to(torch.float64).cumsum(-1)  # (..., V)
    if c.dim() == 1:
        return torch.searchsorted(c, u * c[-1], right=True)  # u's shape
    return torch.searchsorted(c, (u * c[..., -1])[..., None], right=True).squeeze(-1)  # (...,)


def cdf_table(weights: torch.Tensor) -> torch.Tensor:
    """The uniforms (..., V) at which inverse_cdf passes each token: inverse_cdf(weights, u) = #{i : table_i <= u}.

    Entry i is the least float64 u with u total >= c_i in floating point, found from c_i / total an ulp at a time,
    so a table built once turns a draw into comparisons that draw what inverse_cdf draws, bit for bit (the batched
    Markov engine reads it so). Entries from the last weight on are 1, which no u < 1 passes; a row of zeros is NaN."""
    c = _weights(weights).to(torch.float64).cumsum(-1)  # (..., V)
    total = c[..., -1:]  # (..., 1)
    t = (c / total).clamp(0.0, 1.0)  # (..., V) within an ulp or two of the least u that passes c_i
    for _ in range(8):  # down an ulp while the uniform below still passes, up while this one does not
        below = t.nextafter(torch.zeros_like(t))
        down, up = (t > 0) & (below * total >= c), t * total < c
        if not (down.any() or up.any()):
            return t
        t = torch.where(down, below, torch.where(up, t.nextafter(torch.ones_like(t)), t))
    raise AssertionError("unreachable: c_i / total is within two ulps of the least u that passes c_i")


def sample_rows(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of non-negative weights (..., V): inverse_cdf at fresh uniforms; rows need not be normalised.

    Only the type, the shape and the generator are checked (this runs inside the decoders' loops)."""
    weights = _weights(weights)
    check_generator(generator)
    u = torch.rand(weights.shape[:-1], dtype=torch.float64, generator=generator, device=weights.device)  # (...,)
    return inverse_cdf(weights, u)  # (...,)


def sample_from(p: torch.Tensor, *, num_samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """num_samples independent draws from one distribution p (V,) -> LongTensor (num_samples,)."""
    p = check_distribution("p", p)
    if p.dim() != 1:
        raise ValueError(f"p must be one distribution of shape (V,), got shape {tuple(p.shape)}")
    num_samples = check_int("num_samples", num_samples, minimum=0)
    return _draw(p, num_samples, check_generator(generator))


def _draw(p: torch.Tensor, n: int, generator: torch.Generator | None) -> torch.Tensor:
    """n inverse-CDF draws from p (V,), unchecked."""
    return sample_rows(p.expand(n, p.shape[-1]), generator)  # (n,)


def residual_weights(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Unnormalised residual [p - q]_+ (..., V); p itself where p == q leaves no mass (no rejection can happen)."""
    r = torch.clamp(p - q, min=0)  # (..., V)
    empty = r.sum(-1, keepdim=True) <= 0  # (..., 1)
    return torch.where(empty, p, r)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Normalised residual r = [p - q]_+ / sum [p - q]_+ over the last axis; returns p where p == q (never NaN)."""
    p = check_distribution("p", p)
    q = check_distribution("q", q)
    check_same_shape("p", p, "q", q)
    r = residual_weights(p, q)
    return r / r.sum(-1, keepdim=True)


def accept_ratio(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x)/q(x)) as exp(min(0, log p(x) - log q(x))): no overflow, exactly 1 where p >= q, 0 where p = 0."""
    return torch.exp(torch.clamp(torch.log(p_x) - torch.log(q_x), max=0.0))


def acceptance_probability(p: torch.Tensor, q: torch.Tensor, x) -> torch.Tensor:
    """Probability min(1, p(x)/q(x)) of keeping proposal x ~ q, computed in log space; x an int or a tensor of ids."""
    p, q = check_pair(p, q)
    x = check_token_ids("x", x, p.shape[-1])
    q_x = q[x]
    if (q_x <= 0).any():
        raise ValueError("q(x) must be > 0 at every proposed token x: a draft cannot propose a token it gives no mass")
    return accept_ratio(p[x], q_x)


def speculative_sample(p: torch.Tensor, q: torch.Tensor, *, num_samples: int,
                       generator: torch.Generator | None = None, mode: str = "correct") -> torch.Tensor:
    """num_samples tokens, each from one speculative step: propose x ~ q, keep with min(1, p/q), else the residual."""
    p, q = check_pair(p, q)
    n = check_int("num_samples", num_samples, minimum=1)
    check_choice("mode", mode, tuple(SAMPLER_MODES))
    generator = check_generator(generator)
    x = _draw(q, n, generator)  # (n,) proposals
    if mode == "always_accept":
        return x
    keep = torch.rand(n, dtype=torch.float64, generator=generator, device=p.device) < accept_ratio(p[x], q[x]).double()
    fallback = p if mode == "target_on_reject" else residual_weights(p, q)  # (V,)
    out = x.clone()
    n_rej = int((~keep).sum())
    if n_rej:
        out[~keep] = _draw(fallback, n_rej, generator)
    return out


def empirical(samples: torch.Tensor, vocab: int) -> torch.Tensor:
    """Empirical distribution (vocab,) of a 1-D tensor of token ids."""
    samples = check_token_ids("samples", samples, vocab)
    if samples.dim() != 1 or samples.numel() == 0:
        raise ValueError(f"samples must be a non-empty 1-D tensor of token ids, got shape {tuple(samples.shape)}")
    return torch.bincount(samples, minlength=vocab).double() / samples.numel()


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    """TV(a, b) = 1/2 sum |a - b| for two distributions of the same shape (a joint one may have several axes)."""
    check_same_shape("a", check_tensor("a", a), "b", check_tensor("b", b))
    a = check_distribution("a", a.reshape(-1))
    b = check_distribution("b", b.reshape(-1))
    return 0.5 * (a.double() - b.double()).abs().sum().item()


def overlap(p: torch.Tensor, q: torch.Tensor) -> float:
    """Shared mass beta = sum min(p, q) = 1 - TV(p, q): the probability that one proposal is accepted."""
    p, q = check_pair(p, q)
    return torch.minimum(p.double(), q.double()).sum().item()


def post_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """The post's five-token target p and draft q: softmax(1.4 randn(5)) twice, p first, from one generator seeded 0.

    p = 0.7333 0.0562 0.0040 0.1879 0.0186; the shared mass sum min(p, q) is 0.1623.
    """
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, generator=g) * 1.4, dim=0)
    q = torch.softmax(torch.randn(5, generator=g) * 1.4, dim=0)
    return p, q
