"""What to log for a speculative decoder: the post's list, with the denominator beside every rate.

A round is one block verified for one sequence: k proposals, A of them accepted (the accepted
prefix only), and up to A + 1 tokens committed (fewer when, e.g., EOS truncates the block).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._checks import check_int, check_real
from .verification import accepted_prefix

__all__ = ["SpecDecodeSummary", "SpecDecodeLog", "accepted_counts", "emitted_until_eos"]


def _seconds(name: str, x) -> float:
    """A finite duration in seconds, >= 0."""
    return check_real(name, x, low=0.0, high=math.inf, high_open=True)


def _ratio(num: float, den: float) -> float | None:
    """num / den, or None when the denominator is zero (never NaN)."""
    return num / den if den else None


def _cell(x, spec: str) -> str:
    """Format a number, or '-' for an undefined (None) value."""
    return "-" if x is None else format(x, spec)


@dataclass(frozen=True)
class SpecDecodeSummary:
    """Everything the post says to log, computed from the recorded rounds."""

    k: int
    rounds: int
    tokens: int
    tokens_per_target_call: float | None
    blocks_reaching: list[int]
    accepted_at: list[int]
    conditional_acceptance: list[float | None]
    reach: list[float | None]  # P(A >= j) over all rounds (Act III's reach), not a conditional rate
    full_block_fraction: float | None
    draft_time: float
    verify_time: float
    tokens_per_second: float | None
    policy: str
    temperature: float
    batch_size: int

    def table(self) -> str:
        """A readable report; blocks reaching each position is printed beside its conditional rate."""
        rows = [
            ("draft length k", str(self.k)),
            ("target verification rounds", str(self.rounds)),
            ("tokens retired", str(self.tokens)),
            ("tokens per target call", _cell(self.tokens_per_target_call, ".3f")),
            ("fully-accepted block fraction", _cell(self.full_block_fraction, ".3f")),
            ("draft time (s)", f"{self.draft_time:.3f}"),
            ("verify time (s)", f"{self.verify_time:.3f}"),
            ("end-to-end tokens per second", _cell(self.tokens_per_second, ".1f")),
            ("sampling policy", self.policy),
            ("temperature", f"{self.temperature:g}"),
            ("batch size (load regime)", str(self.batch_size)),
        ]
        lines = [f"{label:<32}{value}" for label, value in rows]
        if self.k:
            lines.append("")
            lines.append(f"{'position':>8}{'blocks reaching':>17}{'accepted':>10}{'conditional':>13}{'P(A >= j)':>11}")
            for j in range(self.k):
                lines.append(f"{j + 1:>8}{self.blocks_reaching[j]:>17}{self.accepted_at[j]:>10}"
                             f"{_cell(self.conditional_acceptance[j], '.3f'):>13}"
                             f"{_cell(self.reach[j], '.3f'):>11}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


@dataclass(kw_only=True)
class SpecDecodeLog:
    """Per-round logger for a speculative decoder (draft length k, sampling policy, temperature, batch size)."""

    k: int
    policy: str = "sample"
    temperature: float = 1.0
    batch_size: int = 1
    _hist: list[int] = field(init=False, repr=False)  # _hist[a] = rounds with exactly a accepted
    _tokens: int = field(init=False, repr=False, default=0)
    _draft_time: float = field(init=False, repr=False, default=0.0)
    _verify_time: float = field(init=False, repr=False, default=0.0)

    def __post_init__(self) -> None:
        self.k = check_int("k", self.k, minimum=0)
        if not isinstance(self.policy, str) or not self.policy:
            raise TypeError(f"policy must be a non-empty str, got {self.policy!r}")
        self.temperature = check_real("temperature", self.temperature, low=0.0, high=math.inf, high_open=True)
        self.batch_size = check_int("batch_size", self.batch_size, minimum=1)
        self._hist = [0] * (self.k + 1)

    def record_round(self, accepted: int, emitted: int | None = None,
                     draft_time: float = 0.0, verify_time: float = 0.0) -> None:
        """Log one round: A accepted proposals (0..k), tokens emitted (default A + 1), times in seconds."""
        accepted = check_int("accepted", accepted, minimum=0)
        if accepted > self.k:
            raise ValueError(f"accepted must be <= k = {self.k}, got {accepted}")
        emitted = accepted + 1 if emitted is None else check_int("emitted", emitted, minimum=0)
        if emitted > accepted + 1:
            raise ValueError(f"emitted must be <= accepted + 1 = {accepted + 1}, got {emitted}")
        draft_time = _seconds("draft_time", draft_time)
        verify_time = _seconds("verify_time", verify_time)
        self._hist[accepted] += 1
        self._tokens += emitted
        self._draft_time += draft_time
        self._verify_time += verify_time

    def record_rounds(self, accepted: torch.Tensor, emitted: torch.Tensor | None = None,
                      draft_time: float = 0.0, verify_time: float = 0.0) -> None:
        """Log many rounds at once: integer tensors (R,) of A and emitted; times are totals over the R rounds."""
        accepted = self._counts("accepted", accepted)
        if accepted.numel() and int(accepted.max()) > self.k:
            raise ValueError(f"accepted must be <= k = {self.k}, got {int(accepted.max())}")
        if emitted is None:
            emitted_total = int(accepted.sum()) + accepted.numel()
        else:
            emitted = self._counts("emitted", emitted)
            if emitted.shape != accepted.shape:
                raise ValueError(f"emitted must have the shape of accepted {tuple(accepted.shape)}, "
                                 f"got {tuple(emitted.shape)}")
            if (emitted > accepted + 1).any():
                raise ValueError("emitted must be <= accepted + 1 in every round")
            emitted_total = int(emitted.sum())
        draft_time = _seconds("draft_time", draft_time)
        verify_time = _seconds("verify_time", verify_time)
        hist = torch.bincount(accepted, minlength=self.k + 1).tolist()  # (k + 1,)
        self._hist = [h + d for h, d in zip(self._hist, hist)]
        self._tokens += emitted_total
        self._draft_time += draft_time
        self._verify_time += verify_time

    def merge(self, other: SpecDecodeLog) -> None:
        """Add another log's rounds, tokens and times to this one (same k, policy, temperature and batch size)."""
        if not isinstance(other, SpecDecodeLog):
            raise TypeError(f"other must be a SpecDecodeLog, got {type(other).__name__}")
        mine = (self.k, self.policy, self.temperature, self.batch_size)
        theirs = (other.k, other.policy, other.temperature, other.batch_size)
        if mine != theirs:
            raise ValueError(f"other must log the same (k, policy, temperature, batch_size) {mine}, got {theirs}")
        self._hist = [h + o for h, o in zip(self._hist, other._hist)]
        self._tokens += other._tokens
        self._draft_time += other._draft_time
        self._verify_time += other._verify_time

    @staticmethod
    def _counts(name: str, x) -> torch.Tensor:
        """A 1-D integer tensor of non-negative counts."""
        if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer torch.Tensor")
        if x.dim() != 1:
            raise ValueError(f"{name} must be 1-D (one entry per round), got shape {tuple(x.shape)}")
        if x.numel() and int(x.min()) < 0:
            raise ValueError(f"{name} must be >= 0, got {int(x.min())}")
        return x.long()

    def summary(self) -> SpecDecodeSummary:
        """Summarise the rounds so far; undefined rates are None, never NaN."""
        rounds = sum(self._hist)
        at_least = [sum(self._hist[a:]) for a in range(self.k + 1)]  # at_least[a] = rounds with A >= a
        reaching = at_least[:-1]  # position j reached iff A >= j - 1
        accepted_at = at_least[1:]  # position j accepted iff A >= j
        elapsed = self._draft_time + self._verify_time
        return SpecDecodeSummary(
            k=self.k,
            rounds=rounds,
            tokens=self._tokens,
            tokens_per_target_call=_ratio(self._tokens, rounds),
            blocks_reaching=reaching,
            accepted_at=accepted_at,
            conditional_acceptance=[_ratio(a, r) for a, r in zip(accepted_at, reaching)],
            reach=[_ratio(a, rounds) for a in accepted_at],
            full_block_fraction=_ratio(self._hist[self.k], rounds),
            draft_time=self._draft_time,
            verify_time=self._verify_time,
            tokens_per_second=_ratio(self._tokens, elapsed),
            policy=self.policy,
            temperature=self.temperature,
            batch_size=self.batch_size,
        )

    def table(self) -> str:
        """The summary as readable text."""
        return self.summary().table()

    def __str__(self) -> str:
        return self.table()


def accepted_counts(accept_flags: torch.Tensor, *, causal: bool = True) -> torch.Tensor:
    """Accepted proposals per round from per-slot test outcomes (R, k): the accepted prefix, or (causal=False,
    the vLLM v0 metrics bug) every slot that passed its test, even after an earlier rejection."""
    if not isinstance(accept_flags, torch.Tensor) or accept_flags.dtype != torch.bool or accept_flags.dim() != 2:
        raise TypeError("accept_flags must be a bool tensor of shape (rounds, k)")
    if causal:
        return accepted_prefix(accept_flags)
    return accept_flags.long().sum(-1)


def emitted_until_eos(tokens: torch.Tensor, accepted: torch.Tensor, eos: int) -> torch.Tensor:
    """Tokens a round really retires (R,) when generation stops at EOS: rows of tokens (R, k+1) hold the committed
    tokens of each round (accepted proposals, then the target's token); an EOS among them ends the output there."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise TypeError("tokens must be an integer tensor of shape (rounds, k+1)")
    if not isinstance(accepted, torch.Tensor) or accepted.shape != tokens.shape[:1] or accepted.is_floating_point():
        raise TypeError(f"accepted must be an integer tensor of shape (rounds,) = ({tokens.shape[0]},)")
    if ((accepted < 0) | (accepted >= tokens.shape[1])).any():
        raise ValueError(f"accepted must lie in 0..k = 0..{tokens.shape[1] - 1}")
    eos = check_int("eos", eos, minimum=0)
    slots = torch.arange(tokens.shape[1])  # (k+1,)
    committed = slots[None, :] <= accepted[:, None]  # (R, k+1)
    hit = (tokens == eos) & committed
    first = torch.where(hit.any(-1), hit.long().argmax(-1), accepted)  # index of the first EOS, else the last slot
    return first + 1
