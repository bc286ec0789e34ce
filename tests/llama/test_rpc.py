"""The target on ggml RPC workers (``--rpc``, ``rpc-worker``), on loopback only.

Workers are ``rpc-worker`` processes on 127.0.0.1 with one thread, started and stopped here
(rpc_workers.py).  Through two of them the tiny target gives the tokens it gives locally, greedy
and seeded at T = 1: the workers run the same CPU kernels on the same rows, so the rows are
identical, not merely close.  A worker killed mid-generation ends the client with one line and
exit 3 within seconds.  Refusals that need no worker (a port in use, a non-loopback host, a
build without RPC) run on every build; the rest are skipped without an RPC build.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rpc_workers
from resispec_gguf.llama import backend, rpc
from resispec_gguf.llama.backend import native
from resispec_gguf.surfaces import cli
from resispec_gguf.config import DraftParams, SamplingParams, WorkerParams
from resispec_gguf.engine import Engine
from resispec_gguf.errors import UserError

needs_rpc = pytest.mark.skipif(rpc_workers.skip_reason() is not None, reason=str(rpc_workers.skip_reason()))
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    if rpc_workers.skip_reason():
        pytest.skip(rpc_workers.skip_reason())
    with rpc_workers.workers(tmp_path_factory.mktemp("rpc")) as started:
        yield started


def _load(pair, **settings) -> Engine:
    return Engine.load(str(pair[0]), str(pair[1]), n_ctx=512, n_threads=1, flash_attn=False, progress=False,
                       **settings)


def _one_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and not out.strip(), (out, err)
    return lines[0]


# ---------------------------------------------------------------------------------- exactness


@needs_rpc
def test_through_two_workers_the_output_is_the_local_output(tiny_pair, two_workers, capfd):
    greedy = SamplingParams(temperature=0.0, max_tokens=24)
    seeded = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7, max_tokens=24)
    runs = [(sp, DraftParams(method=m)) for sp in (greedy, seeded) for m in ("none", "resispec")]
    with _load(tiny_pair) as local:
        want = [local.generate(PROMPT, sp, dp).tokens for sp, dp in runs]
    endpoints = rpc_workers.endpoints(two_workers)
    capfd.readouterr()
    with _load(tiny_pair, n_gpu_layers=99, rpc=endpoints, verbose=True) as remote:
        log = capfd.readouterr().err
        assert remote.info()["target"]["rpc"] == endpoints and remote.info()["draft"]["rpc"] is None
        got = [remote.generate(PROMPT, sp, dp).tokens for sp, dp in runs]
    # llama.cpp's load log: the target's weights sit on both workers, the draft's on the CPU
    for i, worker in enumerate(two_workers):
        assert f"using device RPC{i} ({worker.endpoint})" in log, log[-3000:]
        assert f"RPC0[{worker.endpoint}] model buffer size" in log, log[-3000:]
    assert got == want


# ---------------------------------------------------------------------------------- faults


@needs_rpc
def test_a_worker_killed_mid_generation_ends_generate_in_seconds(tiny_pair, tmp_path):
    with rpc_workers.workers(tmp_path) as (first, second):
        argv = ["generate", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--threads", "1",
                "--rpc", rpc_workers.endpoints([first, second]), "-ngl", "99", "--ctx", "2048", "-n", "2000",
                "--temp", "0", "--method", "none", PROMPT]
        p = subprocess.Popen([sys.executable, "-m", "resispec_gguf", *argv], cwd=rpc_workers.ROOT,
                             env=rpc_workers.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            assert p.stdout.read(1), "no output before the worker was killed"  # it is generating
            second.kill()
            killed = time.monotonic()
            out, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
        elapsed = time.monotonic() - killed
    err = err.decode(errors="replace")
    # the start-up's notes (the build check, kernels, costs) come first; the fault is one line, the last
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("resispec-gguf: error:")]
    assert p.returncode == backend.RPC_LOST_EXIT and elapsed < 10, (p.returncode, elapsed, err)
    assert errors == lines[-1:] and errors[0].startswith(f"resispec-gguf: error: lost RPC worker {second.endpoint} "), err
    assert "Traceback" not in err, err


@needs_rpc
def test_a_worker_down_at_start_up_is_one_line_naming_it(tiny_pair, capsys):
    endpoint = f"127.0.0.1:{rpc_workers.free_port()}"
    rc = cli.main(["generate", "--target", str(tiny_pair[0]), "--draft", "", "--rpc", endpoint, "-ngl", "99", "hi"])
    assert rc == 2 and f"cannot reach RPC worker {endpoint}" in _one_line(capsys)


@needs_rpc
def test_two_names_of_one_worker_are_one_line_not_a_hang(tiny_pair, two_workers, capsys):
    port = rpc_workers.endpoints(two_workers).split(",")[0].rpartition(":")[2]
    rpc_arg = f"127.0.0.1:{port},localhost:{port}"
    rc = cli.main(["generate", "--target", str(tiny_pair[0]), "--draft", "", "--rpc", rpc_arg, "-ngl", "99", "hi"])
    line = _one_line(capsys)
    assert rc == 2 and f"127.0.0.1:{port} and localhost:{port} are the same worker" in line


@needs_rpc
def test_a_worker_answering_the_greeting_but_not_ggml_is_one_line_not_a_hang(tiny_pair):
    # a fake worker: it answers the first connection's hello, then holds ggml's connection
    import struct
    import threading

    held = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def serve():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                held.append(conn)
                conn.recv(33)
                conn.sendall(struct.pack("<Q", 3) + bytes([3, 0, 0]))
                while True:
                    held.append(server.accept()[0])

        threading.Thread(target=serve, daemon=True).start()
        code = ("import sys; from resispec_gguf.llama import rpc_client; rpc_client.CONNECT_TIMEOUT = 2; "
                "from resispec_gguf.surfaces import cli; sys.exit(cli.main(sys.argv[1:]))")
        r = subprocess.run([sys.executable, "-c", code, "generate", "--target", str(tiny_pair[0]), "--draft", "",
                            "--rpc", f"127.0.0.1:{port}", "-ngl", "99", "hi"], capture_output=True, text=True,
                           timeout=120, cwd=Path(__file__).resolve().parents[2])
        for conn in held:
            conn.close()
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"RPC worker 127.0.0.1:{port} answered the greeting but not ggml's connection" in lines[0]


def test_without_an_rpc_build_rpc_is_one_line_naming_the_rebuild(tiny_pair, monkeypatch, capsys):
    monkeypatch.setattr(native, "rpc_supported", lambda: False)  # where the RPC calls look it up
    rc = cli.main(["generate", "--target", str(tiny_pair[0]), "--rpc", "127.0.0.1:50052", "hi"])
    assert rc == 2 and "-DGGML_RPC=on" in _one_line(capsys)
    port = rpc_workers.free_port()
    assert cli.main(["rpc-worker", "--port", str(port)]) == 2 and "-DGGML_RPC=on" in _one_line(capsys)


# ---------------------------------------------------------------------------------- the worker


def test_rpc_worker_refuses_a_port_in_use(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["rpc-worker", "--port", str(port)]) == 2
    assert _one_line(capsys) == f"resispec-gguf: error: cannot listen on 127.0.0.1:{port}: the port is in use"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1"])
def test_rpc_worker_refuses_a_non_loopback_host_without_the_flag(host, capsys):
    assert cli.main(["rpc-worker", "--host", host, "--port", str(rpc_workers.free_port())]) == 2
    line = _one_line(capsys)
    assert f"cannot listen on {host} without --allow-remote" in line and "SSH tunnel" in line


def test_rpc_worker_with_the_flag_warns_before_serving(monkeypatch):
    """The order of events on a non-loopback host, with ggml's server faked (no binding)."""
    monkeypatch.setattr(rpc, "is_loopback", lambda address: False)
    monkeypatch.setattr(rpc, "_check_port", lambda host, port: None)
    monkeypatch.setattr(backend, "rpc_worker_devices", lambda: ["CPU (fake)"])
    monkeypatch.setattr(backend, "serve_rpc_worker", lambda *args: time.sleep(1.0))
    said = []
    with pytest.raises(UserError, match="stopped"):
        rpc.run_worker(WorkerParams(host="192.0.2.1", allow_remote=True, n_threads=1), said.append)
    assert said[0].startswith("warning: rpc-worker listens on 192.0.2.1:50052 with no authentication")
    assert said[1].startswith("rpc-worker serving CPU (fake) on 192.0.2.1:50052 with 1 thread")


@needs_rpc
def test_rpc_worker_stops_cleanly_on_ctrl_c(tmp_path):
    worker = rpc_workers.Worker(tmp_path)
    try:
        line = worker.wait_ready()
    finally:
        rc = worker.stop()
    assert line.startswith(f"rpc-worker serving CPU") and f"on {worker.endpoint} with 1 thread" in line
    assert rc == 130 and "Traceback" not in worker.log.read_text(), worker.log.read_text()
