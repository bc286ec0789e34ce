"""Tiny llama-architecture GGUF models for hermetic engine tests.

Every model written here is an F32 ``llama`` GGUF of about 0.45 MB that llama.cpp loads in
milliseconds on a CPU.  Its vocabulary is a SentencePiece ("llama") byte-fallback vocabulary
that tokenizes and detokenizes arbitrary UTF-8 text:

====  ==================  ============
id    text                type
====  ==================  ============
0     ``<unk>``           UNKNOWN
1     ``<s>``  (BOS)      CONTROL
2     ``</s>`` (EOS)      CONTROL
3-258 ``<0x00>``-``<0xFF>`` BYTE
259   ``▁`` (space)       NORMAL
260   ``<|im_start|>``    CONTROL
261   ``<|im_end|>``      CONTROL (end of generation, recognised by its text)
====  ==================  ============

The ``▁`` token is needed: the SPM tokenizer turns spaces into ``▁`` (U+2581) and, with no
``▁`` token, would byte-encode it so that a space detokenizes as ``▁``.  ``add_space_prefix``
is off so that ``detokenize(tokenize(s)) == s`` exactly.

Weights are drawn from ``base_seed`` (default ``seed``); a draft is the same base weights plus
Gaussian noise of relative scale ``noise`` (noise drawn from ``seed``), so a target/draft pair
shares a vocabulary and has partially agreeing next-token distributions.  With the defaults
(``write_tiny_pair``: draft noise ``DEFAULT_DRAFT_NOISE`` = 0.15) the measured numbers at
temperature 1 over 66 positions of a sequence sampled from the target are, for seed 0: target
next-token entropy 3.13 nats mean (0.6-4.0 per position; draft 3.13), acceptance
``sum(min(p, q))`` 0.73 mean (0.61-0.94 per position); seeds 1-4 give acceptance 0.69-0.73 and
entropy 3.0-3.3.  Noise 0.1 / 0.2 / 0.3 give acceptance ~0.81 / 0.65 / 0.52 (seed 0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gguf

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "IM_END_ID",
    "IM_START_ID",
    "N_VOCAB",
    "CHAT_TEMPLATE",
    "DEFAULT_DRAFT_NOISE",
    "write_tiny_llama",
    "write_tiny_pair",
    "FIM_TOKENS",
    "THINK_TOKENS",
    "THINK_TEMPLATE",
    "OPEN_THINK_TEMPLATE",
    "write_incompatible_draft",
    "write_cross_draft",
    "write_not_gguf",
    "write_truncated_gguf",
    "write_garbage",
]

UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE0_ID = 3
SPACE_ID = 259
IM_START_ID, IM_END_ID = 260, 261
N_VOCAB = 262

#: The ``"fim"`` vocabulary variant's extra control tokens (Qwen2.5-Coder's spellings), ids
#: ``N_VOCAB`` on: prefix, suffix, middle, pad, repo name, file separator.
FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")

#: The ``"think"`` variant's thinking markers, ids ``N_VOCAB`` and ``N_VOCAB + 1``: user-defined
#: tokens whose piece is their text, as Qwen3's and DeepSeek-R1's GGUFs hold them.
THINK_TOKENS = ("<think>", "</think>")

#: A Qwen3-style template: the model opens its thinking itself, and ``enable_thinking`` false
#: closes an empty block in the generation prompt.
THINK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)

#: A DeepSeek-R1-distill-style template: the generation prompt opens the thinking block.
OPEN_THINK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)

#: Relative noise of the draft in ``write_tiny_pair`` (acceptance ~0.73, see module docstring).
DEFAULT_DRAFT_NOISE = 0.15

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Init scales.  Matrices get GAIN / sqrt(fan_in) so the residual stream keeps rms ~1 and
# attention is neither uniform nor one-hot; the output head's gain sets the next-token entropy.
_EMBD_STD = 1.0
_LAYER_GAIN = 1.0
_OUTPUT_GAIN = 2.5


def _vocab(variant: str = "default", extra_tokens=()) -> tuple[list[str], list[int], list[float]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    byte_values = range(256) if variant == "default" else range(255, -1, -1)
    tokens += [f"<0x{b:02X}>" for b in byte_values]
    types += [gguf.TokenType.BYTE] * 256
    tokens += ["\u2581", "<|im_start|>", "<|im_end|>"]
    types += [gguf.TokenType.NORMAL, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    if variant == "extra_tokens":  # same text for ids < N_VOCAB, 200 more tokens
        byte_values = range(256)
        tokens[BYTE0_ID:BYTE0_ID + 256] = [f"<0x{b:02X}>" for b in byte_values]
        tokens += [f"<extra_{i}>" for i in range(200)]
        types += [gguf.TokenType.USER_DEFINED] * 200
    elif variant == "fim":  # same as default, plus fill-in-the-middle tokens
        tokens += list(FIM_TOKENS)
        types += [gguf.TokenType.CONTROL] * len(FIM_TOKENS)
    elif variant == "think":  # same as default, plus a reasoning model's thinking markers
        tokens += list(THINK_TOKENS)
        types += [gguf.TokenType.USER_DEFINED] * len(THINK_TOKENS)
    elif variant == "unspellable":  # no byte tokens: texts "x0".."x255" in their place
        tokens[BYTE0_ID:BYTE0_ID + 256] = [f"x{b}" for b in range(256)]
        types[BYTE0_ID:BYTE0_ID + 256] = [gguf.TokenType.NORMAL] * 256
    elif variant == "llama3":  # Llama-3-style specials and a few merged pieces, bytes reversed
        tokens[BOS_ID:EOS_ID + 1] = ["<|begin_of_text|>", "<|end_of_text|>"]
        tokens[IM_START_ID:IM_END_ID + 1] = ["<|start_header_id|>", "<|eot_id|>"]
        tokens += ["\u2581the", "he", "ll", "in", "\u2581a", "er"]
        types += [gguf.TokenType.NORMAL] * 6
    elif variant not in ("default", "reversed_bytes"):
        raise ValueError(f"unknown vocab variant {variant!r}")
    tokens += list(extra_tokens)
    types += [gguf.TokenType.CONTROL] * len(extra_tokens)
    scores = [0.0] * len(tokens)
    scores[SPACE_ID] = -1.0
    if variant == "llama3":  # the merged pieces win over their letters
        scores[N_VOCAB:N_VOCAB + 6] = [5.0, 4.0, 4.0, 4.0, 3.0, 3.0]
    return tokens, [int(t) for t in types], scores


def add_vocab(w, tokens, types, scores, chat_template: str) -> None:
    """The tokenizer's keys of a tiny model (``_vocab``'s lists), the same for every architecture."""
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_unk_token_id(UNK_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(chat_template)


def _tensor_shapes(n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_ff: int,
                   n_vocab: int) -> list[tuple[str, tuple[int, ...], float | None]]:
    """(name, numpy shape, init std or None for a norm of ones).

    numpy shapes are (n_out, n_in), the reverse of llama.cpp's ne = [n_in, n_out].
    """
    head_dim = n_embd // n_head
    n_embd_kv = head_dim * n_head_kv
    out: list[tuple[str, tuple[int, ...], float | None]] = [
        ("token_embd.weight", (n_vocab, n_embd), _EMBD_STD),
    ]
    for i in range(n_layer):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (n_embd,), None),
            (p + "attn_q.weight", (n_embd, n_embd), _LAYER_GAIN / np.sqrt(n_embd)),
            (p + "attn_k.weight", (n_embd_kv, n_embd), _LAYER_GAIN / np.sqrt(n_embd)),
            (p + "attn_v.weight", (n_embd_kv, n_embd), _LAYER_GAIN / np.sqrt(n_embd)),
            (p + "attn_output.weight", (n_embd, n_embd), _LAYER_GAIN / np.sqrt(n_embd)),
            (p + "ffn_norm.weight", (n_embd,), None),
            (p + "ffn_gate.weight", (n_ff, n_embd), _LAYER_GAIN / np.sqrt(n_embd)),
            (p + "ffn_up.weight", (n_ff, n_embd), _LAYER_GAIN / np.sqrt(n_embd)),
            (p + "ffn_down.weight", (n_embd, n_ff), _LAYER_GAIN / np.sqrt(n_ff)),
        ]
    out += [
        ("output_norm.weight", (n_embd,), None),
        ("output.weight", (n_vocab, n_embd), _OUTPUT_GAIN / np.sqrt(n_embd)),
    ]
    return out


def write_tiny_llama(
    path: str | Path,
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_ctx_train: int = 2048,
    noise: float = 0.0,
    base_seed: int | None = None,
    vocab_variant: str = "default",
    name: str = "tiny-llama",
    chat_template: str = CHAT_TEMPLATE,
    extra_tokens: tuple[str, ...] = (),
) -> Path:
    """Write an F32 llama-architecture GGUF to ``path`` and return it as a ``Path``.

    Base weights come from ``base_seed`` (``seed`` when None); when ``noise`` > 0 each weight
    matrix gets added ``noise * init_std * N(0, 1)`` drawn from ``seed`` (norm weights stay
    ones).  Same arguments give byte-identical files.  ``vocab_variant``: ``"default"``,
    ``"reversed_bytes"`` (byte tokens in reverse order: same size/type/specials, different
    token text from id 3), ``"extra_tokens"`` (200 extra tokens at the end), ``"fim"``
    (``FIM_TOKENS`` at the end, as control tokens) or ``"think"`` (``THINK_TOKENS`` at the
    end, user-defined).  ``chat_template``: the GGUF's template (``CHAT_TEMPLATE``,
    ``THINK_TEMPLATE``, ``OPEN_THINK_TEMPLATE``); ``extra_tokens``: more control tokens
    after the variant's (a family's tool or turn markers, such as ``<|eom_id|>``; llama.cpp
    ends generation at those it knows by text).
    """
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must divide by n_head and n_head by n_head_kv")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, scores = _vocab(vocab_variant, extra_tokens)
    n_vocab = len(tokens)
    base_rng = np.random.default_rng([base_seed if base_seed is not None else seed, 0])
    noise_rng = np.random.default_rng([seed, 1])

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)

    add_vocab(w, tokens, types, scores, chat_template)

    for tname, shape, std in _tensor_shapes(n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab):
        if std is None:
            arr = np.ones(shape, dtype=np.float32)
        else:
            arr = base_rng.standard_normal(shape) * std
            if noise:
                arr = arr + noise_rng.standard_normal(shape) * (noise * std)
            arr = arr.astype(np.float32)
        w.add_tensor(tname, arr)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_pair(dirpath: str | Path, seed: int = 0,
                    noise: float = DEFAULT_DRAFT_NOISE, vocab_variant: str = "default",
                    chat_template: str = CHAT_TEMPLATE) -> tuple[Path, Path]:
    """Write ``target.gguf`` and ``draft.gguf`` (same base weights + noise, same vocabulary
    variant and template) into ``dirpath``."""
    dirpath = Path(dirpath)
    target = write_tiny_llama(dirpath / "target.gguf", seed=seed, base_seed=seed, name="tiny-llama-target",
                              vocab_variant=vocab_variant, chat_template=chat_template)
    draft = write_tiny_llama(dirpath / "draft.gguf", seed=seed + 1, base_seed=seed, noise=noise,
                             name="tiny-llama-draft", vocab_variant=vocab_variant, chat_template=chat_template)
    return target, draft


def write_incompatible_draft(dirpath: str | Path, seed: int = 0,
                             kind: str = "unspellable") -> Path:
    """A draft whose vocabulary is incompatible with ``write_tiny_pair``'s target.

    ``kind="unspellable"`` (default): no byte tokens (``x0`` .. ``x255`` in their place), so it
    cannot spell the target's text and no route serves (same size and specials: token 5
    differs first).  ``kind="token_text"``: same vocab type, size, BOS/EOS and add-BOS flag,
    but the byte tokens are in reverse order, so token texts differ from id 3 on (llama.cpp's
    speculative check compares texts from id 5); it runs on the text route.  ``kind="vocab_size"``: 200 extra tokens
    (sizes differ by more than llama.cpp's allowed 128), texts otherwise equal.
    """
    variant = {"token_text": "reversed_bytes", "vocab_size": "extra_tokens", "unspellable": "unspellable"}[kind]
    return write_tiny_llama(Path(dirpath) / f"incompatible_{kind}.gguf", seed=seed + 1,
                            base_seed=seed, noise=DEFAULT_DRAFT_NOISE,
                            vocab_variant=variant, name="tiny-llama-incompatible")


def write_cross_draft(dirpath: str | Path, seed: int = 0) -> Path:
    """A draft of another vocabulary for ``write_tiny_pair``'s target (Mistral-style ``<s>``
    specials): Llama-3-style specials (``<|begin_of_text|>``, ``<|eot_id|>``), byte tokens in
    reverse order and six merged pieces (``▁the``, ``he``, ...) that its tokenizer prefers,
    so the two tokenize one text differently; it spells every byte (the text route)."""
    return write_tiny_llama(Path(dirpath) / "cross_draft.gguf", seed=seed + 1, base_seed=seed,
                            noise=DEFAULT_DRAFT_NOISE, vocab_variant="llama3", name="tiny-llama3-draft")


def write_not_gguf(dirpath: str | Path) -> Path:
    """A file with a ``.gguf`` name that is not a GGUF file."""
    path = Path(dirpath) / "not_a_model.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"This is not a GGUF file.\n" * 64)
    return path


def write_truncated_gguf(dirpath: str | Path, seed: int = 0) -> Path:
    """The first half of a real tiny model (valid header, tensor data cut off)."""
    dirpath = Path(dirpath)
    full = write_tiny_llama(dirpath / "full_for_truncation.gguf", seed=seed)
    data = full.read_bytes()
    full.unlink()
    path = dirpath / "truncated.gguf"
    path.write_bytes(data[: len(data) // 2])
    return path


def write_garbage(dirpath: str | Path) -> tuple[Path, Path]:
    """``(not_gguf_path, truncated_gguf_path)``."""
    return write_not_gguf(dirpath), write_truncated_gguf(dirpath)
