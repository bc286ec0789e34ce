"""The few ggml C functions that llama_cpp does not bind: the device registry, the RPC backend's
entry points and the abort hook, for ``backend``'s RPC code (the target's workers, and
``rpc-worker``'s server), and the device list with memory for ``doctor``.

``bind(lib, load)`` declares them once, on libllama's own handle, which ``backend`` passes in:
it searches the libraries libllama depends on, whereas a wheel holds ``libggml-base.so`` and
``libggml-base.so.0`` as two copies of one file, and loading one by path could give a second
copy, with its own abort hook and device registry.

Plain Python in and out: registry and device handles are opaque ints, names are str; ctypes
stays inside this module.  Never imports llama_cpp (``backend`` does, and binds this module) and
nothing from the package.
"""

from __future__ import annotations

import ctypes

__all__ = ["bind", "device_label", "devices", "local_devices", "registry_devices", "rpc_function", "set_abort_hook"]

_abort_t = ctypes.CFUNCTYPE(None, ctypes.c_char_p)  # ggml.h: ggml_abort_callback_t
_p, _n, _s = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
_GGML = [  # (name, argument types, result type) in libggml
    ("ggml_backend_reg_by_name", [_s], _p),
    ("ggml_backend_dev_count", [], _n),
    ("ggml_backend_dev_get", [_n], _p),
]
_BASE = [  # in libggml-base
    ("ggml_backend_reg_get_proc_address", [_p, _s], _p),
    ("ggml_backend_reg_dev_count", [_p], _n),
    ("ggml_backend_reg_dev_get", [_p, _n], _p),
    ("ggml_backend_dev_name", [_p], _s),
    ("ggml_backend_dev_description", [_p], _s),
    ("ggml_backend_dev_type", [_p], ctypes.c_int),
    ("ggml_backend_dev_memory", [_p, ctypes.POINTER(_n), ctypes.POINTER(_n)], None),
    ("ggml_set_abort_callback", [_abort_t], _abort_t),
]
_bound = {"libs": None, "hook": None}  # (libggml, libggml_base); the abort hook, kept alive


def bind(lib, load) -> None:
    """Declare the functions on ``lib`` (libllama's handle), or where it does not reach them on
    ``load("ggml")`` and ``load("ggml-base")``.  Once; later calls do nothing."""
    if _bound["libs"] is not None:
        return
    try:
        lib.ggml_set_abort_callback, lib.ggml_backend_reg_by_name
        ggml = base = lib
    except AttributeError:  # pragma: no cover - a platform whose lookups stop at libllama
        ggml, base = load("ggml"), load("ggml-base")
    for target, table in ((ggml, _GGML), (base, _BASE)):
        for name, args, res in table:
            fn = getattr(target, name)
            fn.argtypes, fn.restype = args, res
    _bound["libs"] = (ggml, base)


def _libs():
    if _bound["libs"] is None:
        raise RuntimeError("ggml is not bound yet (backend binds it)")
    return _bound["libs"]


def set_abort_hook(hook) -> None:
    """Have ``hook(message: bytes | None)`` called when ggml is about to abort the process."""
    hook = _abort_t(hook)
    _libs()[1].ggml_set_abort_callback(hook)
    _bound["hook"] = hook


def _add_server(addr):
    fn = ctypes.CFUNCTYPE(_p, _s)(addr)
    return lambda endpoint: fn(endpoint.encode())


def _start_server(addr):
    fn = ctypes.CFUNCTYPE(None, _s, _s, _n, _n, ctypes.POINTER(_p))(addr)

    def start(endpoint: str, cache_dir: str | None, n_threads: int, devices: list) -> None:
        array = (_p * len(devices))(*devices)
        fn(endpoint.encode(), cache_dir.encode() if cache_dir else None, int(n_threads), len(devices), array)

    return start


_RPC_FUNCTIONS = {"ggml_backend_rpc_add_server": _add_server, "ggml_backend_rpc_start_server": _start_server}


def rpc_function(name: str):
    """The RPC backend's ``name``, or None when ggml has no RPC backend offering it:
    ``ggml_backend_rpc_add_server`` as ``add(endpoint) -> registry handle or None`` (connects to
    the worker), ``ggml_backend_rpc_start_server`` as ``start(endpoint, cache_dir, n_threads,
    devices)`` (serves until the process ends)."""
    ggml, base = _libs()
    reg = ggml.ggml_backend_reg_by_name(b"RPC")
    addr = base.ggml_backend_reg_get_proc_address(reg, name.encode()) if reg else None
    return _RPC_FUNCTIONS[name](addr) if addr else None


def registry_devices(reg) -> list:
    """The devices of registry ``reg`` (an RPC worker's, from ``add``)."""
    base = _libs()[1]
    return [base.ggml_backend_reg_dev_get(reg, i) for i in range(base.ggml_backend_reg_dev_count(reg))]


def local_devices() -> list:
    """What a worker serves: every GPU (integrated ones if there is no discrete one), else the
    CPU (ggml_backend_dev_type: 0 CPU, 1 GPU, 2 IGPU, 3 ACCEL)."""
    ggml, base = _libs()
    devices = [ggml.ggml_backend_dev_get(i) for i in range(ggml.ggml_backend_dev_count())]
    by_type = {t: [d for d in devices if base.ggml_backend_dev_type(d) == t] for t in (0, 1, 2)}
    return by_type[1] or by_type[2] or by_type[0][:1]


def device_label(device) -> str:
    """``"NAME (description)"`` of a device."""
    base = _libs()[1]
    name, description = base.ggml_backend_dev_name(device), base.ggml_backend_dev_description(device)
    return f"{name.decode()} ({description.decode().strip()})"


_TYPES = {0: "CPU", 1: "GPU", 2: "IGPU", 3: "ACCEL"}


def devices() -> list[dict]:
    """Every device in ggml's registry: ``name``, ``description``, ``type`` (CPU, GPU, IGPU,
    ACCEL) and ``free_mib``/``total_mib`` of memory as the device reports it."""
    ggml, base = _libs()
    out = []
    for i in range(ggml.ggml_backend_dev_count()):
        d = ggml.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        base.ggml_backend_dev_memory(d, ctypes.byref(free), ctypes.byref(total))
        out.append({"name": base.ggml_backend_dev_name(d).decode(),
                    "type": _TYPES.get(base.ggml_backend_dev_type(d), "?"),
                    "description": base.ggml_backend_dev_description(d).decode().strip(),
                    "free_mib": free.value >> 20, "total_mib": total.value >> 20})
    return out
