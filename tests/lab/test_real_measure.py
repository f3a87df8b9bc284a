"""The real pair's measurement code on tiny random Qwen2 models: the same functions `make measure-real` runs."""
import dataclasses
import importlib.util
import json
import pathlib
import statistics
import sys
from types import SimpleNamespace

import pytest
import torch

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding, generate_plain
from specdec_lib.lab.hf_causal_lm import tiny_hf_model
from specdec_lib.lab.numerics import block_vs_incremental
from specdec_lib.lab.real_measure import combine_repeats, decode_plain, first_divergence, measure_run
from specdec_lib.lab.recorded_terms import round_counts
from specdec_lib.lab.recordings import RealRun

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))  # as the benchmarks find it
from hf_generate import hf_generate  # noqa: E402
from real_tasks import TASKS, task_text, tiny_task_prompt  # noqa: E402

V = 300


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return tiny_hf_model("qwen2", vocab=V, seed=0), tiny_hf_model("qwen2", vocab=V, seed=1)


def test_measure_run_greedy_is_exact_and_its_prediction_is_the_equation(pair):
    target, draft = pair
    prompt = tiny_task_prompt("edit", V, length=16)
    plain = decode_plain(target, prompt, 20, decoding=Decoding())
    assert torch.equal(plain.tokens, generate_plain(target, prompt, 20))
    for drafter, k in [(sd.lab.NeuralDraft(draft), 3), (sd.lab.PromptLookupDraft(V), 5)]:
        r = measure_run(target, drafter, prompt, k, plain=plain, decoding=Decoding(), reps=1)
        assert r.equal_to_plain and r.first_divergence is None
        assert r.predicted == pytest.approx(r.e_n / (k * r.c_d + r.c_v), rel=1e-12)
        assert 1 <= r.e_n <= k + 1 and r.measured > 0 and r.T_1 > 0 and len(r.alpha) == k
        assert "spec" not in r.fields() and set(r.fields()) >= {"c_d", "c_v", "measured"}
    sampled = measure_run(target, sd.lab.NeuralDraft(draft), prompt, 2, reps=1, plain=plain,
                          decoding=Decoding(temperature=1.0, generator=torch.Generator().manual_seed(0)))
    assert sampled.equal_to_plain is None and sampled.first_divergence is None


def test_combine_repeats_keeps_every_repeat_and_takes_medians(pair):
    target, draft = pair
    prompt = tiny_task_prompt("code", V, length=16)
    plain = decode_plain(target, prompt, 12, decoding=Decoding())
    one = measure_run(target, sd.lab.NeuralDraft(draft), prompt, 3, plain=plain, decoding=Decoding(), reps=1)
    runs = [dataclasses.replace(one, T_1=t, measured=m) for t, m in ((0.3, 1.4), (0.1, 1.0), (0.2, 0.7))]
    got = combine_repeats(runs, 3)
    assert (got.T_1, got.measured) == (0.2, 1.0) and got.ranges["T_1"] == [0.1, 0.3]  # medians, not the first
    assert [r.T_1 for r in got.repeats] == [0.3, 0.1, 0.2] and got.equal_to_plain  # every repeat, in order
    assert got.predicted == pytest.approx(got.e_n / (3 * got.c_d + got.c_v), rel=1e-12)
    row = RealRun(task="code", draft="model", k=3, temperature=0.0, dtype="float32", matmul="default", n_new=12,
                  **got.fields(), repeats=list(got.repeats), ranges=got.ranges)
    assert row.repeats[1].T_1 == 0.1 and len(got.repeat_fields()["repeats"]) == 3
    assert one.repeat_fields() == {"repeats": [], "ranges": {}}  # one run: no repeats recorded
    assert "repeats" not in one.fields()  # what measure_real_self records stays RealRun's schema-1 fields
    diverged = combine_repeats([runs[0], dataclasses.replace(runs[1], equal_to_plain=False, first_divergence=5)], 3)
    assert diverged.equal_to_plain is False and diverged.first_divergence == 5  # one repeat left plain: the run did
    with pytest.raises(ValueError, match="results must hold at least one"):
        combine_repeats([], 3)


def test_round_counts_match_the_log_when_the_last_round_is_cut(pair):
    target, _ = pair
    prompt = tiny_task_prompt("edit", V, length=16)
    plain = decode_plain(target, prompt, 18, decoding=Decoding())
    same = measure_run(target, sd.lab.NeuralDraft(target), prompt, 3, plain=plain, decoding=Decoding(), reps=1)
    s = same.spec.log.summary()  # the target drafting for itself: every draft accepted, 4 tokens a round
    got = round_counts(SimpleNamespace(n_new=18, e_n=same.e_n, alpha=same.alpha))
    assert (got.rounds, got.accepted, got.committed) == (s.rounds, sum(s.accepted_at), 18) == (5, 15, 18)
    assert got.untruncated == 20 and same.e_n == 18 / 5 and same.alpha == [1.0, 1.0, 1.0]  # alpha counts round 5 whole


def test_first_divergence():
    a = torch.tensor([1, 2, 3, 4])
    assert first_divergence(a, a.clone()) is None
    assert first_divergence(a, torch.tensor([1, 2, 0, 0])) == 2
    with pytest.raises(ValueError, match="one shape"):
        first_divergence(a, a[:3])


def test_float32_block_rows_match_incremental_rows(pair):
    target, _ = pair
    got = block_vs_incremental(target, tiny_task_prompt("code", V), 12, k=3)
    assert got.dtype == "float32" and got.positions == 12
    assert got.flips == 0 and got.first_flip is None and 0 <= got.max_abs_diff < 1e-4
    assert got.min_gap > 0


class _Shifted:
    """Negative control: block rows read one position late (each verification row has seen its own token)."""

    def __init__(self, lm):
        self.lm, self.vocab, self.max_len, self.dtype = lm, lm.vocab, lm.max_len, lm.dtype

    def new_cache(self):
        return self.lm.new_cache()

    def __call__(self, ids, cache=None):
        out = self.lm(ids, cache)
        return torch.cat([out[:, 1:], out[:, -1:]], dim=1) if ids.shape[1] > 1 else out


def test_a_misaligned_block_pass_shows_flips(pair):
    got = block_vs_incremental(_Shifted(pair[0]), tiny_task_prompt("code", V), 12, k=3)
    assert got.flips > 0 and got.max_abs_diff > 1e-2 and got.gap_at_first_flip is not None


@pytest.mark.parametrize("mode", ["plain", "assistant", "lookup"])
def test_transformers_generate_agrees_with_our_greedy_loop(pair, mode):
    target, draft = pair
    prompt = tiny_task_prompt("edit", V, length=16)
    tokens, seconds, per_token = hf_generate(target, prompt, 16, mode=mode, k=3, draft=draft)
    assert torch.equal(tokens, generate_plain(target, prompt, 16)) and seconds > 0 and 0 < per_token < seconds


def test_task_prompts_and_errors():
    assert set(TASKS) == {"code", "prose", "edit"} and "proc" in task_text("edit")
    edit = tiny_task_prompt("edit", 50, length=10)
    assert edit.numel() == 15 and torch.equal(edit[10:], edit[:5])  # it repeats itself: lookup has a match
    with pytest.raises(ValueError, match="code, prose, edit|'code'"):
        task_text("poetry")
    with pytest.raises(ValueError, match="mode"):
        hf_generate(None, edit, 4, mode="beam")
    with pytest.raises(ValueError, match="draft"):
        hf_generate(None, edit, 4, mode="assistant")


def test_the_benchmark_writes_a_recording_from_tiny_models(tmp_path):
    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "measure_real.py"
    spec = importlib.util.spec_from_file_location("measure_real", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rec.json"
    args = ["--tiny", "--json", str(out), "--n-new", "6", "--n-short", "4", "--n-numerics", "4", "--reps", "1",
            "--repeats", "3"]
    assert bench.main(args) == 0
    rec = json.loads(out.read_text())
    assert rec["schema"] == 2 and rec["tiny"] is True and rec["machine"]["repeats"] == 3
    assert {(r["task"], r["draft"], r["temperature"], r["dtype"]) for r in rec["runs"]} >= {
        (t, d, temp, "float32") for t in TASKS for d in bench.KS for temp in (0.0, 1.0)}
    assert all(r["equal_to_plain"] for r in rec["runs"] if r["temperature"] == 0 and r["dtype"] == "float32")
    assert {h["mode"] for h in rec["hf"]} == {"assistant", "lookup"} and all(h["equal_to_plain"] for h in rec["hf"])
    assert {c["matmul"] for c in rec["c_v_curve"]} == {"default", "onednn"}
    for r in rec["runs"]:  # greedy fp32: three repeats, medians and ranges; the rest: one run each
        repeated = r["temperature"] == 0 and r["dtype"] == "float32"
        assert len(r["repeats"]) == (3 if repeated else 0) and bool(r["ranges"]) == repeated
        if repeated:
            t1s = [x["T_1"] for x in r["repeats"]]
            assert r["T_1"] == statistics.median(t1s) and r["ranges"]["T_1"] == [min(t1s), max(t1s)]
            assert r["measured"] == statistics.median(x["measured"] for x in r["repeats"])
            assert len(set(t1s)) == 3  # three timings, not one copied
    from specdec_lib.lab.recordings import load_recording

    assert load_recording("measure-real", out).tiny
    with pytest.raises(SystemExit):
        bench.main(["--tiny", "--repeats", "0"])
