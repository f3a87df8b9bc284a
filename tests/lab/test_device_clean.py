"""The lab builds every tensor on its inputs' device: a tensor made on the CPU inside a decoder breaks it on a GPU
("expected self and mask to be on the same device"). Two checks run that on the CPU.

1. Model and inputs on the `meta` device: a transformers model's passes as the lab drives them (a draft tree with
   its positions and ancestor mask, the early exit's layer ranges with an explicit causal mask, the lower layers'
   kept states, a tree path kept in a DynamicCache). Any CPU tensor that meets them raises. What reads values
   (`.item()`, `.tolist()`, an argmax walked on the host, the token-id checks) cannot run on meta, so a whole decode
   cannot: the second check covers those.
2. Model and inputs on the CPU, torch's default device `meta`: every tensor made without a device lands on meta and
   meets a CPU one, so each lab decoder runs end to end, greedy and sampled, and a device-less factory call anywhere
   on its path (library or transformers) raises. Greedy output is also held to plain decoding, so the run is a decode.
"""
import pytest
import torch

import specdec_lib as sd
from specdec_lib.lab.eagle import EagleDraft, eagle_config, eagle_pair
from specdec_lib.lab.early_exit import EarlyExitTarget, _lower
from specdec_lib.lab.features import FeatureTarget
from specdec_lib.lab.generation import Decoding, exact_continuations, generate_plain, generate_speculative
from specdec_lib.lab.hf_causal_lm import early_exit_lm, tiny_hf_model
from specdec_lib.lab.lookahead import LookaheadDraft
from specdec_lib.lab.medusa import MedusaHeads, medusa_pair
from specdec_lib.lab.ngram import build_ngram, build_sparse_ngram
from specdec_lib.lab.static_lm import StaticLM
from specdec_lib.lab.transformer import TinyCausalLM
from specdec_lib.lab.tree_attention import tree_from_widths, tree_layout
from specdec_lib.lab.tree_decoding import generate_tree

pytest.importorskip("transformers")
META = torch.device("meta")


def _on_meta(arch, layers=2):
    lm = tiny_hf_model(arch, vocab=16, seed=0, layers=layers)
    lm.model.to(META)
    return lm


# --- 1. a transformers model on meta: the passes with masks -----------------------------------------------------------
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_a_draft_tree_pass_and_keeping_its_path_run_on_the_models_device(arch):
    """Fails on a mask bias built on the CPU (hf_causal_lm._bias before issue 39)."""
    lm = _on_meta(arch)
    prompt = torch.tensor([1, 5, 2, 7, 3], device=META)
    cache = lm.new_cache()
    lm(prompt[None, :-1], cache)
    tree = tree_from_widths((2, 2), torch.tensor([1, 2, 3, 4, 5, 6]))
    positions, mask = (x.to(META) for x in tree_layout(tree, 5))
    logits = lm(torch.cat([prompt[-1:], tree.tokens.to(META)])[None], cache, positions=positions, mask=mask)
    assert logits.device == META and logits.shape == (1, 7, 16) and cache.length == 4 + 7
    cache.keep(5, torch.tensor([6, 9]))  # root's second child, its first child (slots n + node)
    assert cache.length == 7 and cache.kv.layers[0].keys.device == META


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_the_early_exit_layer_passes_run_on_the_models_device(arch):
    """The shared cache's draft (layers below the exit, states kept) and verification (the rest, from the kept
    states): layer ranges after cached positions, each with an explicit causal mask."""
    lm = _on_meta(arch, layers=3)
    target, _ = sd.lab.early_exit_pair(lm, 2)
    cache = target.new_cache()
    assert cache.hidden.device == META and cache.tokens.device == META
    layers = target.layers
    prompt = torch.tensor([3, 1, 4, 1, 5, 9], device=META)
    layers.full(prompt[None, :-1], cache.kv)  # the prefill: the model's own pass
    h = _lower(layers, cache, prompt[None, -1:], 5)  # one draft step: one position after 5
    h = torch.cat([h, _lower(layers, cache, torch.tensor([[2, 6, 5]], device=META), 6)], dim=1)  # three after 6
    x = layers.run(h, cache.kv, 5, range(2, 3))  # verification's upper layer over the kept states
    logits = layers.head(x)
    assert logits.device == META and logits.shape == (1, 4, 16) and cache.low == 9


# --- 2. everything on the CPU, the default device meta: every decoder end to end ------------------------------------
V, PROMPT, N_NEW = 8, torch.tensor([1, 2, 3, 1, 2, 3, 1, 2]), 8


def _lab_model():
    return TinyCausalLM(vocab=V, n_layer=2, seed=5)


def _heads(model):
    heads = MedusaHeads(model, 3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in heads.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    return heads


def _chains():
    """(name, target, drafter, k): every chain decoder of the lab on a lab model and a transformers one."""
    lab, hf = _lab_model(), tiny_hf_model("qwen2", vocab=V, seed=1, layers=3)
    table = build_ngram(PROMPT.repeat(4), V, order=3)
    return [("model draft", lab, TinyCausalLM(vocab=V, n_layer=1, seed=6), 3),
            ("table", lab, sd.lab.TableDraft(table), 3),
            ("lookup", hf, sd.lab.PromptLookupDraft(V), 3),
            ("hf model draft", hf, tiny_hf_model("llama", vocab=V, seed=2), 3),
            ("early exit, shared cache", *sd.lab.early_exit_pair(lab, 1), 3),
            ("hf early exit, shared cache", *sd.lab.early_exit_pair(hf, 2), 3),
            ("hf early exit, own cache", hf, early_exit_lm(hf, 1), 3),
            ("static cache, replayed", StaticLM(hf, max_len=32, graphs="replay"),
             StaticLM(hf, max_len=32, layers=1, graphs="replay"), 3),
            ("medusa", *medusa_pair(lab, _heads(lab)), 3),
            ("eagle", *eagle_pair(lab, EagleDraft(eagle_config(lab.config), seed=3, init_std=0.1)), 3)]


def _trees():
    """(name, target, drafter, widths, rule): every tree decoder of the lab."""
    lab, hf = _lab_model(), tiny_hf_model("llama", vocab=V, seed=1)
    target, draft = medusa_pair(lab, _heads(lab))
    return [("medusa tree", target, draft, (2, 2, 1), "mss"),
            ("medusa tree, rrs", target, draft, (2, 2, 1), "rrs"),
            ("medusa tree, top", target, draft, (3, 2), "onehot_walk"),
            ("lookahead", lab, LookaheadDraft(V, window=3, ngram=3, guesses=2), None, "onehot_sequential"),
            ("hf lookahead", hf, LookaheadDraft(V, window=3, ngram=3, guesses=2), None, "onehot_sequential"),
            ("static lookahead", StaticLM(hf, max_len=32), LookaheadDraft(V, window=3, ngram=3, guesses=2), None,
             "onehot_sequential")]


def _plain(target):
    model = target.model if isinstance(target, (FeatureTarget, EarlyExitTarget)) else target
    return generate_plain(model, PROMPT, N_NEW)


@pytest.mark.parametrize("verifier", ["token", "block"])
def test_every_chain_decoder_builds_its_tensors_on_its_inputs_device(verifier):
    for name, target, drafter, k in _chains():
        plain = _plain(target)
        with torch.device(META):
            greedy = generate_speculative(target, drafter, PROMPT, N_NEW, k, decoding=Decoding(verifier=verifier))
            sampled = generate_speculative(target, drafter, PROMPT, N_NEW, k, decoding=Decoding(
                1.0, None, torch.Generator().manual_seed(0), verifier))
        assert torch.equal(greedy, plain), name
        assert sampled.device == PROMPT.device and sampled.shape == (N_NEW,), name


def test_every_tree_decoder_builds_its_tensors_on_its_inputs_device():
    for name, target, drafter, widths, rule in _trees():
        plain = _plain(target)
        with torch.device(META):
            greedy = generate_tree(target, drafter, PROMPT, N_NEW, widths, rule=rule)
            sampled = generate_tree(target, drafter, PROMPT, N_NEW, widths, rule=rule, decoding=Decoding(
                1.0, None, torch.Generator().manual_seed(0)))
        assert torch.equal(greedy, plain), name
        assert sampled.shape == (N_NEW,), name


def test_plain_decoding_the_exact_law_and_the_tables_build_their_tensors_on_their_inputs_device():
    model, hf = _lab_model(), tiny_hf_model("qwen2", vocab=V, seed=1)
    want = [exact_continuations(m, PROMPT, 2) for m in (model, hf)]
    tables = build_ngram(PROMPT, V, order=3).tables, build_sparse_ngram(PROMPT, V, order=3).tables
    with torch.device(META):
        got = [exact_continuations(m, PROMPT, 2) for m in (model, hf)]
        sampled = generate_plain(hf, PROMPT, 4, decoding=Decoding(1.0, None, torch.Generator().manual_seed(0)))
        built = build_ngram(PROMPT, V, order=3).tables, build_sparse_ngram(PROMPT, V, order=3).tables
    assert all(torch.equal(a, b) for a, b in zip(got, want)) and sampled.shape == (4,) and built == tables
