"""Tiny recurrent and hybrid GGUFs for hermetic engine tests, beside ``tiny_gguf``'s llama ones.

* ``write_tiny_lfm2``: an ``lfm2`` hybrid (LiquidAI's layout): short-convolution layers beside
  attention layers (a layer is recurrent where its KV head count is 0).  llama.cpp keeps
  per-token snapshots of its recurrent state (``n_rs_seq``), so it can roll a sequence back.
* ``write_tiny_mamba2``: a pure ``mamba2`` state-space model; llama.cpp keeps no snapshots of
  its state (it cannot be rolled back by a token).

Both are F32, a few hundred KB, and share ``tiny_gguf``'s byte-level vocabulary and chat
template, so they tokenize exactly as the tiny llama pair.  Weights come from ``base_seed``;
``noise`` adds Gaussian noise of that relative scale drawn from ``seed`` (a draft of the same
base weights, as ``tiny_gguf.write_tiny_llama``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gguf

from tiny_gguf import CHAT_TEMPLATE, _vocab, add_vocab

__all__ = ["write_tiny_lfm2", "write_tiny_mamba2"]

_GAIN = 1.0
_OUTPUT_GAIN = 2.5


def _writer(path: Path, arch: str, name: str, n_layer: int, n_embd: int, n_ctx_train: int) -> gguf.GGUFWriter:
    tokens, types, scores = _vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    add_vocab(w, tokens, types, scores, CHAT_TEMPLATE)
    return w


def _tensors(w: gguf.GGUFWriter, shapes, seed: int, base_seed: int | None, noise: float) -> None:
    """Add ``shapes`` (name, numpy shape, std; std None: ones; std < 0: -|N(0, 1)| * -std + a
    negative constant, the decay rates a state-space layer wants)."""
    base_rng = np.random.default_rng([base_seed if base_seed is not None else seed, 0])
    noise_rng = np.random.default_rng([seed, 1])
    for name, shape, std in shapes:
        if std is None:
            arr = np.ones(shape, np.float32)
        elif std < 0:
            arr = -(0.5 + np.abs(base_rng.standard_normal(shape)) * -std)
        else:
            arr = base_rng.standard_normal(shape) * std
            if noise:
                arr = arr + noise_rng.standard_normal(shape) * (noise * std)
        w.add_tensor(name, np.asarray(arr, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tiny_lfm2(path, *, seed: int = 0, base_seed: int | None = None, noise: float = 0.0, n_layer: int = 3,
                    n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128, l_cache: int = 3,
                    name: str = "tiny-lfm2") -> Path:
    """An ``lfm2`` hybrid: layer 1 (and every third after it) attention, the others short
    convolutions of ``l_cache`` taps."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_vocab = len(_vocab()[0])
    attn = [i % 3 == 1 for i in range(n_layer)]
    w = _writer(path, "lfm2", name, n_layer, n_embd, 2048)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv([n_head_kv if a else 0 for a in attn])
    w.add_rope_freq_base(10000.0)
    w.add_uint32(gguf.Keys.ShortConv.L_CACHE.format(arch="lfm2"), l_cache)
    head_dim, s = n_embd // n_head, _GAIN / np.sqrt(n_embd)
    shapes = [("token_embd.weight", (n_vocab, n_embd), 1.0)]
    for i in range(n_layer):
        p = f"blk.{i}."
        shapes += [(p + "attn_norm.weight", (n_embd,), None), (p + "ffn_norm.weight", (n_embd,), None),
                   (p + "ffn_gate.weight", (n_ff, n_embd), s), (p + "ffn_up.weight", (n_ff, n_embd), s),
                   (p + "ffn_down.weight", (n_embd, n_ff), _GAIN / np.sqrt(n_ff))]
        if attn[i]:
            shapes += [(p + "attn_q_norm.weight", (head_dim,), None), (p + "attn_k_norm.weight", (head_dim,), None),
                       (p + "attn_q.weight", (n_embd, n_embd), s),
                       (p + "attn_k.weight", (head_dim * n_head_kv, n_embd), s),
                       (p + "attn_v.weight", (head_dim * n_head_kv, n_embd), s),
                       (p + "attn_output.weight", (n_embd, n_embd), s)]
        else:
            shapes += [(p + "shortconv.conv.weight", (n_embd, l_cache), 1.0 / np.sqrt(l_cache)),
                       (p + "shortconv.in_proj.weight", (3 * n_embd, n_embd), s),
                       (p + "shortconv.out_proj.weight", (n_embd, n_embd), s)]
    shapes += [("token_embd_norm.weight", (n_embd,), None), ("output.weight", (n_vocab, n_embd), _OUTPUT_GAIN * s)]
    _tensors(w, shapes, seed, base_seed, noise)
    return path


def write_tiny_mamba2(path, *, seed: int = 0, base_seed: int | None = None, noise: float = 0.0, n_layer: int = 2,
                      n_embd: int = 64, d_state: int = 16, n_group: int = 1, n_head: int = 4, d_conv: int = 4,
                      name: str = "tiny-mamba2") -> Path:
    """A ``mamba2`` model: ``n_layer`` state-space layers of inner width ``2 * n_embd``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_vocab = len(_vocab()[0])
    d_inner = 2 * n_embd
    conv_dim = d_inner + 2 * n_group * d_state
    w = _writer(path, "mamba2", name, n_layer, n_embd, 2048)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_head)
    w.add_ssm_group_count(n_group)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    s = _GAIN / np.sqrt(n_embd)
    shapes = [("token_embd.weight", (n_vocab, n_embd), 1.0)]
    for i in range(n_layer):
        p = f"blk.{i}."
        shapes += [(p + "attn_norm.weight", (n_embd,), None),
                   (p + "ssm_in.weight", (d_inner + conv_dim + n_head, n_embd), s),
                   (p + "ssm_conv1d.weight", (conv_dim, d_conv), 1.0 / np.sqrt(d_conv)),
                   (p + "ssm_conv1d.bias", (conv_dim,), 0.1),
                   (p + "ssm_dt.bias", (n_head,), 0.5),
                   (p + "ssm_a", (n_head, 1), -1.0),
                   (p + "ssm_d", (n_head, 1), 1.0),
                   (p + "ssm_norm.weight", (n_group, d_inner // n_group), None),
                   (p + "ssm_out.weight", (n_embd, d_inner), _GAIN / np.sqrt(d_inner))]
    shapes += [("output_norm.weight", (n_embd,), None), ("output.weight", (n_vocab, n_embd), _OUTPUT_GAIN * s)]
    _tensors(w, shapes, seed, base_seed, noise)
    return path
