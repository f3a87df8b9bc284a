"""The Hugging Face adapter: tiny random Qwen2 and Llama models (no download) through the lab's own loop, exact."""
import pytest
import torch

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding, exact_continuations, generate_plain, generate_speculative
from specdec_lib.lab.hf_causal_lm import ARCHES, HFCache, HFCausalLM, set_matmul, tiny_hf_model
from specdec_lib.lab.ngram import build_sparse_ngram

BIG_V = 300  # above 256: the one-hot drafts keep their state as a list of ints, as for a real tokenizer


@pytest.fixture(scope="module", params=ARCHES)
def big(request):
    torch.set_num_threads(1)
    return tiny_hf_model(request.param, vocab=BIG_V, seed=0), tiny_hf_model(request.param, vocab=BIG_V, seed=1)


def _prompt(n, vocab, seed=0):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


def _drafts(draft, vocab):
    text = _prompt(400, vocab, seed=9)
    return {"model": sd.lab.NeuralDraft(draft), "lookup": sd.lab.PromptLookupDraft(vocab, m=3),
            "table": sd.lab.TableDraft(build_sparse_ngram(text, vocab, 3))}


def test_interface_and_cache_crop(big):
    target, _ = big
    assert target.vocab == BIG_V and target.max_len == 256 and target.n_params() > 0
    seq = _prompt(20, BIG_V)
    full = target(seq[None])  # (1, 20, V), no cache
    cache = target.new_cache()
    target(seq[None, :12], cache)
    target(_prompt(5, BIG_V, seed=3)[None], cache)  # 5 proposals that verification rejects
    assert cache.length == 17
    cache.crop(12)
    again = target(seq[None, 12:], cache)  # (1, 8, V): what follows the kept 12 positions
    assert cache.length == 20
    assert torch.allclose(again, full[:, 12:], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="n must lie"):
        cache.crop(21)
    with pytest.raises(TypeError, match="transformers causal LM"):
        HFCausalLM(torch.nn.Linear(2, 2))
    assert isinstance(cache, HFCache)


@pytest.mark.parametrize("kind", ["model", "lookup", "table"])
@pytest.mark.parametrize("verifier", ["token", "block"])
def test_speculative_greedy_equals_plain_greedy(big, kind, verifier):
    target, draft = big
    drafter = _drafts(draft, BIG_V)[kind]
    for seed, k in [(0, 1), (1, 3), (2, 5)]:
        prompt = torch.cat([_prompt(8, BIG_V, seed), _prompt(8, BIG_V, seed)])  # a repeat, so lookup has matches
        plain = generate_plain(target, prompt, 24)
        spec = generate_speculative(target, drafter, prompt, 24, k, decoding=Decoding(verifier=verifier))
        assert torch.equal(spec, plain), (kind, k)


@pytest.mark.parametrize("widths", [(3, 2, 1), (2, 2)])
def test_a_draft_tree_in_one_pass_equals_each_root_path(big, widths):
    """Tree verification's pass (ancestor mask, depth positions) through transformers' 4-D mask, and the wrong ones."""
    target, _ = big
    prefix = _prompt(10, BIG_V)
    n = sum(torch.tensor(widths).cumprod(0).tolist())
    tree = sd.lab.tree_from_widths(widths, _prompt(n, BIG_V, seed=5))
    assert sd.lab.tree_alignment_report(target, prefix, tree).aligned
    for wrong in ({"mask": "causal"}, {"positions": "flat"}):  # negative controls: the field's two tree bugs
        report = sd.lab.tree_alignment_report(target, prefix, tree, **wrong)
        assert not report.aligned and report.max_tv > 1e-3


def test_onednn_matmul_path_agrees_and_checks():
    torch.set_num_threads(1)
    base, fast = tiny_hf_model("qwen2", vocab=BIG_V), set_matmul(tiny_hf_model("qwen2", vocab=BIG_V), "onednn")
    draft = tiny_hf_model("qwen2", vocab=BIG_V, seed=1)
    seq = _prompt(30, BIG_V)
    diff = (fast(seq[None]) - base(seq[None])).abs().max().item()
    assert 0 <= diff < 1e-4  # float32 rounding: another kernel, not another model
    assert any(type(m).__name__ == "MkldnnLinear" for m in fast.model.modules())
    plain = generate_plain(fast, seq[:10], 20)
    assert torch.equal(generate_speculative(fast, draft, seq[:10], 20, 4), plain)
    with pytest.raises(ValueError, match="default.*onednn"):
        set_matmul(base, "mkl")
    with pytest.raises(ValueError, match="float32"):
        set_matmul(tiny_hf_model("llama", vocab=8, dtype=torch.bfloat16), "onednn")


def test_tiny_models_are_seeded_without_touching_the_global_generator():
    state = torch.random.get_rng_state()
    a, b = tiny_hf_model("llama", vocab=16, seed=4), tiny_hf_model("llama", vocab=16, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    seq = _prompt(6, 16)[None]
    assert torch.equal(a(seq), b(seq))
    assert not torch.equal(a(seq), tiny_hf_model("llama", vocab=16, seed=5)(seq))
    with pytest.raises(ValueError, match="qwen2"):
        tiny_hf_model("gpt2")


def test_sparse_table_is_the_dense_table_and_lookup_reads_lists_as_bytes():
    g = torch.Generator().manual_seed(0)
    for n in (40, 3000):  # 40 tokens leave most 2-token contexts unseen: both back off the same way
        data = torch.randint(0, 7, (n,), generator=g)
        dense, sparse = sd.lab.build_ngram(data, 7, 3), build_sparse_ngram(data, 7, 3)
        for _ in range(200):
            ctx = torch.randint(0, 7, (int(torch.randint(0, 5, (1,), generator=g)),), generator=g).tolist()
            assert dense.next_token(ctx) == sparse.next_token(ctx)
    for _ in range(300):
        text = torch.randint(0, 5, (int(torch.randint(2, 40, (1,), generator=g)),), generator=g).tolist()
        as_bytes = sd.lab.PromptLookupDraft(256, m=3).next_tokens(bytearray(text), 5)
        assert sd.lab.PromptLookupDraft(BIG_V, m=3).next_tokens(list(text), 5) == as_bytes
    with pytest.raises(ValueError, match="overflow"):
        build_sparse_ngram(torch.zeros(10, dtype=torch.long), 151936, 4)


# --- the exact law, by teacher forcing ------------------------------------------------------------------------
# V**HORIZON = 64 continuations; the target's exact law comes from exact_continuations (one uncached pass), and N
# speculative samples must land within sd.tv_noise_bound(exact, N) of it (exceeded with probability < 1e-6).
V, HORIZON, K, N = 4, 3, 2, 400
PROMPT = torch.tensor([1, 2, 3, 1])


def _empirical(target, drafter, verifier, n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = V ** torch.arange(HORIZON - 1, -1, -1)  # (h,) first token most significant
    decoding = Decoding(temperature=1.0, generator=g, verifier=verifier)
    codes = [int((generate_speculative(target, drafter, PROMPT, HORIZON, K, decoding=decoding) * base).sum())
             for _ in range(n)]
    return torch.bincount(torch.tensor(codes), minlength=V ** HORIZON).double() / n  # (V^h,)


class _NoCrop(HFCache):
    def crop(self, n):  # keeps rejected proposals: the target then reads a history that never happened
        pass


class _NoRollback(HFCausalLM):
    def new_cache(self):
        cache = super().new_cache()
        cache.__class__ = _NoCrop
        return cache


@pytest.mark.stat
@pytest.mark.parametrize("arch, kind, verifier", [("qwen2", "model", "token"), ("qwen2", "model", "block"),
                                                  ("qwen2", "lookup", "token"), ("llama", "model", "token")])
def test_speculative_samples_the_exact_target_distribution(arch, kind, verifier):
    torch.set_num_threads(1)
    target, draft = tiny_hf_model(arch, vocab=V, seed=2), tiny_hf_model(arch, vocab=V, seed=3)
    exact = exact_continuations(target, PROMPT, HORIZON, temperature=1.0)  # (V^h,)
    assert abs(exact.sum().item() - 1) < 1e-9
    drafter = _drafts(draft, V)[kind]
    assert sd.total_variation(_empirical(target, drafter, verifier), exact) < sd.tv_noise_bound(exact, N)


@pytest.mark.stat
def test_a_cache_that_never_rolls_back_fails_the_same_test():
    """Negative control: the same samples from a target whose KV cache ignores crop (rejected proposals stay)."""
    torch.set_num_threads(1)
    target, draft = tiny_hf_model("qwen2", vocab=V, seed=2), tiny_hf_model("qwen2", vocab=V, seed=3)
    exact = exact_continuations(target, PROMPT, HORIZON, temperature=1.0)
    broken = _NoRollback(target.model, name="broken")
    got = _empirical(broken, sd.lab.NeuralDraft(draft), "token")
    assert sd.total_variation(got, exact) > sd.tv_noise_bound(exact, N)
