"""lab/recorded_terms.py: medians and ranges of repeats, T_1 outliers, what a step reads, the rounds behind E[N] and
alpha; each with the wrong answer it must not give."""
from types import SimpleNamespace as NS

import pytest

from specdec_lib.lab import recorded_terms as rt


def rep(T_1, measured, *, c_v=2.0, e_n=3.0):
    return rt.RunRepeat(T_1=T_1, c_d=0.3, c_v=c_v, e_n=e_n, predicted=e_n / (4 * 0.3 + c_v), measured=measured,
                        equal_to_plain=True)


def test_summarise_repeats_takes_medians_and_ranges():
    got = rt.summarise_repeats([rep(0.9, 1.2, c_v=2.2), rep(0.7, 1.0, c_v=2.0), rep(0.8, 1.5, c_v=2.1)], 4)
    assert (got["T_1"], got["measured"], got["c_v"]) == (0.8, 1.2, 2.1)  # the middle value, not the first or mean
    assert got["ranges"]["T_1"] == [0.7, 0.9] and got["ranges"]["measured"] == [1.0, 1.5]
    assert got["predicted"] == pytest.approx(3.0 / (4 * 0.3 + 2.1), rel=1e-12)  # from the median terms
    assert set(got["ranges"]) == set(rt.REPEATED)
    even = rt.summarise_repeats([rep(1.0, 1.0), rep(4.0, 1.0), rep(2.0, 1.0), rep(3.0, 1.0)], 4)
    assert even["T_1"] == 2.5  # an even count: the mean of the middle two
    with pytest.raises(ValueError, match="repeats must hold at least one"):
        rt.summarise_repeats([], 4)
    with pytest.raises(ValueError, match="values must hold at least one"):
        rt.median([])


def run_with(repeats, k=4, **override):
    fields = {**rt.summarise_repeats(repeats, k), **override}
    return NS(k=k, repeats=repeats, **fields)


def test_check_repeats_names_a_wrong_median_a_dropped_repeat_and_a_wrong_range():
    reps = [rep(0.9, 1.2), rep(0.7, 1.0), rep(0.8, 1.5)]
    rt.check_repeats(run_with(reps), "run")  # the negative control: a run written by summarise_repeats passes
    with pytest.raises(ValueError, match=r"run.T_1 must be the median of its 3 repeats"):
        rt.check_repeats(run_with(reps, T_1=0.9), "run")
    dropped = run_with(reps)
    with pytest.raises(ValueError, match=r"run.T_1 must be the median of its 2 repeats"):
        rt.check_repeats(NS(**{**vars(dropped), "repeats": reps[1:]}), "run")
    with pytest.raises(ValueError, match=r"run.ranges must be each field's \[min, max\]"):
        rt.check_repeats(run_with(reps, ranges={**run_with(reps).ranges, "c_v": [1.0, 3.0]}), "run")
    rt.check_repeats(NS(k=4, repeats=[], ranges={}), "run")  # one run, nothing to check
    with pytest.raises(ValueError, match="run.ranges must be empty without repeats"):
        rt.check_repeats(NS(k=4, repeats=[], ranges={"T_1": [1, 2]}), "run")


def test_repeats_table_has_a_line_per_repeated_run():
    reps = [rep(0.9, 1.2), rep(0.7, 1.0), rep(0.8, 1.5)]
    one = NS(task="edit", draft="model", repeats=[], **rt.summarise_repeats(reps[:1], 4), k=4)
    many = NS(task="code", draft="lookup", repeats=reps, **rt.summarise_repeats(reps, 4), k=4)
    lines = rt.repeats_table([one, many]).splitlines()
    assert len(lines) == 2 and lines[1].startswith("code  lookup") and "0.800 [0.700, 0.900]" in lines[1]


def t1_run(task, draft, T_1, *, dtype="float32", temperature=0.0):
    return NS(task=task, draft=draft, T_1=T_1, dtype=dtype, matmul="onednn", temperature=temperature)


def test_t1_spread_flags_a_slow_configuration_of_the_same_target():
    runs = [t1_run("code", "model", 0.80), t1_run("code", "lookup", 0.76), t1_run("prose", "table", 1.06),
            t1_run("edit", "model", 0.78), t1_run("prose", "table", 1.06, temperature=1.0),  # reused terms: once
            t1_run("edit", "model", 0.65, dtype="bfloat16")]
    fp32, bf16 = rt.t1_spread(runs)
    assert fp32.configurations == 4 and fp32.median == pytest.approx(0.79) and (fp32.low, fp32.high) == (0.76, 1.06)
    assert fp32.outliers == [("prose", "table", 1.06)]  # 1.06 / 0.79 = 1.34 > 1.25
    assert bf16.outliers == [] and bf16.configurations == 1
    assert rt.t1_spread(runs, factor=1.4)[0].outliers == []  # the negative control: a looser factor flags none
    fast = rt.t1_spread([*runs, t1_run("edit", "table", 0.5)])[0]
    assert ("edit", "table", 0.5) in fast.outliers  # too fast is flagged too
    with pytest.raises(ValueError, match="factor"):
        rt.t1_spread(runs, factor=1.0)


def test_step_traffic_reads_every_weight_but_the_input_embedding():
    manifest = NS(files=[NS(path="model.safetensors", bytes=4000), NS(path="config.json", bytes=10)], params=1000,
                  header={"n_vocab": 50, "embedding_length": 4})
    got = rt.step_traffic(manifest, 0.5)
    assert (got.weight_bytes, got.embedding_bytes, got.read_bytes, got.flops) == (4000, 800, 3200, 1600.0)
    assert got.gb_per_s == pytest.approx(3200 / 0.5 / 1e9) and got.gflop_per_s == pytest.approx(1600 / 0.5 / 1e9)
    with pytest.raises(ValueError, match="safetensors"):
        rt.step_traffic(NS(files=[], params=1, header={}), 0.5)
    with pytest.raises(ValueError, match="T_1"):
        rt.step_traffic(manifest, 0.0)


def test_round_counts_from_the_recorded_rates():
    # 14 rounds; positions 1..4 accepted in 14, 13, 13, 12 rounds: 52 drafts, 66 tokens uncut, 64 kept
    run = NS(n_new=64, e_n=64 / 14, alpha=[1.0, 13 / 14, 1.0, 12 / 13])
    got = rt.round_counts(run)
    assert (got.rounds, got.accepted, got.committed, got.untruncated) == (14, 52, 64, 66)
    assert got.e_n_untruncated == pytest.approx(66 / 14)
    never = rt.round_counts(NS(n_new=10, e_n=10 / 8, alpha=[0.25, 0.0, None]))
    assert (never.rounds, never.accepted, never.untruncated) == (8, 2, 10)
    with pytest.raises(ValueError, match="whole number of rounds"):
        rt.round_counts(NS(n_new=64, e_n=3.3, alpha=[]))


# ---- the best k chosen on some repeats and reported on others (issue 37) ------------------------------------------

# A hand-made table where choosing k on every repeat and choosing it on half of them disagree: k = 2 has the
# larger median over all five repeats, carried by repeats 1, 3 and 4; repeats 0, 2, 4 prefer k = 1.
KS = [1, 2]
SPEEDS = [[1.10, 1.00, 1.10, 1.00, 1.10],
          [1.00, 1.30, 1.00, 1.30, 1.30]]


def test_split_best_k_chooses_on_some_repeats_and_reports_the_others():
    import statistics
    assert max(range(2), key=lambda i: statistics.median(SPEEDS[i])) == 1  # argmax over all repeats: k = 2
    s = rt.split_best_k(KS, SPEEDS)  # choose on 0, 2, 4; report 1, 3
    assert (s.k, s.chosen, s.reported, s.reported_range) == (1, 1.10, 1.00, (1.00, 1.00))
    s = rt.split_best_k(KS, SPEEDS, choose=(1, 3), report=(0, 2, 4))
    assert (s.k, s.chosen, s.reported, s.reported_range) == (2, 1.30, 1.00, (1.00, 1.30))


@pytest.mark.parametrize("kwargs, match", [
    ({"choose": (0, 1), "report": (1, 3)}, "must not share a repeat"),
    ({"choose": (), "report": (1, 3)}, "choose must name at least one repeat"),
    ({"choose": (0, 2), "report": (5,)}, r"report must name repeats 0 \.\. 4, got 5"),
])
def test_split_best_k_refuses_bad_splits(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rt.split_best_k(KS, SPEEDS, **kwargs)
    with pytest.raises(ValueError, match="one list per k"):
        rt.split_best_k(KS, SPEEDS[:1])
    with pytest.raises(ValueError, match="repeat_speeds is empty: the table keeps no per-repeat speedups"):
        rt.split_best_k(KS, [])
