"""A transformers Llama written as a llama.cpp GGUF file (v3, F32 tensors, a minimal vocabulary): the engines' model.

The kit audits real engines (issue 40) on tiny models it makes itself, so nothing is downloaded. `write_gguf` writes
the weights of a transformers `LlamaForCausalLM` in the layout llama.cpp's own converter produces for the "llama"
architecture; `tiny_llama_gguf` builds a tiny random Llama (surface.tiny_causal_lm) and writes it. Pure Python,
struct and torch: the `gguf` package is not needed, so the locked environment writes the file.

The vocabulary is a SentencePiece-style list (tokenizer.ggml.model "llama") with no text behind it: the unknown
token, BOS and EOS as control tokens, the newline byte token `<0x0A>` (llama.cpp looks it up) and `▁t{i}` for the
rest. The engines are driven by token ids, never by text.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from .._checks import check_int
from ..surface.tiny_model import TinyConfig, tiny_causal_lm

__all__ = ["GGUF_MAGIC", "GGUF_VERSION", "ALIGNMENT", "VALUE_TYPES", "TOKEN_TYPES", "GGUFTensor", "TinyGGUF",
           "GGUF_LAYER", "GGUF_GLOBAL", "hf_name", "rope_permute", "gguf_vocabulary", "gguf_metadata", "gguf_tensors",
           "write_gguf", "tiny_llama_gguf"]

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32  # general.alignment: llama.cpp's default, written explicitly
GGML_F32 = 0  # ggml_type of a float32 tensor
FILE_TYPE_F32 = 0  # general.file_type: LLAMA_FTYPE_ALL_F32
# GGUF metadata value types (gguf.h's enum gguf_type), by the struct code of a scalar
VALUE_TYPES = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint32": 4, "int32": 5, "float32": 6, "bool": 7,
               "string": 8, "array": 9, "uint64": 10, "int64": 11, "float64": 12}
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# tokenizer.ggml.token_type values (llama.h's enum llama_token_type)
TOKEN_TYPES = {"normal": 1, "unknown": 2, "control": 3, "byte": 6}


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor as GGUF stores it: its name, numpy-order shape (the file lists it reversed) and float32 data."""

    name: str
    shape: tuple[int, ...]
    data: bytes


@dataclass(frozen=True)
class TinyGGUF:
    """A written tiny Llama: the file, the transformers model whose weights it holds, and its BOS and EOS ids."""

    path: Path
    model: object
    bos_id: int
    eos_id: int


def rope_permute(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a Q or K projection from transformers' rotate-half layout to llama.cpp's adjacent-pair layout."""
    # llama.cpp's converter does this for the "llama" architecture: LlamaModel.permute and its calls in
    # modify_tensors (permute(q, n_head, n_head), permute(k, n_head, n_head_kv)), ggml-org/llama.cpp
    # conversion/llama.py at commit 7bca1fd9ca2a681b0182e16f24f832b7be1942af (the same lines 175-181 and 260-264 in
    # the copy vendored by llama-cpp-python 0.3.36; convert_hf_to_gguf.py held them at a458664fc83b). Within a head,
    # output row j of the first half and row j + d/2 (the pair transformers rotates together) become rows 2j, 2j+1.
    if not isinstance(weight, torch.Tensor) or weight.dim() not in (1, 2):
        raise TypeError(f"weight must be a 1-D or 2-D torch.Tensor, got {type(weight).__name__}")
    heads = check_int("heads", heads, minimum=1)
    if weight.shape[0] % (2 * heads):
        raise ValueError(f"weight's rows ({weight.shape[0]}) must be a multiple of 2 * heads ({2 * heads})")
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_vocabulary(vocab: int, *, bos_id: int = 1, eos_id: int = 2) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of a minimal SentencePiece-style vocabulary of `vocab` ids."""
    vocab = check_int("vocab", vocab, minimum=4)
    bos_id, eos_id = check_int("bos_id", bos_id, minimum=0), check_int("eos_id", eos_id, minimum=0)
    if bos_id >= vocab or eos_id >= vocab:
        raise ValueError(f"bos_id and eos_id must be below vocab ({vocab}), got {bos_id} and {eos_id}")
    if bos_id == eos_id:
        raise ValueError(f"bos_id and eos_id must differ, got {bos_id} for both")
    free = [i for i in range(vocab) if i not in (bos_id, eos_id)]
    unknown, newline = free[0], free[1]  # the first two ids left: <unk>, then the byte token llama.cpp looks up
    tokens, kinds = [], []
    for i in range(vocab):
        name, kind = {bos_id: ("<s>", "control"), eos_id: ("</s>", "control"), unknown: ("<unk>", "unknown"),
                      newline: ("<0x0A>", "byte")}.get(i, (f"\u2581t{i}", "normal"))
        tokens.append(name)
        kinds.append(TOKEN_TYPES[kind])
    scores = [0.0 if kinds[i] != TOKEN_TYPES["normal"] else -float(i) for i in range(vocab)]
    return tokens, scores, kinds


def _llama_config(model):
    """model's transformers config, checked to be a Llama's."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "llama" or not hasattr(model, "state_dict"):
        raise TypeError(f"model must be a transformers Llama (config.model_type 'llama'), got {type(model).__name__}")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ValueError("model must have no attention or MLP biases (the llama GGUF layout written here has none)")
    return config


def _rope_theta(config) -> float:
    """The rotary base: config.rope_parameters' (transformers 5) or config.rope_theta; plain rotary only."""
    parameters = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    theta = parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    if parameters.get("rope_type", parameters.get("type", "default")) != "default" or "factor" in parameters:
        raise ValueError(f"model must use plain rotary positions (rope_type 'default'), got {parameters}")
    return float(theta)


def gguf_metadata(model, *, bos_id: int, eos_id: int, name: str = "specdec tiny llama") -> list[tuple]:
    """(key, value type, value) of the GGUF header for a transformers Llama: architecture, shapes, vocabulary."""
    config = _llama_config(model)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    heads, hidden = config.num_attention_heads, config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    if head_dim * heads != hidden:
        raise ValueError(f"model's head_dim ({head_dim}) x heads ({heads}) must equal hidden_size ({hidden})")
    tokens, scores, kinds = gguf_vocabulary(config.vocab_size, bos_id=bos_id, eos_id=eos_id)
    u32 = "uint32"
    return [
        ("general.architecture", "string", "llama"),
        ("general.name", "string", name),
        ("general.alignment", u32, ALIGNMENT),
        ("general.file_type", u32, FILE_TYPE_F32),
        ("llama.vocab_size", u32, config.vocab_size),
        ("llama.context_length", u32, config.max_position_embeddings),
        ("llama.embedding_length", u32, hidden),
        ("llama.block_count", u32, config.num_hidden_layers),
        ("llama.feed_forward_length", u32, config.intermediate_size),
        ("llama.attention.head_count", u32, heads),
        ("llama.attention.head_count_kv", u32, config.num_key_value_heads),
        ("llama.attention.layer_norm_rms_epsilon", "float32", float(config.rms_norm_eps)),
        ("llama.rope.dimension_count", u32, head_dim),
        ("llama.rope.freq_base", "float32", _rope_theta(config)),
        ("tokenizer.ggml.model", "string", "llama"),
        ("tokenizer.ggml.tokens", ("array", "string"), tokens),
        ("tokenizer.ggml.scores", ("array", "float32"), scores),
        ("tokenizer.ggml.token_type", ("array", "int32"), kinds),
        ("tokenizer.ggml.bos_token_id", u32, bos_id),
        ("tokenizer.ggml.eos_token_id", u32, eos_id),
        ("tokenizer.ggml.unknown_token_id", u32, kinds.index(TOKEN_TYPES["unknown"])),
        ("tokenizer.ggml.add_bos_token", "bool", False),  # token ids go in as given: no BOS is prepended
        ("tokenizer.ggml.add_eos_token", "bool", False),
    ]


def _f32_bytes(t: torch.Tensor) -> bytes:
    """t as little-endian float32 bytes, row-major."""
    return t.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy().astype("<f4").tobytes()


GGUF_LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
              "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}  # llama.cpp's
# per-layer tensor names (blk.<i>.<name>) -> transformers' (model.layers.<i>.<name>), in the order a GGUF holds them
GGUF_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def hf_name(name: str) -> str:
    """The transformers name of a llama.cpp tensor name of a llama or qwen2 model: blk.<i>.<name>.<weight|bias>
    or <name>.weight."""
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in GGUF_LAYER:
        return f"model.layers.{parts[1]}.{GGUF_LAYER[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in GGUF_GLOBAL:
        return f"{GGUF_GLOBAL[parts[0]]}.{parts[1]}"
    raise ValueError(f"name must be a llama.cpp tensor name (blk.<i>.<{'|'.join(GGUF_LAYER)}>.<weight|bias> or "
                     f"<{'|'.join(GGUF_GLOBAL)}>.weight), got {name!r}")


def gguf_tensors(model) -> list[GGUFTensor]:
    """A transformers Llama's weights under llama.cpp's tensor names, Q and K rows permuted (rope_permute)."""
    config = _llama_config(model)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    state = model.state_dict()
    if "lm_head.weight" not in state:  # tied embeddings: llama.cpp reads token_embd.weight for the head too
        state = {**state, "lm_head.weight": state["model.embed_tokens.weight"]}
    ours = ["token_embd.weight", *(f"blk.{layer}.{n}.weight" for layer in range(config.num_hidden_layers)
                                   for n in GGUF_LAYER), "output_norm.weight", "output.weight"]
    names = [(n, hf_name(n)) for n in ours]
    out = []
    for ours, theirs in names:
        weight = state[theirs]
        if ours.endswith("attn_q.weight"):
            weight = rope_permute(weight, heads)
        elif ours.endswith("attn_k.weight"):
            weight = rope_permute(weight, kv_heads)
        out.append(GGUFTensor(ours, tuple(weight.shape), _f32_bytes(weight)))
    return out


def _string(text: str) -> bytes:
    """A GGUF string: uint64 byte length, then UTF-8 bytes."""
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(kind, value) -> bytes:
    """A metadata value of kind (a VALUE_TYPES name, or ("array", element kind)), without its type tag."""
    if isinstance(kind, tuple):
        element = VALUE_TYPES[kind[1]]
        return struct.pack("<IQ", element, len(value)) + b"".join(_value(kind[1], v) for v in value)
    if kind == "string":
        return _string(value)
    return struct.pack(_SCALAR[VALUE_TYPES[kind]], value)


def _pad(n: int) -> int:
    """Bytes of padding that bring n to a multiple of ALIGNMENT."""
    return -n % ALIGNMENT


def write_gguf(model, path, *, bos_id: int | None = None, eos_id: int | None = None) -> Path:
    """Write a transformers Llama to path as a GGUF v3 file (F32 tensors, minimal vocabulary); the path written.

    bos_id and eos_id default to the model config's, else llama.cpp's SentencePiece defaults 1 and 2."""
    config = _llama_config(model)
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path, got {type(path).__name__}")
    bos_id = bos_id if bos_id is not None else (config.bos_token_id if config.bos_token_id is not None else 1)
    eos_id = eos_id if eos_id is not None else (config.eos_token_id if config.eos_token_id is not None else 2)
    if isinstance(eos_id, list):  # transformers allows several EOS ids; GGUF holds one
        raise ValueError(f"eos_id must be one id, got {eos_id}")
    metadata = gguf_metadata(model, bos_id=bos_id, eos_id=eos_id)
    tensors = gguf_tensors(model)
    head = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(metadata))]
    for key, kind, value in metadata:
        tag = VALUE_TYPES["array"] if isinstance(kind, tuple) else VALUE_TYPES[kind]
        head += [_string(key), struct.pack("<I", tag), _value(kind, value)]
    offset = 0
    for tensor in tensors:  # dims innermost first (ggml's ne[0] is the row length), offsets from the data start
        dims = tensor.shape[::-1]
        head += [_string(tensor.name), struct.pack(f"<I{len(dims)}Q", len(dims), *dims),
                 struct.pack("<IQ", GGML_F32, offset)]
        offset += len(tensor.data) + _pad(len(tensor.data))
    path = Path(path)
    header = b"".join(head)
    with path.open("wb") as handle:
        handle.write(header + b"\0" * _pad(len(header)))
        for tensor in tensors:
            handle.write(tensor.data + b"\0" * _pad(len(tensor.data)))
    return path


def tiny_llama_gguf(path, *, vocab: int = 16, seed: int = 0, layers: int = 2, max_positions: int = 256) -> TinyGGUF:
    """A tiny random Llama (hidden 32, FFN 64, 2 heads, init "normal" from seed), written to path as GGUF."""
    vocab = check_int("vocab", vocab, minimum=4)
    config = TinyConfig("llama", vocab=vocab, hidden=32, intermediate=64, heads=2, kv_heads=2, layers=layers,
                        max_positions=max_positions, tokens=(("bos_token_id", 1), ("eos_token_id", 2)))
    model = tiny_causal_lm(config, seed=seed, init="normal")
    written = write_gguf(model, path, bos_id=1, eos_id=2)
    return TinyGGUF(written, model, 1, 2)
