"""The randomness tier's machinery: uniform sources the kit controls, exact enumeration over them, and the probes.

A keyed verifier reads its uniforms from a source, `source(seed (n,), counter (n, w), stream) -> (n, w)` float64
in [0, 1), as vLLM's Model Runner V2 derives each coin from (request seed, position) and SGLang's kernel takes its
coins as tensors. Each batch row is one world: `GridSource` gives a world's keys grid values in the order it first
reads them (a key read again, in this round or a later one, gets the value it had), so enumerating the digits of
every key a round reads, and every proposal row weighted by q, gives the verifier's exact law on the grid (no
sampling). `HashSource` is a fixed function of the key (for invariance probes), `ConstantSource` one edge value.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import torch

__all__ = ["TOP", "GRID", "ROUNDS_GRID", "Keys", "ConstantSource", "GridSource", "HashSource", "RandCase",
           "rand_cases", "proposal_rows", "grid_law", "run_keyed", "enumerate_round", "law_of", "committed"]

TOP = 1.0 - 2.0 ** -53  # the largest float64 below 1: the top of [0, 1)
GRID = 8  # grid {0, 1/8, ..., 7/8} of the one-round law
ROUNDS_GRID = 2  # grid {0, 1/2} of the two-round law (every key a round reads is enumerated, twice over)
_SLOTS = 16  # keys a world may read


@dataclass(frozen=True)
class Keys:
    """Where each row of a batch stands: its request's seed, the absolute position of its first proposal, and how
    many rounds that request has verified before this one."""

    seed: torch.Tensor  # (n,) long
    position: torch.Tensor  # (n,) long
    step: torch.Tensor  # (n,) long

    @staticmethod
    def of(n: int, *, seed, position=0, step=0) -> Keys:
        def col(x):
            return torch.as_tensor(x, dtype=torch.long).expand(n).clone()
        return Keys(col(seed), col(position), col(step))


def _code(seed: torch.Tensor, counter: torch.Tensor, stream: int) -> torch.Tensor:
    """One int64 per key (seed, counter, stream)."""
    if int(counter.min()) < 0 or int(counter.max()) >= 2 ** 22 or not 0 <= stream < 4:
        raise ValueError("a key's counter must lie in [0, 2**22) and its stream in [0, 4)")
    return (seed[:, None] * 2 ** 24 + counter * 4 + stream).long()


class ConstantSource:
    """Every key reads the same value (0 or TOP at the edges)."""

    def __init__(self, value: float):
        self.value = value

    def __call__(self, seed, counter, stream=0):
        _code(seed, counter, stream)
        return torch.full(counter.shape, self.value, dtype=torch.float64)


class HashSource:
    """A fixed function of the key: grid value digit(hash(seed, counter, stream)) / m, the same in every call."""

    def __init__(self, m: int = GRID):
        self.m = m

    def __call__(self, seed, counter, stream=0):
        x = _code(seed, counter, stream)
        for mul in (0x5851F42D4C957F2D, 0x14057B7EF767814F):  # two rounds of multiply-xorshift (wraps in int64)
            x = x * mul
            x = x ^ (x >> 29)
        return (x.remainder(self.m)).double() / self.m


class GridSource:
    """World r's i-th distinct key reads digits[r, i] / m; the table of keys read persists across calls (rounds)."""

    def __init__(self, digits: torch.Tensor, m: int, codes: torch.Tensor | None = None,
                 count: torch.Tensor | None = None):
        n = digits.shape[0]
        self.digits, self.m = digits, m
        self.codes = torch.full((n, _SLOTS), -1, dtype=torch.long) if codes is None else codes.clone()
        self.count = torch.zeros(n, dtype=torch.long) if count is None else count.clone()

    def __call__(self, seed, counter, stream=0):
        code = _code(seed, counter, stream)
        rows = torch.arange(code.shape[0])
        out = torch.empty(code.shape, dtype=torch.float64)
        for c in range(code.shape[1]):
            hit = self.codes == code[:, c:c + 1]  # (n, S)
            found = hit.any(1)
            slot = torch.where(found, hit.long().argmax(1), self.count)
            if int(slot.max()) >= _SLOTS:
                raise ValueError(f"a world read more than {_SLOTS} distinct keys")
            new = ~found
            self.codes[rows[new], slot[new]] = code[new, c]
            self.count = self.count + new.long()
            out[:, c] = self.digits[rows, slot].double() / self.m
        return out


@dataclass(frozen=True)
class RandCase:
    """One history-free block for the probes: target rows p (k+1, V), draft rows q (k, V), float64."""

    name: str
    p: torch.Tensor
    q: torch.Tensor
    purpose: str


def _t(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def rand_cases() -> list[RandCase]:
    """Tenths (off the grids' points, so float rounding never moves a coin across a threshold), V = 3, k = 2."""
    return [
        RandCase("forbidden", _t([0.6, 0.4, 0.0], [0.0, 0.3, 0.7], [0.2, 0.5, 0.3]),
                 _t([0.7, 0.1, 0.2], [0.5, 0.1, 0.4]),
                 "the draft proposes tokens the target forbids; the second residual gives token 0 no mass"),
        RandCase("one_hot", _t([0.6, 0.3, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]),
                 _t([0.0, 1.0, 0.0], [0.0, 0.0, 1.0]),
                 "greedy (one-hot) drafts, as EAGLE proposes: the target-only path; q is zero almost everywhere"),
    ]


def rounds_case() -> RandCase:
    """The same rows at every position (each round has one law, whatever came before); k = 2, V = 3."""
    return RandCase("stationary", _t(*[[0.15, 0.15, 0.7]] * 3), _t(*[[0.9, 0.05, 0.05]] * 2),
                    "a block that keeps no draft leaves its later coins conditioned (they all failed)")


def proposal_rows(case: RandCase) -> tuple[torch.Tensor, torch.Tensor]:
    """Every proposal row y (M, k) the draft can make, and its probability q_1(y_1) ... q_k(y_k) (M,)."""
    k, V = case.q.shape
    ys = torch.cartesian_prod(*[torch.arange(V)] * k).reshape(-1, k)
    w = case.q[torch.arange(k), ys].prod(-1)
    return ys[w > 0], w[w > 0]


def committed(accepted: torch.Tensor, tokens: torch.Tensor) -> list[tuple[int, ...]]:
    """The committed string of each row: tokens[:accepted + 1] (the verifier's padded output, -1 after)."""
    return [tuple(row[:a + 1]) for a, row in zip(accepted.tolist(), tokens.tolist())]


def law_of(strings, weights) -> dict:
    law: dict = {}
    for s, w in zip(strings, weights.tolist()):
        law[s] = law.get(s, 0.0) + w
    return law


def run_keyed(fn, p, q, ys, source, keys: Keys):
    """One call of a keyed verifier on rows (n, ...); (accepted (n,), tokens (n, k+1)) as long tensors."""
    out = fn(p, q, ys, source, keys)
    if hasattr(out, "accepted") and hasattr(out, "tokens"):
        out = (out.accepted, out.tokens)
    accepted, tokens = out
    return torch.as_tensor(accepted).long().reshape(-1), torch.as_tensor(tokens).long()


@dataclass
class Worlds:
    """Enumerated worlds: a weight each, and the source table that the worlds' keys have filled."""

    weight: torch.Tensor  # (n,)
    digits: torch.Tensor  # (n, S)
    codes: torch.Tensor  # (n, S)
    count: torch.Tensor  # (n,)

    @staticmethod
    def one() -> Worlds:
        return Worlds(torch.ones(1, dtype=torch.float64), torch.zeros(1, _SLOTS, dtype=torch.long),
                      torch.full((1, _SLOTS), -1, dtype=torch.long), torch.zeros(1, dtype=torch.long))

    def take(self, idx: torch.Tensor) -> Worlds:
        return Worlds(self.weight[idx], self.digits[idx].clone(), self.codes[idx], self.count[idx])


def enumerate_round(fn, case: RandCase, worlds: Worlds, keys_of, m: int):
    """Expand every world by every proposal row and every grid value of each key this round reads for the first
    time, then run the round: (worlds after, accepted, tokens). keys_of(n, parent index) -> Keys."""
    ys, wq = proposal_rows(case)
    M, n0 = ys.shape[0], worlds.weight.shape[0]
    parent = torch.arange(n0).repeat_interleave(M)
    base, ys_all = worlds.take(parent), ys.repeat(n0, 1)
    base.weight = base.weight * wq.repeat(n0)
    n = parent.shape[0]
    p, q = case.p.expand(n, *case.p.shape), case.q.expand(n, *case.q.shape)
    probe = GridSource(base.digits, m, base.codes, base.count)  # discovery: how many new keys each world reads
    run_keyed(fn, p, q, ys_all, probe, keys_of(n, parent))
    K = int((probe.count - base.count).max())
    combos = torch.tensor(list(itertools.product(range(m), repeat=K)), dtype=torch.long).reshape(m ** K, K)
    idx = torch.arange(n).repeat_interleave(m ** K)
    full = base.take(idx)
    full.weight = full.weight / m ** K
    cols = full.count[:, None] + torch.arange(K)  # (N, K) the slots of the new keys
    full.digits.scatter_(1, cols, combos.repeat(n, 1))
    N = idx.shape[0]
    source = GridSource(full.digits, m, full.codes, full.count)
    accepted, tokens = run_keyed(fn, case.p.expand(N, *case.p.shape), case.q.expand(N, *case.q.shape),
                                 ys_all[idx], source, keys_of(N, parent[idx]))
    if bool((source.count - full.count > K).any()):
        raise ValueError("how many keys the verifier reads depend on the values it read (more than in the discovery "
                         "run, whose coins are all 0): the probe cannot enumerate it")
    after = Worlds(full.weight, full.digits, source.codes, source.count)
    return after, accepted, tokens, parent[idx]


def _ceil_count(x: Fraction, m: int) -> int:
    """#{i in 0..m-1 : i/m < x}: how many grid coins pass a test `coin < x` (x inside (0, 1) must keep off the
    grid's points by 1e-9, so that float rounding in the verifier cannot move a coin across it)."""
    if 0 < x < 1 and abs(x * m - round(x * m)) < 1e-9:
        raise ValueError(f"threshold {float(x)} sits on the grid of {m}: pick a case off the grid")
    return min(m, max(0, -((-x.numerator * m) // x.denominator)))


def _bucket_law(w: list[Fraction], m: int) -> list[Fraction]:
    """The law of the inverse-CDF draw over the grid: token z owns C_{z-1} <= u * total < C_z."""
    total, acc, out = sum(w), Fraction(0), []
    prev = 0
    for x in w:
        acc += x
        hi = _ceil_count(acc / total, m)
        out.append(Fraction(hi - prev, m))
        prev = hi
    return out


def _fr(t: torch.Tensor) -> list:
    return [_fr(r) for r in t] if t.dim() else Fraction(t.item())


def grid_law(case: RandCase, method: str, m: int = GRID) -> dict:
    """The exact law (in Fractions, then float) of a correct verifier's committed string when every coin is uniform
    on {0, 1/m, ..., (m-1)/m}: tests pass iff coin < threshold, the last draw by inverse CDF in token order."""
    P, Q = _fr(case.p), _fr(case.q)
    k, V = len(Q), len(Q[0])
    law: dict = {}
    for y, wq in zip(*proposal_rows(case)):
        y, wq = y.tolist(), Fraction(wq.item())
        ratio = [min(Fraction(1), P[j][y[j]] / Q[j][y[j]]) for j in range(k)]
        if method == "token":
            run = [Fraction(1)] + ratio
            chances = [_ceil_count(r, m) for r in ratio]
            taus = []
            for a in range(k + 1):
                pr = Fraction(1)
                for j in range(a):
                    pr *= Fraction(chances[j], m)
                pr *= 1 if a == k else 1 - Fraction(chances[a], m)
                taus.append(pr)
            scale = [Fraction(1)] * (k + 1)
        else:
            run = [Fraction(1)]
            for j in range(k):
                run.append(min(Fraction(1), run[-1] * P[j][y[j]] / Q[j][y[j]]))
            h = []
            for i in range(1, k):
                z = sum(max(run[i] * P[i][x] - Q[i][x], Fraction(0)) for x in range(V))
                den = z + 1 - run[i]
                h.append(min(Fraction(1), z / den) if den > 0 else Fraction(1))
            h.append(run[k])
            g = [Fraction(_ceil_count(x, m), m) for x in h]
            taus = [(Fraction(1) if a == 0 else g[a - 1]) * _prod(1 - x for x in g[a:]) for a in range(k + 1)]
            scale = run
        for a, pa in enumerate(taus):
            if pa == 0:
                continue
            if a == k:
                w = P[k]
            else:
                w = [max(scale[a] * P[a][x] - Q[a][x], Fraction(0)) for x in range(V)]
                w = w if sum(w) > 0 else P[a]
            for z, pz in enumerate(_bucket_law(w, m)):
                if pz:
                    s = (*y[:a], z)
                    law[s] = law.get(s, 0.0) + float(wq * pa * pz)
    return law


def _prod(xs) -> Fraction:
    out = Fraction(1)
    for x in xs:
        out *= x
    return out
