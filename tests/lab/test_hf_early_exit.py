"""Early exit of a transformers model through one shared DynamicCache (sd.lab.early_exit_pair on an HFCausalLM): greedy
output equal to plain, the lower layers running ahead and verification giving the model's rows, a block the draft
did not propose scored exactly, and the target's law; each with a negative control that fails it."""
import pytest
import torch
from lab_law import assert_measured_like_any_draft, early_exit_bugs, empirical

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding, exact_continuations, generate_plain, generate_speculative
from specdec_lib.lab.hf_causal_lm import HFLayers, tiny_hf_model

pytest.importorskip("transformers")
NoTokenCheck, OneSlotLate = early_exit_bugs()


def _lengths(cache):
    return [cache.kv.kv.get_seq_length(i) for i in range(len(cache.kv.kv.layers))]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_shared_cache_greedy_equals_plain_greedy_at_every_exit_layer(arch):
    lm = tiny_hf_model(arch, vocab=16, seed=3, layers=3)
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 4])
    plain = generate_plain(lm, prompt, 24)
    for exit_layer in (1, 2):
        target, draft = sd.lab.early_exit_pair(lm, exit_layer)
        for k in (1, 2, 4):
            for verifier in ("token", "block"):
                out = generate_speculative(target, draft, prompt, 24, k, decoding=Decoding(verifier=verifier))
                assert torch.equal(out, plain), (exit_layer, k, verifier)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_the_lower_layers_run_ahead_and_verification_gives_the_models_rows(arch):
    """After proposing 4: layers < L hold 3 positions more than the rest; one verification pass brings every layer
    to n + 4 and its rows are the model's own; a crop rolls every layer back."""
    lm = tiny_hf_model(arch, vocab=16, seed=4, layers=3)
    target, draft = sd.lab.early_exit_pair(lm, 2)
    prompt = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    n = prompt.numel()
    cache = target.new_cache()
    target(prompt[None, :-1], cache)
    state = draft.start(prompt, cache)
    proposals, _ = draft.propose(state, prompt, n, 4, temperature=0.0, top_k=None, generator=None)
    assert _lengths(cache) == [n + 3, n + 3, n - 1] and cache.length == n - 1 and cache.low == n + 3
    block = torch.cat([prompt[-1:], proposals])
    rows = target(block[None], cache)
    want = lm(torch.cat([prompt, proposals])[None])[:, n - 1:]  # (1, 5, V): one uncached pass
    assert (rows - want).abs().max() < 1e-4
    assert _lengths(cache) == [n + 4] * 3 and cache.low == n + 4
    cache.crop(n + 1)
    assert _lengths(cache) == [n + 1] * 3 and cache.low == n + 1


def test_a_block_the_draft_did_not_propose_is_scored_exactly():
    """A kept slot is reused only while its token is the block's; the negative control reuses them all."""
    lm = tiny_hf_model("qwen2", vocab=16, seed=5, layers=3)
    prompt = torch.tensor([2, 7, 1, 8, 2, 8, 1, 8])
    n = prompt.numel()
    other = torch.tensor([0, 1, 2, 3])
    block = torch.cat([prompt[-1:], other])[None]
    want = lm(torch.cat([prompt, other])[None])[:, n - 1:]
    errors = {}
    for cls in (sd.lab.EarlyExitTarget, NoTokenCheck):
        target, draft = cls(lm, 2), sd.lab.early_exit_pair(lm, 2)[1]
        cache = target.new_cache()
        target(prompt[None, :-1], cache)
        proposals, _ = draft.propose(draft.start(prompt, cache), prompt, n, 4, temperature=0.0, top_k=None,
                                     generator=None)
        assert not torch.equal(proposals[:3], other[:3])  # the block really differs from what was kept
        errors[cls] = (target(block, cache) - want).abs().max().item()
    assert errors[sd.lab.EarlyExitTarget] < 1e-4
    assert errors[NoTokenCheck] > 1e-2


# V**HORIZON = 64 continuations; N = 2000 samples land within sd.tv_noise_bound(exact, N) (about 0.14 here) of the
# exact law, exceeded with probability < 1e-6 when the sampler is exact; the negative control's TV lies above it.
V, HORIZON, K, N = 4, 3, 2, 2000
PROMPT = torch.tensor([1, 2, 3, 1])


def _tv(cls, seed=0):
    torch.set_num_threads(1)
    lm = tiny_hf_model("qwen2", vocab=V, seed=6, layers=3)
    exact = exact_continuations(lm, PROMPT, HORIZON, temperature=1.0)
    target, draft = cls(lm, 1), sd.lab.early_exit_pair(lm, 1)[1]
    got = empirical(lambda g: generate_speculative(target, draft, PROMPT, HORIZON, K, decoding=Decoding(
        temperature=1.0, generator=g)), vocab=V, horizon=HORIZON, n=N, seed=seed)
    return sd.total_variation(got, exact), sd.tv_noise_bound(exact, N)


@pytest.mark.stat
def test_shared_cache_early_exit_samples_the_exact_target_distribution():
    tv, bound = _tv(sd.lab.EarlyExitTarget)
    assert tv < bound


@pytest.mark.stat
def test_reading_the_kept_states_one_slot_late_fails_the_same_test():
    tv, bound = _tv(OneSlotLate)
    assert tv > bound


def test_time_terms_and_measure_speedup_take_a_shared_cache_exit():
    lm = tiny_hf_model("qwen2", vocab=16, seed=7, layers=3)
    assert_measured_like_any_draft(*sd.lab.early_exit_pair(lm, 1), "exit@1", 16)


def test_bad_arguments_are_named():
    lm = tiny_hf_model("qwen2", vocab=16, seed=0, layers=3)
    with pytest.raises(ValueError, match="exit_layer must be below the model's 3 layers"):
        sd.lab.early_exit_pair(lm, 3)
    with pytest.raises(TypeError, match="or an HFCausalLM"):
        sd.lab.early_exit_pair(lm.model, 1)
    lm.config.layer_types = ["full_attention", "sliding_attention", "full_attention"]
    with pytest.raises(ValueError, match="lm must use full attention at every layer"):
        HFLayers(lm)


# --- the exit as a separate draft (early_exit_lm): its first L layers, its norm and head, a cache of its own -------
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_an_early_exit_reads_the_first_layers_through_the_norm_and_head_and_leaves_the_model_alone(arch):
    from specdec_lib.lab.hf_causal_lm import early_exit_lm

    lm = tiny_hf_model(arch, vocab=16, seed=3)
    x = torch.tensor([[1, 5, 2, 7, 3, 9]])
    before = lm(x)
    exit1 = early_exit_lm(lm, 1)
    with torch.no_grad():
        out = lm.model(input_ids=x, output_hidden_states=True)
        want = lm.model.lm_head(lm.model.model.norm(out.hidden_states[1])).float()  # after layer 1
    torch.testing.assert_close(exit1(x), want, rtol=0, atol=1e-5)
    assert (exit1(x) - before).abs().max() > 1e-2  # a different read, not the whole model
    torch.testing.assert_close(lm(x), before, rtol=0, atol=0)  # the model itself is untouched
    assert exit1.new_cache().kv is not None and lm.config.num_hidden_layers == 2
    prompt = torch.tensor([1, 2, 3, 1, 2, 3])
    out = sd.lab.generate_speculative(lm, sd.lab.NeuralDraft(exit1), prompt, 20, 3)
    assert torch.equal(out, generate_plain(lm, prompt, 20))
    with pytest.raises(ValueError, match="exit_layer must be below the model's 2 layers"):
        early_exit_lm(lm, 2)
    with pytest.raises(TypeError, match="lm must be an HFCausalLM"):
        early_exit_lm(lm.model, 1)


@pytest.mark.heavy
def test_the_real_target_benchmark_runs_on_a_tiny_model(tmp_path, capsys, monkeypatch):
    """benchmarks/measure_real_self.py --tiny: every run printed and written as the reader reads it, greedy exact."""
    import importlib.util
    import pathlib

    from specdec_lib.lab.recordings import load_recording

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "measure_real_self.py"
    monkeypatch.syspath_prepend(str(path.parent))  # its real_tasks sits beside it
    spec = importlib.util.spec_from_file_location("measure_real_self", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "runs.json"
    assert bench.main(["--tiny", "--n-new", "8", "--reps", "1", "--json", str(out)]) == 0
    rec = load_recording("measure-real-self", out)
    assert rec.tiny and rec.tasks == ["code", "edit"] and rec.n_new == 8
    assert [(r.cache, r.k) for r in rec.exits] == [("own", 4), ("shared", 1), ("shared", 4)] * 2
    assert all(r.equal_to_plain for r in rec.exits) and all(r.equal_to_plain for r in rec.lookahead)
    assert "lookahead W4 n3 G4" in capsys.readouterr().out
