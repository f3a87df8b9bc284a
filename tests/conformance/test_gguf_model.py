"""The GGUF writer (conformance/gguf_model.py): the file round-trips through a small reader written here from the
format (header, metadata, tensor infos, 32-byte aligned data), through the `gguf` package's GGUFReader (the lock
has it, for `make real-pair`; the test skips where it is missing), and through
transformers' own GGUF loader (which undoes llama.cpp's Q/K permutation) reads it back into the same logits. The
Q/K row permutation is checked by the math it stands for: rotate-half rotary on the original rows and
adjacent-pair rotary (llama.cpp's "llama" layout) on the permuted rows give the same attention scores.
"""
from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest
import torch

from specdec_lib.conformance import gguf_model as gm

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    """A GGUF v3 reader from the format alone: fields read in order from a byte string."""

    def __init__(self, raw: bytes):
        self.raw, self.at = raw, 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.raw, self.at)
        self.at += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str:
        size = self.take("<Q")
        self.at += size
        return self.raw[self.at - size:self.at].decode("utf-8")

    def value(self, kind: int):
        if kind == 8:
            return self.string()
        if kind == 9:
            element, count = self.take("<I"), self.take("<Q")
            return [self.value(element) for _ in range(count)]
        return self.take(SCALAR[kind])


def read_gguf(path: Path) -> dict:
    """{"version", "metadata": {key: value}, "tensors": {name: (numpy-order shape, type, offset)}, "data_start",
    "raw"}."""
    r = Reader(path.read_bytes())
    assert r.raw[:4] == b"GGUF"
    r.at = 4
    version, n_tensors, n_kv = r.take("<IQQ")
    metadata = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.take("<I"))
    tensors = {}
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        kind, offset = r.take("<IQ")
        tensors[name] = (tuple(dims[::-1]), kind, offset)
    data_start = r.at + (-r.at % metadata.get("general.alignment", 32))
    return {"version": version, "metadata": metadata, "tensors": tensors, "data_start": data_start, "raw": r.raw}


def tensor(read: dict, name: str) -> torch.Tensor:
    """A float32 tensor of the file, by name."""
    shape, _, offset = read["tensors"][name]
    count = int(torch.tensor(shape).prod())
    start = read["data_start"] + offset
    return torch.frombuffer(bytearray(read["raw"][start:start + 4 * count]), dtype=torch.float32).reshape(shape)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return gm.tiny_llama_gguf(path, vocab=16, seed=5)


@pytest.mark.heavy
def test_the_file_round_trips_through_a_reader_of_the_format(written):
    read = read_gguf(written.path)
    config, state = written.model.config, written.model.state_dict()
    meta = read["metadata"]
    assert read["version"] == 3 and meta["general.architecture"] == "llama" and meta["general.alignment"] == 32
    assert (meta["llama.embedding_length"], meta["llama.block_count"], meta["llama.feed_forward_length"]) == (32, 2, 64)
    assert (meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]) == (2, 2)
    assert meta["llama.rope.dimension_count"] == 16 and meta["llama.rope.freq_base"] == 10000.0
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(config.rms_norm_eps, rel=1e-6)  # float32
    tokens = meta["tokenizer.ggml.tokens"]
    assert meta["tokenizer.ggml.model"] == "llama" and len(tokens) == 16 == len(meta["tokenizer.ggml.scores"])
    assert (tokens[0], tokens[1], tokens[2], tokens[3], tokens[4]) == ("<unk>", "<s>", "</s>", "<0x0A>", "\u2581t4")
    assert meta["tokenizer.ggml.token_type"][:5] == [2, 3, 3, 6, 1]
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"]) == (1, 2)
    assert len(read["tensors"]) == 2 + 9 * 2 + 1
    assert read["data_start"] % 32 == 0 and all(offset % 32 == 0 for _, _, offset in read["tensors"].values())
    assert {kind for _, kind, _ in read["tensors"].values()} == {0}  # F32
    last = max(read["tensors"].values(), key=lambda t: t[2])
    assert len(read["raw"]) == read["data_start"] + last[2] + 4 * int(torch.tensor(last[0]).prod())
    # weights bit for bit: shapes in torch's order, Q and K permuted, the rest as they are
    assert torch.equal(tensor(read, "token_embd.weight"), state["model.embed_tokens.weight"])
    assert torch.equal(tensor(read, "output.weight"), state["lm_head.weight"])
    assert torch.equal(tensor(read, "blk.1.ffn_down.weight"), state["model.layers.1.mlp.down_proj.weight"])
    assert torch.equal(tensor(read, "blk.0.attn_norm.weight"), state["model.layers.0.input_layernorm.weight"])
    assert torch.equal(tensor(read, "blk.0.attn_q.weight"),
                       gm.rope_permute(state["model.layers.0.self_attn.q_proj.weight"], 2))
    assert not torch.equal(tensor(read, "blk.0.attn_k.weight"), state["model.layers.0.self_attn.k_proj.weight"])


def test_rope_permute_pairs_row_j_with_row_j_plus_half_a_head():
    rows = torch.arange(8.0)  # 2 heads of 4 rows: (0, 2) and (1, 3) are the rotate-half pairs in each head
    assert gm.rope_permute(rows, 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert gm.rope_permute(torch.arange(6.0), 1).tolist() == [0, 3, 1, 4, 2, 5]


def _rotate_half(x: torch.Tensor, pos: int, theta: float = 10000.0) -> torch.Tensor:
    """transformers' rotary on one head's vector: dims j and j + d/2 rotate together by pos * theta^(-2j/d)."""
    d = x.shape[-1]
    angle = pos * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = torch.cat([angle.cos()] * 2), torch.cat([angle.sin()] * 2)
    return x * cos + torch.cat([-x[d // 2:], x[:d // 2]]) * sin


def _adjacent_pairs(x: torch.Tensor, pos: int, theta: float = 10000.0) -> torch.Tensor:
    """llama.cpp's "llama" rotary (rope mode normal): dims 2j and 2j + 1 rotate together by pos * theta^(-2j/d)."""
    d = x.shape[-1]
    angle = pos * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    even, odd = x[0::2], x[1::2]
    out = torch.empty_like(x)
    out[0::2], out[1::2] = even * angle.cos() - odd * angle.sin(), even * angle.sin() + odd * angle.cos()
    return out


def test_permuted_rows_under_adjacent_pair_rotary_give_the_same_attention_scores():
    g = torch.Generator().manual_seed(0)
    heads, d, hidden = 2, 8, 12
    wq, wk = torch.randn(heads * d, hidden, generator=g, dtype=torch.float64), torch.randn(
        heads * d, hidden, generator=g, dtype=torch.float64)
    x, y = torch.randn(hidden, generator=g, dtype=torch.float64), torch.randn(hidden, generator=g, dtype=torch.float64)
    pq, pk = gm.rope_permute(wq, heads), gm.rope_permute(wk, heads)
    for h in range(heads):
        rows = slice(h * d, (h + 1) * d)
        hf = _rotate_half(wq[rows] @ x, 5) @ _rotate_half(wk[rows] @ y, 2)
        cpp = _adjacent_pairs(pq[rows] @ x, 5) @ _adjacent_pairs(pk[rows] @ y, 2)
        # float64 throughout: the two sides differ only by rounding in a sum of 8 products (~1e-15)
        assert cpp.item() == pytest.approx(hf.item(), abs=1e-12)
        # and the unpermuted rows do not: the check has teeth
        assert abs((_adjacent_pairs(wq[rows] @ x, 5) @ _adjacent_pairs(wk[rows] @ y, 2)).item() - hf.item()) > 1e-3


def test_vocabulary_places_the_special_tokens_where_asked():
    tokens, scores, kinds = gm.gguf_vocabulary(6, bos_id=4, eos_id=0)
    assert tokens == ["</s>", "<unk>", "<0x0A>", "\u2581t3", "<s>", "\u2581t5"]
    assert kinds == [3, 2, 6, 1, 3, 1] and scores == [0.0, 0.0, 0.0, -3.0, 0.0, -5.0]


@pytest.mark.parametrize("call, error, match", [
    (lambda: gm.gguf_vocabulary(3), ValueError, "vocab must be >= 4"),
    (lambda: gm.gguf_vocabulary(8, bos_id=2, eos_id=2), ValueError, "bos_id and eos_id must differ"),
    (lambda: gm.gguf_vocabulary(8, bos_id=9), ValueError, "bos_id and eos_id must be below vocab"),
    (lambda: gm.rope_permute(torch.zeros(6, 2), 2), ValueError, r"weight's rows \(6\) must be a multiple"),
    (lambda: gm.rope_permute([1.0], 1), TypeError, "weight must be a 1-D or 2-D torch.Tensor"),
    (lambda: gm.write_gguf(torch.nn.Linear(2, 2), "x.gguf"), TypeError, "model must be a transformers Llama"),
    (lambda: gm.tiny_llama_gguf("x.gguf", vocab=2.0), TypeError, "vocab must be an integer"),
])
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.heavy
def test_write_gguf_names_a_bad_path(written):
    with pytest.raises(TypeError, match="path must be a str or Path"):
        gm.write_gguf(written.model, 3)


@pytest.mark.heavy  # the module's model is built by the first test that asks for it (about 2 s)
@pytest.mark.skipif(importlib.util.find_spec("gguf") is None,
                    reason="the gguf package is not installed (the lock's `real` extra has it)")
def test_the_gguf_package_reads_the_file(written):
    import gguf

    reader = gguf.GGUFReader(str(written.path))
    fields = reader.fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    assert int(fields["llama.block_count"].parts[-1][0]) == 2
    by_name = {t.name: t for t in reader.tensors}
    state = written.model.state_dict()
    embd = by_name["token_embd.weight"]
    assert [int(n) for n in embd.shape] == [32, 16]  # ggml order: the row length first
    assert torch.equal(torch.from_numpy(embd.data.copy()).reshape(16, 32), state["model.embed_tokens.weight"])
    assert all(t.data_offset % 32 == 0 for t in reader.tensors)


@pytest.mark.heavy
@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="transformers reads GGUF through the gguf package")
def test_transformers_gguf_loader_reads_back_the_same_logits(written):
    from specdec_lib.surface.tiny_model import offline_transformers

    tf = offline_transformers()
    loaded = tf.AutoModelForCausalLM.from_pretrained(written.path.parent, gguf_file=written.path.name,
                                                     dtype=torch.float32).eval()
    ids = torch.tensor([[1, 5, 7, 9, 3, 4, 11, 12, 0, 15]])
    with torch.no_grad():
        ours, theirs = written.model(ids).logits, loaded(ids).logits
    # the loader un-permutes Q and K: the same float32 weights in the same order, so the same logits bit for bit
    # (measured 0.0); 1e-6 leaves room for a kernel that orders a sum differently, far below a wrong layout (~1)
    assert (ours - theirs).abs().max().item() <= 1e-6


def test_hf_name_maps_llama_cpp_names_back_to_transformers():
    from specdec_lib.conformance.gguf_model import GGUF_LAYER, hf_name

    assert hf_name("blk.12.attn_q.bias") == "model.layers.12.self_attn.q_proj.bias"  # qwen2's biases too
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight" and hf_name("output.weight") == "lm_head.weight"
    assert len({hf_name(f"blk.0.{n}.weight") for n in GGUF_LAYER}) == len(GGUF_LAYER)  # one name each
    for bad in ("blk.x.attn_q.weight", "blk.0.attn_qkv.weight", "rope_freqs.weight", 3):
        with pytest.raises(ValueError, match="name must be a llama.cpp tensor name"):
            hf_name(bad)
