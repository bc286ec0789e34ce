"""Tests for resispec_gguf.llama.rpc_client: greeting ggml RPC workers over plain sockets (fake
workers on loopback), the workers in use, and what a worker failure ends the process with (the
exit itself faked).  The real workers and ggml's client: test_rpc.py."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import types

import pytest

from resispec_gguf.errors import UserError
from resispec_gguf.llama import rpc_client

HELLO = bytes([14]) + struct.pack("<Q", 24) + bytes(24)  # RPC_CMD_HELLO, 24 capability bytes


@contextlib.contextmanager
def fake_worker(reply=None):
    """A one-connection server on loopback: it reads a hello and sends ``reply`` (bytes; None:
    it answers nothing and holds the connection).  Yields ``(port, received)``."""
    received = []
    done = threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def serve():
            conn, _ = server.accept()
            with conn:
                data = b""
                while len(data) < len(HELLO):
                    chunk = conn.recv(len(HELLO) - len(data))
                    if not chunk:
                        break
                    data += chunk
                received.append(data)
                if reply is not None:
                    conn.sendall(reply)
                else:
                    done.wait(5)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield server.getsockname()[1], received
        finally:
            done.set()
            thread.join(5)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fresh(monkeypatch):
    """Module state of its own: no worker in use, nothing loading."""
    state = types.SimpleNamespace(endpoints=[], loading=0)
    monkeypatch.setattr(rpc_client, "_state", state)
    monkeypatch.setattr(rpc_client, "_devices", {})
    return state


def test_rebuild_command_names_the_version_and_the_rpc_flag():
    command = rpc_client.rebuild_command("0.3.36")
    assert command.startswith("CMAKE_ARGS='-DGGML_RPC=on' pip install ")
    assert command.endswith("llama-cpp-python==0.3.36")


def test_hello_sends_ggml_greeting_and_reads_the_protocol_version():
    with fake_worker(struct.pack("<Q", 3) + bytes([3, 0, 1])) as (port, received):
        assert rpc_client.hello("127.0.0.1", port, version="9.9") == (3, 0, 1)
    assert received == [HELLO]


def test_a_worker_of_another_protocol_names_the_version_to_install():
    endpoint_reply = struct.pack("<Q", 1) + b"\x01"
    with fake_worker(endpoint_reply) as (port, _):
        with pytest.raises(UserError) as info:
            rpc_client.hello("127.0.0.1", port, version="9.9")
    assert str(info.value) == (f"RPC worker 127.0.0.1:{port} does not speak this llama.cpp's RPC protocol "
                               f"(install the same llama-cpp-python, 9.9, on every machine)")
    with fake_worker(struct.pack("<Q", 1 << 20)) as (port, _):  # an absurd size is not read
        with pytest.raises(UserError, match="does not speak"):
            rpc_client.hello("127.0.0.1", port, version="9.9")


def test_a_silent_worker_is_a_timeout_naming_it():
    with fake_worker(None) as (port, _):
        with pytest.raises(UserError) as info:
            rpc_client.hello("127.0.0.1", port, timeout=0.2, version="9.9")
    assert str(info.value) == (f"RPC worker 127.0.0.1:{port} did not answer within 0.2 s (a worker serves one "
                               f"client at a time: is another one using it?)")


def test_an_unreachable_or_closing_worker_is_one_line_naming_it():
    port = _closed_port()
    with pytest.raises(UserError, match=rf"^cannot reach RPC worker 127\.0\.0\.1:{port}: .*\(is rpc-worker running "
                                        rf"there\?\)$"):
        rpc_client.hello("127.0.0.1", port, version="9.9")
    with fake_worker(b"") as (port, _):  # reads the hello, closes without a reply
        with pytest.raises(UserError, match=rf"cannot reach RPC worker 127\.0\.0\.1:{port}: the worker closed the "
                                            rf"connection"):
            rpc_client.hello("127.0.0.1", port, version="9.9")


def test_loading_marks_only_a_model_on_workers_and_always_unmarks(fresh):
    with rpc_client.loading(None):
        assert fresh.loading == 0
    with rpc_client.loading("127.0.0.1:1"):
        assert fresh.loading == 1
        with rpc_client.loading("127.0.0.1:1"):
            assert fresh.loading == 2
    with pytest.raises(RuntimeError):
        with rpc_client.loading("127.0.0.1:1"):
            raise RuntimeError("load failed")
    assert fresh.loading == 0


def test_devices_greets_and_adds_each_worker_once(fresh, monkeypatch):
    greeted, added = [], []
    monkeypatch.setattr(rpc_client, "hello", lambda host, port, version: greeted.append((host, port, version)))

    def add(endpoint):
        added.append((endpoint, fresh.loading, list(fresh.endpoints)))
        return {"a:1": 100, "b:2": 200}[endpoint]

    def members(reg):
        return [reg + 1, reg + 2]

    got = rpc_client.devices("a:1,b:2", add, members, version="9.9")
    assert got == [101, 102, 201, 202]
    assert greeted == [("a", 1, "9.9"), ("b", 2, "9.9")]
    # each worker is in use from before ggml connects to it, and connecting is loading
    assert added == [("a:1", 1, ["a:1"]), ("b:2", 1, ["a:1", "b:2"])]
    assert fresh.loading == 0
    assert rpc_client.devices("b:2, a:1", add, members, version="9.9") == [201, 202, 101, 102]
    assert len(greeted) == 2 and len(added) == 2


def test_a_worker_without_a_registry_offers_no_device(fresh, monkeypatch):
    monkeypatch.setattr(rpc_client, "hello", lambda host, port, version: None)
    with pytest.raises(UserError, match=r"^RPC worker a:1 offers no device$"):
        rpc_client.devices("a:1", lambda endpoint: None, lambda reg: [1], version="9.9")
    assert fresh.endpoints == ["a:1"] and fresh.loading == 0
    assert rpc_client.devices("b:2", lambda endpoint: 5, lambda reg: [], version="9.9") == []  # a registry, empty


def test_dead_endpoints_are_those_refusing_a_connection(fresh):
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        alive = f"127.0.0.1:{live.getsockname()[1]}"
        dead = f"127.0.0.1:{_closed_port()}"
        fresh.endpoints[:] = [alive, dead]
        assert rpc_client.dead_endpoints() == [dead]


class _Exit(Exception):
    pass


@pytest.fixture
def process(monkeypatch):
    """``on_abort``'s stderr and exit, faked: ``said`` collects what it writes; exiting raises
    ``_Exit(code)``."""
    said = []

    def _exit(code):
        raise _Exit(code)

    monkeypatch.setattr(rpc_client, "os", types.SimpleNamespace(write=lambda fd, data: said.append((fd, data)),
                                                              _exit=_exit))
    monkeypatch.setattr(rpc_client, "time", types.SimpleNamespace(sleep=lambda s: None))
    return said


def test_an_abort_not_about_rpc_is_reported_and_left_to_ggml(fresh, process):
    assert rpc_client.on_abort(b"ggml.c:100: GGML_ASSERT(x) failed") is None
    assert process == [(2, b"resispec-gguf: llama.cpp aborted: GGML_ASSERT(x) failed\n")]
    rpc_client.on_abort(None)
    assert process[-1] == (2, b"resispec-gguf: llama.cpp aborted: \n")


def test_a_worker_lost_after_loading_ends_the_process_with_exit_3(fresh, process, monkeypatch):
    fresh.endpoints[:] = ["h:1", "h:2"]
    monkeypatch.setattr(rpc_client, "dead_endpoints", lambda: ["h:2"])
    with pytest.raises(_Exit) as info:
        rpc_client.on_abort(b"/src/ggml-rpc.cpp:579: Remote RPC server crashed or returned malformed response")
    assert info.value.args == (rpc_client.RPC_LOST_EXIT,) == (3,)
    assert process == [(2, b"\nresispec-gguf: error: lost RPC worker h:2 (Remote RPC server crashed or returned "
                           b"malformed response); stopping with exit 3\n")]


def test_a_worker_failing_while_loading_is_exit_2_naming_all_when_none_is_seen_dead(fresh, process, monkeypatch):
    fresh.endpoints[:] = ["h:1", "h:2"]
    fresh.loading = 1
    polls = []
    monkeypatch.setattr(rpc_client, "dead_endpoints", lambda: polls.append(1) or [])
    with pytest.raises(_Exit) as info:
        rpc_client.on_abort(b"failed to connect to h:2")
    assert info.value.args == (rpc_client.RPC_LOADING_EXIT,) == (2,)
    assert len(polls) == 10  # it waits a moment for a killed worker's port to close
    assert process == [(2, b"\nresispec-gguf: error: RPC workers h:1, h:2 failed while the model loaded (failed to "
                           b"connect to h:2)\n")]


def test_two_names_of_one_worker_are_refused_before_greeting_it(fresh, monkeypatch):
    greeted = []
    monkeypatch.setattr(rpc_client, "hello", lambda host, port, version: greeted.append(host))
    port = _closed_port()
    for spec, needle in [(f"127.0.0.1:{port},localhost:{port}", f"127.0.0.1:{port} and localhost:{port} are the "
                                                                f"same worker (127.0.0.1:{port})"),
                         (f"localhost:{port}, 127.0.0.1:{port}", "are the same worker"),
                         (f"127.0.0.1:{port},127.0.0.1:{port}", f"lists 127.0.0.1:{port} twice")]:
        with pytest.raises(UserError) as e:
            rpc_client.devices(spec, lambda endpoint: 1, lambda reg: [1], version="9.9")
        assert needle in str(e.value) and "\n" not in str(e.value)
    assert greeted == [] and fresh.endpoints == []
    # other ports of one host are other workers
    assert rpc_client.devices(f"127.0.0.1:{port},localhost:{port + 1 if port < 65535 else port - 1}",
                              lambda endpoint: 1, lambda reg: [reg], version="9.9") == [1, 1]


def test_a_worker_that_never_answers_ggmls_connection_is_refused_naming_it(fresh, monkeypatch):
    monkeypatch.setattr(rpc_client, "hello", lambda host, port, version: None)
    monkeypatch.setattr(rpc_client, "CONNECT_TIMEOUT", 0.01)
    stalled, released = [], threading.Event()

    def stall(endpoint):  # the real one writes one line and exits 2
        stalled.append(endpoint)
        released.set()

    monkeypatch.setattr(rpc_client, "_stalled", stall)

    def add(endpoint):  # ggml's connection, hanging until the watchdog fires
        assert released.wait(30)
        return 7

    assert rpc_client.devices("h:9", add, lambda reg: [reg], version="9.9") == [7]
    assert stalled == ["h:9"]


def test_the_stall_is_one_line_and_exit_2(fresh, process):
    with pytest.raises(_Exit) as info:
        rpc_client._stalled("h:9")
    assert info.value.args == (2,)
    (fd, data), = process
    assert fd == 2 and data.strip().decode().count("\n") == 0 and "RPC worker h:9" in data.decode()
