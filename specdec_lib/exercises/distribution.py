"""Act I exercises: the residual, acceptance in log space, one speculative step."""
from __future__ import annotations

import math

import torch

from .. import sampling
from ..sampling import post_pair
from ._report import DELTA, Grade, Stop, as_tensor, call, fmt, law_verdict, run

__all__ = ["grade_residual", "grade_acceptance_probability", "grade_speculative_sample"]


def grade_residual(residual, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 1.1: residual(p, q) -> [p - q]_+ / sum [p - q]_+ for 1-D p, q; a distribution (not NaN) at p == q."""
    def body(fn, report):
        p0, q0 = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.3, 0.2, 0.5])
        g = torch.Generator().manual_seed(11)
        cases = [(p0, q0), post_pair()] + [tuple(torch.softmax(torch.randn(2, 6, generator=g) * 2, -1))
                                            for _ in range(3)]
        for p, q in cases:
            pc, qc = p.clone(), q.clone()
            r = as_tensor(call(fn, p, q, on=f"p = {fmt(p)}, q = {fmt(q)}"), "residual", p.shape).double()
            if not (torch.equal(p, pc) and torch.equal(q, qc)):
                raise Stop("your function changed p or q in place; work on a copy (vllm-ascend PR #2881 zeroed "
                            "target probabilities in place and never restored them)")
            want = sampling.residual(p.double(), q.double())
            if torch.allclose(r, want, atol=1e-6):
                continue
            clamp = torch.clamp(p - q, min=0).double()
            where = f"for p = {fmt(p)}, q = {fmt(q)}: got {fmt(r)}, expected {fmt(want)}"
            if torch.isnan(r).any():
                raise Stop(f"NaN {where}")
            known = [
                (clamp, "not normalised: you returned [p - q]_+ itself; divide it by its sum"),
                (torch.softmax(clamp, -1), "softmax of [p - q]_+ (the bug of transformers PR #28508): softmax gives "
                 "mass to tokens where p <= q; normalise by the sum instead"),
                (p.double(), "you returned p: that is the 'p on rejection' sampler, which double-counts the overlap"),
                ((p - q).abs().double() / (p - q).abs().sum(), "you normalised |p - q|: tokens where q > p get mass; "
                 "clamp at 0 first"),
                (sampling.residual(q.double(), p.double()), "you computed [q - p]_+: p and q are swapped (p is the "
                 "target, q the draft)"),
            ]
            for wrong, text in known:
                if torch.allclose(r, wrong, atol=1e-6):
                    raise Stop(f"{text} ({where})")
            if abs(r.sum().item() - 1) > 1e-6:
                raise Stop(f"the result must sum to 1, yours sums to {r.sum().item():.4f} ({where})")
            raise Stop(f"wrong values {where}")
        report.note("matches [p - q]_+ / sum on 5 pairs, and leaves p and q unchanged")
        for p in (p0, cases[1][0]):
            r = as_tensor(call(fn, p, p.clone(), on=f"p == q = {fmt(p)}"), "residual", p.shape).double()
            if torch.isnan(r).any():
                raise Stop(f"NaN at p == q = {fmt(p)}: [p - q]_+ is all zeros and 0/0 is NaN. Normalise lazily: "
                            "return p (any distribution will do, it is never sampled) when the sum is 0 "
                            "(jaymody/speculative-sampling #5)")
            if (r < 0).any() or abs(r.sum().item() - 1) > 1e-6:
                raise Stop(f"at p == q the result must still be a distribution (e.g. p itself), got {fmt(r)}")
        report.note("returns a distribution, not NaN, when p == q")
    return run("residual", body, residual, raise_on_failure=raise_on_failure, verbose=verbose)


def grade_acceptance_probability(acceptance_probability, *, raise_on_failure: bool = True,
                                 verbose: bool = True) -> Grade:
    """Exercise 1.2: acceptance_probability(log_p_x, log_q_x) -> min(1, p/q) elementwise, from log-probabilities."""
    def body(fn, report):
        def run(lp, lq, dtype=torch.float64):
            lp, lq = torch.tensor(lp, dtype=dtype), torch.tensor(lq, dtype=dtype)
            out = as_tensor(call(fn, lp, lq, on=f"log p = {fmt(lp)}, log q = {fmt(lq)}"), "acceptance_probability",
                          lp.shape)
            return lp, lq, out.double()

        lp, lq, a = run([math.log(0.6), math.log(0.1), math.log(0.3), math.log(0.05)],
                        [math.log(0.3), math.log(0.2), math.log(0.3), math.log(0.4)])
        want = torch.tensor([1.0, 0.5, 1.0, 0.125], dtype=torch.float64)
        if (a > 1).any():
            raise Stop(f"values above 1 ({fmt(a)}) where p > q: a probability is min(1, p/q), so clamp the log "
                        "ratio at 0 before exp")
        if not torch.allclose(a, want, atol=1e-9):
            raise Stop(f"for p = [0.6, 0.1, 0.3, 0.05], q = [0.3, 0.2, 0.3, 0.4] expected {fmt(want)}, got "
                        f"{fmt(a)}")
        if not (a[lp >= lq] == 1).all():
            raise Stop(f"where p >= q the result must be exactly 1.0, got {a[lp >= lq].tolist()}; "
                        "exp(min(0, log p - log q)) gives exp(0) = 1 exactly")
        report.note("min(1, p/q) on ordinary values, exactly 1 where p >= q")
        lp, lq, a = run([-1000.0, -1001.0, -5.0, -1000.0], [-1001.0, -1000.0, -1000.0, -5.0])
        want = torch.tensor([1.0, math.exp(-1.0), 1.0, 0.0], dtype=torch.float64)
        bad = ~torch.isclose(a, want, rtol=1e-9, atol=0) | torch.isnan(a)
        if bad.any():
            i = int(bad.nonzero()[0])
            kind = "NaN" if torch.isnan(a[i]) else "inf" if torch.isinf(a[i]) else f"{a[i].item():.4g}"
            raise Stop(f"{kind} for log p = {lp[i].item():g}, log q = {lq[i].item():g} "
                        f"(expected {want[i].item():.4g}):"
                        " exp() underflows to 0 there, so p/q becomes 0/0 or x/0. Stay in log space: "
                        "exp(min(0, log p - log q))")
        lp, lq, a = run([-100.0, -120.0], [-120.0, -100.0], torch.float32)
        if not torch.allclose(a, torch.tensor([1.0, math.exp(-20.0)], dtype=torch.float64), rtol=1e-4, atol=0):
            raise Stop(f"float32 log-probabilities [-100, -120] vs [-120, -100]: expected [1, {math.exp(-20):.4g}], "
                        f"got {fmt(a)}; in float32 exp(-120) is 0, so take the difference of the logs first")
        report.note("no overflow, underflow or NaN for log-probabilities down to -1000 (float64) and -120 (float32)")
        lp, lq, a = run([-math.inf, -math.inf], [-3.0, 0.0])
        if not (a == 0).all():
            raise Stop(f"where p = 0 (log p = -inf) the result must be exactly 0.0, got {fmt(a)}")
        report.note("exactly 0 where p = 0")
    return run("acceptance_probability", body, acceptance_probability, raise_on_failure=raise_on_failure,
                verbose=verbose)


def grade_speculative_sample(speculative_sample, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 1.3: speculative_sample(p, q, n, generator) -> n tokens (LongTensor (n,)) distributed as p."""
    n = 200_000

    def body(fn, report):
        p0, q0 = post_pair()
        cases = [("the post's pair", p0, q0),
                 ("p = [0.5, 0.5, 0], q = [0.2, 0.3, 0.5]", torch.tensor([0.5, 0.5, 0.0]),
                  torch.tensor([0.2, 0.3, 0.5])),
                 ("p == q", p0, p0.clone())]
        out = [call(fn, p0, q0, 50, torch.Generator().manual_seed(s), on="the post's pair, n = 50") for s in (3, 3)]
        x = as_tensor(out[0], "speculative_sample", (50,))
        if x.is_floating_point() or x.dtype == torch.bool:
            raise Stop(f"tokens must be integer ids (a LongTensor), got dtype {x.dtype}")
        if not torch.equal(out[0], as_tensor(out[1], "speculative_sample", (50,))):
            raise Stop("two generators seeded alike gave different tokens: pass `generator` to every random draw "
                        "(torch.multinomial, torch.rand), never use the global random state")
        for label, p, q in cases:
            x = as_tensor(call(fn, p, q, n, torch.Generator().manual_seed(1), on=f"{label}, n = {n:,}"),
                        "speculative_sample", (n,))
            if x.min() < 0 or x.max() >= p.numel():
                raise Stop(f"token ids must lie in [0, {p.numel()}), got values in [{int(x.min())}, {int(x.max())}]")
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
                           * sampling.residual(pd, qd), "a proposal is kept only where p >= q, never with "
                           "probability p/q where p < q"),
            }
            if not law_verdict(report, f"{label}", freq, pd, n, mistakes, DELTA / len(cases)):
                raise Stop("the distribution test failed")
        report.note(f"reproducible with a seeded generator; 3 pairs x {n:,} samples each within the noise bound of p")
    return run("speculative_sample", body, speculative_sample, raise_on_failure=raise_on_failure, verbose=verbose)
