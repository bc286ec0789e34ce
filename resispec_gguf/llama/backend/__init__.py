"""The llama.cpp backend: the one package that imports ``llama_cpp``.

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

The modules, by what changes together: ``native`` (llama.cpp's log, read-only float views,
context parameters, the RPC entry points, ``quantize``, ``build_facts``), ``tokens`` (the
vocabulary), ``batches`` (batches, decodes, logits rows), ``kv`` (the KV-cache bookkeeping),
``recurrent`` (recurrent and hybrid memory: its kind, and a step undone by snapshot or
checkpoint) and ``model`` (``LlamaModel``: opening, describing and freeing a model, with the other three
as its mixins).  Use the names re-exported here; the submodules are the package's own.

Nothing ctypes leaves this package (and ``ggml``): results are Python ints/bytes and NumPy
arrays owned by the caller.  Errors a user can cause raise ``UserError`` / ``ContextFullError``.
Imports ``llama_cpp``, the ``llama`` modules it names and ``errors``; nothing above ``llama``.
"""

from __future__ import annotations

from ..rpc_client import RPC_LOADING_EXIT, RPC_LOST_EXIT
from .batches import LogitsRows
from .model import LlamaModel
from .native import (RPC_REBUILD, LlamaDraftModel, _ll, _load_ggml, build_facts, quantize, rpc_hello,  # noqa: F401
                     rpc_supported, rpc_worker_devices, serve_rpc_worker, set_verbose)
from .tokens import llama_vocab_info

__all__ = ["LlamaDraftModel", "LlamaModel", "LogitsRows", "RPC_LOADING_EXIT", "RPC_LOST_EXIT", "build_facts",
           "llama_vocab_info", "quantize", "rpc_hello", "rpc_supported", "rpc_worker_devices", "serve_rpc_worker",
           "set_verbose"]
