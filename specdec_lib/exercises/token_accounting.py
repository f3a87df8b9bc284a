"""Act III exercises: E[N] for per-position rates; the survivor statistic."""
from __future__ import annotations

import math

import torch

from ..accounting import expected_accepted, expected_tokens, survivor_statistics
from ._report import Grade, Stop, as_number, call, fmt, run

__all__ = ["grade_expected_tokens", "grade_conditional_acceptance"]


def grade_expected_tokens(expected_tokens_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 3.1: expected_tokens(alpha) -> E[N] = 1 + sum_j prod_{i<=j} alpha_i, with k = len(alpha)."""
    def body(fn, report):
        cases = [[0.9, 0.8, 0.7], [0.5] * 4, [0.6, 0.95, 0.3, 0.9, 0.8], [1.0, 1.0, 1.0], [0.0, 0.9]]
        wrongs = [
            (lambda a: 1 + sum(a), "you summed the rates (the k * alpha model): proposal j counts only if proposals "
             "1..j-1 all survived, so sum the prefix products prod_{i<=j} alpha_i"),
            (lambda a: float(sum(a)), "you summed the rates (the k * alpha model) and left out the target's token"),
            (lambda a: expected_accepted(list(a), len(a)), "off by one: that is E[A], the accepted proposals; every "
             "round also emits one target token (correction or bonus), so E[N] = 1 + E[A]"),
            (lambda a: 1 + math.prod(a), "you multiplied all the rates once; E[A] sums P(A >= j) over every j"),
        ]
        for alpha in cases:
            want = expected_tokens(alpha, len(alpha))
            got = as_number(call(fn, list(alpha), on=f"alpha = {alpha}"), "expected_tokens", f"alpha = {alpha}")
            if abs(got - want) <= 1e-9:
                continue
            for wrong, text in wrongs:
                if all(abs(wrong(a) - as_number(call(fn, list(a), on=f"alpha = {a}"), "expected_tokens", "")) < 1e-9
                       for a in cases):
                    raise Stop(f"{text} (alpha = {alpha}: got {got:.4f}, expected {want:.4f})")
            raise Stop(f"alpha = {alpha}: got {got:.4f}, expected {want:.4f}")
        got = as_number(call(fn, [], on="alpha = [] (k = 0)"), "expected_tokens", "alpha = []")
        if got != 1.0:
            raise Stop(f"k = 0 (alpha = []) must give 1.0, plain decoding's one token per target call; got {got:g}")
        report.note("E[N] right on 5 rate sequences and for k = 0")
    return run("expected_tokens", body, expected_tokens_fn, raise_on_failure=raise_on_failure, verbose=verbose)


def grade_conditional_acceptance(conditional_acceptance, *, raise_on_failure: bool = True,
                                 verbose: bool = True) -> Grade:
    """Exercise 3.2: conditional_acceptance(accepts bool (n, k)) -> [P(flag j | flags 1..j-1)], 0.0 if unreached."""
    from ..accounting import simulate_mixture

    def body(fn, report):
        hand = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
        unreached = torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.bool)
        mix = simulate_mixture((0.95, 0.45), (0.5, 0.5), 4, num_samples=2000,
                               generator=torch.Generator().manual_seed(5))
        for label, flags in [("the 4 x 3 example", hand), ("flags where no block reaches position 3", unreached),
                             ("2,000 simulated blocks of a mixture", mix)]:
            out = call(fn, flags.clone(), on=label)
            got = out.tolist() if isinstance(out, torch.Tensor) else list(out)
            if len(got) != flags.shape[1]:
                raise Stop(f"return one rate per position ({flags.shape[1]}), got {len(got)} (on {label})")
            got = [float(x) for x in got]
            want = survivor_statistics(flags).conditional_rate
            if all(abs(a - b) <= 1e-9 for a, b in zip(got, want)):
                continue
            where = f"on {label}: got {fmt(got)}, expected {fmt(want)}"
            if any(math.isnan(x) for x in got):
                raise Stop(f"NaN at a position no block reached (0 / 0); report 0.0 there ({where})")
            f = flags.double()
            previous = [f[:, 0].mean().item()] + [
                (f[:, j] * f[:, j - 1]).sum().item() / max(f[:, j - 1].sum().item(), 1) for j in range(1, f.shape[1])]
            wrongs = [(f.mean(0).tolist(), "that is the population rate: flag j averaged over all n blocks, including "
                       "blocks that stopped before j. Divide by the blocks that reached j (flags 1..j-1 all true)"),
                      (survivor_statistics(flags).reach, "that is P(A >= j), the share of all blocks that accepted "
                       "1..j; divide by the blocks that reached j, not by n"),
                      (previous, "you conditioned on flag j-1 alone; a block reaches j only if flags 1..j-1 are all "
                       "true (a cumulative product along the row)")]
            for wrong, text in wrongs:
                if all(abs(a - b) <= 1e-9 for a, b in zip(got, wrong)):
                    raise Stop(f"{text} ({where})")
            raise Stop(f"wrong rates {where}")
        report.note("conditional rates right on 3 flag sets, including an unreached position (0.0)")
    return run("conditional_acceptance", body, conditional_acceptance, raise_on_failure=raise_on_failure,
                verbose=verbose)
