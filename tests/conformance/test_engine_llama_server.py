"""conformance.engine_llama_server: the command line of each mode, the Settings -> request mapping, what is unsupported
and why, the raw-logit offset from the penalty probes, the EOS continuation (no server needed); then, where
`make engines-env` built llama-server, the live engine: logits against a float64 forward, plain passes, the
synthetic control fails, sample-and-match keeps plain's tokens seed for seed."""
import math

import pytest
import torch

from specdec_lib.conformance import engine_llama_server as els
from specdec_lib.surface import grammar as grammars
from specdec_lib.surface.settings import Settings

ALL_ON = Settings(temperature=0.7, top_k=8, top_p=0.9, min_p=0.05, repetition_penalty=1.3, max_new_tokens=5)


def _flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def test_each_mode_has_its_command_line():
    plain = els.server_command("bin/llama-server", "t.gguf", "plain", port=8080, slots=2, threads=1)
    assert plain[:3] == ["bin/llama-server", "-m", "t.gguf"] and _flag(plain, "--port") == "8080"
    assert _flag(plain, "--host") == "127.0.0.1" and _flag(plain, "-np") == "2" and _flag(plain, "-c") == "512"
    assert _flag(plain, "--cache-type-k") == _flag(plain, "--cache-type-v") == "f32" and _flag(plain, "-fa") == "off"
    assert "-md" not in plain and "--spec-type" not in plain
    draft = els.server_command("s", "t.gguf", "draft", port=1, k=4, draft="d.gguf")
    assert _flag(draft, "-md") == "d.gguf" and _flag(draft, "--spec-type") == "draft-simple"
    assert _flag(draft, "--spec-draft-n-max") == "4" and _flag(draft, "--spec-draft-p-min") == "0"
    assert _flag(draft, "-ctkd") == _flag(draft, "-ctvd") == "f32" and "--spec-draft-sampling" not in draft
    prob = els.server_command("s", "t.gguf", "draft probabilistic", port=1, draft="d.gguf")
    assert _flag(prob, "--spec-draft-sampling") == "probabilistic" and _flag(prob, "--spec-type") == "draft-simple"
    ngram = els.server_command("s", "t.gguf", "ngram", port=1, k=3)
    assert _flag(ngram, "--spec-type") == "ngram-simple" and _flag(ngram, "--spec-ngram-simple-size-m") == "3"
    assert _flag(ngram, "--spec-ngram-simple-size-n") == "1" and "-md" not in ngram
    wide = els.server_command("s", "t.gguf", "ngram", port=1, k=6, slots=2, ctx=1024, ngram_n=3)
    assert _flag(wide, "-c") == "2048" and _flag(wide, "--spec-ngram-simple-size-n") == "3" and "--metrics" in wide
    synth = els.server_command("s", "t.gguf", "synthetic", port=1, k=3, draft="d.gguf")
    rates = [float(r) for r in _flag(synth, "--spec-synth-rates").split(",")]
    assert len(rates) == 3 and rates == sorted(rates, reverse=True) and all(0 < r < 1 for r in rates)


def test_command_line_errors_name_the_argument():
    with pytest.raises(ValueError, match="mode must be one of"):
        els.server_command("s", "t", "eagle", port=1)
    with pytest.raises(ValueError, match="draft must name a draft GGUF"):
        els.server_command("s", "t", "draft", port=1)
    with pytest.raises(ValueError, match="k must be"):
        els.server_command("s", "t", "ngram", port=1, k=0)
    with pytest.raises(ValueError, match="ngram_n must be"):
        els.server_command("s", "t", "ngram", port=1, ngram_n=0)
    with pytest.raises(ValueError, match="ctx must be"):
        els.server_command("s", "t", "plain", port=1, ctx=0)


def test_settings_map_to_a_request_in_the_kits_order():
    body = els.request_body(ALL_ON, (1, 5, 6), 5, 42)
    assert body["samplers"] == ["penalties", "temperature", "min_p", "top_k", "top_p"]  # surface/processors.py
    assert (body["temperature"], body["top_k"], body["top_p"], body["min_p"]) == (0.7, 8, 0.9, 0.05)
    assert body["repeat_penalty"] == 1.3 and body["repeat_last_n"] >= 1 << 16
    assert body["prompt"] == [1, 5, 6] and body["n_predict"] == 5 and body["seed"] == 42 and body["return_tokens"]
    assert "n_probs" not in body
    plain = els.request_body(Settings(logit_bias=((3, 1.5),)), [1], 2, 0, logprobs=True)
    assert plain["samplers"] == [] and plain["logit_bias"] == [[3, 1.5]] and plain["top_k"] == 0
    assert plain["n_probs"] == 1 and plain["post_sampling_probs"] is True
    greedy = els.request_body(Settings(temperature=0.0), [1], 2, 0)
    assert greedy["samplers"] == ["temperature"] and greedy["temperature"] == 0.0


def test_unsupported_settings_say_why():
    assert els.llama_server_unsupported(ALL_ON, 2) is None and els.llama_server_unsupported(Settings(eos=2), 2) is None
    assert "count the prompt" in els.llama_server_unsupported(Settings(frequency_penalty=1.0), 2)
    assert "count the prompt" in els.llama_server_unsupported(Settings(presence_penalty=1.0), 2)
    assert "before the penalties" in els.llama_server_unsupported(Settings(repetition_penalty=2.0,
                                                                     logit_bias=((1, 1.0),)), 2)
    assert "GBNF" in els.llama_server_unsupported(Settings(grammar=grammars.no_immediate_repeat(4)), 2)
    assert "n-gram or bad-word" in els.llama_server_unsupported(Settings(no_repeat_ngram_size=2), 2)
    assert "only at the model's EOS (id 2)" in els.llama_server_unsupported(Settings(eos=3), 2)
    with pytest.raises(TypeError, match="settings must be a Settings"):
        els.llama_server_unsupported({"temperature": 1.0}, 2)


def test_a_missing_binary_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="binary: no llama-server"):
        els.LlamaServerEngine(tmp_path / "t.gguf", vocab=16, eos=2, binary=tmp_path / "nothing")


class Offline(els.LlamaServerEngine):
    """The engine's own arithmetic on a raw row it is given: the probes follow llama.cpp's penalty rule (float32)."""

    def __init__(self, raw):
        self.raw, self.vocab, self.eos, self.logprobs = raw, raw.numel(), 2, False

    def _probe(self, server, context, penalty):
        x = self.raw.clone().float()
        if penalty:
            t = context[-1]
            x[t] = x[t] * penalty if x[t] <= 0 else x[t] / penalty
        return torch.log_softmax(x, -1).double()


@pytest.mark.parametrize("last", [0.8, -1.3, 0.0])
def test_the_penalty_probes_recover_the_raw_logits(last):
    raw = torch.tensor([0.5, -2.0, 3.0, last, 1.0, -0.5], dtype=torch.float64)
    engine = Offline(raw)
    a = engine._probe(None, (0, 3), None)
    assert torch.allclose(a + engine._offset(None, (0, 3), a), raw, atol=2e-5)


class Scripted:
    """A server whose answers are given: records the requests."""

    def __init__(self, answers):
        self.answers, self.bodies = list(answers), []

    def post(self, path, body):
        self.bodies.append(body)
        return self.answers.pop(0)


def test_an_eos_the_settings_do_not_name_is_continued_past():
    engine = Offline(torch.zeros(16))
    server = Scripted([{"tokens": [4, 2], "stop_type": "eos"}, {"tokens": [7], "stop_type": "limit"}])
    assert engine._one(server, (1, 5), Settings(max_new_tokens=3), 11) == ((4, 2, 7), None, "length")
    assert server.bodies[1]["prompt"] == [1, 5, 4, 2] and server.bodies[1]["n_predict"] == 1
    assert server.bodies[1]["seed"] != server.bodies[0]["seed"] == 11
    at_cap = Scripted([{"tokens": [4, 2], "stop_type": "eos"}])
    assert engine._one(at_cap, (1,), Settings(max_new_tokens=2), 0) == ((4, 2), None, "length")
    named = Scripted([{"tokens": [2], "stop_type": "eos"}])
    assert engine._one(named, (1,), Settings(max_new_tokens=3, eos=2), 0) == ((2,), None, "eos")


def test_rows_and_logprobs_are_read_from_the_answer():
    answer = {"completion_probabilities": [{"top_logprobs": [{"id": 3, "logprob": -0.1}, {"id": 0, "logprob": -2.4}]}]}
    row = els._row(answer, 4)
    assert row[3] == -0.1 and row[0] == -2.4 and row[1] == -math.inf
    post = {"completion_probabilities": [{"top_probs": [{"id": 1, "prob": 0.25}, {"id": 2, "prob": 0.0}]}]}
    assert els._row(post, 4)[1] == pytest.approx(math.log(0.25)) and els._row(post, 4)[2] == -math.inf


LIVE = pytest.mark.skipif(not els.binary_path().exists(), reason=f"no llama-server at {els.binary_path()} "
                          "(make engines-env builds it)")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from specdec_lib.conformance.gguf_model import tiny_llama_gguf, write_gguf
    from specdec_lib.surface.tiny_model import TinyConfig, tiny_causal_lm

    folder = tmp_path_factory.mktemp("llama-server")
    target = tiny_llama_gguf(folder / "target.gguf", vocab=16, seed=0)
    config = TinyConfig("llama", vocab=16, hidden=32, intermediate=64, heads=2, kv_heads=2, layers=2,
                        max_positions=256, tokens=(("bos_token_id", 1), ("eos_token_id", 2)))
    write_gguf(tiny_causal_lm(config, seed=1, head_scale=0.5), folder / "draft.gguf", bos_id=1, eos_id=2)
    with els.LlamaServerEngine(target.path, vocab=16, eos=2, draft=folder / "draft.gguf", slots=2) as live:
        live.reference = target.model.double()
        yield live


@LIVE
def test_live_logits_match_a_float64_forward(engine):
    context = (1, 5, 6, 7, 5, 6)
    with torch.no_grad():
        want = engine.reference(torch.tensor([context])).logits[0, -1]
    assert engine.version.startswith("b") and (engine.logits(context) - want).abs().max() < 2e-4  # F32 cache: ~4e-6


@LIVE
def test_live_plain_passes_synthetic_fails_and_draft_keeps_plains_tokens(engine):
    from specdec_lib.conformance.engines import EngineChain, audit_engine, engine_cases, same_seed, with_settings

    cases = engine_cases(EngineChain("llama-server target", engine), prompt=(1, 5, 6, 7, 5, 6, 7, 5, 6), eos=2)
    # five new tokens: the server drafts at most n_predict - generated - 1 (two new tokens never speculate); top-k 2
    # keeps 2^5 outcomes, so the kit's power needs only a few thousand samples
    cases = [with_settings(c, max_new_tokens=5) for c in cases if c.name == "top_k"]
    report, left = audit_engine(engine, "plain", cases=cases)
    assert report.passed and left == {}, str(report)
    synthetic, _ = audit_engine(engine, "synthetic", cases=cases)
    assert not synthetic.passed, str(synthetic)
    assert same_seed(engine, "draft", cases[0], n=100).all_equal


@LIVE
def test_the_speed_anchor_runs_its_code_path_on_tiny_models(tmp_path):
    """make measure-engines' driver on two tiny GGUFs: the recording it writes reads back through the lab's reader,
    greedy speculation gives plain's tokens, and the counts are the server's own."""
    import importlib.util
    import pathlib

    from specdec_lib.lab.recordings import load_recording

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "measure_engines.py"
    spec = importlib.util.spec_from_file_location("measure_engines", path)
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    out = tmp_path / "speed.json"
    assert driver.main(["--tiny", "--repeats", "2", "--n-new", "16", "--json", str(out)]) == 0
    rec = load_recording("measure-engines", out)
    assert {r.mode for r in rec.runs} == {"plain", "draft", "ngram"} and len(rec.terms) == 3
    assert all(r.equal_to_plain and len(r.passes) == 2 and all(p.n == 16 for p in r.passes) for r in rec.runs)
    draft = [p for r in rec.runs if r.mode == "draft" for p in r.passes]
    assert all(p.verified >= 1 and p.drafted >= p.verified for p in draft)  # the server drafted and verified
