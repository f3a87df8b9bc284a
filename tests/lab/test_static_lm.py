"""StaticLM, the static-cache decoder whose passes CUDA captures as graphs, run on the CPU uncaptured ("off") and
through the capture path's bookkeeping ("replay"): held against HFCausalLM's DynamicCache path and CachedLM's own
forward pass by pass (float32 logits within 1e-4: the same weights, another order of summation) and decoder by decoder
(greedy output equal)."""
import pytest
import torch

import specdec_lib as sd
from specdec_lib.lab import static_lm
from specdec_lib.lab.generation import generate_plain, generate_speculative
from specdec_lib.lab.hf_causal_lm import tiny_hf_model
from specdec_lib.lab.lookahead import LookaheadDraft
from specdec_lib.lab.static_lm import StaticLM
from specdec_lib.lab.transformer import TinyCausalLM
from specdec_lib.lab.tree_attention import tree_from_widths, tree_layout
from specdec_lib.lab.tree_decoding import generate_tree

pytest.importorskip("transformers")
TOL = 1e-4  # float32 logits of order 10 (weights N(0, 0.3^2)); the two paths differ by ~3e-6 here
MODES = ("off", "replay")
PROMPT = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2, 5, 6])


def _ids(n, vocab=64, seed=0):
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def _close(a, b):
    return (a - b).abs().max().item() < TOL


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_its_passes_match_the_dynamic_cache_through_prefill_steps_rollback_and_a_kept_tree_path(arch, mode):
    lm = tiny_hf_model(arch, vocab=64, seed=1, layers=2)
    st = StaticLM(lm, max_len=64, graphs=mode)
    ids = _ids(14)
    dyn, sta = lm.new_cache(), st.new_cache()
    assert _close(lm(ids[:, :7], dyn), st(ids[:, :7], sta))  # prefill
    for t in range(7, 11):  # one position at a time
        assert _close(lm(ids[:, t:t + 1], dyn), st(ids[:, t:t + 1], sta))
    assert _close(lm(ids[:, 11:14], dyn), st(ids[:, 11:14], sta))  # a verification pass
    dyn.crop(9)
    sta.crop(9)  # a rejected draft: the static buffers keep its keys, the bias hides them
    assert sta.length == 9 and _close(lm(ids[:, 3:7], dyn), st(ids[:, 3:7], sta))
    tree = tree_from_widths((2, 2), torch.tensor([5, 6, 7, 8, 9, 10]))
    positions, mask = tree_layout(tree, 14)
    tokens = torch.cat([ids[0, -1:], tree.tokens])[None]  # (1, 7): the prefix's last token, then the tree
    assert _close(lm(tokens, dyn, positions=positions, mask=mask), st(tokens, sta, positions=positions, mask=mask))
    path = torch.tensor([14, 17])  # root's second child (node 1 at slot 13 + 1 + 1), its first child (node 3)
    dyn.keep(14, path)
    sta.keep(14, path)
    assert sta.length == dyn.length == 16
    assert _close(lm(ids[:, :2], dyn), st(ids[:, :2], sta))  # the next pass reads the kept path
    assert _close(lm(ids), st(ids))  # no cache: a scratch one


@pytest.mark.parametrize("mode", MODES)
def test_every_decoder_on_it_gives_plain_greedy_output(mode):
    lm = tiny_hf_model("qwen2", vocab=16, seed=1, layers=3)
    draft = tiny_hf_model("llama", vocab=16, seed=2, layers=1)
    target = StaticLM(lm, max_len=96, graphs=mode)
    plain = generate_plain(lm, PROMPT, 30)
    assert torch.equal(generate_plain(target, PROMPT, 30), plain)
    drafters = {"model draft": StaticLM(draft, max_len=96, graphs=mode),
                "the target's first layer": StaticLM(lm, max_len=96, layers=1, graphs=mode),
                "lookup": sd.lab.PromptLookupDraft(16, m=2)}
    for name, drafter in drafters.items():
        assert torch.equal(generate_speculative(target, drafter, PROMPT, 30, 3), plain), name
    lookahead = generate_tree(target, LookaheadDraft(16, window=3, ngram=3, guesses=2), PROMPT, 30, None,
                              rule="onehot_sequential")
    assert torch.equal(lookahead, plain)
    if mode == "replay":  # each (B, T) seen below max_captured ran through the capture path
        assert (1, 1) in target._captured and (1, 4) in target._captured


@pytest.mark.parametrize("mode", MODES)
def test_the_byte_pair_runs_on_it_too(mode):
    """CachedLM (the course's own model, learned positions, one KV head per head): passes and decoders."""
    target, draft = sd.lab.load_pair("cpu")
    st = StaticLM(target, max_len=target.max_len, graphs=mode)
    prompt = sd.lab.corpus_prompts(1, 24, seed=3)[0]
    own, static = target.new_cache(), st.new_cache()
    assert _close(target(prompt[None, :20], own), st(prompt[None, :20], static))
    assert _close(target(prompt[None, 20:], own), st(prompt[None, 20:], static))
    plain = generate_plain(target, prompt, 40)
    for drafter in (StaticLM(draft, max_len=draft.max_len, graphs=mode),
                    StaticLM(target, max_len=target.max_len, layers=2, graphs=mode)):
        assert torch.equal(generate_speculative(st, drafter, prompt, 40, 4), plain), drafter.name
    assert torch.equal(generate_tree(st, LookaheadDraft(256), prompt, 40, None, rule="onehot_sequential"), plain)
    assert st.n_params() == sd.lab.n_params(target) > StaticLM(target, max_len=64, layers=2).n_params()
    tiny = TinyCausalLM(vocab=12, n_layer=2, seed=0)  # a mask's tree pass on a CachedLM, against its own forward
    tree = tree_from_widths((2, 1), torch.tensor([3, 4, 5, 6]))
    positions, mask = tree_layout(tree, 6)
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    st_tiny = StaticLM(tiny, max_len=64, graphs=mode)
    own, static = tiny.new_cache(), st_tiny.new_cache()
    tiny(tokens[:, :5], own)
    st_tiny(tokens[:, :5], static)
    tree_ids = torch.cat([tokens[0, 5:6], tree.tokens])[None]
    assert _close(tiny(tree_ids, own, positions=positions, mask=mask),
                  st_tiny(tree_ids, static, positions=positions, mask=mask))


def _two_passes_held(st):
    """Two passes of one shape, the first's logits held while the second runs: both as the eager path gives them."""
    ids = _ids(12)
    cache = st.new_cache()
    st(ids[:, :4], cache)
    first = st(ids[:, 4:6], cache)
    second = st(ids[:, 6:8], cache)
    ref = StaticLM(st.model, max_len=st.max_len, graphs="off")
    rc = ref.new_cache()
    ref(ids[:, :4], rc)
    return _close(first, ref(ids[:, 4:6], rc)) and _close(second, ref(ids[:, 6:8], rc))


def test_replay_hands_back_each_pass_its_own_logits_and_reads_each_calls_inputs(monkeypatch):
    st = StaticLM(tiny_hf_model("llama", vocab=64, seed=3), max_len=32, graphs="replay")
    assert _two_passes_held(st)
    # negative controls: the capture path's two classic mistakes must fail the same check
    monkeypatch.setattr(static_lm._Graph, "__call__", _no_clone)
    assert not _two_passes_held(StaticLM(st.model, max_len=32, graphs="replay"))
    monkeypatch.setattr(static_lm._Graph, "__call__", _no_copy_in)
    assert not _two_passes_held(StaticLM(st.model, max_len=32, graphs="replay"))


def _no_clone(self, *inputs):
    for static, x in zip(self.inputs, inputs):
        static.copy_(x)
    self.out.copy_(self.run(*self.inputs))
    return self.out  # the next replay overwrites it


def _no_copy_in(self, *inputs):
    self.out.copy_(self.run(*self.inputs))  # replays the first call's inputs
    return self.out.clone()


def test_a_draft_by_depth_is_the_targets_first_layers_then_its_norm_and_head():
    lm = tiny_hf_model("qwen2", vocab=16, seed=1, layers=3)
    one = StaticLM(lm, max_len=32, layers=1)
    assert one.name == "tiny-qwen2@1" and one.n_params() < StaticLM(lm, max_len=32).n_params() == lm.n_params()
    exit_lm = sd.lab.hf_causal_lm.early_exit_lm(lm, 1)  # the same cut through transformers' own forward
    assert _close(one(PROMPT[None]), exit_lm(PROMPT[None]))


def test_one_live_cache_per_batch_size_and_bad_input_raise():
    lm = tiny_hf_model("qwen2", vocab=16, seed=1)
    st = StaticLM(lm, max_len=16)
    old, new = st.new_cache(), st.new_cache()
    with pytest.raises(ValueError, match="latest new_cache"):
        st(PROMPT[None, :2], old)
    st(PROMPT[None, :2], new)
    assert st.new_cache(batch=2).k.shape[1] == 2 and new.length == 2  # another batch size, other buffers
    with pytest.raises(ValueError, match="exceed max_len = 16"):
        st(torch.zeros(1, 15, dtype=torch.long), new)
    with pytest.raises(TypeError, match="ids must be a LongTensor"):
        st(PROMPT[None].int(), new)
    with pytest.raises(ValueError, match="'auto', 'cuda', 'replay', 'off'"):
        StaticLM(lm, max_len=16, graphs="always")
    with pytest.raises(ValueError, match="needs the model on a CUDA device"):
        StaticLM(lm, max_len=16, graphs="cuda")
    with pytest.raises(ValueError, match=r"layers must lie in \[1, 2\]"):
        StaticLM(lm, max_len=16, layers=3)
    with pytest.raises(ValueError, match="must not exceed the model's 256 positions"):
        StaticLM(lm, max_len=512)
    with pytest.raises(TypeError, match="model must be an HFCausalLM or a CachedLM"):
        StaticLM(lm.model, max_len=16)
