"""The batch regime's fit (c_v(k; B) by a line, best k per B) and `make measure`'s closing lines, parsed."""
import dataclasses
import importlib.util
import pathlib
import re

import pytest
import torch

import specdec_lib as sd
from specdec_lib.lab.batch_cost import BatchCost, best_k_by_batch, fit_c_v, time_batched_passes
from specdec_lib.lab.measure import SpeedupTable, VerifierRun
from specdec_lib.lab.transformer import CachedLM, LMConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("measure_speedup", ROOT / "benchmarks" / "measure_speedup.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_fit_recovers_a_line_and_least_squares_by_hand():
    ks = [1, 2, 3, 4, 8]
    assert fit_c_v(ks, [1.1 + 0.05 * k for k in ks]) == pytest.approx((1.1, 0.05))
    # three points off a line: the slope is cov(k, c) / var(k) = 0.5 and the line passes through the means
    assert fit_c_v([0, 1, 2], [1.0, 2.0, 2.0]) == pytest.approx((7 / 6, 0.5))
    with pytest.raises(ValueError, match="at least 2 distinct"):
        fit_c_v([2, 2], [1.0, 1.5])
    with pytest.raises(ValueError, match="same length"):
        fit_c_v([1, 2], [1.0])
    with pytest.raises(ValueError, match="c_v"):
        fit_c_v([1, 2], [1.0, -1.0])


def test_best_k_by_batch_is_sd_best_k_and_shrinks_with_the_slope():
    fits = [(1.0, 0.02), (1.0, 0.1), (1.0, 0.4), (1.0, 1.0)]
    best = best_k_by_batch(fits, 0.7, 0.05, k_max=16)
    for (c0, s), b in zip(fits, best):
        assert b == sd.best_k(0.7, c_d=0.05, c_v=lambda k, c0=c0, s=s: c0 + s * k, k_max=16)
    ks = [b.k for b in best]
    assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1]  # a steeper c_v(k) buys a shorter block
    assert best[-1].k == 0 and best[-1].speedup == 1.0  # c_v = 1 + k: every k is slower than plain decoding


def test_time_batched_passes_leaves_the_cache_at_the_round_start():
    target = CachedLM(LMConfig(vocab=8, d_model=16, n_head=2, n_layer=1, max_len=32), seed=1)
    contexts = torch.randint(0, 8, (4, 6), generator=torch.Generator().manual_seed(0))
    T_1, V = time_batched_passes(target, contexts, [1, 3], reps=2)
    assert T_1 > 0 and len(V) == 2 and min(V) > 0
    with pytest.raises(ValueError, match="contexts"):
        time_batched_passes(target, contexts[0], [1])
    with pytest.raises(ValueError, match="B >= max"):
        bench.batch_cost(target, contexts, alpha=0.5, c_d=0.1, batches=[1, 8], ks=[1, 2], reps=1)


def test_constant_guess_is_the_minimax_constant():
    c, err = bench.constant_guess([0.8, 1.0, 1.6])
    assert c == pytest.approx(2 * 0.8 * 1.6 / 2.4) and err == pytest.approx(0.8 / 2.4)
    assert (c - 0.8) / 0.8 == pytest.approx(err) == pytest.approx((1.6 - c) / 1.6)  # both ends equally wrong
    for other in (c * 0.99, c * 1.01):  # any other constant does worse at one end
        assert max(abs(other - m) / m for m in (0.8, 1.0, 1.6)) > err
    assert bench.alpha_from_tokens(sd.expected_tokens(0.6, 4), 4) == pytest.approx(0.6, abs=1e-9)


def _table(draft, ks, measured, predicted):
    n = len(ks)
    return SpeedupTable(ks=ks, T_1=1e-3, c_d=[0.1] * n, c_v=[1.2] * n, e_n=[1.5] * n, alpha=[0.5] * ks[-1],
                        predicted=predicted, measured=measured, measured_range=[(m, m) for m in measured],
                        overhead=[0.0] * n, plain_step=1.0, T_1_range=(1e-3, 1e-3), repeats=1, pairs=1, draft=draft)


LINES = [r"measured speedups from (?P<A>\d+\.\d{3}) to (?P<B>\d+\.\d{3})",
         r"best measured speedup: (?P<S>\d+\.\d{3}) \(draft (?P<name>\w+), k=(?P<k>\d+)\)",
         r"constant guess max relative error: (?P<C>\d+\.\d{3})",
         r"max relative error: (?P<X>\d+\.\d{3})",
         r"best k by batch size: (?P<bk>B=\d+: k=\d+(, B=\d+: k=\d+)*)"]


def _parse(lines):
    assert len(lines) == 5
    out = {}
    for line, pattern in zip(lines, LINES):
        m = re.fullmatch(pattern, line)
        assert m, line
        out |= m.groupdict()
    return out


def test_block_lines_by_hand():
    run = VerifierRun(verifier="block", e_n=[1.65, 1.98], measured=[1.0, 1.1], measured_range=[(1.0, 1.0)] * 2)
    tables = [dataclasses.replace(_table("draft", [1, 2], [0.9, 0.8], [1.0, 0.8]), e_n=[1.5, 1.8], beside=(run,)),
              _table("table", [1, 4], [1.2, 1.5], [1.2, 1.35])]
    assert bench.block_lines(tables) == [
        "block verification, draft (token rule -> block): k=1: E[N] 1.500 -> 1.650 (+10.0%), S 0.900 -> 1.000; "
        "k=2: E[N] 1.800 -> 1.980 (+10.0%), S 0.800 -> 1.100",
        "block verification, table: a one-hot draft, where it is the token rule (not run twice)"]
    text = tables[0].table()  # the table prints the same pairs beside the token rule's columns
    assert "block verification on the same pairs" in text and "  2  1.800   1.980  +10.0%   0.800   1.100" in text


def test_final_lines_by_hand():
    tables = [_table("draft", [1, 2], [0.9, 0.8], [1.0, 0.8]), _table("table", [1, 4], [1.2, 1.5], [1.2, 1.35])]
    fits = [(1.0, 0.05), (1.2, 0.3)]
    batch = BatchCost(batches=[1, 8], ks=[1, 2], T_1=[1e-3, 2e-3], c_v=[[1.05, 1.1], [1.5, 1.8]], fits=fits,
                      best=best_k_by_batch(fits, 0.6, 0.01), alpha=0.6, c_d=0.01)
    got = _parse(bench.final_lines(tables, batch))
    assert (got["A"], got["B"], got["S"], got["name"], got["k"]) == ("0.800", "1.500", "1.500", "table", "4")
    assert got["C"] == f"{0.7 / 2.3:.3f}" and got["X"] == "0.111"  # 1.0 against 0.9; 1.35 against 1.5: 0.1
    assert got["bk"] == ", ".join(f"B={B}: k={b.k}" for B, b in zip([1, 8], batch.best))


@pytest.mark.heavy
def test_make_measure_ends_with_the_five_lines(capsys):
    """A tiny run of the real script (every draft, 1 prompt, 4 tokens): its last five lines parse."""
    assert bench.main(["--repeats", "1", "--prompts", "1", "--n-new", "4", "--ks", "1,2", "--batches", "1,2",
                       "--batch-reps", "1", "--reps", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    got = _parse(lines[-5:])
    assert got["name"] in bench.DEFAULT_DRAFTS and float(got["A"]) <= float(got["S"]) == float(got["B"])
    assert [b.split(": ")[0] for b in got["bk"].split(", ")] == ["B=1", "B=2"]
    assert sum(line.startswith("draft ") for line in lines) == len(bench.DEFAULT_DRAFTS)  # one table per draft
    beside = [line for line in lines if line.startswith("block verification, ")]  # the neural drafts, beside
    assert [line.split(" ")[2] for line in beside] == ["draft", "draft_deep", "table:", "lookup:"]
    assert beside[0].count("E[N]") == 2 and "one-hot draft" in beside[2]
    assert sum("block verification on the same pairs" in line for line in lines) == 2  # in the two tables
    with pytest.raises(SystemExit):
        bench.main(["--drafts", "bogus"])
    with pytest.raises(SystemExit):
        bench.main(["--block-drafts", "table"])
