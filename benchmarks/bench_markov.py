"""Batched decode_markov against a one-sequence-at-a-time loop of the same algorithm, at the same M.

Run with `make bench`. The loop is written the way the post writes it (torch calls per token, one
sequence at a time); it lives here and not in the library. Both use one thread.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import specdec_lib as sd


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


def time_batched(ch, M: int, k: int, repeats: int) -> float:
    """Median seconds of decode_markov for M sequences."""
    g = torch.Generator().manual_seed(0)
    sd.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=k, n=min(M, 1000), generator=g)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sd.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=k, n=M, generator=g)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_loop(ch, M: int, k: int) -> tuple[float, torch.Tensor]:
    """Seconds for M sequences decoded one at a time, and the samples (to check they agree)."""
    g = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    out = [loop_decode(ch.P, ch.Q, ch.start, ch.horizon, k, g) for _ in range(M)]
    return time.perf_counter() - t0, torch.tensor(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--M", type=int, default=60_000, help="sequences for the head-to-head run")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--big", type=int, default=1_000_000, help="sequences for the batched-only run")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ch = sd.reference_chain()
    exact = sd.exact_sequence_distribution(ch.P, ch.start, ch.horizon)

    t_batched = time_batched(ch, args.M, args.k, args.repeats)
    t_loop, loop_samples = time_loop(ch, args.M, args.k)
    g = torch.Generator().manual_seed(2)
    batched_samples = sd.decode_markov(ch.P, ch.Q, start=ch.start, horizon=ch.horizon, k=args.k, n=args.M, generator=g)
    t_big = time_batched(ch, args.big, args.k, max(3, args.repeats // 2))

    print(f"reference chain V=5, horizon {ch.horizon}, k = {args.k}, one thread, torch {torch.__version__}")
    print(f"{'decoder':<34}{'M':>11}{'seconds':>11}{'us / sequence':>15}{'TV vs exact':>13}")
    print(f"{'per-sample loop (the post style)':<34}{args.M:>11,}{t_loop:>11.3f}{1e6 * t_loop / args.M:>15.2f}"
          f"{sd.sequence_tv(loop_samples, exact):>13.4f}")
    print(f"{'batched decode_markov':<34}{args.M:>11,}{t_batched:>11.4f}{1e6 * t_batched / args.M:>15.3f}"
          f"{sd.sequence_tv(batched_samples, exact):>13.4f}")
    print(f"{'batched decode_markov':<34}{args.big:>11,}{t_big:>11.4f}{1e6 * t_big / args.big:>15.3f}")
    print(f"\nspeed ratio at M = {args.M:,}: {t_loop / t_batched:.0f}x  (loop seconds / batched seconds, same run)")
    print(f"extrapolated ratio at M = {args.big:,}: {t_loop / args.M * args.big / t_big:.0f}x "
          f"(loop time scaled linearly from M = {args.M:,})")


if __name__ == "__main__":
    main()
