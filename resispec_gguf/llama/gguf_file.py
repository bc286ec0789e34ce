"""What a model file must look like before llama.cpp is asked to load it.

llama.cpp answers a missing, unreadable or foreign file with a bare failure (or worse), so
``backend.LlamaModel`` first checks the path and the GGUF header here and raises one
``UserError`` that says what is wrong.  Reads 24 bytes.

``write_probe_model`` writes the smallest model that is still a real one: an F32
llama-architecture GGUF of one layer whose rows are 256 wide (so that llama.cpp's quantizer
turns it into Q4_K / Q6_K blocks, as in the default pair), with a byte vocabulary.
``buildcheck`` quantizes and loads it in a child process.  Imports only ``errors`` (and
NumPy), never llama_cpp.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ..errors import UserError

__all__ = ["GGUF_MAGIC", "check_gguf_file", "write_probe_model"]

GGUF_MAGIC = b"GGUF"
_VERSIONS = (2, 3)  # the GGUF versions llama.cpp reads
_HEADER = 24  # magic, version, tensor count, metadata count


def check_gguf_file(path: str) -> None:
    """``UserError`` unless ``path`` is a readable file with a GGUF header of a version
    llama.cpp reads."""
    if not os.path.exists(path):
        raise UserError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise UserError(f"model path is a directory, not a GGUF file: {path}")
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER)
    except OSError as e:
        raise UserError(f"cannot read model file {path}: {e.strerror}") from None
    if len(head) < 4 or head[:4] != GGUF_MAGIC:
        raise UserError(f"not a GGUF file (bad magic): {path}")
    if len(head) < _HEADER:
        raise UserError(f"truncated GGUF file: {path}")
    version = struct.unpack("<I", head[4:8])[0]
    if version not in _VERSIONS:
        raise UserError(f"unsupported GGUF version {version}: {path}")


# --------------------------------------------------------------------- writing a probe model

_U32, _I32, _F32, _BOOL, _STR, _ARR = 4, 5, 6, 7, 8, 9  # GGUF metadata value types
_ALIGN = 32


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _value(value) -> bytes:
    """A metadata value with its type tag: bool, int (u32), float (f32), str, or a list of
    one of str / int (i32) / float."""
    if isinstance(value, bool):
        return struct.pack("<I?", _BOOL, value)
    if isinstance(value, int):
        return struct.pack("<II", _U32, value)
    if isinstance(value, float):
        return struct.pack("<If", _F32, value)
    if isinstance(value, str):
        return struct.pack("<I", _STR) + _string(value)
    kind = _STR if isinstance(value[0], str) else _F32 if isinstance(value[0], float) else _I32
    items = b"".join(_string(v) if kind == _STR else struct.pack("<f" if kind == _F32 else "<i", v) for v in value)
    return struct.pack("<IIQ", _ARR, kind, len(value)) + items


def _probe_tensors(n_embd: int, n_ff: int, n_vocab: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """One llama block's weights, NumPy shapes ``(n_out, n_in)``, norms ones."""
    rng = np.random.default_rng(seed)

    def w(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    ones = np.ones(n_embd, np.float32)
    return [("token_embd.weight", w(n_vocab, n_embd)), ("blk.0.attn_norm.weight", ones),
            ("blk.0.attn_q.weight", w(n_embd, n_embd)), ("blk.0.attn_k.weight", w(n_embd, n_embd)),
            ("blk.0.attn_v.weight", w(n_embd, n_embd)), ("blk.0.attn_output.weight", w(n_embd, n_embd)),
            ("blk.0.ffn_norm.weight", ones), ("blk.0.ffn_gate.weight", w(n_ff, n_embd)),
            ("blk.0.ffn_up.weight", w(n_ff, n_embd)), ("blk.0.ffn_down.weight", w(n_embd, n_ff)),
            ("output_norm.weight", ones), ("output.weight", w(n_vocab, n_embd))]


def write_probe_model(path: str, *, n_embd: int = 256, n_ff: int = 512, n_head: int = 4, seed: int = 0) -> None:
    """Write an F32 llama GGUF of one layer to ``path`` (about 2.5 MB): tokens ``<unk>``,
    ``<s>``, ``</s>``, the 256 byte tokens and padding up to 320."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, byte (llama.cpp's token types)
    tokens += [f"<pad{i}>" for i in range(320 - len(tokens))]
    types += [4] * (320 - len(types))  # user-defined
    meta = {"general.architecture": "llama", "general.name": "resispec-probe", "general.file_type": 0,
            "llama.context_length": 256, "llama.embedding_length": n_embd, "llama.block_count": 1,
            "llama.feed_forward_length": n_ff, "llama.attention.head_count": n_head,
            "llama.attention.head_count_kv": n_head, "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "llama.rope.dimension_count": n_embd // n_head, "llama.vocab_size": len(tokens),
            "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": [0.0] * len(tokens), "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0}
    tensors = _probe_tensors(n_embd, n_ff, len(tokens), seed)
    head = [GGUF_MAGIC, struct.pack("<IQQ", 3, len(tensors), len(meta))]
    head += [_string(k) + _value(v) for k, v in meta.items()]
    offset = 0
    for name, arr in tensors:  # F32 (type 0); llama.cpp's dimensions are NumPy's reversed
        head.append(_string(name) + struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}Q", *arr.shape[::-1])
                    + struct.pack("<IQ", 0, offset))
        offset += -(-arr.nbytes // _ALIGN) * _ALIGN
    header = b"".join(head)
    with open(path, "wb") as f:
        f.write(header + bytes(-len(header) % _ALIGN))
        for _, arr in tensors:
            f.write(arr.tobytes() + bytes(-arr.nbytes % _ALIGN))
