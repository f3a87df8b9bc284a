"""What the lab's draft suites share: seeded decodes counted against the exact law, a primed lookahead, the clock."""
from __future__ import annotations

import torch


def empirical(decode, *, vocab: int, horizon: int, n: int, seed: int = 0) -> torch.Tensor:
    """Frequencies (vocab**horizon,) of n decodes: decode(generator) -> (horizon,) tokens, the first most significant.

    One generator, seeded once, is handed to every decode, so the n samples are independent and the run repeats.
    """
    g = torch.Generator().manual_seed(seed)
    base = vocab ** torch.arange(horizon - 1, -1, -1)  # (h,)
    codes = torch.tensor([int((decode(g) * base).sum()) for _ in range(n)])
    return torch.bincount(codes, minlength=vocab ** horizon).double() / n  # (V^h,)


def empirical_with_first_rounds(decode, *, k: int, vocab: int, horizon: int, n: int, seed: int = 0):
    """(frequencies (vocab**horizon,), accepted (n,)): empirical's run, with accepted[j] the proposals the first round
    of decode j kept. decode(generator, log) -> (horizon,) tokens must hand log (a SpecDecodeLog for k) to the decoder.
    """
    firsts = []

    def run(g):
        log = _FirstRound(k=k, policy="sample", temperature=1.0)
        out = decode(g, log)
        firsts.append(log.first)
        return out

    freqs = empirical(run, vocab=vocab, horizon=horizon, n=n, seed=seed)
    assert None not in firsts  # every decode ran at least one round
    return freqs, torch.tensor(firsts)


def _first_round_log():
    from dataclasses import dataclass

    import specdec_lib as sd

    @dataclass(kw_only=True)
    class FirstRound(sd.SpecDecodeLog):
        """A SpecDecodeLog that also keeps its first round's accepted count."""

        first: int | None = None

        def record_round(self, accepted, emitted=None, draft_time=0.0, verify_time=0.0):
            if self.first is None:
                self.first = int(accepted)
            super().record_round(accepted, emitted, draft_time, verify_time)

    return FirstRound


_FirstRound = _first_round_log()


def accepts_first_proposals(accepted: torch.Tensor, beta: float) -> bool:
    """Whether the first rounds kept a proposal at least as often as a chance beta per decode allows: the fraction of
    decodes whose first round kept one is above beta - 5 sigma, sigma = sqrt(beta (1 - beta) / n).

    When each first round keeps a proposal with probability >= beta independently, that fraction falls below the
    bound with probability < exp(-2 n (5 sigma)^2) = exp(-50 beta (1 - beta)) (Hoeffding), < 3e-5 for beta in
    [0.3, 0.7]; a drafter whose proposals are never (or seldom) kept sits far below it.
    """
    from stats import rate_bound

    n = accepted.numel()
    return float((accepted > 0).double().mean()) > beta - rate_bound(beta, n)


def primed_lookahead():
    """A LookaheadDraft class that starts with every level filled and G seeded guesses under every token.

    A decode of 3 tokens ends before lookahead's pool fills by itself; any pool that is a function of the past keeps
    a one-hot rule exact, so the law test may start from this one (an explicit generator, no global seeding).
    """
    from specdec_lib.lab.lookahead import LookaheadDraft

    class Primed(LookaheadDraft):
        def start(self, prompt, cache=None):
            state = super().start(prompt, cache)
            g = torch.Generator().manual_seed(7)
            for key in range(self.vocab):
                for _ in range(self.G):
                    gram = tuple(torch.randint(0, self.vocab, (self.N - 1,), generator=g).tolist())
                    self._remember(state.pool, key, gram)
            state.levels = [state.levels[0][:self.W - 1]] + [
                torch.randint(0, self.vocab, (self.W,), generator=g).tolist() for _ in range(self.N - 2)]
            state.filled = self.N - 2
            return state

    return Primed


def assert_measured_like_any_draft(target, draft, name: str, vocab: int) -> None:
    """time_terms and measure_speedup run on (target, draft) and leave the caches where a round starts: positive
    terms, E[N] within [1, k + 1] at k = 1 and 3, the table named after the draft."""
    import specdec_lib as sd
    from specdec_lib.lab.measure import MeasurePlan

    T_1, D, V = sd.lab.time_terms(target, draft, torch.tensor([1, 2, 3, 4, 5]), [1, 3], reps=2)
    assert T_1 > 0 and min(D + V) > 0
    prompts = [torch.randint(0, vocab, (6,), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    t = sd.lab.measure_speedup(target, draft, prompts, [1, 3], plan=MeasurePlan(n_new=8, repeats=1, reps=1))
    assert t.draft == name and all(1.0 <= e <= k + 1 for e, k in zip(t.e_n, t.ks))

def early_exit_bugs():
    """(NoTokenCheck, OneSlotLate): EarlyExitTarget subclasses with a shared-cache bug each, the negative controls of
    the early-exit suites (the lab's model and a transformers one).

    NoTokenCheck reuses every kept slot whatever token it holds (a block the draft did not propose reads the wrong
    states); OneSlotLate reads each kept layer-L input one slot late (slot s gets s + 1's), Act II's off-by-one.
    """
    from specdec_lib.lab.early_exit import EarlyExitTarget

    class NoTokenCheck(EarlyExitTarget):
        def __call__(self, idx, cache=None):
            if cache is not None:
                m = max(0, min(cache.low - cache.length, idx.shape[1]))
                cache.tokens[cache.length:cache.length + m] = idx[0, :m]
            return super().__call__(idx, cache)

    class OneSlotLate(EarlyExitTarget):
        def __call__(self, idx, cache=None):
            if cache is not None and cache.low - cache.length >= 2:
                start, low = cache.length, cache.low
                cache.hidden[start:low - 1] = cache.hidden[start + 1:low].clone()
            return super().__call__(idx, cache)

    return NoTokenCheck, OneSlotLate
