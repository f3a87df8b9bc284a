"""Act II, the fast path: the block decoder for all n sequences at once, correct or broken in any registered way.

reference.py decodes one sequence, step by step, as the algorithm reads. This module runs the same rounds
for every unfinished sequence together. On a Markov chain everything a round needs depends on one or two
states, so it is precomputed as tables, flattened so that one gather reads a whole batch:

  acc[(r V + c) V + y]     = the chance target row r keeps y, believed drawn by R[c] (min(1, P[r, y] / R[c, y]))
  fix[(r V + c) V + y]     = CDF table of what rejecting y samples, for target row r and believed state c
  fix[V^3 + y_k]           = CDF table of the bonus token after a full block ending in y_k
  block_fix[b (k+1) + tau] = a block verifier's CDF table of the token after tau kept drafts of block row b
                             (b = s V^k + y_1 V^(k-1) + .. + y_k; block_weights holds its p and h at row b)

Every draw is the core's inverse-CDF draw (sampling.inverse_cdf), read off its sampling.cdf_table built once:
token = #{i : table[i] <= u} for a uniform u, bit for bit what inverse_cdf draws. A round draws its uniforms
as one (2k + 1 [+ 1], m) block: k for drafting, k for the acceptance tests, one for the residual or bonus
token (and one for a phantom token). The reference decoder reads the same uniforms in the same order, and
the batched one reads them one slot at a time over all m sequences, as one-dimensional gathers. Under a
schedule each row has its own k and the block is sized by the largest (a lone row reads exactly its own).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch

from .._checks import check_generator, check_int
from ..block_verification import BlockWeights
from ..sampling import cdf_table, inverse_cdf
from . import semantics as sem
from .block_round import block_table
from .draft_rules import ngram_proposals_batch
from .registry import MODES, make_decoder
from .spec import Decoder, DecoderSpec

__all__ = ["POST_MODES", "DECODER_MODES", "Tables", "draw", "accept_table", "residual_table", "tables",
           "Round", "run_round", "run_block_round", "decode_markov", "decode_tables"]

POST_MODES = ("correct", "bad_draft", "mismatched_q", "phantom_history", "off_by_one")  # the post's five decoders
DECODER_MODES = {name: MODES[name].description for name in POST_MODES}
BLOCK_TABLE_LIMIT = 1 << 16  # most blocks (s, X_1 .. X_k) a block verifier's table holds; past it, rows per round


def draw(cdf_cols: torch.Tensor, rows: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens (m,) from rows (m,) of a sampling.cdf_table and uniforms (m,): the number of entries of the row <= u.

    cdf_cols is the table transposed, (V, rows): column i of every row, contiguous, so the count is V - 1
    one-dimensional gathers (a row's last entry is 1 and never counts), three times faster than searchsorted on
    gathered rows.
    """
    count = (cdf_cols[0].take(rows) <= u).view(torch.uint8)  # a bool is a byte: counting them needs no cast
    for col in cdf_cols[1:-1]:
        count = count + (col.take(rows) <= u).view(torch.uint8)
    return count.long()


def accept_table(P: torch.Tensor, R: torch.Tensor, spec: DecoderSpec) -> torch.Tensor:
    """acc[r, c, y]: the chance target row r keeps proposal y, believed drawn by R[c] (semantics.acceptance)."""
    return sem.acceptance(spec, P.double()[:, None, :], R.double()[None, :, :])  # (V, V, V)


def residual_table(P: torch.Tensor, R: torch.Tensor, spec: DecoderSpec) -> torch.Tensor:
    """CDF (V, V, V, V) of what a rejection samples, at [target row r, believed draft state c, rejected token y]."""
    V = P.shape[0]
    p = P.double()[:, None, None, :]  # (V, 1, 1, V)
    q = R.double()[None, :, None, :]  # (1, V, 1, V)
    y_hot = torch.eye(V, dtype=torch.float64)[None, None]  # (1, 1, V, V)
    return cdf_table(sem.rejection_weights(spec, p, q, y_hot).expand(V, V, V, V))


@dataclass(frozen=True)
class Tables:
    """Every table a round reads, flattened for gathers (see the module docstring for the indices)."""

    V: int
    acc: torch.Tensor  # (V^3,) acceptance chances
    q: torch.Tensor  # (V^2,) the proposing table, for a confidence stop
    draft: torch.Tensor  # CDF columns of the proposing table, for draw
    target: torch.Tensor  # CDF columns of the target table (a match test's own sample)
    fix: torch.Tensor  # CDF columns of the residuals (V^3 rows) then the bonus (V rows)
    phantom: torch.Tensor  # CDF columns of the draft's own table (a phantom token)
    block_weights: BlockWeights | None = None  # a block verifier's p, h by block row b, if V^(k+1) <= BLOCK_TABLE_LIMIT
    block_fix: torch.Tensor | None = None  # ... and CDF columns of the token after tau kept drafts, row b (k+1) + tau


def tables(dec: Decoder) -> Tables:
    """Every table a round reads, built from semantics.py's meanings of the spec, flattened for gathers."""
    V, spec = dec.target.shape[0], dec.spec
    bonus = cdf_table(sem.bonus_row(spec, dec.target.double(), dec.draft.double()))  # (V, V) indexed by y_k
    fix = torch.cat([residual_table(dec.target, dec.ratio, spec).reshape(V ** 3, V), bonus])
    acc = accept_table(dec.target, dec.ratio, spec).reshape(-1)

    def cols(table: torch.Tensor) -> torch.Tensor:  # a CDF table transposed, for draw
        return table.T.contiguous()

    block_weights = block_fix = None
    if spec.verifier != "token" and V ** (dec.k + 1) <= BLOCK_TABLE_LIMIT:  # every block's round, by its row b
        block_weights, tokens = block_table(spec, dec.target.double(), dec.ratio.double(), dec.k)
        block_fix = cols(cdf_table(tokens).reshape(-1, V))
    return Tables(V=V, acc=acc, q=dec.propose.double().reshape(-1), draft=cols(cdf_table(dec.propose)),
                  target=cols(cdf_table(dec.target)), fix=cols(fix), phantom=cols(cdf_table(dec.draft)),
                  block_weights=block_weights, block_fix=block_fix)


class Round(NamedTuple):
    """What one round did to each of m sequences: it commits columns 0 .. where of proposals + [token]."""

    proposals: list[torch.Tensor]  # K x (m,) y_1 .. y_K (a row drafted only its first `drafted`)
    token: torch.Tensor  # (m,) the target's token, the last one committed
    where: torch.Tensor  # (m,) its column: A, or A + 1 when a rejected proposal is kept before it
    accepted: torch.Tensor  # (m,) A, the accepted proposals
    last_proposal: torch.Tensor  # (m,) y_k, where the draft stopped (its own state, if nobody trims its cache)
    drafted: torch.Tensor  # (m,) how many proposals the row's draft made

    def write(self, buf: torch.Tensor, ids: torch.Tensor, at: torch.Tensor) -> None:
        """Write the round into rows ids of buf from column at: y_1 .. y_k, then the token over column `where`.
        Columns past `where` hold scratch, overwritten by the next round (a round never writes past at + k)."""
        if ids.numel() == buf.shape[0] and not at.any():  # the first round: every row, from column 0
            for j, y in enumerate(self.proposals):
                buf[:, j] = y
            buf[ids, self.where] = self.token
            return
        flat, base = buf.view(-1), ids * buf.shape[1] + at  # (m,) where each row's round starts in flat buf
        for j, y in enumerate(self.proposals):
            flat[base + j] = y
        flat[base + self.where] = self.token


class _Verdicts(NamedTuple):
    """What a round's slot-by-slot tests (step 2) leave for the target's token, for each of m sequences."""

    alive: torch.Tensor  # (m,) no drafted proposal was rejected
    accepted: torch.Tensor  # (m,) A
    last_proposal: torch.Tensor  # (m,) the last proposal the row drafted: the bonus row after a full block
    rejected_row: torch.Tensor  # (m,) the row of fix a rejection draws from
    u_fix: torch.Tensor  # (m,) the uniform that draw reads
    sample: torch.Tensor | None  # (m,) a sampling test's own sample at the first rejection (the token there)


def _draft(spec: DecoderSpec, t: Tables, s, d0, k: int, u, count, lookup):
    """Step 1 for m sequences: (proposals K x (m,), the draft's states before each and after the last, how many
    proposals each row drafted (m,)). Each is drawn from the draft's state before it, or copied by a lookup;
    a stop rule cuts a row's count after a proposal it is unsure of (semantics.draft_count)."""
    if lookup is not None:  # (proposals (k, m), count (m,)) copied from the text: each is the next one's state
        props, count = list(lookup[0]), lookup[1]
        d = [s, *props]
    else:
        d = [d0]
        for j in range(k):
            d.append(draw(t.draft, d[j], u[j]))
        props = d[1:]
    q_ys = (t.q.take(d[j] * t.V + y) for j, y in enumerate(props))  # q(y_j) at its state, read only if a stop reads it
    return props, d, sem.draft_count(spec, count, q_ys)


def _verify(spec: DecoderSpec, t: Tables, s, props, d, count, k: int, u) -> _Verdicts:
    """Step 2 for m sequences: test proposal j with u[k + j], slot by slot; a row stays alive until its first
    rejection, which fixes the row and the uniform of its token (semantics: keeps, rejection_row, fix_uniforms)."""
    V = t.V
    alive = torch.ones_like(s, dtype=torch.bool)
    accepted, rejected_row, last_prop, u_fix, sample_at = torch.zeros_like(s), torch.zeros_like(s), s, u[2 * k], None
    for j, y in enumerate(props):
        active = j < count  # (m,) the row drafted proposal j
        committed = s if j == 0 else props[j - 1]  # the committed state right before y
        judge = sem.judge_row(spec, committed, y)  # the target row that judges y
        index = (judge * V + sem.ratio_state(spec, d[j], committed)) * V + y  # into acc, and y's residual row of fix
        ok, sample = sem.keeps(spec, y, u[k + j], chance=partial(t.acc.take, index),
                               sample=partial(draw, t.target, judge), first=j == 0)
        rejected = alive & active & ~ok  # rejected here, at the first failure
        rejected_row = torch.where(rejected, sem.rejection_row(spec, index, committed, bonus_base=V ** 3), rejected_row)
        u_fix = sem.fix_uniforms(spec, rejected, u[k + j], u_fix)  # a fresh u[2k] needs no gather per slot
        if sample is not None:  # the test drew the target's own sample: the token where it rejects
            sample_at = torch.where(rejected, sample, torch.zeros_like(s) if sample_at is None else sample_at)
        alive &= ok | ~active
        accepted += alive & active
        last_prop = torch.where(active, y, last_prop)
    return _Verdicts(alive, accepted, last_prop, rejected_row, u_fix, sample_at)


def run_round(spec: DecoderSpec, t: Tables, s, d0, k: int, u, k_row=None, lookup=None) -> Round:
    """One round for m sequences in committed state s (m,), draft state d0 (m,), uniforms u (2k + 1 [+ 1], m).

    The same four steps as reference.decode_one, each over all m sequences, one slot at a time; what each of the
    spec's values means comes from semantics.py. k_row (m,): each row's own k (at most k) under a schedule;
    lookup: (proposals (k, m), count (m,)) copied from the text.
    """
    count = torch.full_like(s, k) if k_row is None else k_row  # (m,) proposals each row may draft
    # 1. draft: up to k proposals, each drawn from the draft's state before it (or copied by a lookup)
    props, d, count = _draft(spec, t, s, d0, k, u, count, lookup)
    # 2. verify slot by slot; a sequence stays alive until its first rejection
    v = _verify(spec, t, s, props, d, count, k, u)
    # 3. the target's token: the residual draw at the first rejection, or the bonus after a full block
    nxt = draw(t.fix, torch.where(v.alive, t.V ** 3 + v.last_proposal, v.rejected_row), v.u_fix)
    if v.sample is not None:  # a sampling test's own sample is the token where it rejected
        nxt = torch.where(v.alive, nxt, v.sample)
    # 4. what to commit: the accepted proposals, then the target's token in column `where` (a kept rejected
    # proposal sits before it, in column A)
    where = v.accepted + sem.kept_rejected(spec, ~v.alive).long()
    return Round(proposals=props, token=nxt, where=where, accepted=v.accepted, last_proposal=v.last_proposal,
                 drafted=count)


def run_block_round(dec: Decoder, t: Tables, s, k: int, u) -> Round:
    """A block verifier's round for m sequences in state s (m,): the proposals run_round drafts, judged together by
    u[k..2k-1] (semantics.block_round), then the token after the kept ones read with u[2k], as decode_one does."""
    d = [s]
    for j in range(k):  # 1. draft k proposals, each from the draft's row at the token before it
        d.append(draw(t.draft, d[j], u[j]))
    eta = u[k:2 * k].T  # (m, k) one uniform per row of the block
    if t.block_weights is None:  # 2-3. the joint test, and the weights of the token after the kept proposals
        states = torch.stack(d, 1)  # (m, k+1)
        tau, weights = sem.block_round(dec.spec, dec.target.double()[states], dec.ratio.double()[states[:, :k]],
                                       states[:, 1:], eta)
        nxt = inverse_cdf(weights, u[2 * k])
    else:  # 2-3. the same, read off the tables at the block's row b = s V^k + y_1 V^(k-1) + .. + y_k
        b = sum(x * t.V ** (k - j) for j, x in enumerate(d))  # (m,)
        w = t.block_weights
        tau = sem.block_pass(dec.spec, BlockWeights(p=w.p.index_select(0, b), h=w.h.index_select(0, b)), eta)
        nxt = draw(t.block_fix, b * (k + 1) + tau, u[2 * k])
    return Round(proposals=d[1:], token=nxt, where=tau, accepted=tau, last_proposal=d[-1],
                 drafted=torch.full_like(s, k))


def decode_markov(P: torch.Tensor, Q: torch.Tensor, *, start: int, horizon: int, k: int, num_samples: int,  # noqa: PLR0913 (the Markov engines' one shared signature)
                  mode: str = "correct", generator: torch.Generator | None = None,
                  Q_bad: torch.Tensor | None = None, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None, log=None, options: dict | None = None) -> torch.Tensor:
    """num_samples sequences (num_samples, horizon) from a speculative block decoder over Markov target P and draft Q.

    `mode` is a registered decoder (`failure_modes()`; the post's five are DECODER_MODES); bad_draft and
    mismatched_q also need `Q_bad`. The sampling policy (temperature 0 is greedy) is applied to every table
    before decoding, as a serving stack applies it to both models. A SpecDecodeLog passed as `log` records
    every round: its A, and the tokens of its verified output (A proposals, then the target's token) that land
    inside the horizon, so a log never credits tokens past the end. `options` sets a mode's own options by
    name (typical_acceptance: epsilon, delta, resample; hf_schedule: k_min, k_max; confidence_stop: confidence;
    ngram_lookup: ngram_match; sglang_threshold: threshold_single, threshold_acc); under hf_schedule k is the
    first round's k, and a log needs k = max(k, k_max).
    """
    dec = make_decoder(P, Q, start=start, horizon=horizon, k=k, mode=mode, Q_bad=Q_bad, temperature=temperature,
                       top_k=top_k, top_p=top_p, options=options)
    n = check_int("num_samples", num_samples, minimum=1)
    generator = check_generator(generator)
    if log is not None and getattr(log, "k", None) != dec.max_k:
        raise ValueError(f"log must be a SpecDecodeLog with the same k = {dec.max_k}")
    return decode_tables(dec, tables(dec), num_samples=n, generator=generator, log=log)


def decode_tables(dec: Decoder, t: Tables, *, num_samples: int, generator: torch.Generator | None,
                  log=None) -> torch.Tensor:
    """decode_markov's loop, for a validated decoder and its tables (built once when decoding many batches)."""
    spec, horizon, n = dec.spec, dec.horizon, num_samples

    width = horizon + dec.max_k + 1  # committed tokens, plus room for one round's overshoot (a round writes k + 1)
    buf = torch.empty(n, width, dtype=torch.long)
    # the unfinished sequences only, compacted after every round: their rows in buf, tokens committed so far,
    # the last committed token (the Markov state), the one before it, where an untrimmed draft cache left the
    # draft, and each row's k (one k for all but under a schedule)
    ids, at = torch.arange(n), torch.zeros(n, dtype=torch.long)
    last = before = draft_last = torch.full((n,), dec.start, dtype=torch.long)
    k_row = torch.full((n,), dec.k, dtype=torch.long)
    while ids.numel():
        k = int(k_row.max()) if spec.schedule == "hf" else dec.k  # one row alone draws exactly its own 2k + 1
        u = torch.rand(2 * k + 1 + spec.phantom, ids.numel(), dtype=torch.float64, generator=generator)
        d0 = sem.draft_state(spec, last, before, draft_last)
        lookup = None
        if spec.proposer == "ngram":  # each row's committed text: the start token, then buf up to column at - 1
            full_seq = torch.cat([torch.full((ids.numel(), 1), dec.start), buf[ids]], 1)  # (m, 1 + W)
            lookup = ngram_proposals_batch(full_seq, at, k_row, k, spec.ngram_match)
        if spec.verifier != "token":  # block verification: the whole block judged together
            r = run_block_round(dec, t, last, k, u)
        else:
            r = run_round(spec, t, last, d0, k, u, k_row=k_row if spec.adaptive else None, lookup=lookup)
        r.write(buf, ids, at)
        if log is not None:  # a round that runs past the horizon retires only the tokens that land inside it
            log.record_rounds(r.accepted, emitted=torch.minimum(r.accepted + 1, horizon - at))
        at, last = at + r.where + 1, r.token
        if spec.phantom:  # an unverified draft token slips into the history
            more = at < horizon
            phantom = draw(t.phantom, last, u[2 * k + 1])
            buf.view(-1)[(ids * width + at)[more]] = phantom[more]
            last = torch.where(more, phantom, last)
            at = at + more.long()
        if spec.draft_context == "one_too_far":  # the committed token before the last one
            full_seq = torch.cat([torch.full((ids.numel(), 1), dec.start), buf[ids]], 1)  # (m, 1 + W)
            before = full_seq.gather(1, (at - 1)[:, None]).squeeze(1)
        draft_last = r.last_proposal
        k_row = sem.next_k(spec, k_row, accepted=r.accepted, drafted=r.drafted)  # hf: + 2 after a full block, - 1 else
        keep = at < horizon
        if not keep.all():
            keep = keep.nonzero().squeeze(1)
            ids, at, last, before, draft_last, k_row = (x.index_select(0, keep)
                                                        for x in (ids, at, last, before, draft_last, k_row))
    return buf[:, :horizon]
