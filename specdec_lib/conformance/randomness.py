"""The randomness tier: a verifier fed randomness the kit controls must behave exactly as the exact law says.

    from specdec_lib.conformance import audit_randomness, library_verifier
    print(audit_randomness(library_verifier("block"), method="block"))

Conventions. "uniforms" (as vLLM's sampler takes uniform_probs and SGLang's kernel its coins):
fn(p (n, k+1, V), q (n, k, V), proposals (n, k), coins (n, k), final (n,)) -> (accepted (n,), tokens (n, k+1)) or
a BlockVerdicts; coins[:, j] judges proposal j+1 (the token rule keeps it iff coin < min(1, p/q), block
verification's row j+1 passes iff coin < h), `final` drives the one draw after the kept prefix. The kit keys a
uniforms verifier by (seed, round) through `keyed_by_step`, so it never sees a stale coin. "keyed": fn(p, q,
proposals, source, keys) reads its own uniforms, source(seed (n,), counter (n, w), stream) -> (n, w), where keys
(randomness_probes.Keys) say each row's request seed, absolute position and round: where the coins come from is
then part of what is tested. sd.verify_blocks takes a torch.Generator, not uniforms: `library_verifier` replays
the coins through the generator's draws (torch.rand, called with that generator, returns the kit's tape in the
order the library draws: the tests (n, k), then the final draw (n,); any other order raises).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .._checks import check_choice, check_int
from ..block_verification import block_weights
from ..sampling import accept_ratio
from .randomness_probes import (
    GRID,
    ROUNDS_GRID,
    TOP,
    ConstantSource,
    HashSource,
    Keys,
    Worlds,
    committed,
    enumerate_round,
    grid_law,
    law_of,
    proposal_rows,
    rand_cases,
    rounds_case,
    run_keyed,
)
from .randomness_refs import BROKEN, batch_stream, broken_verifier, keyed_by_position, keyed_by_step, library_verifier

__all__ = ["RAND_CONVENTIONS", "PROBES", "ProbeResult", "RandomnessReport", "audit_randomness", "library_verifier",
           "keyed_by_step", "keyed_by_position", "batch_stream", "BROKEN", "broken_verifier"]

RAND_CONVENTIONS = ("uniforms", "keyed")
_SINGLE = {
    "coin_zero": "sglang #35771: `coin <= prob_acc / threshold_acc` accepts a token of target probability 0 at "
                 "coin 0 (sgl-kernel/csrc/speculative/speculative_sampling.cuh @ b227f632); NeMo Automodel PR #3166 "
                 "branch, `draw <= acceptance` (nemo_automodel/components/speculative/eagle/msd_decode.py @ "
                 "825d108a, fixed by 556f7c51 before the merge dab67fc6); the zero-mass bucket a non-strict CDF "
                 "search picks at u = 0 (sglang PR #35788, from its description)",
    "coin_top": "coins narrowed to float32: 1 - 2^-53 becomes 1.0, `coin < 1` rejects a proposal with p >= q, and "
                "the final draw finds no bucket (SGLang's kernel takes coins in the probabilities' DType and then "
                "keeps its `sampled_id = d - 1` default, speculative_sampling.cuh @ b227f632; latent there, as "
                "torch.rand's float32 coins stay below 1)",
    "grid_law": "any rule error at a coin value, e.g. the residual draw reusing the rejected test's coin (the field "
                "guide's reused_uniform: vllm-ascend PR #16370 / #16920)",
    "rounds": "position-keyed coins reread across rounds: vLLM Model Runner V2 draws u = tl_rand32(seed, pos) "
              "(vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py @ 02e318bd, called from "
              "rejection_sampler.py @ 01b21056; seeds fixed per request, sample/states.py @ 1f4079d9); harmless "
              "for the token rule, biased for block verification, which reads every coin of the block",
    "batch": "a request's coins drawn from a stream the batch shares: vLLM #6038 (fixed by PR #6034: the rejection "
             "sampler drew `torch.rand(batch_size, k)` from the global generator, ignoring per-request seeds); "
             "vLLM #17498 / PR #17509 (unseeded requests, no generator: TP workers accept different tokens)",
    "poison": "sglang PR #12561: `draft_probs = torch.empty_like(target_probs)` read as q by the kernel's residual "
              "(python/sglang/srt/speculative/eagle_info_v2.py; fixed to zeros_like)",
}
PROBES = tuple(_SINGLE)


@dataclass(frozen=True)
class ProbeResult:
    """One probe: what it fed, how far the verifier was from the exact behaviour, and what it catches."""

    name: str
    feeds: str
    passed: bool
    measure: float  # worlds that broke the rule, or the largest law error (grid, rounds)
    detail: str
    catches: str


@dataclass(frozen=True)
class RandomnessReport:
    subject: str
    convention: str
    method: str
    probes: tuple[ProbeResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.probes)

    def __bool__(self) -> bool:
        return self.passed

    def failed(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.probes if not r.passed)

    def __str__(self) -> str:
        lines = [f"randomness tier of {self.subject} ({self.convention} convention, {self.method} rule): controlled "
                 "coins, exact enumeration, no sampling"]
        for r in self.probes:
            lines += [f"{r.name:10s} {'pass' if r.passed else 'FAIL'}  {r.detail}", f"{'':12s}feeds: {r.feeds}"]
            if not r.passed:
                lines.append(f"{'':12s}catches: {r.catches}")
        lines.append("PASSED: every probe" if self.passed else f"FAILED: {', '.join(self.failed())}")
        return "\n".join(lines)


def _edge(fn, method, value):
    """Every coin at one edge: a committed token must have target mass, and the kept count must be the rule's."""
    bad = total = 0
    for case in rand_cases():
        ys, _ = proposal_rows(case)
        n, k = ys.shape
        accepted, tokens = run_keyed(fn, case.p.expand(n, *case.p.shape), case.q.expand(n, *case.q.shape), ys,
                                     ConstantSource(value), Keys.of(n, seed=1))
        for i, s in enumerate(committed(accepted, tokens)):
            total += 1
            ok = 0 < len(s) <= k + 1 and all(0 <= t < case.p.shape[1] for t in s)
            ok = ok and all(case.p[j, t] > 0 for j, t in enumerate(s)) and list(s[:-1]) == ys[i, :len(s) - 1].tolist()
            bad += not (ok and len(s) - 1 == _kept(case, ys[i], method, value))
    return bad, total


def _kept(case, y, method, coin) -> int:
    """Proposals a correct rule keeps when every coin is `coin`: tests pass iff coin < threshold."""
    k = y.shape[0]
    if method == "token":
        rows = torch.arange(k)
        ratio = accept_ratio(case.p[rows, y], case.q[rows, y]).tolist()  # the token rule's min(1, p(y) / q(y))
        return next((j for j in range(k) if not coin < ratio[j]), k)
    h = block_weights(case.p, case.q, y).h.tolist()
    return max([0] + [i + 1 for i in range(k) if coin < h[i]])


def _grid(fn, method, m):
    worst = 0.0
    for case in rand_cases():
        worlds, accepted, tokens, _ = enumerate_round(fn, case, Worlds.one(), lambda n, _: Keys.of(n, seed=1), m)
        law, ref = law_of(committed(accepted, tokens), worlds.weight), grid_law(case, method, m)
        worst = max(worst, max(abs(law.get(s, 0.0) - ref.get(s, 0.0)) for s in set(law) | set(ref)))
    return worst


def _rounds(fn):
    """Two rounds of one request; TV between the joint law of the two commits and the product of its marginals."""
    case = rounds_case()
    w1, a1, t1, _ = enumerate_round(fn, case, Worlds.one(), lambda n, _: Keys.of(n, seed=1), ROUNDS_GRID)
    first = committed(a1, t1)
    start = a1 + 1

    def keys2(n, parent):
        return Keys(torch.ones(n, dtype=torch.long), start[parent], torch.ones(n, dtype=torch.long))

    w2, a2, t2, parent = enumerate_round(fn, case, w1, keys2, ROUNDS_GRID)
    pairs = [(first[i], s) for i, s in zip(parent.tolist(), committed(a2, t2))]
    joint = law_of(pairs, w2.weight)
    m1, m2 = law_of([a for a, _ in pairs], w2.weight), law_of([b for _, b in pairs], w2.weight)
    prod = {(a, b): x * y for a, x in m1.items() for b, y in m2.items()}
    return 0.5 * sum(abs(joint.get(s, 0.0) - prod.get(s, 0.0)) for s in set(joint) | set(prod))


@contextlib.contextmanager
def _zeroed_fresh_buffers():
    """torch.empty, torch.empty_like and Tensor.new_empty return zeros inside: a reference run that sees no garbage
    (not even the NaN a poisoned run left behind in memory the allocator hands out again)."""
    empty, empty_like, new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty
    torch.empty = lambda *a, **kw: empty(*a, **kw).zero_()
    torch.empty_like = lambda *a, **kw: empty_like(*a, **kw).zero_()
    torch.Tensor.new_empty = lambda self, *a, **kw: new_empty(self, *a, **kw).zero_()
    try:
        yield
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = empty, empty_like, new_empty


def _same(fn, build, seeds, *, zero_fresh: bool = False) -> tuple[int, int]:
    """Worlds (seeds x every proposal row, HashSource coins) whose commit changes when build() alters the call; with
    zero_fresh the unaltered call runs with zeroed fresh buffers, so reading one shows whatever build() fills in."""
    bad = total = 0
    for case in rand_cases():
        ys, _ = proposal_rows(case)
        ys = ys.repeat(seeds, 1)
        n, k = ys.shape
        seed = torch.arange(n) // (n // seeds) + 100
        p, q = case.p.expand(n, *case.p.shape).clone(), case.q.expand(n, *case.q.shape).clone()
        keys = Keys(seed, torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long))
        with _zeroed_fresh_buffers() if zero_fresh else contextlib.nullcontext():
            a, t = run_keyed(fn, p, q, ys, HashSource(), keys)
        a2, t2 = build(fn, p, q, ys, keys, a)
        bad += sum(x != y for x, y in zip(committed(a, t), committed(a2, t2)))
        total += n
    return bad, total


def _companions(fn, p, q, ys, keys, _):
    """The same rows between companions: other seeds, rows permuted, proposals reversed; the rows' own commit."""
    n = ys.shape[0]
    order = torch.arange(3 * n).reshape(n, 3)
    cat = torch.cat
    P, Q, Y = cat([p.flip(-1), p, p.roll(1, -2)]), cat([q.flip(-1), q, q]), cat([ys.flip(-1), ys, ys.flip(-1)])
    mix = order.T.reshape(-1).argsort()  # row r of part c lands at 3r + c
    P, Q, Y = P[mix], Q[mix], Y[mix]
    bad_q = Q.gather(-1, Y[..., None]).squeeze(-1) <= 0  # companions must be proposals their q can make
    Q = torch.where(bad_q[..., None], torch.full_like(Q, 1.0 / Q.shape[-1]), Q)
    K = Keys(cat([keys.seed + 7919, keys.seed, keys.seed + 104729])[mix], cat([keys.position] * 3)[mix],
             cat([keys.step] * 3)[mix])
    a, t = run_keyed(fn, P, Q, Y, HashSource(), K)
    return a[1::3], t[1::3]


def _poisoned(fn, p, q, ys, keys, a, method="token"):
    """Fresh buffers filled with NaN; for the token rule, rows after the first rejection replaced by garbage."""
    k = ys.shape[1]
    if method == "token":
        late = torch.arange(k + 1)[None, :] > a[:, None]  # target rows after the one the rejection draws from
        junk = torch.full_like(p, 1.0 / p.shape[-1])
        p = torch.where(late[..., None], junk.roll(1, -1) * 0.5 + junk * 0.5, p)
        q = torch.where(late[:, :k, None], junk[:, :k], q)
    flag = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return run_keyed(fn, p, q, ys, HashSource(), keys)
    finally:
        torch.use_deterministic_algorithms(flag)


def _edge_probe(value):
    def run(fn, method, grid, seeds):
        bad, total = _edge(fn, method, value)
        name = "coin_zero" if value == 0.0 else "coin_top"
        return ProbeResult(name, f"every coin {value!r} (tests and final draw), every proposal row", bad == 0, bad,
                           f"{bad} of {total} rows broke the rule (zero-mass token or wrong kept count)", _SINGLE[name])
    return run


def _grid_probe(fn, method, grid, seeds):
    worst = _grid(fn, method, grid)
    return ProbeResult("grid_law", f"every coin combination on {{0, 1/{grid}, ..., {grid - 1}/{grid}}} x every "
                       "proposal row, enumerated", worst <= 1e-12, worst,
                       f"max |law - exact grid law| = {worst:.2e} (tolerance 1e-12)", _SINGLE["grid_law"])


def _rounds_probe(fn, method, grid, seeds):
    tv = _rounds(fn)
    return ProbeResult("rounds", "two rounds of one request, every key's coin on {0, 1/2}; a key read again keeps "
                       "its value", tv <= 1e-12, tv, f"TV(two-round law, product of its rounds' laws) = {tv:.2e}",
                       _SINGLE["rounds"])


def _invariance_probe(name, feeds):
    def run(fn, method, grid, seeds):
        build = _companions if name == "batch" else (lambda *a: _poisoned(*a, method=method))
        bad, total = _same(fn, build, seeds, zero_fresh=name == "poison")
        return ProbeResult(name, feeds, bad == 0, bad, f"{bad} of {total} commits changed", _SINGLE[name])
    return run


_PROBE = {"coin_zero": _edge_probe(0.0), "coin_top": _edge_probe(TOP), "grid_law": _grid_probe,
          "rounds": _rounds_probe,
          "batch": _invariance_probe("batch", "each request alone, then between two companions (other seeds, rows)"),
          "poison": _invariance_probe("poison", "NaN in every fresh buffer (torch fill_uninitialized_memory); "
                                      "garbage in the rows after a rejection (token rule)")}


def audit_randomness(fn, *, convention: str = "uniforms", method: str = "token", grid: int = GRID,
                     seeds: int = 64, probes: tuple[str, ...] = PROBES, subject: str | None = None) -> RandomnessReport:
    """Run every probe on fn (the module docstring gives the conventions); method is the rule fn implements
    ("token" or "block": the exact law it is held to); grid the coins of the one-round law, seeds the requests
    of the batch and poison probes."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    check_choice("convention", convention, RAND_CONVENTIONS)
    check_choice("method", method, ("token", "block"))
    keyed = keyed_by_step(fn) if convention == "uniforms" else fn
    grid, seeds = check_int("grid", grid, minimum=2), check_int("seeds", seeds, minimum=1)
    if isinstance(probes, str) or not isinstance(probes, (tuple, list)):
        raise TypeError(f"probes must be a tuple of probe names from {PROBES}, got {probes!r}")
    for name in probes:
        check_choice("probes", name, PROBES)
    out = [_PROBE[name](keyed, method, grid, seeds) for name in PROBES if name in probes]
    name = subject or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return RandomnessReport(name, convention, method, tuple(out))
