"""The client side of ggml RPC that plain sockets can do: greeting workers, knowing which are in
use, and what a worker failure means.

ggml's RPC client aborts the process when a worker cannot be reached or fails.  So
``devices`` greets each new worker first (``hello``: one ``UserError`` naming an unreachable,
busy or incompatible worker), records it as in use, and has ``backend`` add it to ggml while
marked as loading (``loading`` marks a model's load the same way).  ``backend``'s abort hook
hands ggml's message to ``on_abort``, which ends the process with one line on stderr naming
the dead worker(s) and exit ``RPC_LOADING_EXIT`` (2, the worker failed while a model was
loading) or ``RPC_LOST_EXIT`` (3, afterwards): no C backtrace.  A worker that vanishes without
closing its connection (a cut cable) stalls the client until TCP gives up; a worker that dies
or is stopped closes it, and the client stops within a second.

No ctypes and no llama_cpp: ggml's calls come in as functions and its handles as opaque values
(``backend``, ``ggml``), with the installed llama-cpp-python's version for messages.  Imports
only ``config`` and ``errors``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
import types

from ..config import rpc_endpoints
from ..errors import UserError
from ..progress import slow_note

__all__ = ["CONNECT_TIMEOUT", "HELLO_TIMEOUT", "RPC_LOADING_EXIT", "RPC_LOST_EXIT", "dead_endpoints", "devices", "hello", "loading",
           "on_abort", "rebuild_command"]

RPC_LOADING_EXIT = 2  # a worker failed while a model was loading: as a user error
RPC_LOST_EXIT = 3  # a worker was lost afterwards (mid-generation)
HELLO_TIMEOUT = 5.0
# how long ggml's own connection to a greeted worker (its device list and memory) may take
CONNECT_TIMEOUT = 60.0
_RPC_HELLO = 14  # ggml-rpc.h: RPC_CMD_HELLO, fixed across protocol versions
_RPC_CAPS = 24  # ggml-rpc's hello request: connection capabilities, none asked for here

# the workers added to ggml, in order, and how many models are loading through them now
_state = types.SimpleNamespace(endpoints=[], loading=0)
_devices: dict[str, list] = {}  # each worker's devices, by endpoint
_lock = threading.Lock()


def rebuild_command(version: str) -> str:
    """How to rebuild llama-cpp-python ``version`` with ggml's RPC backend."""
    return ("CMAKE_ARGS='-DGGML_RPC=on' pip install --force-reinstall --no-deps --no-cache-dir "
            f"llama-cpp-python=={version}")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError("the worker closed the connection")
        data += chunk
    return data


def hello(host: str, port: int, timeout: float = HELLO_TIMEOUT, *, version: str) -> tuple[int, int, int]:
    """Greet the ggml RPC worker at ``host:port`` as ggml's client does; returns its protocol
    version.  ``UserError`` naming the endpoint when it cannot be reached or does not answer
    (``version``: this llama-cpp-python's, for the message).

    ggml's client aborts the process on any of these, so each endpoint is greeted here first.
    A worker serves one client at a time: one busy with another client does not answer."""
    endpoint = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(bytes([_RPC_HELLO]) + struct.pack("<Q", _RPC_CAPS) + bytes(_RPC_CAPS))
            size = struct.unpack("<Q", _recv_exact(sock, 8))[0]
            reply = _recv_exact(sock, size) if size < 4096 else b""
    except socket.timeout:
        raise UserError(f"RPC worker {endpoint} did not answer within {timeout:g} s (a worker serves one client "
                        f"at a time: is another one using it?)") from None
    except OSError as e:
        raise UserError(f"cannot reach RPC worker {endpoint}: {e.strerror or e} (is rpc-worker running there?)") from None
    if len(reply) < 3:
        raise UserError(f"RPC worker {endpoint} does not speak this llama.cpp's RPC protocol (install the same "
                        f"llama-cpp-python, {version}, on every machine)")
    return reply[0], reply[1], reply[2]


@contextlib.contextmanager
def loading(rpc):
    """While a model with ``rpc`` loads, a worker failure is a load error (exit 2)."""
    if rpc:
        _state.loading += 1
    try:
        yield
    finally:
        if rpc:
            _state.loading -= 1


def _address(host: str, port: int) -> tuple[str, int]:
    """Where ``host:port`` leads (IPv4, as ggml's client resolves it); the name itself when it
    does not resolve (greeting it then says so)."""
    try:
        return socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][:2]
    except (OSError, UnicodeError):
        return host, port


def _distinct(endpoints) -> None:
    """``UserError`` when two endpoints of one ``--rpc`` list reach the same worker: ggml would
    list its devices twice and wait for it forever."""
    seen: dict[tuple, str] = {}
    for host, port in endpoints:
        endpoint, addr = f"{host}:{port}", _address(host, port)
        first = seen.setdefault(addr, endpoint)
        if first != endpoint:
            raise UserError(f"--rpc: {first} and {endpoint} are the same worker ({addr[0]}:{addr[1]}); list each "
                            f"worker once")


def _stalled(endpoint: str) -> None:
    """ggml's connection to a greeted worker never finished: one line, exit 2 (it cannot be
    interrupted from Python)."""
    line = (f"RPC worker {endpoint} answered the greeting but not ggml's connection within {CONNECT_TIMEOUT:g} s "
            f"(is it another program, or stuck?)")
    try:
        os.write(2, f"\nresispec-gguf: error: {line}\n".encode())
    finally:
        os._exit(RPC_LOADING_EXIT)


def _watchdog(endpoint: str):
    """While ggml connects to ``endpoint``: past ``CONNECT_TIMEOUT``, ``_stalled``."""
    return slow_note(_stalled, endpoint, CONNECT_TIMEOUT)


def devices(rpc: str, add, members, *, version: str) -> list:
    """The device handles of every worker in ``rpc`` (``config.rpc_endpoints`` spelling), in
    order; each worker's are found once.  A worker seen for the first time is greeted
    (``hello``), recorded as in use, and added to ggml with ``add(endpoint)`` (its registry
    handle, falsy if none; a failure meanwhile is a load error); ``members(registry)`` lists its
    devices.  Handles are opaque to this module."""
    found = []
    endpoints = rpc_endpoints(rpc)
    named = [f"{h}:{p}" for h, p in endpoints]
    for endpoint in named:
        if named.count(endpoint) > 1:
            raise UserError(f"--rpc lists {endpoint} twice; list each worker once")
    _distinct(endpoints)
    with _lock:
        for host, port in endpoints:
            endpoint = f"{host}:{port}"
            if endpoint not in _devices:
                hello(host, port, version=version)
                _state.endpoints.append(endpoint)
                with loading(True), _watchdog(endpoint):
                    reg = add(endpoint)
                if not reg:
                    raise UserError(f"RPC worker {endpoint} offers no device")
                _devices[endpoint] = members(reg)
            found += _devices[endpoint]
    return found


def dead_endpoints() -> list[str]:
    """The endpoints in use that refuse a connection now: a worker that died.  (A live one
    busy with this client may leave a connection pending until it times out: not dead.)"""
    dead = []
    for endpoint in _state.endpoints:
        host, _, port = endpoint.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
        except (ConnectionRefusedError, socket.gaierror):
            dead.append(endpoint)
        except OSError:
            pass
    return dead


def on_abort(message: bytes | None) -> None:
    """ggml is about to abort the process (its RPC client does when a worker fails): say so on
    one line, naming the worker, and exit without ggml's backtrace.  Returns only for a message
    that is not about RPC, after printing it (ggml then aborts)."""
    text = (message or b"").decode("utf-8", "replace").strip()
    text = text.split(": ", 1)[-1] if text.split(":", 1)[0].endswith((".c", ".cpp", ".h")) else text
    if "RPC" not in text and "connect" not in text and "handshake" not in text:
        os.write(2, f"resispec-gguf: llama.cpp aborted: {text}\n".encode())
        return
    for _ in range(10):  # a killed worker's connection may close a moment before its port does
        dead = dead_endpoints()
        if dead:
            break
        time.sleep(0.1)
    dead = dead or _state.endpoints
    workers = "RPC worker" + ("s " if len(dead) > 1 else " ") + ", ".join(dead)
    if _state.loading:
        line, code = f"{workers} failed while the model loaded ({text})", RPC_LOADING_EXIT
    else:
        line, code = f"lost {workers} ({text}); stopping with exit {RPC_LOST_EXIT}", RPC_LOST_EXIT
    try:
        os.write(2, f"\nresispec-gguf: error: {line}\n".encode())
    finally:
        os._exit(code)
