"""Random-weight qwen2 GGUF models of any shape, written directly (no quantizer, no download).

The matrices are Q4_0 blocks of random nibbles, so a model of the default pair's shapes
(151,936-token vocabulary included) is written in seconds.  ``scripts/gpu_check.py`` writes
the default pair's exact shapes with it; ``scripts/host_bench.py`` writes one thin layer
under a full-size vocabulary.  A script helper: nothing of the package imports it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["write_model"]


def _q4_0(rng, n_out: int, n_in: int, std: float) -> np.ndarray:
    """Random Q4_0 blocks (f16 scale + 32 nibbles per 32 weights) of weights with std ~``std``."""
    blocks = n_in // 32
    raw = np.empty((n_out, blocks, 18), np.uint8)
    raw[:, :, :2] = np.frombuffer(np.float16(std / 4.6).tobytes(), np.uint8)  # nibble - 8: std ~4.6
    raw[:, :, 2:] = rng.integers(0, 256, (n_out, blocks, 16), dtype=np.uint8)
    return raw.reshape(n_out, blocks * 18)


def write_model(path: Path, n_layer: int, n_embd: int, n_ff: int, n_head: int, n_head_kv: int, n_vocab: int,
                seed: int = 0, embd_std: float = 1.0, layer_seed: int | None = None,
                out_scale: float = 1.0) -> Path:
    """A qwen2-architecture GGUF of these shapes with random weights (an SPM vocabulary of
    byte tokens and fillers: the measurements feed token ids, not text).

    The output matrix is the (tied) token embedding, so ``embd_std`` sets how peaked the
    logits are (their std is about ``embd_std * sqrt(n_embd)``).  ``layer_seed``: draw the
    blocks from their own seed, so that two models share their embedding (``seed``) but not
    their layers: a draft that agrees with its target only in part.  ``out_scale`` scales
    the blocks' output projections: the smaller, the more the embedding decides the logits
    (and the more two such models agree)."""
    import gguf

    rng = np.random.default_rng(seed)
    head = n_embd // n_head
    kv = head * n_head_kv
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name(path.stem)
    w.add_context_length(32768)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1_000_000.0)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_0))
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    tokens += [f"<t{i}>" for i in range(n_vocab - len(tokens))]
    types += [gguf.TokenType.NORMAL] * (n_vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([int(t) for t in types])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    q4 = gguf.GGMLQuantizationType.Q4_0

    def matrix(name, n_out, n_in, std):
        w.add_tensor(name, _q4_0(rng, n_out, n_in, std), raw_dtype=q4)

    def vector(name, n, value=None):
        w.add_tensor(name, np.full(n, 1.0, np.float32) if value is None else
                     (rng.standard_normal(n) * value).astype(np.float32))

    matrix("token_embd.weight", n_vocab, n_embd, embd_std)
    if layer_seed is not None:
        rng = np.random.default_rng(layer_seed)
    for i in range(n_layer):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", n_embd)
        matrix(p + "attn_q.weight", n_embd, n_embd, n_embd ** -0.5)
        vector(p + "attn_q.bias", n_embd, 0.1)
        matrix(p + "attn_k.weight", kv, n_embd, n_embd ** -0.5)
        vector(p + "attn_k.bias", kv, 0.1)
        matrix(p + "attn_v.weight", kv, n_embd, n_embd ** -0.5)
        vector(p + "attn_v.bias", kv, 0.1)
        matrix(p + "attn_output.weight", n_embd, n_embd, out_scale * n_embd ** -0.5)
        vector(p + "ffn_norm.weight", n_embd)
        matrix(p + "ffn_gate.weight", n_ff, n_embd, n_embd ** -0.5)
        matrix(p + "ffn_up.weight", n_ff, n_embd, n_embd ** -0.5)
        matrix(p + "ffn_down.weight", n_embd, n_ff, out_scale * n_ff ** -0.5)
    vector("output_norm.weight", n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
