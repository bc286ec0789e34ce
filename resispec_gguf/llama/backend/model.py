"""``LlamaModel``: one GGUF model and one multi-sequence context, opened (on the local devices
or, with ``rpc``, on the workers'), described and freed here; its vocabulary calls are
``tokens.Tokens``'s, its batches and decodes ``batches.Batches``'s, its KV bookkeeping
``kv.KVCache``'s (the package docstring says what it offers as a whole)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import threading

import llama_cpp as _ll

from . import native
from .. import devices, rpc_client
from ..forest import Forest
from ..gguf_file import check_gguf_file
from ...errors import UserError
from .batches import Batches
from .kv import KVCache
from .native import _context_params, _rpc_devices
from .recurrent import RS_SNAPSHOTS, RecurrentState, memory_kind
from .tokens import Tokens


class LlamaModel(Tokens, Batches, KVCache, RecurrentState):
    """One GGUF model with a multi-sequence context (see the package docstring)."""

    def __init__(
        self,
        path,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        n_seq_max: int = 64,
        flash_attn: bool | None = None,
        rpc: str | None = None,
        n_slots: int = 1,
    ):
        path = os.fspath(path)
        check_gguf_file(path)
        self.path = path
        self.rpc = rpc
        self._model = self._ctx = None  # what close() frees, once made
        self._model = self._load_model(n_gpu_layers)
        self._vocab = _ll.llama_model_get_vocab(self._model)
        self.n_vocab = int(_ll.llama_vocab_n_tokens(self._vocab))
        threads = n_threads or max(1, os.cpu_count() or 1)
        self.n_slots = int(n_slots)
        per_slot = self._fit_outputs(n_ctx, n_batch, n_seq_max, self.n_slots)
        self.memory = memory_kind(self._model)
        flash_attn = cpu_flash_attn(flash_attn, self.devices, self.rpc)
        # recurrent memory: a state cell per sequence id, the slots' and their checkpoints'
        ids, snaps = (n_seq_max, 0) if not self.recurrent else (2 * self.n_slots, RS_SNAPSHOTS)
        self._ctx = self._new_context(per_slot * self.n_slots, n_batch, ids, threads, flash_attn, snaps)
        self._mem = _ll.llama_get_memory(self._ctx)
        self.rollback = int(_ll.llama_n_rs_seq(self._ctx)) if self.recurrent else 0
        self._rs_init()
        # per slot; one slot gets all llama.cpp gave (it rounds up to a multiple of 256)
        self.n_ctx = int(_ll.llama_n_ctx(self._ctx)) if self.n_slots == 1 else per_slot
        self.n_batch = int(_ll.llama_n_batch(self._ctx))  # llama.cpp may clamp it to n_ctx
        self.n_seq_max = int(n_seq_max)
        self.n_threads = threads
        self.n_gpu_layers = int(n_gpu_layers)
        self.flash_attn = flash_attn
        self._batch = self._new_batch()
        self._seqs: list[list[int]] = [[] for _ in range(self.n_slots)]  # committed tokens per slot, in order
        self._nodes = Forest(self.n_slots)  # this step's uncommitted nodes
        self._local = threading.local()  # per-thread out-buffers: the server detokenises on two threads
        # special tokens whose text the reply shows (a tool format's markers, such as Mistral's
        # [TOOL_CALLS]: llama.cpp's "preserved tokens"); other special tokens add no text
        self.shown_specials: frozenset[int] = frozenset()
        self._generation = 0
        self._rows, self._rows_of = None, -1  # the last decode's logits buffer as [n_out, V], and its generation
        self._views, self._views_at = {}, None  # n_out -> [n_out, V] view of the buffer at address _views_at
        self._specials = None
        self._max_piece = None
        self._pieces: dict[int, bytes] = {}  # 2 * token + special -> token_piece's bytes (fixed per model)
        self._eog: dict[int, bool] = {}  # token -> is_eog

    def _load_model(self, n_gpu_layers: int):
        """The model, its offloaded layers on the local devices or, with ``rpc``, on the workers'."""
        mparams = _ll.llama_model_default_params()
        mparams.n_gpu_layers = int(n_gpu_layers)
        if self.rpc:
            # NULL-terminated; llama.cpp copies the list while loading, kept anyway
            self._devices = _rpc_devices(self.rpc)
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        native._load_log = []  # what the log callback appends to while this model loads
        with rpc_client.loading(self.rpc):
            model = _ll.llama_model_load_from_file(self.path.encode(), mparams)
        self.devices = devices.layer_devices(b"".join(native._load_log).decode("utf-8", "replace"))
        native._load_log = None
        if not model:
            raise UserError(f"llama.cpp could not load the model (corrupt or truncated GGUF?): {self.path}")
        return model

    def _fit_outputs(self, n_ctx: int, n_batch: int, n_seq_max: int, n_slots: int = 1) -> int:
        """The context size (``n_ctx`` <= 0: the model's training context), checked to give
        every sequence its output row.

        llama.cpp reserves an output row per sequence at context creation and aborts the
        process (GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)) unless that many rows
        fit one batch, and a batch never exceeds the context: n_seq_max <= min(n_ctx, n_batch)."""
        if n_ctx <= 0:
            n_ctx = int(_ll.llama_model_n_ctx_train(self._model))
        if min(n_ctx * n_slots, n_batch) < n_seq_max:
            self.close()
            what = f"a context of {n_ctx}" if n_ctx < n_batch else f"a batch of {n_batch}"
            raise UserError(f"{what} tokens is too small: it must hold at least {n_seq_max} tokens "
                            f"(one output row per sequence, {n_seq_max} sequences)")
        return n_ctx

    def _new_context(self, n_ctx: int, n_batch: int, n_seq_max: int, threads: int, flash_attn: bool | None,
                     n_rs_seq: int = 0):
        cparams = _context_params(n_ctx, n_batch, n_seq_max, threads, flash_attn, n_rs_seq)
        native._load_log = []  # its log says what the memory takes (``devices.memory_mib``)
        try:
            with rpc_client.loading(self.rpc):
                ctx = _ll.llama_init_from_model(self._model, cparams)
        finally:
            self.memory_mib = devices.memory_mib(b"".join(native._load_log).decode("utf-8", "replace"))
            native._load_log = None
        if not ctx:
            self.close()
            raise UserError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.path}")
        return ctx

    def close(self) -> None:
        if self._ctx is not None:
            _ll.llama_free(self._ctx)
            self._ctx = None
        if self._model is not None:
            _ll.llama_model_free(self._model)
            self._model = None

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass

    def describe(self) -> dict:
        """This model's file and settings, the backend library, and ``figures()`` (as ``meta``), for reports."""
        return {
            "path": self.path,
            "n_ctx": self.n_ctx,
            "n_batch": self.n_batch,
            "n_threads": self.n_threads,
            "n_gpu_layers": self.n_gpu_layers,
            "flash_attn": self.flash_attn,
            "rpc": self.rpc,
            "devices": self.devices,
            "memory": self.memory,
            "rollback": self.rollback,
            "kv_bytes": self.kv_bytes(),
            "state_bytes": self.state_bytes(),
            "llama_cpp_python": _ll.__version__,
            "gpu_offload_supported": bool(_ll.llama_supports_gpu_offload()),
            "meta": self.figures(),
        }

    def figures(self) -> dict:
        """The model's own figures, as llama.cpp's server reports them per model: vocabulary
        type and size, training context, embedding width, parameters and size in bytes."""
        return {
            "vocab_type": int(_ll.llama_vocab_type(self._vocab)),
            "n_vocab": self.n_vocab,
            "n_ctx_train": int(_ll.llama_model_n_ctx_train(self._model)),
            "n_embd": int(_ll.llama_model_n_embd(self._model)),
            "n_params": int(_ll.llama_model_n_params(self._model)),
            "size": int(_ll.llama_model_size(self._model)),
        }

    def cost_key(self) -> str:
        """What a decode's cost depends on: the model's content (``content_key``: size and
        a hash of its header and tail, never the file's path or modification time), the build
        (llama-cpp-python's version and the ggml features it runs with), threads, offloaded
        layers, context, flash attention, RPC workers and slots."""
        return json.dumps([self.content_key(), _ll.__version__, native.build_key(), self.n_threads,
                           self.n_gpu_layers, self.n_ctx, self.flash_attn, self.rpc or "", self.n_slots])

    def content_key(self) -> str:
        """The model file's size and the SHA-256 of its first MiB (the GGUF header) and last
        64 KiB: the same model copied, moved or touched keeps its key; another has another."""
        if getattr(self, "_content_key", None) is None:
            size = os.path.getsize(self.path)
            h = hashlib.sha256()
            with open(self.path, "rb") as f:
                h.update(f.read(1 << 20))
                f.seek(max(0, size - (1 << 16)))
                h.update(f.read())
            self._content_key = f"{size}:{h.hexdigest()[:24]}"
        return self._content_key


def cpu_flash_attn(flash_attn: bool | None, layer_devices: list[str], rpc: str | None) -> bool | None:
    """The flash-attention setting a model's context gets: as asked, and when not asked
    (None), off where every layer runs on the CPU, else llama.cpp's choice.

    On the CPU, ggml's flash-attention kernel walks the cache once per query row, where the
    plain path multiplies the cache by all rows at once: a speculative step's rows then cost
    more with it.  Measured on a 2-core AMD EPYC, Qwen2.5-Coder-1.5B Q4_K_M, 2 threads, after
    3,000 tokens: one decode of 16 rows cost 10.2-10.6x one row with it and 7.6x without,
    32 rows 18.7-19.2x and 13.3x; one row and a prefill cost the same either way."""
    if flash_attn is not None:
        return bool(flash_attn)
    if rpc or any(d != "CPU" for d in layer_devices):
        return None
    return False
