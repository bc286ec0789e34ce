"""Tests for resispec_gguf.llama.devices: the devices read off llama.cpp's load log, the
devices a build can offload to, the start-up line's part, the memory sizes read off a
context's creation log and the ``-ngl`` warning."""

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


def test_summary_names_a_recurrent_or_hybrid_model_s_memory():
    hybrid = {"devices": ["CPU"], "memory": "hybrid", "rollback": 8, "state_bytes": 3 * 2**19}
    assert devices.summary({"target": hybrid, "draft": {"devices": ["CPU"], "memory": "attention"}}) == (
        "target on CPU (hybrid memory, rollback 8 tokens, recurrent state 1.50 MiB); draft on CPU")
    plain = {"devices": ["CPU"], "memory": "recurrent", "rollback": 0, "state_bytes": 40 * 2**20}
    assert devices.summary({"target": plain}) == (
        "target on CPU (recurrent memory, rollback 0 tokens: plain decoding, recurrent state 40 MiB)")


CONTEXT_LOG = """llama_kv_cache:        CPU KV buffer size =     0.03 MiB
llama_kv_cache: size =   12.50 MiB (   256 cells,   1 layers,  2/1 seqs), K (f16):    0.02 MiB, V (f16):    0.02 MiB
llama_kv_cache: size =    4.00 MiB (   512 cells,   3 layers,  1/1 seqs), K (f16):    2.00 MiB, V (f16):    2.00 MiB
llama_memory_recurrent:        CPU RS buffer size =     0.02 MiB
llama_memory_recurrent: size =    0.75 MiB (     2 cells,   3 layers,  2 seqs  8 rs_seq), R (f32):    0.02 MiB
"""


def test_memory_mib_reads_each_module_s_total_off_the_creation_log():
    assert devices.memory_mib(CONTEXT_LOG) == {"kv": 16.5, "recurrent": 0.75}  # both KV caches of a sliding-window model
    assert devices.memory_mib(CONTEXT_LOG.split("llama_memory_recurrent")[0]) == {"kv": 16.5}
    assert devices.memory_mib("no sizes here") == {}


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
