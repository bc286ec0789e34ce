"""Tests for resispec_gguf.llama.ggml: the ggml functions llama_cpp does not bind, declared on
libllama's handle (which ``backend`` passes in).  ggml's RPC client and server on real workers:
test_rpc.py."""

from __future__ import annotations

import pytest

from resispec_gguf.llama import backend, ggml, rpc_client


@pytest.fixture
def bound():
    ggml.bind(backend._ll.llama_cpp._lib, backend._load_ggml)
    return ggml


def test_nothing_is_reachable_before_bind(monkeypatch):
    monkeypatch.setitem(ggml._bound, "libs", None)
    with pytest.raises(RuntimeError, match="not bound"):
        ggml.local_devices()


def test_bind_declares_once(bound):
    libs = ggml._bound["libs"]
    ggml.bind(object(), None)  # a second bind does nothing, whatever it is given
    assert ggml._bound["libs"] is libs


def test_a_worker_serves_the_local_devices_as_plain_values(bound):
    devices = ggml.local_devices()
    assert devices and all(isinstance(d, int) for d in devices)
    labels = [ggml.device_label(d) for d in devices]
    assert all(isinstance(label, str) and label.endswith(")") and " (" in label for label in labels)
    assert backend.rpc_worker_devices() == labels


def test_the_rpc_entry_points_are_python_functions(bound):
    if not backend.rpc_supported():
        pytest.skip("llama-cpp-python built without RPC")
    assert callable(ggml.rpc_function("ggml_backend_rpc_add_server"))
    assert callable(ggml.rpc_function("ggml_backend_rpc_start_server"))


def test_the_abort_hook_is_kept_alive(bound):
    seen = []
    try:
        ggml.set_abort_hook(seen.append)
        first = ggml._bound["hook"]
        assert first is not None and first.__class__.__name__ == "CFunctionType"
    finally:
        ggml.set_abort_hook(rpc_client.on_abort)  # as backend installs it
    assert ggml._bound["hook"] is not first and seen == []


def test_the_device_list_is_plain_values_with_memory(bound):
    listed = ggml.devices()
    assert listed and any(d["type"] == "CPU" for d in listed)
    for d in listed:
        assert set(d) == {"name", "type", "description", "free_mib", "total_mib"}
        assert isinstance(d["name"], str) and d["type"] in ("CPU", "GPU", "IGPU", "ACCEL")
        assert 0 <= d["free_mib"] <= d["total_mib"] or d["total_mib"] == 0
