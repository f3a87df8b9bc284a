"""Batched decode_markov against a one-sequence-at-a-time loop of the same algorithm, at the same M.

Run with `make bench`. The loop is written the way the post writes it (torch calls per token, one
sequence at a time); it lives here and not in the library (the library's readable one-sequence decoder is
specdec_lib/markov/reference.py). Both use one thread, and they take turns: the loop runs in pieces with a
batched run before each, so a machine whose speed drifts slows both alike. Then decode_markov under block
verification (Act VI) against the token rule ("correct") at the same k and M, the two modes taking turns.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import specdec_lib as sd

VERIFIER_MODES = ("correct", "block_verification")  # the token rule, and block verification (Act VI)


def residual(p, q):
    """[p - q]_+ normalised, as the post writes it (no argument checks)."""
    r = torch.clamp(p - q, min=0)
    total = r.sum()
    return p.clone() if total <= 0 else r / total


def loop_decode(P, Q, start: int, horizon: int, k: int, generator: torch.Generator) -> tuple:
    """One sequence of the correct block decoder, token by token."""
    seq = [start]
    while len(seq) - 1 < horizon:
        props = []
        for _ in range(k):
            props.append(int(torch.multinomial(Q[(seq + props)[-1]], 1, generator=generator)))
        for j, t in enumerate(props):
            ctx = (seq + props[:j])[-1]
            p_j, q_j = P[ctx], Q[ctx]
            if torch.rand(1, generator=generator).item() < min(1.0, float(p_j[t] / q_j[t])):
                continue
            seq.extend(props[:j])
            seq.append(int(torch.multinomial(residual(p_j, q_j), 1, generator=generator)))
            break
        else:
            seq.extend(props)
            seq.append(int(torch.multinomial(P[seq[-1]], 1, generator=generator)))
    return tuple(seq[1:horizon + 1])


def batched_seconds(ch, M: int, k: int, g: torch.Generator, mode: str = "correct") -> float:
    """Seconds of one decode_markov call for M sequences."""
    t0 = time.perf_counter()
    sd.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=k, num_samples=M, mode=mode, generator=g)
    return time.perf_counter() - t0


def verifier_seconds(ch, M: int, k: int, repeats: int) -> dict[str, float]:
    """Median seconds of decode_markov for M sequences under each verifier, the modes taking turns (one warm-up)."""
    g = torch.Generator().manual_seed(4)
    times = {mode: [] for mode in VERIFIER_MODES}
    for _ in range(repeats + 1):
        for mode in VERIFIER_MODES:
            times[mode].append(batched_seconds(ch, M, k, g, mode))
    return {mode: statistics.median(t[1:]) for mode, t in times.items()}


def head_to_head(ch, M: int, k: int, chunks: int) -> tuple[list[float], list[float], torch.Tensor]:
    """(batched seconds, loop seconds per chunk, loop samples): the loop's M sequences in `chunks` pieces, one
    batched run of all M before each piece, so both sample the same moments of a machine whose speed drifts."""
    g_batch, g_loop = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    for _ in range(3):  # warm-up
        batched_seconds(ch, M, k, g_batch)
    batched, loop, out = [], [], []
    for c in range(chunks):
        batched.append(batched_seconds(ch, M, k, g_batch))
        size = M // chunks + (c < M % chunks)
        t0 = time.perf_counter()
        out += [loop_decode(ch.P, ch.Q, ch.start, ch.horizon, k, g_loop) for _ in range(size)]
        loop.append(time.perf_counter() - t0)
    return batched, loop, torch.tensor(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--M", type=int, default=60_000, help="sequences for the head-to-head run")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--big", type=int, default=1_000_000, help="sequences for the batched-only run")
    parser.add_argument("--repeats", type=int, default=7, help="timings of the batched-only run")
    parser.add_argument("--chunks", type=int, default=20, help="pieces of the loop, a batched run before each")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ch = sd.reference_chain()
    exact = sd.sequence_law(ch.P, start=ch.start, horizon=ch.horizon)

    batched, loop, loop_samples = head_to_head(ch, args.M, args.k, args.chunks)
    t_batched, t_loop = statistics.median(batched), sum(loop)
    per_chunk = [lp * args.chunks / b for lp, b in zip(loop, batched)]  # each piece's ratio, scaled to M
    g = torch.Generator().manual_seed(2)
    batched_samples = sd.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=args.k, num_samples=args.M,
                                       generator=g)
    g_big = torch.Generator().manual_seed(3)
    t_big = statistics.median(batched_seconds(ch, args.big, args.k, g_big) for _ in range(args.repeats))

    print(f"reference chain V=5, horizon {ch.horizon}, k = {args.k}, one thread, torch {torch.__version__}")
    print(f"{'decoder':<34}{'M':>11}{'seconds':>11}{'us / sequence':>15}{'TV vs exact':>13}")
    print(f"{'per-sample loop (the post style)':<34}{args.M:>11,}{t_loop:>11.3f}{1e6 * t_loop / args.M:>15.2f}"
          f"{sd.sequence_tv(loop_samples, exact):>13.4f}")
    print(f"{'batched decode_markov (median)':<34}{args.M:>11,}{t_batched:>11.4f}{1e6 * t_batched / args.M:>15.3f}"
          f"{sd.sequence_tv(batched_samples, exact):>13.4f}")
    print(f"{'batched decode_markov (median)':<34}{args.big:>11,}{t_big:>11.4f}{1e6 * t_big / args.big:>15.3f}")
    t_mode = verifier_seconds(ch, args.M, args.k, args.repeats)
    g_block = torch.Generator().manual_seed(5)
    block_samples = sd.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=args.k, num_samples=args.M,
                                     mode="block_verification", generator=g_block)
    t_token, t_block = t_mode["correct"], t_mode["block_verification"]
    print(f"{'token rule (median, taking turns)':<34}{args.M:>11,}{t_token:>11.4f}{1e6 * t_token / args.M:>15.3f}")
    print(f"{'block verification (median, ditto)':<34}{args.M:>11,}{t_block:>11.4f}{1e6 * t_block / args.M:>15.3f}"
          f"{sd.sequence_tv(block_samples, exact):>13.4f}")
    print(f"\nblock verification / token rule at M = {args.M:,}, k = {args.k}: "
          f"{t_block / t_token:.2f}x the time per sequence")
    print(f"speed ratio at M = {args.M:,}: {t_loop / t_batched:.0f}x  (loop seconds / median batched seconds, "
          f"{args.chunks} interleaved pieces; per piece {min(per_chunk):.0f}x to {max(per_chunk):.0f}x)")
    print(f"extrapolated ratio at M = {args.big:,}: {t_loop / args.M * args.big / t_big:.0f}x "
          f"(loop time scaled linearly from M = {args.M:,})")


if __name__ == "__main__":
    main()
