"""Act II exercises: verifying one block; the smallest M that catches a bug."""
from __future__ import annotations

import functools

import torch

from ..markov.chain import reference_chain, sequence_law
from ..markov.exact import decoder_law
from ..markov.registry import MODES
from ..noise import tv_noise_bound, tv_noise_mean
from ..sampling import residual, total_variation
from ._report import DELTA, Grade, Stop, call, fmt, law_verdict, run

__all__ = ["grade_verify_block", "grade_smallest_catching_m"]


def _block() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fixed block, k = 3 over V = 4, chosen so that every mistake below is far outside the noise."""
    p_rows = torch.tensor([[0.10, 0.20, 0.60, 0.10], [0.40, 0.10, 0.20, 0.30],
                           [0.30, 0.30, 0.20, 0.20], [0.05, 0.05, 0.10, 0.80]], dtype=torch.float64)
    q_rows = torch.tensor([[0.10, 0.10, 0.75, 0.05], [0.50, 0.20, 0.20, 0.10],
                           [0.20, 0.20, 0.35, 0.25]], dtype=torch.float64)  # each proposal passes with prob 0.8
    return p_rows, q_rows, torch.tensor([2, 0, 3])


def _block_law(p_rows, q_rows, y, *, fix="residual", bonus_row=None, deterministic=False) -> torch.Tensor:
    """Exact law (k+1, V) of (accepted count A, emitted token z) of one verified block, and of its known mistakes."""
    k, V = len(y), p_rows.shape[-1]
    law, alive = torch.zeros(k + 1, V, dtype=torch.float64), 1.0
    for j in range(k):
        p, q = p_rows[j], q_rows[j]
        a = min(1.0, (p[y[j]] / q[y[j]]).item())
        a = float(a >= 1.0) if deterministic else a
        law[j] = alive * (1 - a) * (residual(p, q) if fix == "residual" else p)
        alive *= a
    law[k] = alive * p_rows[k if bonus_row is None else bonus_row]
    return law


def _as_verdict(out, k: int, V: int, on: str) -> tuple[int, list[int]]:
    if not isinstance(out, tuple) or len(out) != 2:
        raise Stop(f"verify_block must return a pair (accepted, tokens), got {type(out).__name__} (on {on})")
    accepted, tokens = out
    accepted = int(accepted)
    tokens = [int(t) for t in (tokens.reshape(-1).tolist() if isinstance(tokens, torch.Tensor) else tokens)]
    if not 0 <= accepted <= k:
        raise Stop(f"accepted must lie in 0..k = 0..{k}, got {accepted} (on {on})")
    if len(tokens) != accepted + 1:
        raise Stop(f"tokens must hold the {accepted} accepted proposal(s) and then exactly one target token "
                    f"(correction or bonus), {accepted + 1} in all; got {len(tokens)}: {tokens} (on {on})")
    if any(not 0 <= t < V for t in tokens):
        raise Stop(f"token ids must lie in [0, {V}), got {tokens} (on {on})")
    return accepted, tokens


def _check_rejection(fn, p_rows, q_rows, k: int, V: int) -> None:
    """Part 2 of exercise 2.1's grader: a first proposal the target never produces must be rejected."""
    # 2. a first proposal the target never produces: rejected, and the residual is a point mass on token 2
    p1 = p_rows.clone()
    p1[0] = torch.tensor([0.0, 0.5, 0.5, 0.0], dtype=torch.float64)
    q1 = q_rows.clone()
    q1[0] = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)
    y1 = torch.tensor([0, 1, 3])
    on = "p_1 = [0, 0.5, 0.5, 0], q_1 = [0.5, 0.5, 0, 0], y_1 = 0"
    for seed in range(20):
        acc, toks = _as_verdict(call(fn, p1, q1, y1, torch.Generator().manual_seed(seed), on=on), k, V, on)
        if acc != 0:
            raise Stop(f"you reported {acc} accepted proposal(s), but y_1 = 0 must be rejected ({on}): its "
                        "acceptance min(1, p/q) is 0, and the walk stops at the first rejection")
        if toks[0] == 0:
            raise Stop(f"after rejecting y_1 = 0 you emitted 0 again ({on}): the rejected proposal is dropped "
                        "(lucidrains/speculative-decoding #3) and the token comes from the residual")
        if toks[0] != 2:
            raise Stop(f"after rejecting y_1 you emitted {toks[0]} ({on}); the residual [p_1 - q_1]_+ puts all "
                        "its mass on token 2. Drawing from p_1 instead of the residual gives token 1 half the time")


def grade_verify_block(verify_block, *, raise_on_failure: bool = True, verbose: bool = True,
                       n: int = 2_000) -> Grade:
    """Exercise 2.1: verify_block(p_rows (k+1, V), q_rows (k, V), proposals (k,), generator) -> (accepted, tokens)."""
    def body(fn, report):
        p_rows, q_rows, y = _block()
        k, V = len(y), p_rows.shape[-1]
        # 1. a block the target must accept whole: q == p at every slot
        acc, toks = _as_verdict(call(fn, p_rows, p_rows[:k].clone(), y, torch.Generator().manual_seed(0),
                                      on="q_rows == p_rows[:k]"), k, V, "q_rows == p_rows[:k]")
        if acc != k:
            raise Stop(f"with q == p at every slot each proposal passes with probability 1, but you accepted {acc} "
                        f"of {k}: accept y_j when u < min(1, p_j(y_j) / q_j(y_j)), judging y_j with row j")
        if toks[:k] != y.tolist():
            raise Stop(f"the committed tokens must start with the accepted proposals {y.tolist()}, got {toks}")
        # 2. a first proposal the target never produces: rejected, and the residual is a point mass on token 2
        _check_rejection(fn, p_rows, q_rows, k, V)
        report.note("accepts a block with q == p whole; a rejection drops the proposal and draws the residual")
        # 3. reproducible with a seeded generator
        runs = [[_as_verdict(call(fn, p_rows, q_rows, y, g, on="the test block"), k, V, "the test block")
                 for _ in range(30)] for g in (torch.Generator().manual_seed(5), torch.Generator().manual_seed(5))]
        if runs[0] != runs[1]:
            raise Stop("two generators seeded alike gave different verdicts: pass `generator` to every random "
                        "draw (torch.rand, torch.multinomial), never use the global random state")
        # 4. the law of (A, z) over n verifications against the exact law and the laws of known mistakes
        g = torch.Generator().manual_seed(1)
        counts = torch.zeros(k + 1, V, dtype=torch.float64)
        for _ in range(n):
            acc, toks = _as_verdict(call(fn, p_rows, q_rows, y, g, on="the test block"), k, V, "the test block")
            if toks[:acc] != y[:acc].tolist():
                raise Stop(f"the first {acc} committed tokens must be the accepted proposals {y[:acc].tolist()}, "
                            f"got {toks[:acc]}")
            counts[acc, toks[-1]] += 1
        freq, law = counts / n, _block_law(p_rows, q_rows, y)
        mistakes = {
            "p": (_block_law(p_rows, q_rows, y, fix="target"), "a rejection draws from p_j instead of the residual "
                  "[p_j - q_j]_+"),
            "bonus": (_block_law(p_rows, q_rows, y, bonus_row=k - 1), f"the bonus after a full block comes from row "
                      f"{k - 1} (the last proposal's row) instead of the bonus row p_rows[{k}]"),
            "det": (_block_law(p_rows, q_rows, y, deterministic=True), "a proposal passes only where p >= q, "
                    "never with probability p/q where p < q"),
        }
        a_freq, a_law = freq.sum(-1), law.sum(-1)
        if not law_verdict(report, "(accepted, emitted token)", freq, law, n, mistakes, DELTA):
            if total_variation(a_freq, a_law) <= tv_noise_bound(a_law, n, DELTA):
                report.note("the accepted counts are right: the walk is correct, the token emitted after it is not")
            else:
                report.note(f"the accepted counts are off too: P(A = 0..{k}) measured {fmt(a_freq)}, exact "
                            f"{fmt(a_law)}")
            return
        report.note(f"(accepted, emitted token) of {n:,} verifications within the noise bound of the exact law")
    return run("verify_block", body, verify_block, raise_on_failure=raise_on_failure, verbose=verbose)


@functools.lru_cache(maxsize=64)
def _catch_tv(mode: str, k: int) -> tuple[float, torch.Tensor]:
    ch = reference_chain()
    law = decoder_law(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=k, mode=mode, Q_bad=ch.Q_bad)
    target = sequence_law(MODES[mode].target(ch.P), start=ch.start, horizon=ch.horizon)
    return total_variation(law, target), target


def _first_m(target: torch.Tensor, tv: float, threshold, m_max: int = 10**8) -> int | None:
    """Smallest M in 1..m_max with threshold(target, M) < tv (thresholds fall with M), or None."""
    if not threshold(target, m_max) < tv:
        return None
    lo, hi = 1, m_max
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if threshold(target, mid) < tv else (mid + 1, hi)
    return lo


def grade_smallest_catching_m(smallest_catching_m, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 2.2: smallest_catching_m(mode, k=2) -> smallest M with tv_noise_bound(target, M) < exact TV, or None."""
    def body(fn, report):
        cases = [("off_by_one", 2), ("phantom_history", 2), ("phantom_history", 1), ("target_policy_missing", 2),
                 ("stale_draft_cache", 2)]
        for mode, k in cases:
            tv, target = _catch_tv(mode, k)
            want = _first_m(target, tv, tv_noise_bound)
            got = call(fn, mode, k=k, on=f"mode = {mode!r}, k = {k}")
            where = f"{mode!r} at k = {k} (exact TV {tv:.4f})"
            if want is None:
                if got is not None:
                    raise Stop(f"{where}: this decoder is exact, only slower, so no M catches it; return None "
                                f"(you returned {got!r})")
                continue
            if got is None:
                if mode == "target_policy_missing":
                    raise Stop(f"{where}: you returned None. Compare with the distribution the user asked for, "
                                "sd.sequence_law(mode.target(P), start=...): under the request's top-p, "
                                "not plain P")
                raise Stop(f"{where}: you returned None, but M = {want:,} catches it")
            if isinstance(got, bool) or not isinstance(got, int):
                raise Stop(f"{where}: return an int (or None), got {type(got).__name__}")
            if got == want:
                continue
            if got == _first_m(target, tv, tv_noise_mean):
                raise Stop(f"{where}: you returned {got:,}, where the noise floor tv_noise_mean drops below the TV. "
                            "The test's threshold is tv_noise_bound (floor plus McDiarmid's deviation), "
                            f"which needs M = {want:,}")
            tv_k2 = _catch_tv(mode, 2)[0]
            if k != 2 and got == _first_m(target, tv_k2, tv_noise_bound):
                raise Stop(f"{where}: your answer is the one for k = 2; pass k on to decoder_law")
            if got < 1 or tv_noise_bound(target, got) >= tv:
                raise Stop(f"{where}: at your M = {got:,} the threshold is {tv_noise_bound(target, max(got, 1)):.4f}, "
                            "not yet below the TV, so the test does not catch it there")
            raise Stop(f"{where}: a smaller M already catches it: the threshold at M = {got - 1:,} is "
                        f"{tv_noise_bound(target, got - 1):.4f} < {tv:.4f} (expected {want:,})")
        report.note("right for off_by_one, phantom_history (k = 2 and k = 1), target_policy_missing and the exact "
                    "stale_draft_cache")
    return run("smallest_catching_m", body, smallest_catching_m, raise_on_failure=raise_on_failure,
                verbose=verbose)
