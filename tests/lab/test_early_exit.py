"""Early exit: the target's first L layers draft through one shared cache, and the output is still the target's."""
import importlib.util
import pathlib

import pytest
import torch
from lab_law import assert_measured_like_any_draft, early_exit_bugs, empirical

import specdec_lib as sd
from specdec_lib.lab.early_exit import EarlyExitTarget, SharedCache, early_exit_pair
from specdec_lib.lab.generation import Decoding, exact_continuations, generate_plain, generate_speculative
from specdec_lib.lab.transformer import TinyCausalLM

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    return sd.lab.load_pair()[0]


def _prompt(n, vocab, seed=0):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


# --- greedy: token for token ----------------------------------------------------------------------------------
@pytest.mark.heavy
@pytest.mark.parametrize("verifier", ["token", "block"])
def test_speculative_greedy_equals_plain_greedy_at_every_exit_layer(trained, verifier):
    prompt = sd.lab.corpus_prompts(1, 48)[0]
    plain = generate_plain(trained, prompt, 64)
    for exit_layer in range(1, len(trained.blocks)):
        target, draft = early_exit_pair(trained, exit_layer)
        for k in (1, 2, 4, 6):
            out = generate_speculative(target, draft, prompt, 64, k, decoding=Decoding(verifier=verifier))
            assert torch.equal(out, plain), (exit_layer, k)


def test_the_shared_cache_after_a_round_holds_what_the_invariant_says(trained):
    """After each round: every layer holds the committed tokens but the last; no kept state lies beyond them."""
    target, draft = early_exit_pair(trained, 2)
    prompt = sd.lab.corpus_prompts(1, 32, seed=3)[0]
    cache = target.new_cache()
    trained_cache = trained.new_cache()
    target(prompt[None, :-1], cache)
    trained(prompt[None, :-1], trained_cache)
    state = draft.start(prompt, cache)
    assert state is cache and cache.length == cache.low == prompt.numel() - 1
    seq, n = prompt.clone(), prompt.numel()
    proposals, _ = draft.propose(state, seq, n, 4, temperature=0.0, top_k=None, generator=None)
    assert cache.length == n - 1 and cache.low == n - 1 + 4  # the last committed token and 3 proposals, lower only
    assert torch.equal(cache.tokens[n - 1:n + 3], torch.cat([seq[-1:], proposals[:3]]))
    rows = target(torch.cat([seq[-1:], proposals])[None], cache)  # verification
    want = trained(torch.cat([seq[-1:], proposals])[None], trained_cache)
    assert (rows - want).abs().max() < 1e-4  # float32 rounding of logits near 20: one pass vs one at a time
    assert cache.length == cache.low == n + 4
    cache.crop(n + 1)  # one proposal accepted
    assert cache.length == cache.low == n + 1


_NoTokenCheck, _OneSlotLate = early_exit_bugs()  # the negative controls (tests/lab_law.py)


def test_a_block_the_draft_did_not_propose_is_scored_exactly(trained):
    """Verification reuses a kept slot only while its token is the block's; the negative control reuses them all."""
    prompt = sd.lab.corpus_prompts(1, 32, seed=4)[0]
    n = prompt.numel()
    other = (prompt[-4:] + 1) % trained.vocab  # 4 tokens that are not the draft's proposals
    block = torch.cat([prompt[-1:], other])[None]
    want = trained(torch.cat([prompt, other])[None])[:, n - 1:]  # (1, 5, V): one uncached pass
    errors = {}
    for cls in (EarlyExitTarget, _NoTokenCheck):
        target, draft = cls(trained, 2), early_exit_pair(trained, 2)[1]
        cache = target.new_cache()
        target(prompt[None, :-1], cache)
        draft.propose(draft.start(prompt, cache), prompt, n, 4, temperature=0.0, top_k=None, generator=None)
        errors[cls] = (target(block, cache) - want).abs().max().item()
    assert errors[EarlyExitTarget] < 1e-4
    assert errors[_NoTokenCheck] > 1e-2


# --- the exact law, by teacher forcing ------------------------------------------------------------------------
# V**HORIZON = 64 continuations; N speculative samples must land within sd.tv_noise_bound(exact, N) of the target's
# exact law (exceeded with probability < 1e-6 when the sampler is exact). N = 2000 puts that bound at 0.14, below the
# TV of the negative control's bug (about 0.23 here; at N = 400 the bound, 0.32, would hide it).
V, HORIZON, K, N = 4, 3, 2, 2000
PROMPT = torch.tensor([1, 2, 3, 1])


def _tiny():
    return TinyCausalLM(vocab=V, n_layer=3, seed=5)


def _empirical(target, draft, verifier, n=N, seed=0):
    return empirical(lambda g: generate_speculative(target, draft, PROMPT, HORIZON, K, decoding=Decoding(
        temperature=1.0, generator=g, verifier=verifier)), vocab=V, horizon=HORIZON, n=n, seed=seed)


@pytest.mark.stat
@pytest.mark.parametrize("exit_layer, verifier", [(1, "token"), (2, "block")])
def test_early_exit_samples_the_exact_target_distribution(exit_layer, verifier):
    torch.set_num_threads(1)
    model = _tiny()
    exact = exact_continuations(model, PROMPT, HORIZON, temperature=1.0)  # (V^h,)
    got = _empirical(*early_exit_pair(model, exit_layer), verifier)
    assert sd.total_variation(got, exact) < sd.tv_noise_bound(exact, N)


@pytest.mark.stat
def test_reading_the_kept_states_one_slot_late_fails_the_same_test():
    """Negative control: the same samples, verification reusing each kept state at the wrong slot."""
    torch.set_num_threads(1)
    model = _tiny()
    exact = exact_continuations(model, PROMPT, HORIZON, temperature=1.0)
    got = _empirical(_OneSlotLate(model, 1), early_exit_pair(model, 1)[1], "token")
    assert sd.total_variation(got, exact) > sd.tv_noise_bound(exact, N)


# --- measured like every other draft ---------------------------------------------------------------------------
def test_time_terms_and_measure_speedup_take_an_early_exit():
    """The clock's phases run on the shared cache and leave it where a round starts; greedy pairs stay exact."""
    assert_measured_like_any_draft(*early_exit_pair(TinyCausalLM(vocab=8, n_layer=3, seed=1), 1), "exit@1", 8)


@pytest.mark.heavy
def test_make_measure_runs_an_early_exit(capsys):
    """benchmarks/measure_speedup.py --drafts exit2: one table, the target's first 2 layers as its draft."""
    spec = importlib.util.spec_from_file_location("measure_speedup", ROOT / "benchmarks" / "measure_speedup.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--drafts", "exit2", "--repeats", "1", "--prompts", "1", "--n-new", "4", "--ks", "1,2",
                       "--batches", "1", "--batch-reps", "1", "--reps", "1", "--block-drafts", "exit2"]) == 0
    out = capsys.readouterr().out
    assert "draft exit2 (the target's first 2 layers, one shared cache)" in out
    assert "block verification, exit@2 (token rule -> block)" in out


# --- bad input --------------------------------------------------------------------------------------------------
def test_bad_arguments_are_named():
    model = _tiny()
    with pytest.raises(ValueError, match="exit_layer must be below"):
        early_exit_pair(model, 3)
    with pytest.raises(ValueError, match="exit_layer"):
        early_exit_pair(model, 0)
    with pytest.raises(TypeError, match="model must be a CachedLM"):
        early_exit_pair(object(), 1)
    target, draft = early_exit_pair(model, 1)
    with pytest.raises(TypeError, match="target_cache must be the SharedCache"):
        draft.start(PROMPT, model.new_cache())
    with pytest.raises(TypeError, match="target_cache must be the SharedCache"):
        draft.start(PROMPT, early_exit_pair(model, 2)[0].new_cache())
    with pytest.raises(TypeError, match="cache must be a SharedCache"):
        target(PROMPT[None], model.new_cache())
    with pytest.raises(ValueError, match="batch must be 1"):
        target.new_cache(2)
    assert isinstance(target.new_cache(), SharedCache)


# --- the early-exit fine-tune (make models: target_ee) --------------------------------------------------------
def _exit_nats(model, prompts):
    """Held-out nats per byte at each exit (layer 1 .. last), over every next-byte prediction in prompts."""
    x = torch.stack(prompts)  # (B, T)
    with torch.no_grad():
        return [torch.nn.functional.cross_entropy(z[:, :-1].flatten(0, 1), x[:, 1:].flatten()).item()
                for z in sd.lab.exit_logits(model, x)]


def test_exit_logits_end_with_the_model_and_read_each_layer_through_the_head():
    model = TinyCausalLM(vocab=11, n_layer=3, seed=2)
    x = _prompt(9, 11)[None]  # (1, 9)
    rows = sd.lab.exit_logits(model, x)
    assert len(rows) == 3 and all(r.shape == (1, 9, 11) for r in rows)
    torch.testing.assert_close(rows[-1], model(x), rtol=0, atol=1e-5)
    target, draft = early_exit_pair(model, 1)
    cache = target.new_cache()
    target(x[:, :-1], cache)
    state = draft.start(x[0], cache)
    with torch.no_grad():
        _, q = draft.propose(state, x[0], 9, 1, temperature=1.0, top_k=None, generator=torch.Generator())
    torch.testing.assert_close(q[0], torch.softmax(rows[0][0, -1], -1), rtol=0, atol=1e-5)  # exit 1 = draft 1
    assert (rows[0] - rows[-1]).abs().max() > 0.1  # a different read, not the last layer twice


def test_the_fine_tuned_target_drafts_better_at_every_exit_for_a_small_cost_in_its_own_quality(trained):
    """make models' target_ee: measured held-out (tools/train_models.py) exit 1 2.161 -> 1.788 nats/byte,
    the last layer 1.333 -> 1.379. On these 8 x 128 held-out bytes the gaps hold with a wide margin."""
    tuned = sd.lab.load_target("target_ee")
    assert tuned.config == trained.config and not tuned.training
    assert torch.equal(sd.lab.load_target("target").head.weight, trained.head.weight)
    prompts = sd.lab.corpus_prompts(8, 128, seed=11)
    before, after = _exit_nats(trained, prompts), _exit_nats(tuned, prompts)
    assert all(a < b - 0.05 for a, b in zip(after[:-1], before[:-1])), (before, after)
    assert before[-1] < after[-1] < before[-1] + 0.2, (before, after)  # it costs the target a little
    with pytest.raises(ValueError, match="name must be one of 'target', 'target_ee'"):
        sd.lab.load_target("draft")


@pytest.mark.heavy
def test_make_models_fine_tunes_the_committed_target_when_asked_for_target_ee_alone(capsys):
    """tools/train_models.py --models target_ee at 1 step: the fine-tune runs, reports every exit, writes nothing."""
    spec = importlib.util.spec_from_file_location("train_models", ROOT / "tools" / "train_models.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    before = {f.name: f.stat().st_mtime_ns for f in sd.lab.weights.WEIGHTS_DIR.glob("*.pt")}
    assert train.main(["--steps-scale", "0.001", "--models", "target_ee"]) == 0
    out = capsys.readouterr().out
    assert all(f"exit after layer {layer}: held-out" in out for layer in range(1, 5))
    assert "the target's own (last-layer) quality 1.333 ->" in out  # the committed target's, as measured
    assert {f.name: f.stat().st_mtime_ns for f in sd.lab.weights.WEIGHTS_DIR.glob("*.pt")} == before
    with pytest.raises(SystemExit):
        train.main(["--models", "target_ee,nope"])


def test_the_kept_states_grow_past_their_first_buffer_and_keep_what_was_written():
    """A long context (the real target's prompts are 324 tokens) grows the kept buffers; earlier slots survive."""
    kv = TinyCausalLM(vocab=8, n_layer=2, seed=0, max_len=1024).new_cache()
    cache = SharedCache(kv, 1, 4, max_len=1024)
    first = cache.hidden.shape[0]
    cache.record(3, torch.tensor([5]), torch.ones(1, 4))
    cache.record(first + 10, torch.tensor([1, 2]), torch.full((2, 4), 2.0))  # past the first buffer
    assert cache.hidden.shape[0] > first + 11 and cache.low == first + 12
    assert cache.tokens[3] == 5 and torch.equal(cache.hidden[3], torch.ones(4))
    assert cache.tokens[first + 10:first + 12].tolist() == [1, 2] and cache.hidden[first + 11].eq(2).all()


def test_every_cache_follows_the_rollback_protocol_with_one_meaning_per_name():
    """keep(start, slots) moves a tree's accepted path in every cache that has it; SharedCache records its kept
    states under another name, so keep never means two things."""
    from specdec_lib.lab.features import FeatureCache
    from specdec_lib.lab.hf_causal_lm import HFCache
    from specdec_lib.lab.transformer import RollbackCache
    model = TinyCausalLM(vocab=8, n_layer=2, seed=0, max_len=32)
    kv = model.new_cache()
    hf = sd.lab.tiny_hf_model("qwen2", seed=0).new_cache()
    assert isinstance(hf, HFCache)
    for cache in (kv, FeatureCache(model), hf):
        assert isinstance(cache, RollbackCache)
    shared = SharedCache(kv, 1, 4, max_len=32)
    assert not hasattr(shared, "keep") and not isinstance(shared, RollbackCache) and callable(shared.record)
    # keep's one meaning, on the lab's cache: slots 5 and 7 after the first 4 positions move down to 4 and 5
    model(torch.arange(8)[None], kv)  # 8 positions cached
    before = kv.k[:, :, :, [5, 7]].clone()
    kv.keep(4, torch.tensor([5, 7]))
    assert kv.length == 6 and torch.equal(kv.k[:, :, :, 4:6], before)
