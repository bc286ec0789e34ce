"""Loopback ggml RPC workers for the tests: each one ``python -m resispec_gguf rpc-worker`` on
127.0.0.1 with one thread, started and stopped by the test that uses it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTED = "rpc-worker serving "


def skip_reason() -> str | None:
    """Why RPC tests cannot run here, or None."""
    from resispec_gguf.llama import backend

    if backend.rpc_supported():
        return None
    return ("llama-cpp-python was built without RPC: rebuild it with CMAKE_ARGS='-DGGML_RPC=on' "
            "(docs/rpc.md) to run the RPC tests")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1"}


class Worker:
    """One worker process; ``endpoint`` is ``127.0.0.1:PORT``; its stderr goes to a file."""

    def __init__(self, tmp: Path, *args: str, port: int | None = None):
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = tmp / f"rpc-worker-{self.port}.err"
        argv = ["rpc-worker", "--port", str(self.port), "--threads", "1", *args]
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "resispec_gguf", *argv], cwd=ROOT, env=env(),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    def wait_ready(self, timeout: float = 60) -> str:
        """The worker's start-up line, once it answers a client's greeting."""
        from resispec_gguf.llama import backend

        deadline = time.monotonic() + timeout
        while STARTED not in self.log.read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.05)
        backend.rpc_hello("127.0.0.1", self.port)
        return next(line for line in self.log.read_text().splitlines() if line.startswith(STARTED))

    def stop(self) -> int:
        """Ctrl-C; its exit status (killed if it does not stop within 10 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@contextlib.contextmanager
def workers(tmp: Path, n: int = 2):
    """``n`` ready workers; stopped on the way out."""
    started = []
    try:
        for _ in range(n):
            started.append(Worker(tmp))
        for w in started:
            w.wait_ready()
        yield started
    finally:
        for w in started:
            w.stop()


def endpoints(started) -> str:
    return ",".join(w.endpoint for w in started)
