"""Act VI, the best exact verifier: the block rule's weights h_i; which verifier a drafter needs."""
from __future__ import annotations

import functools

import torch

from ..block_verification import block_weights, owed_rows, pass_chances
from ..markov.chain import reference_chain
from ..markov.registry import MODES
from ..markov.verifier_map import VERIFIERS, Drafter, Fit, fit
from ._report import Grade, Stop, call, fmt, run

__all__ = ["grade_block_h", "grade_needs", "h_cases", "H_MISTAKES", "h_mistake", "free_rows", "NEED_CASES", "need_fit"]

TOL = 1e-6  # float32 solutions pass; every recognised mistake is further than this from h on some case


def _block(p, q, proposals) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p_rows, q_rows, proposals) of one block, float64, from lists of rows."""
    return (torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64),
            torch.tensor(proposals, dtype=torch.long))


def _random_block(g: torch.Generator, *, k: int, vocab: int, sharpness: float):
    """A target/draft pair of k + 1 and k rows (softmax of scaled normals) and k proposals drawn from the draft."""
    p = torch.softmax(sharpness * torch.randn(k + 1, vocab, generator=g, dtype=torch.float64), dim=-1)
    q = torch.softmax(sharpness * torch.randn(k, vocab, generator=g, dtype=torch.float64), dim=-1)
    return p, q, torch.multinomial(q, 1, generator=g).squeeze(-1)


@functools.cache
def h_cases() -> tuple:
    """The checker's blocks: (what it is, p_rows (k+1, V), q_rows (k, V), proposals (k,))."""
    toy_p, toy_q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
    out = [(f"the paper's toy (p = (1/3, 2/3), q = (2/3, 1/3), k = 2), proposals {xs}",
            *_block([toy_p] * 3, [toy_q] * 2, xs)) for xs in ((0, 0), (1, 0), (0, 1), (1, 1))]
    for k, vocab, sharpness, seed in ((3, 5, 1.0, 18), (4, 5, 1.0, 38), (4, 3, 0.5, 109), (2, 6, 1.5, 0),
                                      (1, 4, 1.5, 24)):
        g = torch.Generator().manual_seed(seed)
        out.append((f"a random pair, k = {k}, {vocab} tokens (seed {seed})",
                    *_random_block(g, k=k, vocab=vocab, sharpness=sharpness)))
    same = [[0.5, 0.3, 0.2]] * 4
    out.append(("P = Q at every row (pi_i = 1 and Z_i = 0: the denominator Z_i + 1 - pi_i is 0)",
                *_block(same, same[:3], (0, 1, 2))))
    out.append(("a proposal the target never emits (P_2(X_2) = 0)",
                *_block([[0.5, 0.3, 0.2], [0.6, 0.0, 0.4], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]],
                        [[0.4, 0.4, 0.2], [0.3, 0.5, 0.2], [0.3, 0.3, 0.4]], (0, 1, 2))))
    out.append(("a draft with zero probabilities (Q gives token 2 nothing)",
                *_block([[0.2, 0.3, 0.5], [0.3, 0.3, 0.4], [0.5, 0.2, 0.3]], [[0.5, 0.5, 0.0], [0.6, 0.4, 0.0]],
                        (1, 0))))
    return tuple(out)


def _gathered(p_rows, q_rows, proposals):
    """P_i(X_i) and Q_i(X_i), i = 1 .. k."""
    k = proposals.shape[-1]
    at = proposals.long().unsqueeze(-1)
    return p_rows[:k].gather(-1, at).squeeze(-1), q_rows.gather(-1, at).squeeze(-1)


def _h_from(p_rows, q_rows, running, *, weighted=True, shift=0):
    """h (k,) from a running p (k+1,) by the core's Z_i (owed_rows) and h_i (pass_chances), fed what a mistake feeds
    them: weighted=False drops the pi_i weight of Z_i, shift=1 reads the rows that judged X_i."""
    k = q_rows.shape[0]
    rows = slice(1 - shift, k - shift)  # the rows after X_1 .. X_{k-1} (shift 1: the rows that judged them)
    z = owed_rows(running[1:k, None] if weighted else 1.0, p_rows[rows], q_rows[rows]).sum(-1)  # (k-1,)
    return pass_chances(z, running)


def h_mistake(name: str, p_rows, q_rows, proposals) -> torch.Tensor:
    """The h a recognised mistake computes on one block (the tests' negative controls use the same names)."""
    P, Q = _gathered(p_rows, q_rows, proposals)
    ratio = P / Q
    capped = block_weights(p_rows, q_rows, proposals).p
    one = torch.ones(1, dtype=torch.float64)
    if name == "naive":
        return capped[1:]
    if name == "unweighted_z":
        return _h_from(p_rows, q_rows, capped, weighted=False)
    if name == "judging_rows":
        return _h_from(p_rows, q_rows, capped, shift=1)
    if name == "token_product":
        return _h_from(p_rows, q_rows, torch.cat([one, torch.cumprod(ratio.clamp(max=1.0), 0)]))
    if name == "uncapped":
        return _h_from(p_rows, q_rows, torch.cat([one, torch.cumprod(ratio, 0)]))
    raise ValueError(f"unknown mistake {name!r}; known: {', '.join(H_MISTAKES)}")


def _naive_story() -> str:
    m = MODES.get("block_verification_naive")
    port = m.description if m else "vllm-ascend, shipped in PR #5542 and fixed by PR #7808"
    return ("h_i = pi_i: pi_i is how much of the target the prefix X_1..X_i carries, not the chance that row i passes "
            "(row i would pass when eta_i < pi_i). A different wrong rule, not this one: the port the registry holds "
            "as block_verification_naive also skips h_i but passes row i when the product eta_1 ... eta_i <= pi_i "
            f"({port})")


H_MISTAKES = {
    "naive": None,  # its text comes from the registry entry, read when a learner's answer matches it
    "unweighted_z": "Z_i without the pi_i weight: Z_i = sum_x max(pi_i P_{i+1}(x) - Q_{i+1}(x), 0), the target row "
                    "scaled by the chance pi_i carried to row i",
    "judging_rows": "Z_i from the rows that judged X_i (P_i, Q_i), as vllm-ascend's PyTorch fallback after its fix "
                    "(#7808, 2f4d55e7) computes it; h_i looks ahead: Z_i reads the next rows, P_{i+1} and Q_{i+1}, "
                    "where the residual after i kept drafts would be drawn",
    "token_product": "pi_i as the token rule's chance of passing rows 1..i, prod_j min(1, P_j(X_j)/Q_j(X_j)), the "
                     "p of vllm-ascend's PyTorch fallback as it shipped (#5542, 8763953f); the block rule caps the "
                     "running product instead, pi_i = min(1, pi_{i-1} P_i(X_i)/Q_i(X_i)), so a later ratio above 1 "
                     "wins back what an earlier one lost",
    "uncapped": "the running pi_i without its cap: pi_i = min(1, pi_{i-1} P_i(X_i)/Q_i(X_i)) never exceeds 1",
}


def free_rows(p_rows, q_rows, proposals) -> torch.Tensor:
    """(k,) True where Z_i + 1 - pi_i = 0: P_{i+1} = Q_{i+1}, a later row passes for sure, h_i does not matter."""
    p = block_weights(p_rows, q_rows, proposals).p
    k = proposals.shape[-1]
    z = owed_rows(p[1:k, None], p_rows[1:k], q_rows[1:k]).sum(-1)  # (k-1,) Z_1 .. Z_{k-1}
    return torch.cat([(z + (1 - p[1:k])) == 0, torch.zeros(1, dtype=torch.bool)])


def _agrees(got, p_rows, q_rows, proposals) -> bool:
    """got equals the library's h, except where h_i does not matter: there any value in [0, 1] does."""
    want, free = block_weights(p_rows, q_rows, proposals).h, free_rows(p_rows, q_rows, proposals)
    close = (got - want).abs() <= TOL
    return bool(torch.where(free, (got >= 0) & (got <= 1), close).all())


def _as_h(got, k: int, on: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise Stop(f"block_h must return a torch.Tensor of shape ({k},), got {type(got).__name__} ({on})")
    if tuple(got.shape) != (k,):
        hint = " (h_1 .. h_k: h_0 = 1 is implicit, and p is not h)" if got.numel() == k + 1 else ""
        raise Stop(f"block_h must return shape ({k},), got {tuple(got.shape)}{hint} ({on})")
    return got.detach().double()


def _diagnose(got, case) -> str:
    what, p_rows, q_rows, proposals = case
    want = block_weights(p_rows, q_rows, proposals).h
    where = f"on {what}: got {fmt(got)}, expected {fmt(want)}"
    if not torch.isfinite(got).all():
        return (f"h is not finite {where}. Where Z_i + 1 - pi_i = 0 (pi_i = 1 and P_{{i+1}} = Q_{{i+1}}) the rule "
                "sets h_i = 1; any value in [0, 1] gives the same law there, since a later row then passes for sure")
    hits = [_naive_story() if name == "naive" else text for name, text in H_MISTAKES.items()
            if torch.allclose(h_mistake(name, p_rows, q_rows, proposals), got, atol=TOL, rtol=0, equal_nan=True)]
    if hits:
        return f"{'; or '.join(hits)} ({where})"
    return (f"{where}. pi_0 = 1, pi_i = min(1, pi_{{i-1}} P_i(X_i)/Q_i(X_i)); h_i = Z_i / (Z_i + 1 - pi_i) with "
            "Z_i = sum_x max(pi_i P_{i+1}(x) - Q_{i+1}(x), 0) for i < k, and h_k = pi_k")


def grade_block_h(block_h, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 8.1: block_h(p_rows (k+1, V), q_rows (k, V), proposals (k,)) -> the block rule's weights h (k,)."""
    def body(fn, report):
        for case in h_cases():
            what, p_rows, q_rows, proposals = case
            try:
                got = call(fn, p_rows.clone(), q_rows.clone(), proposals.clone(), on=what)
            except Stop as stop:
                extra = ("; h_k has no draft row after it: it is pi_k, the running weight after all k rows"
                         if "IndexError" in str(stop) else "")
                raise Stop(f"{stop}{extra}") from None
            got = _as_h(got, proposals.shape[0], what)
            if not _agrees(got, p_rows, q_rows, proposals):
                raise Stop(_diagnose(got, case))
        report.note(f"h equals the library's block_weights on {len(h_cases())} blocks: the paper's toy, random "
                    "pairs, P = Q (where h_i is 0/0 and any value in [0, 1] does), a proposal the target never "
                    "emits and a draft with zeros")
    return run("block_h", body, block_h, raise_on_failure=raise_on_failure, verbose=verbose)


# ---- Exercise 8.2: which verifier does a drafter need? ----------------------------------------------------------

NEED_CASES = (  # the drafters the checker asks about; prompt lookup is a one-hot draft that is not the argmax
    Drafter("a sampled draft at temperature 1, k = 4", "sampled", k=4),
    Drafter("the same sampled draft at k = 1", "sampled", k=1),
    Drafter("the draft's argmax (a greedy draft), k = 4", "deterministic", k=4),
    Drafter("prompt lookup (one-hot proposals copied from the text), k = 3", "deterministic", k=3),
    Drafter("a sampled draft at temperature 0.5, k = 3", "sampled", k=3, temperature=0.5),
    Drafter("a sampled draft under greedy decoding (temperature 0), k = 4", "sampled", k=4, temperature=0.0),
    Drafter("3 sampled drafts at one position", "sampled", num_drafts=3, k=1),
    Drafter("the draft's top 3 tokens at one position (deterministic heads)", "deterministic", num_drafts=3, k=1),
)


def _lookup_draft(V: int) -> torch.Tensor:
    """A one-hot draft table that is not the argmax: after token s it proposes s + 1 (mod V), as a copy rule might."""
    return torch.eye(V, dtype=torch.float64).roll(1, dims=1)


@functools.cache
def need_fit(index: int) -> Fit:
    """The computed map's answer for NEED_CASES[index]: the verifier map's fit on the reference chain, from state 0."""
    drafter, ch = NEED_CASES[index], reference_chain()
    Q = _lookup_draft(ch.Q.shape[0]) if drafter.name.startswith("prompt lookup") else ch.Q
    return fit(drafter, ch.P, Q)


def _why_tie(d: Drafter) -> str:
    if d.draft == "deterministic":
        return ("a deterministic draft gains nothing from block verification: with a one-hot q each pi_i is the "
                "token rule's chance of passing rows 1..i, and h_i gives tau the token rule's law")
    if d.k == 1:
        return "at k = 1 block verification is the token rule: h_1 = p_1 = min(1, P_1(X_1)/Q_1(X_1))"
    return ("under greedy decoding the target is one-hot, and so is every test: block verification keeps a draft "
            "exactly when the token rule does")


def _need_message(index: int, got: str) -> str:
    d, f = NEED_CASES[index], need_fit(index)
    where = f"({d.name}: got {got!r}, expected {f.best!r}; E[N] is one round's tokens from state 0 of the reference " \
            "chain)"
    token, block = f.tokens["token rule"], f.tokens["block verification"]
    if f.best == "multi-draft":
        return (f"with {d.num_drafts} drafts at a position a single-draft rule judges only one of them: a multi-draft "
                f"rule keeps E[N] = {f.tokens['multi-draft']:.4f} against {max(token, block):.4f} for the first "
                f"draft alone {where}")
    if got == "multi-draft":
        return f"one draft per position: a multi-draft rule with one draft is the token rule {where}"
    if f.best == "token rule":
        return (f"{_why_tie(d)}: both keep E[N] = {token:.4f} exactly; the token rule (sample-and-match for a one-hot "
                f"draft) is already optimal {where}")
    return (f"block verification keeps E[N] = {block:.4f} against the token rule's {token:.4f} "
            f"(+{100 * (block / token - 1):.1f}%): a sampled draft with k >= 2 gains {where}")


def grade_needs(needs, *, raise_on_failure: bool = True, verbose: bool = True) -> Grade:
    """Exercise 8.2: needs(drafter) -> the verifier a verifier_map.Drafter needs, one of verifier_map.VERIFIERS."""
    def body(fn, report):
        for index, drafter in enumerate(NEED_CASES):
            got = call(fn, drafter, on=drafter.name)
            if got not in VERIFIERS:
                raise Stop(f"needs must return one of {', '.join(map(repr, VERIFIERS))}, got {got!r} "
                           f"({drafter.name})")
            if got != need_fit(index).best:
                raise Stop(_need_message(index, got))
        report.note(f"the right verifier for {len(NEED_CASES)} drafters, each answer from the exact engine on the "
                    "reference chain: deterministic drafts, k = 1 and greedy decoding tie (the token rule), a "
                    "sampled draft at k >= 2 gains from block verification, many drafts need a multi-draft rule")
    return run("needs", body, needs, raise_on_failure=raise_on_failure, verbose=verbose)
