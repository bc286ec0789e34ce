"""``rpc-worker``: serve this machine's device to a target running elsewhere, through ggml's
RPC backend (the same server as llama.cpp's ``rpc-server``, from the installed package).

ggml's RPC protocol has neither authentication nor encryption, so a worker binds to loopback
unless ``allow_remote`` is set, and then says so.  Reach a remote worker over a trusted
network or an SSH tunnel.  A worker serves one client at a time.

``run_worker`` checks what it can before ggml takes over (the host, the cache directory, the
port), runs ggml's server in a thread (it blocks in C, where Ctrl-C cannot reach it), and
returns on Ctrl-C.  It reports through ``say`` and never prints itself.  No model, no engine.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import threading

from . import backend
from ..config import WorkerParams
from ..errors import UserError

__all__ = ["ipv4_address", "is_loopback", "run_worker"]

_STARTED = 0.5  # seconds: a server still running after this has bound its port


def ipv4_address(host: str) -> str:
    """The IPv4 address ``host`` names (ggml's server binds IPv4 literals only)."""
    try:
        return socket.gethostbyname(host)
    except OSError as e:
        raise UserError(f"cannot listen on {host}: no IPv4 address ({getattr(e, 'strerror', None) or e})") from None


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _check_port(host: str, port: int) -> None:
    """One line for a port that is taken (ggml would only print a bare failure)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ggml's server does
            s.bind((host, port))
    except OSError as e:
        why = "the port is in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise UserError(f"cannot listen on {host}:{port}: {why}") from None


def _cache_dir(path: str | None) -> str | None:
    if path is None:
        return None
    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot use cache directory {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"cannot use cache directory {path}: permission denied")
    return path


def run_worker(params: WorkerParams, say) -> None:
    """Serve until Ctrl-C (``KeyboardInterrupt`` propagates to the caller, the server still
    running in a daemon thread: end the process).  ``say(line)`` gets the start-up line and
    any warning.  ``UserError`` for a host, cache directory or port that cannot be used."""
    host = ipv4_address(params.host)
    remote = not is_loopback(host)
    if remote and not params.allow_remote:
        raise UserError(f"cannot listen on {params.host} without --allow-remote: ggml's RPC protocol has no "
                        f"authentication or encryption, so anyone who can reach the port could use this worker "
                        f"(bind 127.0.0.1 and use an SSH tunnel, or a trusted network)")
    cache = _cache_dir(params.cache_dir)
    threads = params.n_threads or max(1, os.cpu_count() or 1)
    _check_port(host, params.port)
    devices = backend.rpc_worker_devices()  # refuses a build without RPC
    if remote:
        say(f"warning: rpc-worker listens on {host}:{params.port} with no authentication and no "
            f"encryption: anyone who can reach it can use it; use a trusted network or an SSH tunnel")
    server = threading.Thread(target=backend.serve_rpc_worker, name="rpc-worker", daemon=True,
                              args=(host, params.port, threads, cache))
    server.start()
    server.join(_STARTED)
    if not server.is_alive():
        raise UserError(f"cannot listen on {host}:{params.port} (ggml's server did not start)")
    say(f"rpc-worker serving {', '.join(devices)} on {host}:{params.port} with {threads} thread"
        f"{'s' if threads > 1 else ''}{f', cache {cache}' if cache else ''} (Ctrl-C stops it)")
    while server.is_alive():
        server.join(0.5)
    raise UserError(f"rpc-worker on {host}:{params.port} stopped (see ggml's message above)")
