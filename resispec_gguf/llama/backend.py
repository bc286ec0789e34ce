"""The llama.cpp backend: the one module that imports ``llama_cpp``.

``LlamaModel`` owns one GGUF model and one multi-sequence context and offers what the engine
needs, in NumPy terms:

* tokenize / token pieces / end-of-generation tokens / chat template / vocabulary facts;
* ``decode(tokens, parents, want_logits)``: one ``llama_decode`` of a *forest* of new nodes
  hanging off the committed sequence or off nodes decoded earlier in the same step (their KV
  layout: ``forest``);
* ``commit(path)``: keep one root-to-node path of uncommitted nodes, drop every other;
* ``sync_prefix(tokens)``: reuse the cached common prefix, evaluate the rest.

Slots (``protocol.SlotBackend``).  With ``n_slots`` > 1 the context holds that many
committed sequences, one per request, in one unified cache of ``n_slots * n_ctx`` cells:
``n_ctx`` is each slot's context.  ``decode_slots``/``commit_slots``/``sync_slot`` act on
several slots in one call; the single-sequence calls act on slot 0.

``describe`` reports a model's file, settings and the devices its layers are on (read off the
load log by ``devices``); ``quantize`` and ``build_facts`` serve ``buildcheck`` and ``doctor``.  For
``llama_draft.LlamaDraft``: ``LlamaDraftModel`` (llama-cpp-python's draft-model base class,
re-exported so that no other module imports llama_cpp) and ``llama_vocab_info`` (a
``llama_cpp.Llama``'s vocabulary facts).

RPC.  A target opened with ``rpc`` endpoints lists those workers' devices (ggml's RPC backend)
in ``llama_model_params.devices``, so its offloaded layers live there; the endpoints are not
added to ggml's device registry, so a model opened without ``rpc`` (the draft) stays on the
local devices.  Each worker is greeted first, and a worker failing while in use ends the
process with one line (``rpc_client``).  ``serve_rpc_worker`` is the other end: it serves
this machine's device.  The ggml functions this needs are bound in ``ggml``, on libllama's
handle passed from here.

Nothing ctypes leaves this module (and ``ggml``): results are Python ints/bytes and NumPy
arrays owned by the caller.  Errors a user can cause raise ``UserError`` / ``ContextFullError``.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading

import numpy as np

import llama_cpp as _ll
from llama_cpp.llama_speculative import LlamaDraftModel

from . import devices, ggml, rpc_client
from .forest import Forest
from .gguf_file import check_gguf_file
from .rpc_client import RPC_LOADING_EXIT, RPC_LOST_EXIT
from .vocab import TableTokenizer, VocabInfo
from ..errors import ContextFullError, UserError

__all__ = ["LlamaDraftModel", "LlamaModel", "LogitsRows", "RPC_LOADING_EXIT", "RPC_LOST_EXIT", "build_facts",
           "llama_vocab_info", "quantize", "rpc_hello", "rpc_supported", "rpc_worker_devices", "serve_rpc_worker",
           "set_verbose"]

_verbose = False
_load_log: list[bytes] | None = None  # llama.cpp's log while a model loads (devices.layer_devices reads it)


@_ll.llama_log_callback
def _log_callback(level, text, user_data):  # pragma: no cover - called from C
    if _load_log is not None:
        _load_log.append(text)
    if _verbose:
        try:
            os.write(2, text)
        except OSError:
            pass


_ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
_ll.llama_backend_init()


def set_verbose(verbose: bool) -> None:
    """Let llama.cpp's own logging through to stderr (silenced by default)."""
    global _verbose
    _verbose = bool(verbose)


class _Floats:
    """A C float buffer described to NumPy through the array interface."""

    __slots__ = ("__array_interface__",)


# llama_get_logits returning the address as an int: a function object of our own (llama_cpp's
# keeps its restype), so that no ctypes pointer is made and cast after each decode
_logits_address = _ll.llama_cpp._lib["llama_get_logits"]
_logits_address.argtypes = [ctypes.c_void_p]
_logits_address.restype = ctypes.c_void_p


def _readonly_floats(address: int, shape: tuple[int, int]) -> np.ndarray:
    """A read-only float32 view of ``shape`` at ``address`` (llama.cpp's buffer), through the
    array interface: ``np.ctypeslib.as_array`` with its ctypes array types and buffer
    protocol, and ``ctypes.cast``, cost ~15 us a decode from the cold caches a decode leaves."""
    buf = _Floats()
    buf.__array_interface__ = {"data": (address, True), "shape": shape, "typestr": "<f4", "version": 3}
    return np.asarray(buf)


class LogitsRows:
    """Logits of one decode, row by row on demand (float32 ``[V]`` each, read-only views of
    llama.cpp's own buffer: nothing is copied).

    Valid until the model's next decode; asking for a row later raises instead of returning
    garbage, and a row taken earlier must not be read after the next decode.
    """

    def __init__(self, model, generation, batch_index):
        self._model = model
        self._generation = generation
        self._index = batch_index  # [n_out] batch positions of the rows (a range when every node has one)

    def __len__(self):
        return len(self._index)

    def __getitem__(self, i: int) -> np.ndarray:
        m = self._model
        if self._generation == m._rows_of == m._generation:  # this decode's view is made already
            return m._rows[i]
        return m._row(self._generation, i, len(self._index))


def _context_params(n_ctx: int, n_batch: int, n_seq_max: int, threads: int, flash_attn: bool | None):
    """llama.cpp's context parameters: one batch a ubatch, a unified KV cache (``forest``'s
    layout needs it), no performance counters."""
    cparams = _ll.llama_context_default_params()
    cparams.n_ctx = int(n_ctx)
    cparams.n_batch = int(n_batch)
    cparams.n_ubatch = int(n_batch)
    cparams.n_seq_max = int(n_seq_max)
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    cparams.kv_unified = True
    # Flash attention: None lets llama.cpp decide (on where the backend supports it).  It
    # is faster, and exactness is defined against the target as evaluated in each batch,
    # which it does not change; but on the CPU it rounds through F16 in a way that
    # depends on where cells sit, so a node's logits differ slightly (1e-3 on F32 models)
    # between a tree decode and a sequential one.  Tests that compare the two turn it off.
    cparams.flash_attn_type = {
        None: _ll.LLAMA_FLASH_ATTN_TYPE_AUTO,
        True: _ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        False: _ll.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }[None if flash_attn is None else bool(flash_attn)]
    cparams.no_perf = True
    return cparams


class LlamaModel:
    """One GGUF model with a multi-sequence context (see the module docstring)."""

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
        self._ctx = self._new_context(per_slot * self.n_slots, n_batch, n_seq_max, threads, flash_attn)
        self._mem = _ll.llama_get_memory(self._ctx)
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
        global _load_log
        _load_log = []
        with rpc_client.loading(self.rpc):
            model = _ll.llama_model_load_from_file(self.path.encode(), mparams)
        self.devices, _load_log = devices.layer_devices(b"".join(_load_log).decode("utf-8", "replace")), None
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

    def _new_context(self, n_ctx: int, n_batch: int, n_seq_max: int, threads: int, flash_attn: bool | None):
        cparams = _context_params(n_ctx, n_batch, n_seq_max, threads, flash_attn)
        with rpc_client.loading(self.rpc):
            ctx = _ll.llama_init_from_model(self._model, cparams)
        if not ctx:
            self.close()
            raise UserError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.path}")
        return ctx

    def _new_batch(self):
        """A ``llama_batch`` of ``n_batch`` tokens pointing into buffers owned by NumPy."""
        n, s = self.n_batch, self.n_seq_max
        self._tok = np.zeros(n, np.int32)
        self._pos = np.zeros(n, np.int32)
        self._nseq = np.zeros(n, np.int32)
        self._seq = np.zeros((n, s), np.int32)
        self._out = np.zeros(n, np.int8)
        self._seq_ptrs = (self._seq.ctypes.data + np.arange(n, dtype=np.uint64) * self._seq.strides[0]).astype(np.uint64)
        batch = _ll.llama_batch()
        batch.token = self._tok.ctypes.data_as(ctypes.POINTER(_ll.llama_token))
        batch.embd = ctypes.POINTER(ctypes.c_float)()
        batch.pos = self._pos.ctypes.data_as(ctypes.POINTER(_ll.llama_pos))
        batch.n_seq_id = self._nseq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        batch.seq_id = self._seq_ptrs.ctypes.data_as(ctypes.POINTER(ctypes.POINTER(_ll.llama_seq_id)))
        batch.logits = self._out.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        return batch

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
        """This file (path, size, mtime) and the settings a decode's cost depends on."""
        st = os.stat(self.path)
        # no change to the keys cached before RPC and slots
        return json.dumps([os.path.abspath(self.path), st.st_size, int(st.st_mtime), self.n_threads,
                           self.n_gpu_layers, self.n_ctx, self.flash_attn]
                          + ([self.rpc] if self.rpc else []) + ([f"slots={self.n_slots}"] if self.n_slots > 1 else []))

    @property
    def bos(self) -> int:
        return int(_ll.llama_vocab_bos(self._vocab))

    @property
    def eos(self) -> int:
        return int(_ll.llama_vocab_eos(self._vocab))

    @property
    def add_bos(self) -> bool:
        return bool(_ll.llama_vocab_get_add_bos(self._vocab))

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[int(token)] = bool(_ll.llama_vocab_is_eog(self._vocab, int(token)))
        return eog

    @property
    def add_eos(self) -> bool:
        return bool(_ll.llama_vocab_get_add_eos(self._vocab))

    def special_tokens(self) -> list[tuple[str, int, bool, bool]]:
        """``(text, id, lstrip, rstrip)`` of every token that only ``parse_special=True`` makes
        out of text (control and unknown tokens), longest text first: the order in which
        llama.cpp looks for them.  Computed once."""
        if self._specials is None:
            attrs = _ll.LLAMA_TOKEN_ATTR_CONTROL | _ll.LLAMA_TOKEN_ATTR_UNKNOWN
            found = []
            for i in range(self.n_vocab):
                attr = int(_ll.llama_vocab_get_attr(self._vocab, i))
                if attr & attrs:
                    text = self.token_text(i)
                    if text:
                        found.append((len(text), i, text.decode("utf-8", "replace"),
                                      bool(attr & _ll.LLAMA_TOKEN_ATTR_LSTRIP), bool(attr & _ll.LLAMA_TOKEN_ATTR_RSTRIP)))
            found.sort(key=lambda f: (-f[0], f[1]))
            self._specials = [(text, i, lstrip, rstrip) for _, i, text, lstrip, rstrip in found]
        return self._specials

    def grammar_tokenizer(self):
        """The vocabulary as the grammar engine (llguidance) reads it, every end-of-generation
        token an end token, its tokenizer held to its token table (``vocab.TableTokenizer``).
        The table is llguidance's own reading of a llama.cpp vocabulary: each token's piece
        with special tokens shown, a control token (or a user-defined one spelled ``<...>``)
        after a 0xFF byte.  Slow (about a second at 152k tokens): the engine caches it."""
        try:
            import llguidance
        except ImportError as e:  # pragma: no cover - a dependency
            raise UserError(f"constrained generation needs llguidance: pip install llguidance ({e})") from None
        tokens, special = [], []
        for i in range(self.n_vocab):
            piece = self._piece(i, True)
            attr = int(_ll.llama_vocab_get_attr(self._vocab, i))
            if attr & _ll.LLAMA_TOKEN_ATTR_CONTROL or (
                    attr & _ll.LLAMA_TOKEN_ATTR_USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">")):
                piece = b"\xff" + piece
                special.append(i)
            tokens.append(piece)
        eog = [i for i in range(self.n_vocab) if _ll.llama_vocab_is_eog(self._vocab, i)]
        table = TableTokenizer(tokens, special, lambda data: self.tokenize(data, add_special=False, parse_special=False),
                               eos=eog[0] if eog else self.eos, bos=self.bos)
        return llguidance.LLTokenizer(table, n_vocab=self.n_vocab, eos_token=eog or None)

    def tokenize(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        try:
            data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        except UnicodeEncodeError as e:
            raise UserError(f"the text is not valid Unicode (a lone surrogate at character {e.start})") from None
        cap = len(data) + 16
        buf = (_ll.llama_token * cap)()
        n = _ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (_ll.llama_token * cap)()
            n = _ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_piece(self, token: int, special: bool = False) -> bytes:
        """Bytes this token contributes to the text (possibly part of a UTF-8 character); a
        special token adds its text when ``special`` or when it is one of ``shown_specials``."""
        key = 2 * int(token) + bool(special or int(token) in self.shown_specials)
        got = self._pieces.get(key)
        if got is None:
            got = self._pieces[key] = self._piece(key >> 1, bool(key & 1))
        return got

    def _piece(self, token: int, special: bool) -> bytes:
        """``llama_token_to_piece``'s bytes, through a per-thread buffer."""
        piece = getattr(self._local, "piece", None)
        if piece is None:
            piece = self._local.piece = ctypes.create_string_buffer(256)
        n = _ll.llama_token_to_piece(self._vocab, int(token), piece, 256, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = _ll.llama_token_to_piece(self._vocab, int(token), buf, -n, 0, special)
            return buf.raw[:n]
        return piece.raw[:n]

    def max_piece_bytes(self) -> int:
        """The most bytes of text any one token stands for (its piece; a control token's text).

        So a text of n bytes is at least ``n / max_piece_bytes()`` tokens.  Computed once, with
        a buffer of its own so that another thread may be decoding meanwhile."""
        if self._max_piece is None:
            buf = ctypes.create_string_buffer(256)
            longest = 1
            for i in range(self.n_vocab):
                n = _ll.llama_token_to_piece(self._vocab, i, buf, 256, 0, True)
                longest = max(longest, -n if n < 0 else n)
            self._max_piece = longest
        return self._max_piece

    def token_text(self, token: int) -> bytes:
        return _ll.llama_vocab_get_text(self._vocab, int(token)) or b""

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = _ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            _ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        return self.meta("tokenizer.chat_template")

    def vocab_info(self) -> VocabInfo:
        return _vocab_info(self._vocab)

    @property
    def cached(self) -> list[int]:
        """Slot 0's committed tokens."""
        return self._seqs[0]

    @property
    def n_past(self) -> int:
        return len(self._seqs[0])

    def slot_past(self, slot: int) -> int:
        return len(self._seqs[slot])

    def slot_tokens(self, slot: int) -> list[int]:
        return list(self._seqs[slot])

    def kv_bytes(self) -> int:
        """Bytes of the KV cache: keys and values (F16, llama.cpp's default) of every layer
        for every cell of the context (``n_slots * n_ctx`` cells)."""
        layers = int(_ll.llama_model_n_layer(self._model))
        head_dim = int(_ll.llama_model_n_embd(self._model)) // max(1, int(_ll.llama_model_n_head(self._model)))
        cells = int(_ll.llama_n_ctx(self._ctx))
        return 2 * layers * int(_ll.llama_model_n_head_kv(self._model)) * head_dim * 2 * cells

    def _decode_batch(self, n: int) -> None:
        """One ``llama_decode`` of the batch's first ``n`` tokens, waited for: on a GPU
        llama.cpp returns once the work is queued and waits at the first logits read, which
        would put the device's time into the host work after every decode (``bench``'s
        overhead per step, and the cost curves ``auto`` measures); every caller reads the
        rows next anyway."""
        self._batch.n_tokens = n
        self._generation += 1
        rc = _ll.llama_decode(self._ctx, self._batch)
        if rc == 1:
            raise ContextFullError(f"the context ({self.n_ctx} tokens) is full")
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc}")
        _ll.llama_synchronize(self._ctx)

    def _logits(self, n_out: int) -> np.ndarray:
        ptr = _ll.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab)).copy()  # [n_out, V]

    def _row(self, generation: int, i: int, n_out: int) -> np.ndarray:
        """Output row ``i`` of the decode ``generation`` (of ``n_out`` rows): a read-only view
        of llama.cpp's buffer, which holds the rows in batch order.  One view of the whole
        buffer per decode: viewing each row on its own costs ~5 us at 152k tokens."""
        if generation != self._generation:
            raise RuntimeError("logits rows are only readable until the next decode")
        if self._rows_of != generation:
            self._rows, self._rows_of = self._logits_view(n_out), generation
        return self._rows[i]

    def _logits_view(self, n_out: int) -> np.ndarray:
        """llama.cpp's logits buffer as a read-only ``[n_out, V]`` view, kept per ``n_out``
        while the buffer stays at the same address (a view is its address and shape, nothing
        more): a step's few row counts recur, and a new view costs ~10 us after a decode."""
        address = _logits_address(self._ctx)
        if address != self._views_at:
            self._views, self._views_at = {}, address
        rows = self._views.get(n_out)
        if rows is None:
            rows = self._views[n_out] = _readonly_floats(address, (n_out, self.n_vocab))  # [n_out, V]
        return rows

    def sync_prefix(self, tokens: list[int]) -> int:
        """Make sequence 0 hold ``tokens[:-1]`` plus nothing else; returns tokens reused.

        The last token is left out on purpose: it is the next step's root, decoded together
        with the first tree so that its logits come from that call.
        """
        return self.sync_slot(0, tokens)

    def sync_slot(self, slot: int, tokens: list[int]) -> int:
        """``sync_prefix`` for slot ``slot``'s sequence; the other slots keep theirs."""
        self.drop_uncommitted()
        cached = self._seqs[slot]
        _ll.llama_memory_seq_rm(self._mem, slot, len(cached), -1)  # anything an interrupt left behind
        want = list(tokens[:-1])
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"the prompt ({len(tokens)} tokens) does not fit the context ({self.n_ctx} tokens)")
        common = 0
        for a, b in zip(cached, want):
            if a != b:
                break
            common += 1
        if common < len(cached):
            _ll.llama_memory_seq_rm(self._mem, slot, common, -1)
            del cached[common:]
        try:
            self._append_seq(want[common:], logits=False, slot=slot)
        except ContextFullError:
            _ll.llama_memory_seq_rm(self._mem, slot, len(cached), -1)
            raise
        return common

    def save_slot(self, slot: int) -> np.ndarray:
        """``slot``'s committed KV state copied to host memory (llama.cpp's sequence state:
        each cell's position and keys/values, uint8 bytes), for ``load_slot`` into any slot of
        this model later.  Drops the uncommitted nodes first."""
        self.drop_uncommitted()
        _ll.llama_memory_seq_rm(self._mem, slot, len(self._seqs[slot]), -1)  # anything an interrupt left behind
        size = int(_ll.llama_state_seq_get_size_ext(self._ctx, slot, _ll.LLAMA_STATE_SEQ_FLAGS_NONE))
        state = np.empty(size, np.uint8)
        n = _ll.llama_state_seq_get_data_ext(self._ctx, state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size,
                                             slot, _ll.LLAMA_STATE_SEQ_FLAGS_NONE)
        return state[:n]

    def load_slot(self, slot: int, state: np.ndarray, tokens, keep: int) -> bool:
        """Put a ``save_slot`` state holding ``tokens`` into ``slot`` (whatever it held is
        gone) and keep its first ``keep`` tokens.  False when llama.cpp finds no room for its
        cells (the slot is then empty: prefill it as usual)."""
        self.drop_uncommitted()
        seq = self._seqs[slot]
        seq.clear()
        _ll.llama_memory_seq_rm(self._mem, slot, -1, -1)
        ok = _ll.llama_state_seq_set_data_ext(self._ctx, state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                              state.nbytes, slot, _ll.LLAMA_STATE_SEQ_FLAGS_NONE)
        if not ok:
            _ll.llama_memory_seq_rm(self._mem, slot, -1, -1)
            return False
        _ll.llama_memory_seq_rm(self._mem, slot, keep, -1)
        seq.extend(int(t) for t in tokens[:keep])
        return True

    def decode(self, tokens, parents, want_logits=None) -> "LogitsRows":
        """Decode new uncommitted nodes in one ``llama_decode``; returns their logits.

        Returns lazily copied rows (see ``LogitsRows``).  ``tokens``: ``[n]`` token ids.
        ``parents``: ``[n]`` for each node the index of its parent among this step's nodes
        (earlier calls first, then this call's, in order), or -1 for a node that follows the
        committed sequence directly.  Parents must come before their children.
        ``want_logits``: ``[n]`` bools (default all); rows are indexed by position among the
        nodes that want logits.  Node indices continue across calls until ``commit`` or
        ``drop_uncommitted``.
        """
        return self.decode_slots(tokens, parents, None, want_logits)

    def decode_slots(self, tokens, parents, slots, want_logits=None, prefill=None) -> "LogitsRows":
        """``decode`` of nodes of several slots (``slots[j]``: node j's; None: all slot 0).
        ``prefill``: ``{slot: tokens}`` appended to those slots' committed sequences in the
        same ``llama_decode`` (no rows; a slot with nodes of this step may not prefill)."""
        prefill = {int(s): list(p) for s, p in (prefill or {}).items() if len(p)}
        n = len(tokens)
        m = n + sum(len(p) for p in prefill.values())
        base = len(self._nodes)
        if n:
            pasts = [len(seq) for seq in self._seqs]
            depth_end = self._nodes.add(tokens, parents, pasts, n_batch=self.n_batch - (m - n),
                                        n_seq_max=self.n_seq_max, slots=slots)
            if depth_end > self.n_ctx or self._overfull():
                self._forget_nodes(base)
                raise ContextFullError(f"the context ({self.n_ctx} tokens) is full")
        try:
            self._check_prefill(prefill, m)
        except Exception:
            self._forget_nodes(base)
            raise
        if n:
            ids, counts, copies = self._nodes.cells(base)
            for src, dst, end in copies:
                _ll.llama_memory_seq_cp(self._mem, src, dst, -1, end)
            self._tok[:n] = tokens
            self._pos[:n] = self._nodes.pos[base:]
            self._nseq[:n] = counts
            self._seq[:n, : ids.shape[1]] = ids
        if want_logits is None:
            self._out[:n] = 1
            rows = range(n)
        else:
            out = np.asarray(want_logits, bool)
            self._out[:n] = out
            rows = np.flatnonzero(out)
        at = n
        for slot, chunk in prefill.items():  # after the nodes: their rows stay first in the buffer
            k, past = len(chunk), len(self._seqs[slot])
            self._tok[at:at + k] = chunk
            self._pos[at:at + k] = np.arange(past, past + k)
            self._nseq[at:at + k] = 1
            self._seq[at:at + k, 0] = slot
            self._out[at:at + k] = 0
            at += k
        try:
            self._decode_batch(m)
        except Exception:
            self._forget_nodes(base)
            for slot in prefill:
                _ll.llama_memory_seq_rm(self._mem, slot, len(self._seqs[slot]), -1)
            raise
        for slot, chunk in prefill.items():
            self._seqs[slot].extend(int(t) for t in chunk)
        return LogitsRows(self, self._generation, rows)

    def _check_prefill(self, prefill: dict, m: int) -> None:
        """``decode_slots``'s ``prefill`` fits: one batch of ``m`` tokens in all, each slot's
        context, and no slot that has nodes of this step."""
        if m == 0:
            raise ValueError("nothing to decode")
        if m > self.n_batch:
            raise ValueError(f"{m} tokens exceed the batch size {self.n_batch}")
        busy = set(self._nodes.slot)
        for slot, chunk in prefill.items():
            if not 0 <= slot < self.n_slots or slot in busy:
                raise ValueError(f"slot {slot} cannot prefill in this decode")
            if len(self._seqs[slot]) + len(chunk) > self.n_ctx:
                raise ContextFullError(f"the context ({self.n_ctx} tokens) is full")

    def _overfull(self) -> bool:
        """Whether a slot's committed plus uncommitted tokens exceed its context."""
        if self.n_slots == 1:
            return self.n_past + len(self._nodes) > self.n_ctx
        held = [len(seq) for seq in self._seqs]
        for slot in self._nodes.slot:
            held[slot] += 1
        return max(held) > self.n_ctx

    def _forget_nodes(self, keep: int) -> None:
        for sid, start in self._nodes.forget(keep):
            if sid < self.n_slots:  # a slot's root chain: its committed cells stay
                start = max(start, len(self._seqs[sid]))
            _ll.llama_memory_seq_rm(self._mem, sid, start, -1)

    def commit(self, path) -> None:
        """Append the uncommitted nodes ``path`` (a chain from a -1-parent node) to sequence
        0 and drop every other uncommitted node."""
        self.commit_slots({0: path})

    def commit_slots(self, paths) -> None:
        """``commit`` for several slots: ``paths[slot]`` joins that slot's sequence."""
        paths = {int(slot): self._nodes.chain(path, int(slot)) for slot, path in paths.items()}
        ids = self._nodes.seq
        for slot, path in paths.items():
            if path:
                seq = self._seqs[slot]
                on = 0  # the path's nodes on the slot's root chain (they carry its id already)
                while on < len(path) and ids[path[on]] == slot:
                    on += 1
                if on < len(path):  # the rest of the root chain leaves the slot, the rest of the path joins
                    _ll.llama_memory_seq_rm(self._mem, slot, len(seq) + on, -1)
                    _ll.llama_memory_seq_cp(self._mem, ids[path[-1]], slot, len(seq) + on, len(seq) + len(path))
                seq.extend(self._nodes.tok[i] for i in path)
        self.drop_uncommitted()  # and the root chain past a path that ends on it leaves the slot here

    def drop_uncommitted(self) -> None:
        # Every id in the cache but the slots' is one of this step's nodes', so removing those
        # ids is llama_memory_seq_keep of the slots; it is also several times cheaper than
        # seq_keep(0) for one slot, which re-indexes every committed cell (a cost that grows
        # with the context), where seq_rm touches only the cells that carry the id.
        if len(self._nodes):
            self._forget_nodes(0)

    def reset(self) -> None:
        self.drop_uncommitted()
        _ll.llama_memory_clear(self._mem, True)
        for seq in self._seqs:
            seq.clear()

    def logits_of_sequence(self, tokens) -> np.ndarray:
        """Logits after each token of ``tokens`` from a clean cache (test/analysis helper).

        Clears the cache first; afterwards the cache holds ``tokens``.  Returns ``[n, V]``.
        """
        self.reset()
        rows = self._append_seq(list(tokens), logits=True)
        return np.concatenate(rows) if rows else np.zeros((0, self.n_vocab), np.float32)

    def _append_seq(self, tokens: list[int], logits: bool, slot: int = 0) -> list[np.ndarray]:
        """Decode ``tokens`` onto ``slot``'s committed sequence in batch-sized chunks;
        returns the logits blocks ``[n, V]`` when ``logits``."""
        rows = []
        seq = self._seqs[slot]
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            n = len(chunk)
            self._tok[:n] = chunk
            self._pos[:n] = np.arange(len(seq), len(seq) + n)
            self._nseq[:n] = 1
            self._seq[:n, 0] = slot
            self._out[:n] = int(logits)
            self._decode_batch(n)
            if logits:
                rows.append(self._logits(n))
            seq.extend(chunk)
        return rows


def _vocab_info(v) -> VocabInfo:
    n = int(_ll.llama_vocab_n_tokens(v))
    return VocabInfo(
        vocab_type=int(_ll.llama_vocab_type(v)),
        n_vocab=n,
        bos=int(_ll.llama_vocab_bos(v)),
        eos=int(_ll.llama_vocab_eos(v)),
        add_bos=bool(_ll.llama_vocab_get_add_bos(v)),
        add_eos=bool(_ll.llama_vocab_get_add_eos(v)),
        texts=tuple(_ll.llama_vocab_get_text(v, i) or b"" for i in range(n)),
    )


def llama_vocab_info(llama) -> VocabInfo:
    """The vocabulary facts of a ``llama_cpp.Llama`` (what ``vocab.check_compatible`` compares)."""
    return _vocab_info(_ll.llama_model_get_vocab(llama.model))


RPC_REBUILD = rpc_client.rebuild_command(_ll.__version__)


def rpc_supported() -> bool:
    """Whether the installed llama-cpp-python was built with ggml's RPC backend."""
    return bool(_ll.llama_supports_rpc())


def _require_rpc() -> None:
    if not rpc_supported():
        raise UserError(f"this llama-cpp-python was built without RPC; rebuild it: {RPC_REBUILD}")


def quantize(src: str, dst: str, ftype: str = "Q4_K_M", n_threads: int = 1) -> None:
    """llama.cpp's quantizer: the F32/F16 GGUF ``src`` into ``dst`` as ``LLAMA_FTYPE_MOSTLY_<ftype>``."""
    params = _ll.llama_model_quantize_default_params()
    params.ftype, params.nthread = getattr(_ll, f"LLAMA_FTYPE_MOSTLY_{ftype}"), int(n_threads)
    if _ll.llama_model_quantize(os.fsencode(src), os.fsencode(dst), ctypes.byref(params)) != 0:
        raise UserError(f"llama.cpp could not quantize {src} to {ftype}")


def build_facts() -> dict:
    """This build's version, system info, GPU offload and RPC support, ggml devices and memory."""
    ggml.bind(_ll.llama_cpp._lib, _load_ggml)
    return {"llama_cpp_python": _ll.__version__, "gpu_offload": bool(_ll.llama_supports_gpu_offload()),
            "rpc": rpc_supported(), "system_info": (_ll.llama_print_system_info() or b"").decode("utf-8", "replace"),
            "devices": ggml.devices()}


def rpc_hello(host: str, port: int, timeout: float = rpc_client.HELLO_TIMEOUT) -> tuple[int, int, int]:
    """``rpc_client.hello`` for this llama-cpp-python: the worker's protocol version."""
    return rpc_client.hello(host, port, timeout, version=_ll.__version__)


def _load_ggml(name: str):  # pragma: no cover - a platform whose lookups stop at libllama
    from llama_cpp._ctypes_extensions import load_shared_library
    from pathlib import Path

    return load_shared_library(name, Path(_ll.__file__).resolve().parent / "lib")


def _rpc_function(name: str):
    """``ggml.rpc_function(name)``, with ggml bound to libllama; ``UserError`` without RPC."""
    _require_rpc()
    ggml.bind(_ll.llama_cpp._lib, _load_ggml)
    fn = ggml.rpc_function(name)
    if fn is None:
        raise UserError(f"this llama-cpp-python was built without RPC; rebuild it: {RPC_REBUILD}")
    return fn


def _rpc_devices(rpc: str):
    """A NULL-terminated ``ggml_backend_dev_t[]`` of the devices of every worker in ``rpc``
    (``rpc_client.devices``); installs the abort hook (``rpc_client.on_abort``)."""
    add_server = _rpc_function("ggml_backend_rpc_add_server")
    ggml.set_abort_hook(rpc_client.on_abort)
    devices = rpc_client.devices(rpc, add_server, ggml.registry_devices, version=_ll.__version__)
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)


def rpc_worker_devices() -> list[str]:
    """``"NAME (description)"`` of each device ``serve_rpc_worker`` would serve."""
    _require_rpc()
    ggml.bind(_ll.llama_cpp._lib, _load_ggml)
    return [ggml.device_label(d) for d in ggml.local_devices()]


def serve_rpc_worker(host: str, port: int, n_threads: int, cache_dir: str | None) -> None:
    """Serve this machine's devices to ggml RPC clients on ``host:port``, one client at a time;
    returns only if the server cannot start (ggml then says why on stderr).  Blocks in C: run it
    in a thread to keep Ctrl-C working.  ggml prints a few lines of its own on stdout."""
    start = _rpc_function("ggml_backend_rpc_start_server")
    start(f"{host}:{port}", cache_dir, n_threads, ggml.local_devices())
