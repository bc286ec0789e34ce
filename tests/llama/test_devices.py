"""Tests for resispec_gguf.llama.devices: the devices read off llama.cpp's load log, the
devices a build can offload to, the start-up line's part and the ``-ngl`` warning."""

from __future__ import annotations

from resispec_gguf.llama import devices

LOG = """load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors: layer   0 assigned to device CUDA0, is_swa = 0
load_tensors: layer   1 assigned to device CUDA0, is_swa = 0
load_tensors: layer   2 assigned to device RPC0[127.0.0.1:50052], is_swa = 0
load_tensors: layer   3 assigned to device CPU, is_swa = 0
load_tensors:   CPU_Mapped model buffer size =     0.44 MiB
"""


def test_layer_devices_in_layer_order_each_once():
    assert devices.layer_devices(LOG) == ["CUDA0", "RPC0[127.0.0.1:50052]", "CPU"]
    assert devices.layer_devices("nothing here") == ["CPU"]


def test_offload_devices_are_the_ones_that_are_not_the_cpu():
    listed = [{"name": "CPU", "type": "CPU"}, {"name": "CUDA0", "type": "GPU"}, {"name": "Vulkan0", "type": "IGPU"}]
    assert devices.offload_devices(listed) == ["CUDA0", "Vulkan0"]
    assert devices.offload_devices(listed[:1]) == []


def test_summary_names_each_model_s_devices():
    info = {"target": {"devices": ["CUDA0", "CPU"]}, "draft": {"devices": ["CPU"]}}
    assert devices.summary(info) == "target on CUDA0, CPU; draft on CPU"
    assert devices.summary({"target": {"devices": ["CPU"]}, "draft": None}) == "target on CPU"


def test_the_cpu_only_warning_only_when_layers_were_asked_for_and_none_left_the_cpu():
    cpu = {"target": {"devices": ["CPU"]}, "draft": {"devices": ["CPU"]}}
    asked = {"n_gpu_layers": 99, "draft_gpu_layers": None}
    line = devices.cpu_only_warning(asked, cpu, "0.3.36")
    assert line.startswith("warning: -ngl 99 and -ngld 99,") and "\n" not in line and "-DGGML_CUDA=on" in line
    assert devices.cpu_only_warning({"n_gpu_layers": 0, "draft_gpu_layers": None}, cpu, "0.3.36") is None
    only_draft = devices.cpu_only_warning({"n_gpu_layers": 0, "draft_gpu_layers": 5}, cpu, "0.3.36")
    assert only_draft.startswith("warning: -ngld 5,")
    gpu = {"target": {"devices": ["CUDA0"]}, "draft": {"devices": ["CUDA0"]}}
    assert devices.cpu_only_warning(asked, gpu, "0.3.36") is None
    assert devices.cpu_only_warning(asked, {"target": {"devices": ["CPU"]}, "draft": None}, "0.3.36").startswith(
        "warning: -ngl 99,")


def test_with_rpc_the_draft_stays_local_unless_ngld_asks():
    info = {"target": {"devices": ["RPC0"]}, "draft": {"devices": ["CPU"]}}
    assert devices.cpu_only_warning({"n_gpu_layers": 99, "draft_gpu_layers": None, "rpc": "h:1"}, info, "v") is None
    line = devices.cpu_only_warning({"n_gpu_layers": 99, "draft_gpu_layers": 9, "rpc": "h:1"}, info, "v")
    assert line.startswith("warning: -ngld 9,")
