"""A grammar as a small automaton over token ids: each state says which tokens may come next, and where each leads.

`Grammar(transitions, start, accepting)`: transitions[s][x] is the state after token x in state s, or -1 when x is
forbidden there. The automaton reads the generated tokens (never the prompt). An EOS token (Settings.eos) is
allowed exactly in the accepting states, whatever its column says: generation may stop only where the text is
complete. With no EOS the grammar only masks. A text that has left the grammar (state -1; only a broken loop
lets a forbidden token through) is masked no further: `allowed(-1)` is every token.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_int

__all__ = ["DEAD", "Grammar", "alternating", "no_immediate_repeat"]

DEAD = -1  # the state after a forbidden token


@dataclass(frozen=True)
class Grammar:
    """A deterministic automaton: transitions (S, V) of next states (-1 = forbidden), a start state, accepting ones."""

    transitions: tuple[tuple[int, ...], ...]
    start: int = 0
    accepting: frozenset = frozenset()

    def __post_init__(self) -> None:
        if not isinstance(self.transitions, (tuple, list)) or not self.transitions:
            raise TypeError("transitions must be a non-empty tuple of rows (one per state) of next states")
        rows = tuple(tuple(check_int(f"transitions[{s}][{x}]", t, minimum=-1) for x, t in enumerate(row))
                     for s, row in enumerate(self.transitions))
        S, V = len(rows), len(rows[0])
        if V == 0 or any(len(row) != V for row in rows):
            raise ValueError(f"transitions must be a rectangular (S, V) table with V >= 1, got row lengths "
                             f"{sorted({len(row) for row in rows})}")
        if any(t >= S for row in rows for t in row):
            raise ValueError(f"transitions must hold states in [0, {S}) or -1 (forbidden)")
        for s, row in enumerate(rows):
            if all(t == DEAD for t in row):
                raise ValueError(f"transitions: state {s} allows no token (every state must allow at least one)")
        start = check_int("start", self.start, minimum=0)
        if start >= S:
            raise ValueError(f"start must be a state in [0, {S}), got {start}")
        accepting = frozenset(check_int("accepting", a, minimum=0) for a in self.accepting)
        if any(a >= S for a in accepting):
            raise ValueError(f"accepting must hold states in [0, {S}), got {sorted(accepting)}")
        object.__setattr__(self, "transitions", rows)
        object.__setattr__(self, "accepting", accepting)
        masks = torch.tensor([[t != DEAD for t in row] for row in rows], dtype=torch.bool)  # (S, V), built once
        object.__setattr__(self, "_masks", masks)

    @property
    def vocab(self) -> int:
        return len(self.transitions[0])

    @property
    def num_states(self) -> int:
        return len(self.transitions)

    def allowed(self, state: int) -> torch.Tensor:
        """bool (V,): the tokens the automaton allows in `state` (every token once the text has left the grammar)."""
        if state == DEAD:
            return torch.ones(self.vocab, dtype=torch.bool)
        return self._masks[state].clone()

    def step(self, state: int, token: int) -> int:
        """The state after `token` in `state` (-1 if it is forbidden there, and -1 stays -1)."""
        return DEAD if state == DEAD else self.transitions[state][token]

    def state_after(self, tokens) -> int:
        """The state after reading `tokens` from the start state."""
        state = self.start
        for token in tokens:
            state = self.step(state, token)
        return state


def alternating(V: int) -> Grammar:
    """Even and odd token ids alternate; the text may end (EOS) once it holds a token. States: 0 start, 1 after an
    even token (next must be odd), 2 after an odd one (next must be even)."""
    V = check_int("V", V, minimum=2)
    start = tuple(1 if x % 2 == 0 else 2 for x in range(V))
    after_even = tuple(2 if x % 2 else DEAD for x in range(V))
    after_odd = tuple(DEAD if x % 2 else 1 for x in range(V))
    return Grammar((start, after_even, after_odd), start=0, accepting=frozenset({1, 2}))


def no_immediate_repeat(V: int) -> Grammar:
    """No token twice in a row. State x < V: the last token was x; state V: nothing generated yet. Every state
    accepts except the start (the text may end once it holds a token)."""
    V = check_int("V", V, minimum=2)
    rows = tuple(tuple(DEAD if x == last else x for x in range(V)) for last in range(V))
    return Grammar(rows + (tuple(range(V)),), start=V, accepting=frozenset(range(V)))
