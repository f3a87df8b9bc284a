"""Workshop exercises: one checker per exercise, each saying in plain words what is wrong.

A checker takes the learner's function, runs it on fixed inputs with seeded generators, compares the result with
the library and with the laws of known mistakes, prints a `Report`, and raises AssertionError when something is
wrong (`raise_on_failure=False` returns the report instead). Thresholds for sampled checks come from the sample
size (`tv_noise_bound`). An exception raised by the learner's function is reported, never propagated, except
NotImplementedError: an unfinished stub re-raises it unchanged.

Act I   check_residual, check_acceptance_probability, check_speculative_sample
Act II  check_verify_block, check_smallest_catching_m
Act III check_expected_tokens, check_conditional_acceptance
Act IV  check_speedup, check_best_k
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from .accounting import expected_accepted, expected_tokens, survivor_statistics
from .chain import exact_sequence_distribution, reference_chain
from .cost import best_k, speedup
from .exact import exact_decoder_distribution
from .failures import MODES
from .noise import tv_noise_bound, tv_noise_mean

__all__ = ["Report", "check_residual", "check_acceptance_probability", "check_speculative_sample",
           "check_verify_block", "check_smallest_catching_m", "check_expected_tokens",
           "check_conditional_acceptance", "check_speedup", "check_best_k"]

DELTA = 1e-6  # false-alarm rate of every sampled check: a correct solution fails about once in a million runs


@dataclass
class Report:
    """What a checker found: `ok`, and one plain-words message per finding (printing a report shows them)."""

    exercise: str
    ok: bool = True
    messages: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.ok = False
        self.messages.append(message)

    def note(self, message: str) -> None:
        self.messages.append(message)

    def __str__(self) -> str:
        head = f"{self.exercise}: {'all checks passed' if self.ok else 'not right yet'}"
        return "\n".join([head] + [f"  - {m}" for m in self.messages])

    def __repr__(self) -> str:
        return f"Report({self.exercise!r}, ok={self.ok}, {len(self.messages)} message(s))"


class _Stop(Exception):
    """Raised inside a checker once a finding makes further checks meaningless."""


def _call(fn, *args, on: str, **kwargs):
    """fn(*args): NotImplementedError passes through; any other exception becomes a finding."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's bug, reported in words
        raise _Stop(f"your function raised {type(e).__name__}: {e} (on {on})") from None


def _run(exercise: str, body, fn, *, raise_on_failure: bool, verbose: bool) -> Report:
    report = Report(exercise)
    if not callable(fn):
        report.fail(f"expected a function, got {type(fn).__name__}: pass the function itself, without calling it")
    else:
        try:
            body(fn, report)
        except NotImplementedError:
            raise
        except _Stop as stop:
            report.fail(str(stop))
        except Exception as e:  # an output the checker could not read: still a plain-words finding
            report.fail(f"could not read your function's output ({type(e).__name__}: {e})")
    if verbose:
        print(report)
    if raise_on_failure and not report.ok:
        raise AssertionError(f"{exercise}: see the report above" if verbose else str(report))
    return report


def _fmt(xs) -> str:
    return "[" + ", ".join(f"{float(x):.4g}" for x in xs) + "]"


def _tensor(out, name: str, shape=None) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise _Stop(f"{name} must return a torch.Tensor, got {type(out).__name__}")
    if shape is not None and tuple(out.shape) != tuple(shape):
        raise _Stop(f"{name} must return shape {tuple(shape)}, got {tuple(out.shape)}")
    return out


def _tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * (a.double().reshape(-1) - b.double().reshape(-1)).abs().sum().item()


def _law_verdict(report: Report, what: str, freq: torch.Tensor, law: torch.Tensor, n: int,
                 mistakes: dict, delta: float) -> bool:
    """Measured TV against the noise bound; on failure name every known mistake whose law the samples match."""
    tv, bound = _tv(freq, law), tv_noise_bound(law, n, delta)
    if tv <= bound:
        return True
    msg = f"{what}: wrong distribution, TV {tv:.4f} from the exact law with {n:,} samples (noise bound {bound:.4f})"
    hits = [text for wrong_law, text in mistakes.values() if _tv(freq, wrong_law) <= tv_noise_bound(wrong_law, n, delta)]
    report.fail(msg + (". It matches a known mistake: " + "; ".join(hits) if hits else ""))
    return False


# ---- Act I ---------------------------------------------------------------------------------------------

def _residual_ref(p, q):
    r = torch.clamp(p - q, min=0)
    return r / r.sum() if r.sum() > 0 else p


def _post_pair() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)  # the post's pair, as in notebook 01
    p = torch.softmax(torch.randn(5, generator=g) * 1.4, dim=0)
    return p, torch.softmax(torch.randn(5, generator=g) * 1.4, dim=0)


def check_residual(residual, *, raise_on_failure: bool = True, verbose: bool = True) -> Report:
    """Exercise 1.1: residual(p, q) -> [p - q]_+ / sum [p - q]_+ for 1-D p, q; a distribution (not NaN) at p == q."""
    def body(fn, report):
        p0, q0 = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.3, 0.2, 0.5])
        g = torch.Generator().manual_seed(11)
        cases = [(p0, q0), _post_pair()] + [tuple(torch.softmax(torch.randn(2, 6, generator=g) * 2, -1))
                                            for _ in range(3)]
        for p, q in cases:
            pc, qc = p.clone(), q.clone()
            r = _tensor(_call(fn, p, q, on=f"p = {_fmt(p)}, q = {_fmt(q)}"), "residual", p.shape).double()
            if not (torch.equal(p, pc) and torch.equal(q, qc)):
                raise _Stop("your function changed p or q in place; work on a copy (vllm-ascend PR #2881 zeroed "
                            "target probabilities in place and never restored them)")
            want = _residual_ref(p.double(), q.double())
            if torch.allclose(r, want, atol=1e-6):
                continue
            clamp = torch.clamp(p - q, min=0).double()
            where = f"for p = {_fmt(p)}, q = {_fmt(q)}: got {_fmt(r)}, expected {_fmt(want)}"
            if torch.isnan(r).any():
                raise _Stop(f"NaN {where}")
            known = [
                (clamp, "not normalised: you returned [p - q]_+ itself; divide it by its sum"),
                (torch.softmax(clamp, -1), "softmax of [p - q]_+ (the bug of transformers PR #28508): softmax gives "
                 "mass to tokens where p <= q; normalise by the sum instead"),
                (p.double(), "you returned p: that is the 'p on rejection' sampler, which double-counts the overlap"),
                ((p - q).abs().double() / (p - q).abs().sum(), "you normalised |p - q|: tokens where q > p get mass; "
                 "clamp at 0 first"),
                (_residual_ref(q.double(), p.double()), "you computed [q - p]_+: p and q are swapped (p is the "
                 "target, q the draft)"),
            ]
            for wrong, text in known:
                if torch.allclose(r, wrong, atol=1e-6):
                    raise _Stop(f"{text} ({where})")
            if abs(r.sum().item() - 1) > 1e-6:
                raise _Stop(f"the result must sum to 1, yours sums to {r.sum().item():.4f} ({where})")
            raise _Stop(f"wrong values {where}")
        report.note("matches [p - q]_+ / sum on 5 pairs, and leaves p and q unchanged")
        for p in (p0, cases[1][0]):
            r = _tensor(_call(fn, p, p.clone(), on=f"p == q = {_fmt(p)}"), "residual", p.shape).double()
            if torch.isnan(r).any():
                raise _Stop(f"NaN at p == q = {_fmt(p)}: [p - q]_+ is all zeros and 0/0 is NaN. Normalise lazily: "
                            "return p (any distribution will do, it is never sampled) when the sum is 0 "
                            "(jaymody/speculative-sampling #5)")
            if (r < 0).any() or abs(r.sum().item() - 1) > 1e-6:
                raise _Stop(f"at p == q the result must still be a distribution (e.g. p itself), got {_fmt(r)}")
        report.note("returns a distribution, not NaN, when p == q")
    return _run("residual", body, residual, raise_on_failure=raise_on_failure, verbose=verbose)


def check_acceptance_probability(acceptance_probability, *, raise_on_failure: bool = True,
                                 verbose: bool = True) -> Report:
    """Exercise 1.2: acceptance_probability(log_p_x, log_q_x) -> min(1, p/q) elementwise, from log-probabilities."""
    def body(fn, report):
        def run(lp, lq, dtype=torch.float64):
            lp, lq = torch.tensor(lp, dtype=dtype), torch.tensor(lq, dtype=dtype)
            out = _tensor(_call(fn, lp, lq, on=f"log p = {_fmt(lp)}, log q = {_fmt(lq)}"), "acceptance_probability",
                          lp.shape)
            return lp, lq, out.double()

        lp, lq, a = run([math.log(0.6), math.log(0.1), math.log(0.3), math.log(0.05)],
                        [math.log(0.3), math.log(0.2), math.log(0.3), math.log(0.4)])
        want = torch.tensor([1.0, 0.5, 1.0, 0.125], dtype=torch.float64)
        if (a > 1).any():
            raise _Stop(f"values above 1 ({_fmt(a)}) where p > q: a probability is min(1, p/q), so clamp the log "
                        "ratio at 0 before exp")
        if not torch.allclose(a, want, atol=1e-9):
            raise _Stop(f"for p = [0.6, 0.1, 0.3, 0.05], q = [0.3, 0.2, 0.3, 0.4] expected {_fmt(want)}, got "
                        f"{_fmt(a)}")
        if not (a[lp >= lq] == 1).all():
            raise _Stop(f"where p >= q the result must be exactly 1.0, got {a[lp >= lq].tolist()}; "
                        "exp(min(0, log p - log q)) gives exp(0) = 1 exactly")
        report.note("min(1, p/q) on ordinary values, exactly 1 where p >= q")
        lp, lq, a = run([-1000.0, -1001.0, -5.0, -1000.0], [-1001.0, -1000.0, -1000.0, -5.0])
        want = torch.tensor([1.0, math.exp(-1.0), 1.0, 0.0], dtype=torch.float64)
        bad = ~torch.isclose(a, want, rtol=1e-9, atol=0) | torch.isnan(a)
        if bad.any():
            i = int(bad.nonzero()[0])
            kind = "NaN" if torch.isnan(a[i]) else "inf" if torch.isinf(a[i]) else f"{a[i].item():.4g}"
            raise _Stop(f"{kind} for log p = {lp[i].item():g}, log q = {lq[i].item():g} (expected {want[i].item():.4g}):"
                        " exp() underflows to 0 there, so p/q becomes 0/0 or x/0. Stay in log space: "
                        "exp(min(0, log p - log q))")
        lp, lq, a = run([-100.0, -120.0], [-120.0, -100.0], torch.float32)
        if not torch.allclose(a, torch.tensor([1.0, math.exp(-20.0)], dtype=torch.float64), rtol=1e-4, atol=0):
            raise _Stop(f"float32 log-probabilities [-100, -120] vs [-120, -100]: expected [1, {math.exp(-20):.4g}], "
                        f"got {_fmt(a)}; in float32 exp(-120) is 0, so take the difference of the logs first")
        report.note("no overflow, underflow or NaN for log-probabilities down to -1000 (float64) and -120 (float32)")
        lp, lq, a = run([-math.inf, -math.inf], [-3.0, 0.0])
        if not (a == 0).all():
            raise _Stop(f"where p = 0 (log p = -inf) the result must be exactly 0.0, got {_fmt(a)}")
        report.note("exactly 0 where p = 0")
    return _run("acceptance_probability", body, acceptance_probability, raise_on_failure=raise_on_failure,
                verbose=verbose)


def check_speculative_sample(speculative_sample, *, raise_on_failure: bool = True, verbose: bool = True) -> Report:
    """Exercise 1.3: speculative_sample(p, q, n, generator) -> n tokens (LongTensor (n,)) distributed as p."""
    n = 200_000

    def body(fn, report):
        p0, q0 = _post_pair()
        cases = [("the post's pair", p0, q0),
                 ("p = [0.5, 0.5, 0], q = [0.2, 0.3, 0.5]", torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.2, 0.3, 0.5])),
                 ("p == q", p0, p0.clone())]
        out = [_call(fn, p0, q0, 50, torch.Generator().manual_seed(s), on="the post's pair, n = 50") for s in (3, 3)]
        x = _tensor(out[0], "speculative_sample", (50,))
        if x.is_floating_point() or x.dtype == torch.bool:
            raise _Stop(f"tokens must be integer ids (a LongTensor), got dtype {x.dtype}")
        if not torch.equal(out[0], _tensor(out[1], "speculative_sample", (50,))):
            raise _Stop("two generators seeded alike gave different tokens: pass `generator` to every random draw "
                        "(torch.multinomial, torch.rand), never use the global random state")
        for label, p, q in cases:
            x = _tensor(_call(fn, p, q, n, torch.Generator().manual_seed(1), on=f"{label}, n = {n:,}"),
                        "speculative_sample", (n,))
            if x.min() < 0 or x.max() >= p.numel():
                raise _Stop(f"token ids must lie in [0, {p.numel()}), got values in [{int(x.min())}, {int(x.max())}]")
            freq = torch.bincount(x.long(), minlength=p.numel()).double() / n
            pd, qd = p.double(), q.double()
            shared = torch.minimum(pd, qd)
            beta = shared.sum()
            mistakes = {
                "p": (shared + (1 - beta) * pd, "a rejection draws from p instead of the residual (this double-counts "
                      "the overlap min(p, q) that accepted proposals already delivered)"),
                "q": (qd, "every proposal is kept: the output is q, not p"),
                "softmax": (shared + (1 - beta) * torch.softmax(torch.clamp(pd - qd, min=0), -1),
                            "the residual is softmax([p - q]_+) instead of [p - q]_+ / sum"),
                "greedy": (torch.where(pd >= qd, qd, torch.zeros_like(qd)) + (1 - qd[pd >= qd].sum())
                           * _residual_ref(pd, qd), "a proposal is kept only where p >= q, never with "
                           "probability p/q where p < q"),
            }
            if not _law_verdict(report, f"{label}", freq, pd, n, mistakes, DELTA / len(cases)):
                raise _Stop("the distribution test failed")
        report.note(f"reproducible with a seeded generator; 3 pairs x {n:,} samples each within the noise bound of p")
    return _run("speculative_sample", body, speculative_sample, raise_on_failure=raise_on_failure, verbose=verbose)


# ---- Act II --------------------------------------------------------------------------------------------

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
        law[j] = alive * (1 - a) * (_residual_ref(p, q) if fix == "residual" else p)
        alive *= a
    law[k] = alive * p_rows[k if bonus_row is None else bonus_row]
    return law


def _as_verdict(out, k: int, V: int, on: str) -> tuple[int, list[int]]:
    if not isinstance(out, tuple) or len(out) != 2:
        raise _Stop(f"verify_block must return a pair (accepted, tokens), got {type(out).__name__} (on {on})")
    accepted, tokens = out
    accepted = int(accepted)
    tokens = [int(t) for t in (tokens.reshape(-1).tolist() if isinstance(tokens, torch.Tensor) else tokens)]
    if not 0 <= accepted <= k:
        raise _Stop(f"accepted must lie in 0..k = 0..{k}, got {accepted} (on {on})")
    if len(tokens) != accepted + 1:
        raise _Stop(f"tokens must hold the {accepted} accepted proposal(s) and then exactly one target token "
                    f"(correction or bonus), {accepted + 1} in all; got {len(tokens)}: {tokens} (on {on})")
    if any(not 0 <= t < V for t in tokens):
        raise _Stop(f"token ids must lie in [0, {V}), got {tokens} (on {on})")
    return accepted, tokens


def check_verify_block(verify_block, *, raise_on_failure: bool = True, verbose: bool = True,
                       n: int = 2_000) -> Report:
    """Exercise 2.1: verify_block(p_rows (k+1, V), q_rows (k, V), proposals (k,), generator) -> (accepted, tokens)."""
    def body(fn, report):
        p_rows, q_rows, y = _block()
        k, V = len(y), p_rows.shape[-1]
        # 1. a block the target must accept whole: q == p at every slot
        acc, toks = _as_verdict(_call(fn, p_rows, p_rows[:k].clone(), y, torch.Generator().manual_seed(0),
                                      on="q_rows == p_rows[:k]"), k, V, "q_rows == p_rows[:k]")
        if acc != k:
            raise _Stop(f"with q == p at every slot each proposal passes with probability 1, but you accepted {acc} "
                        f"of {k}: accept y_j when u < min(1, p_j(y_j) / q_j(y_j)), judging y_j with row j")
        if toks[:k] != y.tolist():
            raise _Stop(f"the committed tokens must start with the accepted proposals {y.tolist()}, got {toks}")
        # 2. a first proposal the target never produces: rejected, and the residual is a point mass on token 2
        p1 = p_rows.clone()
        p1[0] = torch.tensor([0.0, 0.5, 0.5, 0.0], dtype=torch.float64)
        q1 = q_rows.clone()
        q1[0] = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)
        y1 = torch.tensor([0, 1, 3])
        on = "p_1 = [0, 0.5, 0.5, 0], q_1 = [0.5, 0.5, 0, 0], y_1 = 0"
        for seed in range(20):
            acc, toks = _as_verdict(_call(fn, p1, q1, y1, torch.Generator().manual_seed(seed), on=on), k, V, on)
            if acc != 0:
                raise _Stop(f"you reported {acc} accepted proposal(s), but y_1 = 0 must be rejected ({on}): its "
                            "acceptance min(1, p/q) is 0, and the walk stops at the first rejection")
            if toks[0] == 0:
                raise _Stop(f"after rejecting y_1 = 0 you emitted 0 again ({on}): the rejected proposal is dropped "
                            "(lucidrains/speculative-decoding #3) and the token comes from the residual")
            if toks[0] != 2:
                raise _Stop(f"after rejecting y_1 you emitted {toks[0]} ({on}); the residual [p_1 - q_1]_+ puts all "
                            "its mass on token 2. Drawing from p_1 instead of the residual gives token 1 half the time")
        report.note("accepts a block with q == p whole; a rejection drops the proposal and draws the residual")
        # 3. reproducible with a seeded generator
        runs = [[_as_verdict(_call(fn, p_rows, q_rows, y, g, on="the test block"), k, V, "the test block")
                 for _ in range(30)] for g in (torch.Generator().manual_seed(5), torch.Generator().manual_seed(5))]
        if runs[0] != runs[1]:
            raise _Stop("two generators seeded alike gave different verdicts: pass `generator` to every random "
                        "draw (torch.rand, torch.multinomial), never use the global random state")
        # 4. the law of (A, z) over n verifications against the exact law and the laws of known mistakes
        g = torch.Generator().manual_seed(1)
        counts = torch.zeros(k + 1, V, dtype=torch.float64)
        for _ in range(n):
            acc, toks = _as_verdict(_call(fn, p_rows, q_rows, y, g, on="the test block"), k, V, "the test block")
            if toks[:acc] != y[:acc].tolist():
                raise _Stop(f"the first {acc} committed tokens must be the accepted proposals {y[:acc].tolist()}, "
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
        if not _law_verdict(report, "(accepted, emitted token)", freq, law, n, mistakes, DELTA):
            if _tv(a_freq, a_law) <= tv_noise_bound(a_law, n, DELTA):
                report.note("the accepted counts are right: the walk is correct, the token emitted after it is not")
            else:
                report.note(f"the accepted counts are off too: P(A = 0..{k}) measured {_fmt(a_freq)}, exact "
                            f"{_fmt(a_law)}")
            return
        report.note(f"(accepted, emitted token) of {n:,} verifications within the noise bound of the exact law")
    return _run("verify_block", body, verify_block, raise_on_failure=raise_on_failure, verbose=verbose)


@functools.lru_cache(maxsize=64)
def _catch_tv(mode: str, k: int) -> tuple[float, torch.Tensor]:
    ch = reference_chain()
    law = exact_decoder_distribution(ch.P, ch.Q, ch.start, ch.horizon, k, mode, Q_bad=ch.Q_bad)
    target = exact_sequence_distribution(MODES[mode].target(ch.P), ch.start, ch.horizon)
    return _tv(law, target), target


def _first_m(target: torch.Tensor, tv: float, threshold, m_max: int = 10**8) -> int | None:
    """Smallest M in 1..m_max with threshold(target, M) < tv (thresholds fall with M), or None."""
    if not threshold(target, m_max) < tv:
        return None
    lo, hi = 1, m_max
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if threshold(target, mid) < tv else (mid + 1, hi)
    return lo


def check_smallest_catching_m(smallest_catching_m, *, raise_on_failure: bool = True, verbose: bool = True) -> Report:
    """Exercise 2.2: smallest_catching_m(mode, k=2) -> smallest M with tv_noise_bound(target, M) < exact TV, or None."""
    def body(fn, report):
        cases = [("off_by_one", 2), ("phantom_history", 2), ("phantom_history", 1), ("target_policy_missing", 2),
                 ("stale_draft_cache", 2)]
        for mode, k in cases:
            tv, target = _catch_tv(mode, k)
            want = _first_m(target, tv, tv_noise_bound)
            got = _call(fn, mode, k=k, on=f"mode = {mode!r}, k = {k}")
            where = f"{mode!r} at k = {k} (exact TV {tv:.4f})"
            if want is None:
                if got is not None:
                    raise _Stop(f"{where}: this decoder is exact, only slower, so no M catches it; return None "
                                f"(you returned {got!r})")
                continue
            if got is None:
                if mode == "target_policy_missing":
                    raise _Stop(f"{where}: you returned None. Compare with the distribution the user asked for, "
                                "sd.exact_sequence_distribution(mode.target(P), ...): under the request's top-p, "
                                "not plain P")
                raise _Stop(f"{where}: you returned None, but M = {want:,} catches it")
            if isinstance(got, bool) or not isinstance(got, int):
                raise _Stop(f"{where}: return an int (or None), got {type(got).__name__}")
            if got == want:
                continue
            if got == _first_m(target, tv, tv_noise_mean):
                raise _Stop(f"{where}: you returned {got:,}, where the noise floor tv_noise_mean drops below the TV. "
                            "The test's threshold is tv_noise_bound (floor plus McDiarmid's deviation), "
                            f"which needs M = {want:,}")
            tv_k2 = _catch_tv(mode, 2)[0]
            if k != 2 and got == _first_m(target, tv_k2, tv_noise_bound):
                raise _Stop(f"{where}: your answer is the one for k = 2; pass k on to exact_decoder_distribution")
            if got < 1 or tv_noise_bound(target, got) >= tv:
                raise _Stop(f"{where}: at your M = {got:,} the threshold is {tv_noise_bound(target, max(got, 1)):.4f}, "
                            "not yet below the TV, so the test does not catch it there")
            raise _Stop(f"{where}: a smaller M already catches it: the threshold at M = {got - 1:,} is "
                        f"{tv_noise_bound(target, got - 1):.4f} < {tv:.4f} (expected {want:,})")
        report.note("right for off_by_one, phantom_history (k = 2 and k = 1), target_policy_missing and the exact "
                    "stale_draft_cache")
    return _run("smallest_catching_m", body, smallest_catching_m, raise_on_failure=raise_on_failure,
                verbose=verbose)


# ---- Act III -------------------------------------------------------------------------------------------

def _number(out, name: str, on: str) -> float:
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        out = out.item()
    if isinstance(out, bool) or not isinstance(out, (int, float)):
        raise _Stop(f"{name} must return a number, got {type(out).__name__} (on {on})")
    return float(out)


def check_expected_tokens(expected_tokens_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Report:
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
            got = _number(_call(fn, list(alpha), on=f"alpha = {alpha}"), "expected_tokens", f"alpha = {alpha}")
            if abs(got - want) <= 1e-9:
                continue
            for wrong, text in wrongs:
                if all(abs(wrong(a) - _number(_call(fn, list(a), on=f"alpha = {a}"), "expected_tokens", "")) < 1e-9
                       for a in cases):
                    raise _Stop(f"{text} (alpha = {alpha}: got {got:.4f}, expected {want:.4f})")
            raise _Stop(f"alpha = {alpha}: got {got:.4f}, expected {want:.4f}")
        got = _number(_call(fn, [], on="alpha = [] (k = 0)"), "expected_tokens", "alpha = []")
        if got != 1.0:
            raise _Stop(f"k = 0 (alpha = []) must give 1.0, plain decoding's one token per target call; got {got:g}")
        report.note("E[N] right on 5 rate sequences and for k = 0")
    return _run("expected_tokens", body, expected_tokens_fn, raise_on_failure=raise_on_failure, verbose=verbose)


def check_conditional_acceptance(conditional_acceptance, *, raise_on_failure: bool = True,
                                 verbose: bool = True) -> Report:
    """Exercise 3.2: conditional_acceptance(accepts bool (n, k)) -> [P(flag j | flags 1..j-1 all true)], 0.0 if unreached."""
    from .accounting import simulate_mixture

    def body(fn, report):
        hand = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
        unreached = torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.bool)
        mix = simulate_mixture((0.95, 0.45), (0.5, 0.5), 4, 2000, generator=torch.Generator().manual_seed(5))
        for label, flags in [("the 4 x 3 example", hand), ("flags where no block reaches position 3", unreached),
                             ("2,000 simulated blocks of a mixture", mix)]:
            out = _call(fn, flags.clone(), on=label)
            got = out.tolist() if isinstance(out, torch.Tensor) else list(out)
            if len(got) != flags.shape[1]:
                raise _Stop(f"return one rate per position ({flags.shape[1]}), got {len(got)} (on {label})")
            got = [float(x) for x in got]
            want = survivor_statistics(flags).conditional_rate
            if all(abs(a - b) <= 1e-9 for a, b in zip(got, want)):
                continue
            where = f"on {label}: got {_fmt(got)}, expected {_fmt(want)}"
            if any(math.isnan(x) for x in got):
                raise _Stop(f"NaN at a position no block reached (0 / 0); report 0.0 there ({where})")
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
                    raise _Stop(f"{text} ({where})")
            raise _Stop(f"wrong rates {where}")
        report.note("conditional rates right on 3 flag sets, including an unreached position (0.0)")
    return _run("conditional_acceptance", body, conditional_acceptance, raise_on_failure=raise_on_failure,
                verbose=verbose)


# ---- Act IV --------------------------------------------------------------------------------------------

class _CostV:
    """c_v(k) = base + slope * k that records the k it was called with."""

    def __init__(self, base: float, slope: float):
        self.base, self.slope, self.calls = base, slope, []

    def __call__(self, k: int) -> float:
        self.calls.append(k)
        return self.base + self.slope * k

    def __str__(self) -> str:
        return f"c_v(k) = {self.base:g} + {self.slope:g} k"


def check_speedup(speedup_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Report:
    """Exercise 4.1: speedup(alpha, c_d, k, c_v) -> E[N(k)] / (k c_d + c_v(k)), c_v a function of k; S(0) = 1."""
    def body(fn, report):
        for alpha, c_d, k, base, slope in [(0.8, 0.15, 8, 1.0, 0.05), (0.8, 0.15, 8, 1.6, 0.0),
                                           (0.6, 0.1, 3, 1.0, 0.5), (0.95, 0.3, 16, 1.2, 0.02)]:
            c_v = _CostV(base, slope)
            on = f"alpha = {alpha}, c_d = {c_d}, k = {k}, {c_v}"
            got = _number(_call(fn, alpha, c_d, k, c_v, on=on), "speedup", on)
            want = speedup(alpha, c_d, k, c_v)
            if abs(got - want) <= 1e-9:
                continue
            cost = k * c_d + base + slope * k
            where = f"{on}: got {got:.4f}, expected {want:.4f}"
            if k not in c_v.calls[:-1] and slope:
                raise _Stop(f"c_v is a function of the draft length: evaluate it at k, c_v(k) (you called it with "
                            f"{c_v.calls[:-1] or 'nothing'}) ({where})")
            for num, text in [(1 + k * alpha, "the numerator is 1 + k alpha; use E[N(k)] = 1 + sum_j alpha^j"),
                              (expected_accepted(alpha, k), "the numerator is E[A]; a round retires E[N] = 1 + E[A]")]:
                if abs(got - num / cost) <= 1e-9:
                    raise _Stop(f"{text} ({where})")
            if abs(got - expected_tokens(alpha, k) / (c_d + base + slope * k)) <= 1e-9:
                raise _Stop(f"the draft cost is k c_d: k sequential draft steps ({where})")
            raise _Stop(where)
        c_v = _CostV(1.2, 0.05)
        got = _number(_call(fn, 0.8, 0.15, 0, c_v, on=f"k = 0, {c_v}"), "speedup", "k = 0")
        if got != 1.0:
            raise _Stop(f"k = 0 is plain decoding, no draft and no verification pass, so S(0) = 1; got {got:.4f} "
                        f"with {c_v}")
        report.note("S(k) right on 4 settings with c_v(k) a function of k, and S(0) = 1")
    return _run("speedup", body, speedup_fn, raise_on_failure=raise_on_failure, verbose=verbose)


def check_best_k(best_k_fn, *, raise_on_failure: bool = True, verbose: bool = True) -> Report:
    """Exercise 4.2: best_k(alpha, c_d, c_v, k_max) -> the k in 0..k_max with the largest S(k), ties to the smaller k."""
    def body(fn, report):
        cases = [(0.9, 0.15, (1.0, 0.05), 32), (0.7, 0.15, (1.0, 0.05), 32), (0.5, 0.15, (1.0, 0.5), 32),
                 (0.99, 0.01, (1.0, 0.01), 5), (0.0, 0.0, (1.0, 0.0), 4)]
        for alpha, c_d, (base, slope), k_max in cases:
            c_v = _CostV(base, slope)
            on = f"alpha = {alpha}, c_d = {c_d}, {c_v}, k_max = {k_max}"
            got = _call(fn, alpha, c_d, c_v, k_max, on=on)
            learner_calls = list(c_v.calls)
            if isinstance(got, torch.Tensor) and got.numel() == 1:
                got = int(got)
            if isinstance(got, bool) or not isinstance(got, int):
                raise _Stop(f"best_k must return the draft length as an int, got {type(got).__name__} ({on})")
            ref = best_k(alpha, c_d, c_v, k_max)
            if got == ref.k:
                continue
            where = f"{on}: got k = {got}, expected k = {ref.k}"
            if not 0 <= got <= k_max:
                raise _Stop(f"k must lie in 0..k_max ({where})")
            if ref.k == 0:
                if alpha == 0.0:
                    raise _Stop(f"every k gives S = 1 here; on ties return the smallest k, the cheapest ({where})")
                raise _Stop(f"k = 0 (switch speculation off) wins here: every k >= 1 is slower than plain decoding, "
                            f"best S = {max(ref.speedups[1:]):.3f} < 1. Search k = 0..k_max ({where})")
            if ref.k == k_max:
                raise _Stop(f"the best k is k_max itself; search range(k_max + 1) ({where})")
            if abs(ref.speedups[got] - ref.speedup) <= 1e-12:
                raise _Stop(f"k = {got} ties with k = {ref.k}; return the smaller ({where})")
            if slope and len(set(learner_calls)) <= 1:
                raise _Stop(f"c_v depends on k: evaluate c_v(k) for each candidate k ({where})")
            raise _Stop(f"{where} (S = {ref.speedups[got]:.4f} at yours, {ref.speedup:.4f} at the best)")
        report.note("best k right on 5 settings, including k = 0, k = k_max and a tie")
    return _run("best_k", body, best_k_fn, raise_on_failure=raise_on_failure, verbose=verbose)
