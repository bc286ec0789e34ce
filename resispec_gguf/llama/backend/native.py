"""The ctypes side of the backend: what talks to llama.cpp and ggml below the model object.

llama.cpp's log (silenced unless ``set_verbose``; captured while a model loads, for
``devices``), read-only NumPy views of llama.cpp's float buffers (``_readonly_floats``), the
context parameters (``_context_params``), the RPC entry points (``rpc_supported``,
``rpc_worker_devices``, ``serve_rpc_worker``, ``rpc_hello``, and ``_rpc_devices`` for a
target's workers; ggml bound on libllama's handle through ``ggml``), and ``quantize`` /
``build_facts`` for ``buildcheck`` and ``doctor``.  Importing it sets llama.cpp's log callback
and initialises its backend, once.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

import llama_cpp as _ll
from llama_cpp.llama_speculative import LlamaDraftModel  # noqa: F401 - re-exported by the package

from .. import ggml, rpc_client
from ...errors import UserError


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


def _context_params(n_ctx: int, n_batch: int, n_seq_max: int, threads: int, flash_attn: bool | None,
                    n_rs_seq: int = 0):
    """llama.cpp's context parameters: one batch a ubatch, a unified KV cache (``forest``'s
    layout needs it), ``n_rs_seq`` recurrent-state snapshots per sequence (``recurrent``), no
    performance counters."""
    cparams = _ll.llama_context_default_params()
    cparams.n_ctx = int(n_ctx)
    cparams.n_batch = int(n_batch)
    cparams.n_ubatch = int(n_batch)
    cparams.n_seq_max = int(n_seq_max)
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    cparams.kv_unified = True
    cparams.n_rs_seq = int(n_rs_seq)
    # Flash attention: None lets llama.cpp decide (on where the backend supports it;
    # ``model.cpu_flash_attn`` turns it off first for a model on the CPU alone).  Exactness
    # is defined against the target as evaluated in each batch, which it does not change;
    # but on the CPU it rounds through F16 in a way that
    # depends on where cells sit, so a node's logits differ slightly (1e-3 on F32 models)
    # between a tree decode and a sequential one.  Tests that compare the two turn it off.
    cparams.flash_attn_type = {
        None: _ll.LLAMA_FLASH_ATTN_TYPE_AUTO,
        True: _ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        False: _ll.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }[None if flash_attn is None else bool(flash_attn)]
    cparams.no_perf = True
    return cparams


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


def build_key() -> str:
    """The build as a decode's cost sees it: a hash of llama.cpp's system info (the ggml
    features and backends it was compiled with)."""
    import hashlib

    return hashlib.sha256(_ll.llama_print_system_info() or b"").hexdigest()[:12]


def build_facts() -> dict:
    """This build's version, system info, GPU offload and RPC support, ggml devices and memory,
    and whether it keeps recurrent-state snapshots (``rs_snapshots``: ``llama_n_rs_seq`` and
    the ``n_rs_seq`` context parameter, which rolling back a recurrent or hybrid model needs)."""
    ggml.bind(_ll.llama_cpp._lib, _load_ggml)
    snapshots = hasattr(_ll, "llama_n_rs_seq") and any(f[0] == "n_rs_seq" for f in _ll.llama_context_params._fields_)
    return {"llama_cpp_python": _ll.__version__, "gpu_offload": bool(_ll.llama_supports_gpu_offload()),
            "rpc": rpc_supported(), "system_info": (_ll.llama_print_system_info() or b"").decode("utf-8", "replace"),
            "devices": ggml.devices(), "rs_snapshots": bool(snapshots)}


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
