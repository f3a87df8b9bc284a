"""Field-guide exercise: name a decoder's bug from the distribution of what it outputs."""
from __future__ import annotations

import functools

import torch

from ..markov.batched import decode_markov
from ..markov.chain import empirical_sequences, reference_chain
from ..markov.exact import decoder_law
from ..markov.registry import failure_modes
from ..noise import tv_noise_bound
from ..sampling import total_variation
from ._report import DELTA, Grade, Stop, call, run

__all__ = ["grade_find_bug"]

K, HORIZON, N = 2, 3, 100_000  # the field guide's k and horizon; sequences per sampled case
# (mode, sampled?): the two nearest distinct laws at k = 2 lie 0.035 apart (target_on_reject, single_token_residual),
# more than twice the noise bound of 100,000 sequences (0.017), so the nearest law is the right answer, w.p. 1 - 1e-6
CASES = [("off_by_one", False), ("reused_uniform", True), ("single_token_residual", True), ("target_on_reject", True),
         ("phantom_history", True), ("bonus_from_draft", True), ("bad_draft", True), ("stale_draft_cache", False)]


@functools.cache
def registry_laws(k: int = K, horizon: int = HORIZON) -> dict[str, torch.Tensor]:
    """{mode: its exact output law (V,) * horizon} on the reference chain, in registry order (correct first)."""
    ch = reference_chain()
    return {m.name: decoder_law(ch.P, ch.Q, start=ch.start, horizon=horizon, k=k, mode=m.name,
                                               Q_bad=ch.Q_bad) for m in failure_modes(chapter="field guide")}


def diagnosis(freqs: torch.Tensor, laws: dict[str, torch.Tensor]) -> str:
    """The first name, in laws' order, whose law is nearest freqs in TV (names with equal laws are one answer)."""
    tv = {name: total_variation(freqs, law) for name, law in laws.items()}
    best = min(tv.values())
    return next(name for name, d in tv.items() if d <= best + 1e-9)


def _case(mode: str, sampled: bool, seed: int) -> tuple[torch.Tensor, str]:
    """(input distribution over sequences, where it came from in words)."""
    law = registry_laws()[mode]
    if not sampled:
        return law, f"the exact law of {mode}"
    ch = reference_chain()
    s = decode_markov(ch.P, ch.Q, start=ch.start, horizon=HORIZON, k=K, num_samples=N, mode=mode, Q_bad=ch.Q_bad,
                      generator=torch.Generator().manual_seed(seed))
    return empirical_sequences(s, ch.P.shape[0]), f"{N:,} sequences sampled from {mode}"


def grade_find_bug(find_bug, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 2b.1: find_bug(freqs (V, V, V), laws {name: law}) -> the name whose law is nearest freqs in TV."""
    def body(fn, report):
        laws = registry_laws()
        names = list(laws)
        for i, (mode, sampled) in enumerate(CASES):
            freqs, on = _case(mode, sampled, seed=100 + i)
            want = diagnosis(freqs, laws)
            nearest = ("sampled frequencies never equal a law exactly: take the nearest in TV, since the right law "
                       f"lies within the noise bound {tv_noise_bound(laws[want], N, DELTA):.4f}")
            try:
                got = call(fn, freqs.clone(), dict(laws), on=on)
            except Stop as stop:
                raise Stop(f"{stop}; {nearest}" if sampled else str(stop)) from None
            if got == want:
                continue
            if got not in laws:
                raise Stop(f"return one of the names in laws (the registry's), got {got!r} (on {on})"
                           + (f"; {nearest}" if sampled and got is None else ""))
            tv = {name: total_variation(freqs, law) for name, law in laws.items()}
            if tv[got] <= tv[want] + 1e-9:
                raise Stop(f"{got} and {want} have the same law: return the first of them in laws' order, {want} "
                           f"(every decoder that stays exact samples the target, so they all read as 'correct')")
            if got == max(tv, key=tv.get):
                raise Stop(f"{got} is the farthest law (TV {tv[got]:.4f}); the diagnosis is the nearest (on {on})")
            raise Stop(f"on {on} you said {got}: the nearest law is {want}'s (TV {tv[want]:.4f}); yours is "
                       f"{tv[got]:.4f} away")
        report.note(f"named the bug right on {len(CASES)} inputs: {sum(s for _, s in CASES)} sampled runs "
                    f"({N:,} sequences each) and {sum(not s for _, s in CASES)} exact laws, among {len(names)} "
                    f"registered decoders")
    return run("find_bug", body, find_bug, raise_on_failure=raise_on_failure, verbose=verbose)
