"""Act VI, which exact verifier fits which draft: the tables notebook 08 shows, each number computed exactly.

A round from start state s drafts x_1 .. x_k from Q. block_round_outcomes enumerates every drafted path (V^k per start)
through the exact engine's block_outcomes (markov/block_round.py: core block_verification's weights, tau law and
residual), so it gives
E[N | s] (tokens a round commits: tau accepted drafts and one token of the target's) and the law of the next
round's start. The token rule's round is long_run.round_law at a fixed k. Both go through long_run's stationary
law of round starts to the long-run N̄ and S = N̄ / C̄ (a round costs k c_d + c_v), the measure of notebook 07's
oracle stopping rule (adaptive.optimal_stopping, token rule, at most k proposals), which is compared with them.
alive_mass is the derivation's identity: along a drafted path, w_0 = 1 and w_i = min(Q(x_1..x_i), w_{i-1}
P_i(x_i)), the draft mass block verification still keeps at depth i; E[N | s] = 1 + sum_i sum_paths w_i.
fit and verifier_map give E[N | 0] of one round under each verifier that applies to a drafter, and for many drafts
at one position P(a draft kept) beside multidraft_optimum: the map from a kind of draft to the verifier it needs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_choice, check_int, check_numbers, check_real
from ..cost import round_cost
from ..multidraft import multidraft_accept_probability, multidraft_optimum
from ..policy import policy_table
from ..sampling import post_pair
from .adaptive import PolicyResult, policy_speedup
from .block_round import block_outcomes
from .chain import check_table, reference_chain
from .long_run import costed_chain, long_run_result, round_law, stationary
from .spec import DecoderSpec
from .tree import tree_expected_tokens

__all__ = ["RULES", "VERIFIERS", "DRAFTS", "MAX_PATHS", "BlockRound", "block_round_outcomes", "PathMass", "path_mass",
           "alive_mass", "verifier_speedup", "KRow", "against_k", "GainGrid", "gain_grid", "greedy_draft", "Drafter",
           "Fit", "fit", "MapRow", "verifier_map"]

RULES = ("token", "block", "block_naive")  # the token rule, block verification, its known wrong port
VERIFIERS = ("token rule", "block verification", "multi-draft")  # the map's labels, simplest first
DRAFTS = ("sampled", "deterministic")  # a draft drawn from q, or q's argmax (top-n for many drafts)
MAX_PATHS = 50_000  # drafted paths per start state (V^k); the round holds (V, V^k, k + 1, V) float64 numbers


@dataclass(frozen=True)
class BlockRound:
    """One round of a verifier at a fixed k from every start state s: the law of (N, the next round's start)."""

    verifier: str
    k: int
    jumps: torch.Tensor  # (k + 2, V, V) P(N = n, the round ends on token s' | s), n = 0 .. k + 1 (n = 0 never)

    @property
    def n(self) -> torch.Tensor:
        """(V,) E[N | s]: accepted drafts plus the target's token."""
        return torch.einsum("n,nst->s", torch.arange(self.k + 2, dtype=torch.float64), self.jumps)

    @property
    def next_start(self) -> torch.Tensor:
        """(V, V) the law of the next round's start state."""
        return self.jumps.sum(0)


def _tables(P, Q, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, Q) validated, the sampling temperature applied to both, float64 rows summing to 1."""
    P, Q = check_table("P", P), check_table("Q", Q)
    if P.shape != Q.shape:
        raise ValueError(f"P and Q must have the same shape, got {tuple(P.shape)} and {tuple(Q.shape)}")
    temperature = check_real("temperature", temperature, low=0.0, high=math.inf, high_open=True)
    P, Q = (policy_table(t, temperature=temperature).double() for t in (P, Q))
    return P / P.sum(-1, keepdim=True), Q / Q.sum(-1, keepdim=True)


def block_round_outcomes(P, Q, *, k: int, naive: bool = False, temperature: float = 1.0) -> BlockRound:
    """Block verification's round (naive=True: the wrong port's) at k from every start: the exact engine's
    block_outcomes (markov/block_round.py) over all V^k drafted paths, the committed drafts summed out."""
    P, Q = _tables(P, Q, temperature)
    V, k = P.shape[0], check_int("k", k, minimum=1)
    if V ** k > MAX_PATHS:
        raise ValueError(f"k = {k} needs {V}^{k} drafted paths per start state; at most {MAX_PATHS} are allowed")
    spec = DecoderSpec(verifier="block_naive" if naive else "block")
    jumps = torch.zeros(k + 2, V, V, dtype=torch.float64)
    for s, out in enumerate(block_outcomes(spec, P, Q, Q, k)):
        for i, kept in enumerate(out.kept):  # kept (V,) * (i + 1): the i kept drafts, then the round's last token
            jumps[i + 1, s] = kept.reshape(-1, V).sum(0)  # N = i + 1, the next round starts at that last token
    return BlockRound("block_naive" if naive else "block", k, jumps)


@dataclass(frozen=True)
class PathMass:
    """Over the V^k drafted paths from one start (row-major): draft and target mass, and what each rule keeps."""

    draft: torch.Tensor  # (V^k,) Q(x_1 .. x_k)
    target: torch.Tensor  # (V^k,) P(x_1 .. x_k)
    token: torch.Tensor  # (V^k,) P(the token rule accepts all k, path) = prod_i min(Q_i, P_i)(x_i)
    block: torch.Tensor  # (V^k,) w_k = min(Q(x_1..x_k), w_{k-1} P_k(x_k)): block verification's P(tau = k, path)


def path_mass(P, Q, *, k: int, start: int = 0, temperature: float = 1.0) -> PathMass:
    """The PathMass of every drafted path of length k from `start`: where the token rule loses mass."""
    P, Q = _tables(P, Q, temperature)
    V, k = P.shape[0], check_int("k", k, minimum=1)
    draft, target, token, block = (torch.ones(1, dtype=torch.float64) for _ in range(4))
    last = torch.tensor([check_int("start", start, minimum=0)])
    for _ in range(k):  # extend every path by one token: (paths * V,)
        q, p = Q[last].reshape(-1), P[last].reshape(-1)
        grow = [x.repeat_interleave(V) for x in (draft, target, token, block)]
        draft, target, token = grow[0] * q, grow[1] * p, grow[2] * torch.minimum(p, q)
        block = torch.minimum(draft, grow[3] * p)
        last = torch.arange(V).repeat(last.numel())
    return PathMass(draft, target, token, block)


def alive_mass(P, Q, *, k: int, temperature: float = 1.0) -> torch.Tensor:
    """(V, k + 1): sum over drafted paths of w_i, the draft mass block verification keeps at depth i (w_0 = 1)."""
    V = check_table("P", P).shape[0]
    out = torch.ones(V, check_int("k", k, minimum=1) + 1, dtype=torch.float64)
    for s in range(V):
        for i in range(1, k + 1):
            out[s, i] = path_mass(P, Q, k=i, start=s, temperature=temperature).block.sum()
    return out


def verifier_speedup(P, Q, *, k: int, verifier: str, c_d: float, c_v: float,
                     temperature: float = 1.0) -> PolicyResult:
    """The long-run PolicyResult (N̄, m̄ = k, C̄ = k c_d + c_v, S = N̄ / C̄) of a verifier at a fixed k >= 1."""
    check_choice("verifier", verifier, RULES)
    k = check_int("k", k, minimum=1)
    P, Q = _tables(P, Q, temperature)
    if verifier == "token":
        law = round_law(costed_chain(P, Q, c_d=c_d, c_v=c_v), k=k)
        n, nxt = law.n, law.next_start
    else:
        costed_chain(P, Q, c_d=c_d, c_v=c_v)  # validates the costs
        r = block_round_outcomes(P, Q, k=k, naive=verifier == "block_naive")
        n, nxt = r.n, r.next_start
    V = P.shape[0]
    return long_run_result(f"{verifier} rule, k = {k}", stationary(nxt), n=n,
                           cost=torch.full((V,), round_cost(draft_steps=k, c_d=c_d, c_v=c_v), dtype=torch.float64),
                           m=torch.full((V,), float(k), dtype=torch.float64))


@dataclass(frozen=True)
class KRow:
    """At one k: the token rule and block verification at fixed k, and the oracle stopping rule with at most k."""

    k: int
    token: PolicyResult
    block: PolicyResult
    oracle: PolicyResult  # 07's oracle: the token rule, drafting as far as the exact acceptances make worth it

    @property
    def gain(self) -> float:
        """Block verification's N̄ over the token rule's, minus 1."""
        return self.block.tokens_per_round / self.token.tokens_per_round - 1.0


def against_k(P, Q, *, ks, c_d: float, c_v: float) -> tuple[KRow, ...]:
    """One KRow per k in ks (each k >= 1), in the long run on (P, Q)."""
    ks = [check_int("k", k, minimum=1) for k in check_numbers("ks", ks)]
    return tuple(KRow(k, verifier_speedup(P, Q, k=k, verifier="token", c_d=c_d, c_v=c_v),
                      verifier_speedup(P, Q, k=k, verifier="block", c_d=c_d, c_v=c_v),
                      policy_speedup(P, Q, c_d=c_d, c_v=c_v, policy="oracle", k_max=k)) for k in ks)


@dataclass(frozen=True)
class GainGrid:
    """Long-run tokens per round N̄ of the token rule and block verification over temperatures x ks."""

    ks: tuple[int, ...]
    temperatures: tuple[float, ...]
    token: torch.Tensor  # (len(temperatures), len(ks))
    block: torch.Tensor  # (len(temperatures), len(ks))

    @property
    def gain(self) -> torch.Tensor:
        """Block verification's relative gain in N̄, block / token - 1, (len(temperatures), len(ks))."""
        return self.block / self.token - 1.0


def gain_grid(P, Q, *, ks, temperatures) -> GainGrid:
    """N̄ of both verifiers at every (temperature, k), the temperature applied to P and Q alike (sampled drafts)."""
    ks = tuple(check_int("k", k, minimum=1) for k in check_numbers("ks", ks))
    temperatures = tuple(check_real("temperature", t, low=0.0, low_open=True, high=math.inf, high_open=True)
                         for t in check_numbers("temperatures", temperatures))
    token = torch.zeros(len(temperatures), len(ks), dtype=torch.float64)
    block = torch.zeros_like(token)
    for i, t in enumerate(temperatures):
        for j, k in enumerate(ks):
            token[i, j] = verifier_speedup(P, Q, k=k, verifier="token", c_d=0.0, c_v=1.0,
                                           temperature=t).tokens_per_round
            block[i, j] = verifier_speedup(P, Q, k=k, verifier="block", c_d=0.0, c_v=1.0,
                                           temperature=t).tokens_per_round
    return GainGrid(ks, temperatures, token, block)


def greedy_draft(Q) -> torch.Tensor:
    """The deterministic draft of Q: one-hot rows at each row's argmax (temperature 0), float64."""
    return policy_table(check_table("Q", Q), temperature=0.0).double()


@dataclass(frozen=True)
class Drafter:
    """A drafter to fit a verifier to: how it drafts, how many drafts per round, how deep, at what temperature."""

    name: str
    draft: str = "sampled"  # one of DRAFTS
    num_drafts: int = 1  # draft paths per round, sharing the round's start
    k: int = 4  # drafts per path
    temperature: float = 1.0  # applied to P and Q alike; 0 is greedy

    def __post_init__(self):
        check_choice("draft", self.draft, DRAFTS)
        check_int("num_drafts", self.num_drafts, minimum=1)
        check_int("k", self.k, minimum=1)
        check_real("temperature", self.temperature, low=0.0, high=math.inf, high_open=True)


@dataclass(frozen=True)
class Fit:
    """The verifier a drafter needs (the simplest within 1e-12 of the most tokens) and E[N | 0] under each."""

    best: str
    tokens: dict  # {label: exact E[N] of one round from state 0}


def fit(drafter: Drafter, P=None, Q=None, *, start: int = 0) -> Fit:
    """E[N | start] of one round under every verifier that applies to the drafter (default: the reference chain).

    token rule, block verification: the first draft path (Q's argmax rows for a deterministic draft);
    multi-draft, when num_drafts > 1: the tree (num_drafts,) + (1,) * (k - 1), rrs (sampled) or onehot_sequential.
    """
    if not isinstance(drafter, Drafter):
        raise TypeError(f"drafter must be a Drafter, got {type(drafter).__name__}")
    if P is None or Q is None:
        chain = reference_chain()
        P, Q = chain.P if P is None else P, chain.Q if Q is None else Q
    P, Q = _tables(P, Q, drafter.temperature)
    one = greedy_draft(Q) if drafter.draft == "deterministic" else Q
    tokens = {"token rule": float(round_law(costed_chain(P, one, c_d=0.0, c_v=1.0), k=drafter.k).n[start]),
              "block verification": float(block_round_outcomes(P, one, k=drafter.k).n[start])}
    if drafter.num_drafts > 1:
        rule = "rrs" if drafter.draft == "sampled" else "onehot_sequential"
        tokens["multi-draft"] = tree_expected_tokens(P, Q, start=start, rule=rule,
                                                     widths=(drafter.num_drafts,) + (1,) * (drafter.k - 1))
    top = max(tokens.values())
    return Fit(next(label for label in VERIFIERS if label in tokens and tokens[label] >= top - 1e-12), tokens)


@dataclass(frozen=True)
class MapRow:
    """One row of the map: a kind of draft, what is measured, each verifier's exact value, the one to use."""

    draft: str
    measure: str
    values: dict  # {verifier: exact value}; "optimum" is the most any exact verifier keeps
    use: str


def verifier_map(*, k: int = 4, num_drafts: int = 3) -> tuple[MapRow, ...]:
    """Which verifier fits which draft on the reference chain (single drafts) and the post's pair (many drafts)."""
    rows = []
    for draft, label in (("deterministic", "deterministic (argmax) draft"), ("sampled", "sampled draft")):
        f = fit(Drafter(label, draft, k=k))
        rows.append(MapRow(f"{label}, k = {k}", "E[N | 0]", f.tokens, f.best))
    f = fit(Drafter("tree", "sampled", num_drafts=num_drafts, k=k))
    rows.append(MapRow(f"{num_drafts} sampled paths of k = {k}", "E[N | 0]", f.tokens, f.best))
    p, q = post_pair()
    for rule, draws in (("mss", "iid"), ("rrs", "without_replacement")):
        values = {rule: multidraft_accept_probability(p, q, num_drafts=num_drafts, rule=rule),
                  "optimum": multidraft_optimum(p, q, num_drafts, draws=draws)}
        rows.append(MapRow(f"{num_drafts} drafts {draws.replace('_', ' ')}, one position", "P(a draft kept)",
                           values, rule))
    return tuple(rows)
