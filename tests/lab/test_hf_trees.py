"""Tree decoding on a transformers model (HFCausalLM): the accepted path kept in its DynamicCache as a chain pass
writes it, lookahead's greedy output equal to plain decoding, and its law under a one-hot rule the target's."""
import pytest
import torch
from lab_law import empirical, primed_lookahead

import specdec_lib as sd
from specdec_lib.lab.generation import Decoding, exact_continuations, generate_plain
from specdec_lib.lab.hf_causal_lm import tiny_hf_model
from specdec_lib.lab.lookahead import LookaheadDraft
from specdec_lib.lab.steps import GREEDY, prefill
from specdec_lib.lab.tree_attention import tree_from_widths
from specdec_lib.lab.tree_decoding import DraftTree, generate_tree, tree_round

pytest.importorskip("transformers")


def _layers(cache, n):
    return [(layer.keys[..., :n, :], layer.values[..., :n, :]) for layer in cache.kv.layers]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_after_a_tree_round_the_dynamic_cache_holds_the_path_as_a_chain_pass_would(arch):
    lm = tiny_hf_model(arch, vocab=16, seed=0)
    prompt = torch.tensor([1, 5, 2, 7, 3])
    n = prompt.numel()
    top = int(lm(prompt[None])[0, -1].argmax())
    nxt = int(lm(torch.cat([prompt, torch.tensor([top])])[None])[0, -1].argmax())
    tokens = torch.tensor([(top + 1) % 16, (top + 2) % 16, top, (nxt + 1) % 16, (nxt + 2) % 16, nxt])
    draft = DraftTree(tree_from_widths((3, 1), tokens), None)  # greedy: the argmax path is nodes 2, 5
    chain = lm.new_cache()
    lm(torch.cat([prompt, torch.tensor([top, nxt])])[None], chain)
    cache = prefill(lm, prompt)
    path, _, _ = tree_round(lm, cache, draft, prompt[-1:], n=n, decoding=GREEDY, verifier=None)
    assert path.tolist() == [top, nxt] and cache.length == n + 2
    got, want = _layers(cache, n + 2), _layers(chain, n + 2)
    assert max((a - b).abs().max().item() for pg, pw in zip(got, want) for a, b in zip(pg, pw)) < 1e-5
    left = prefill(lm, prompt)  # negative control: keep the tree's first slots where they are (crop, no move)
    left.keep = lambda start, slots: left.crop(start + slots.numel())
    tree_round(lm, left, draft, prompt[-1:], n=n, decoding=GREEDY, verifier=None)
    assert max((a - b).abs().max().item() for pg, pw in zip(_layers(left, n + 2), want) for a, b in zip(pg, pw)) > 1e-2


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_lookahead_on_a_transformers_model_equals_plain_greedy(arch):
    lm = tiny_hf_model(arch, vocab=8, seed=1)
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    plain = generate_plain(lm, prompt, 24)
    for W, N, G in [(2, 3, 2), (4, 4, 4)]:
        out = generate_tree(lm, LookaheadDraft(8, window=W, ngram=N, guesses=G), prompt, 24, rule="onehot_sequential")
        assert torch.equal(out, plain), (arch, W, N, G)


_Primed = primed_lookahead()  # full levels and seeded guesses from the start (tests/lab_law.py)


@pytest.mark.stat
def test_lookahead_on_a_transformers_model_samples_the_exact_law():
    """V**3 = 64 continuations, N = 2000 decodes: within sd.tv_noise_bound (0.13 here; exceeded with probability
    < 1e-6 when exact)."""
    torch.set_num_threads(1)
    lm, prompt = tiny_hf_model("qwen2", vocab=4, seed=2), torch.tensor([1, 2, 3, 1])
    exact = exact_continuations(lm, prompt, 3, temperature=1.0)
    got = empirical(lambda g: generate_tree(lm, _Primed(4, window=3, ngram=3, guesses=3), prompt, 3,
                                            rule="onehot_sequential", decoding=Decoding(temperature=1.0, generator=g)),
                    vocab=4, horizon=3, n=2000, seed=1)
    assert sd.total_variation(got, exact) < sd.tv_noise_bound(exact, 2000)
