"""A Markov chain small enough to enumerate: the exact target distribution over every sequence, and samples from it."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_distribution, check_generator, check_int, check_real, check_token_ids
from ..sampling import sample_rows, total_variation

__all__ = ["ReferenceChain", "random_table", "reference_chain", "check_table", "check_start", "sequence_law",
           "direct_sample", "sequence_index", "empirical_sequences", "sequence_tv"]


@dataclass(frozen=True)
class ReferenceChain:
    """The course's chain: target P, a blurred-target draft Q, a badly wrong draft Q_bad; each (V, V) by last token."""

    P: torch.Tensor
    Q: torch.Tensor
    Q_bad: torch.Tensor
    start: int = 0
    horizon: int = 3
    k: int = 4


def random_table(vocab: int, seed: int, sharpness: float) -> torch.Tensor:
    """A (vocab, vocab) transition table: softmax of seeded standard normals times `sharpness`."""
    vocab = check_int("vocab", vocab, minimum=1)
    sharpness = check_real("sharpness", sharpness, low=0.0)
    g = torch.Generator().manual_seed(check_int("seed", seed))
    return torch.softmax(torch.randn(vocab, vocab, generator=g) * sharpness, dim=-1)


def reference_chain(vocab: int = 5) -> ReferenceChain:
    """The post's chain: P = table(1, 1.6); Q = softmax(0.7 log P + 0.3 log table(2, 1.2)); Q_bad = table(7, 2.2)."""
    P = random_table(vocab, seed=1, sharpness=1.6)
    blur = random_table(vocab, seed=2, sharpness=1.2)
    Q = torch.softmax(torch.log(P + 1e-9) * 0.7 + torch.log(blur + 1e-9) * 0.3, dim=-1)
    Q_bad = random_table(vocab, seed=7, sharpness=2.2)
    return ReferenceChain(P=P, Q=Q, Q_bad=Q_bad)


def check_table(name: str, table) -> torch.Tensor:
    """Validate a (V, V) transition table whose rows are distributions."""
    table = check_distribution(name, table, min_dim=2)
    if table.dim() != 2 or table.shape[0] != table.shape[1]:
        raise ValueError(f"{name} must be a square (V, V) transition table, got shape {tuple(table.shape)}")
    return table


def check_start(start, vocab: int) -> int:
    """Validate a start token id."""
    start = check_int("start", start, minimum=0)
    if start >= vocab:
        raise ValueError(f"start must be a token id in [0, {vocab}), got {start}")
    return start


def sequence_law(P: torch.Tensor, *, start: int, horizon: int) -> torch.Tensor:
    """Exact probability of every continuation of `start`, shape (V,) * horizon: a product of conditionals."""
    P = check_table("P", P)
    start = check_start(start, P.shape[0])
    horizon = check_int("horizon", horizon, minimum=1)
    P = P.double() / P.double().sum(-1, keepdim=True)  # float64 rows summing to 1 to machine precision
    dist = P[start]  # (V,)
    for _ in range(horizon - 1):
        dist = dist[..., None] * P  # (V, ..., V) x (V, V) -> one more axis
    return dist


def direct_sample(P: torch.Tensor, *, start: int, horizon: int, num_samples: int,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """(num_samples, horizon) sequences sampled token by token from the target chain: the noise reference."""
    P = check_table("P", P)
    start = check_start(start, P.shape[0])
    horizon = check_int("horizon", horizon, minimum=1)
    n = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator)
    out = torch.empty(n, horizon, dtype=torch.long)
    cur = torch.full((n,), start, dtype=torch.long)
    for t in range(horizon):
        cur = sample_rows(P[cur], generator)  # (n,)
        out[:, t] = cur
    return out


def sequence_index(samples: torch.Tensor, vocab: int) -> torch.Tensor:
    """Row-major index (n,) of each sequence in (n, horizon): the flat position in a (V,) * horizon tensor."""
    weights = vocab ** torch.arange(samples.shape[1] - 1, -1, -1)  # (horizon,)
    return (samples * weights).sum(-1)


def empirical_sequences(samples: torch.Tensor, vocab: int) -> torch.Tensor:
    """Empirical distribution (V,) * horizon of sampled sequences (n, horizon)."""
    samples = check_token_ids("samples", samples, vocab, dims=2, allow_empty=False)  # (n, horizon)
    horizon = samples.shape[1]
    counts = torch.bincount(sequence_index(samples, vocab), minlength=vocab ** horizon)
    return (counts.double() / samples.shape[0]).reshape((vocab,) * horizon)


def sequence_tv(samples: torch.Tensor, exact: torch.Tensor) -> float:
    """TV between the empirical distribution of samples (n, horizon) and an exact one of shape (V,) * horizon."""
    if not isinstance(exact, torch.Tensor) or not exact.is_floating_point():
        raise TypeError("exact must be a floating tensor of shape (V,) * horizon")
    vocab = exact.shape[0]
    if exact.shape != (vocab,) * exact.dim():
        raise ValueError(f"exact must have shape (V,) * horizon, got {tuple(exact.shape)}")
    if isinstance(samples, torch.Tensor) and samples.dim() == 2 and samples.shape[1] != exact.dim():
        raise ValueError(f"samples have horizon {samples.shape[1]} but exact has horizon {exact.dim()}")
    check_distribution("exact", exact.reshape(-1))
    return total_variation(empirical_sequences(samples, vocab), exact)
