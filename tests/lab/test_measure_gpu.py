"""benchmarks/measure_gpu.py (`make measure-gpu`) on small random shapes on the CPU: it writes a "measure-gpu"
recording that the one reader reads back, every term where the schema says, in two columns (eager transformers, and
sd.lab.StaticLM uncaptured), and it never overwrites the committed reference from a --tiny run."""
import json
import pathlib
import sys

import pytest

from specdec_lib.lab.recordings import REFERENCE_PATHS, load_recording

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))  # as the benchmarks find it
import measure_gpu  # noqa: E402


@pytest.mark.heavy
def test_the_tiny_run_writes_a_recording_the_reader_reads(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    assert measure_gpu.main(["--tiny", "--json", str(out), "--device", "cpu", "--reps", "1"]) == 0
    R = load_recording("measure-gpu", out)
    assert R.tiny and R.weights == "tiny" and R.measured_by == "benchmarks/measure_gpu.py"
    assert "measure_gpu.py" in R.source and R.machine["device"] == "cpu" and json.loads(out.read_text())["schema"] == 1
    eager = R.column("eager", "measure_gpu")
    assert eager.ks == list(range(1, 9)) and len(eager.c_v) == 8 and eager.T_1_ms > 0
    assert eager.batches == [1, 4, 16, 64] and all(eager.c_v_batch(k=k, B=64) > 0 for k in range(1, 9))
    assert "64" in eager.pass_ms["1"] and "128" not in eager.pass_ms["1"]  # --tiny stops the long passes at 64
    assert [d.draft for d in eager.drafts] == ["draft", "one_layer", "exit2", "lookup"]
    assert [(d.layers, d.hidden) for d in eager.drafts] == [(2, 32), (1, 64), (2, 64), (0, 0)]
    static = R.column("minimal-eager", "measure_gpu")  # sd.lab.StaticLM, uncaptured off a GPU
    assert static.measured and static.T_1_ms > 0 and "StaticLM" in static.decoder and "graphs 'off'" in static.decoder
    assert [d.draft for d in static.drafts] == [d.draft for d in eager.drafts] and static.batches == eager.batches
    assert [c.path for c in R.columns] == ["eager", "minimal-eager"]  # "captured" only where CUDA captured it
    assert {(p.task, p.draft) for p in R.predictions} == {(t, d) for t in ("code", "prose", "edit")
                                                          for d in ("draft", "one_layer", "exit2", "lookup")}
    assert all(p.measured is None for p in R.predictions)  # no real weights in a tiny run
    assert "wrote" in capsys.readouterr().out


def test_a_tiny_run_never_writes_the_committed_reference(capsys):
    for argv in (["--tiny"], ["--tiny", "--json", str(REFERENCE_PATHS["measure-gpu"])], ["--device", "cpu"]):
        with pytest.raises(SystemExit):
            measure_gpu.main(argv)
    assert "never overwrites the committed reference" in capsys.readouterr().err


@pytest.mark.heavy
def test_the_real_weights_runs_measure_each_task_and_fill_the_predictions():
    # real_runs on tiny models and stand-in prompts: the path a GPU with the real pair takes, greedy and exact
    import torch
    from real_tasks import TASKS, tiny_task_prompt

    from specdec_lib.lab.hf_causal_lm import tiny_hf_model

    target, draft = tiny_hf_model("qwen2", vocab=128, seed=0), tiny_hf_model("qwen2", vocab=128, seed=1)
    prompts = {t: tiny_task_prompt(t, 128, length=16) for t in TASKS}
    bar = measure_gpu.tqdm(total=6, disable=True)
    runs = measure_gpu.real_runs(target, draft, prompts, measure_gpu.sd.lab.recorded("measure-real"), n_new=6, reps=1,
                                 bar=bar)
    assert set(runs) == {(t, d) for t in TASKS for d in ("0.5B", "lookup")}
    assert all(r.equal_to_plain and r.measured > 0 and isinstance(r.spec.tokens, torch.Tensor) for r in runs.values())
