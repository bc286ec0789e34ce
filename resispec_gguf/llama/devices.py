"""Where a model's layers run, as llama.cpp reports it, and what a build can offload to.

llama.cpp has no call that says which device holds a layer, but its load log does
(``load_tensors: layer N assigned to device CUDA0, ...``): ``backend`` captures the log while
a model loads and ``layer_devices`` reads the device names off it (CPU, CUDA0, Vulkan0,
RPC0[host:port], ...), in layer order, each once.  ``offload_devices`` picks the devices of
a ``backend.build_facts()`` list that can hold offloaded layers (GPUs, accelerators), and
``summary`` writes the start-up line's part; ``cpu_only_warning`` the line for ``-ngl`` layers
that found no device but the CPU.  Plain Python on text; imports nothing from the
package and never llama_cpp.
"""

from __future__ import annotations

import re

__all__ = ["cpu_only_warning", "layer_devices", "offload_devices", "summary"]

_ASSIGNED = re.compile(r"layer\s+\d+\s+assigned to device\s+([^,\s]+)")


def layer_devices(log: str) -> list[str]:
    """The devices the load log ``log`` assigns layers to, first appearance first; ``["CPU"]``
    when the log names none (an older llama.cpp, or a load that failed early)."""
    found: list[str] = []
    for name in _ASSIGNED.findall(log):
        if name not in found:
            found.append(name)
    return found or ["CPU"]


def offload_devices(devices: list[dict]) -> list[str]:
    """The names of the devices (``ggml.devices()`` entries) that ``-ngl`` layers can go to:
    every one that is not the CPU."""
    return [d["name"] for d in devices if d.get("type") != "CPU"]


def summary(info: dict) -> str:
    """``"target on CUDA0, CPU; draft on CPU"`` from ``Engine.info()``."""
    parts = [f"{role} on {', '.join(m.get('devices') or ['CPU'])}" for role, m in info.items() if m is not None]
    return "; ".join(parts)


def cpu_only_warning(model: dict, info: dict, version: str) -> str | None:
    """One warning line when ``-ngl``/``-ngld`` asked for offloaded layers (``model``: the
    ``ModelParams`` fields ``n_gpu_layers``, ``draft_gpu_layers``, ``rpc``) but llama.cpp put
    every layer of that model on the CPU (``info``: ``Engine.info()``), else None.  With
    ``--rpc`` and no ``-ngld`` the draft's layers are not asked for: it stays local by design."""
    draft = model["n_gpu_layers"] if model["draft_gpu_layers"] is None else model["draft_gpu_layers"]
    if model.get("rpc") and model["draft_gpu_layers"] is None:
        draft = 0
    asked = {"target": model["n_gpu_layers"], "draft": draft}
    flags = {"target": "-ngl", "draft": "-ngld"}
    cpu_only = [role for role, m in info.items() if m is not None and asked[role] > 0
                and (m.get("devices") or ["CPU"]) == ["CPU"]]
    if not cpu_only:
        return None
    what = " and ".join(f"{flags[r]} {asked[r]}" for r in cpu_only)
    return (f"warning: {what}, but this llama-cpp-python has no GPU or RPC device for those layers: they run on "
            f"the CPU (for a CUDA build: CMAKE_ARGS='-DGGML_CUDA=on' pip install --no-cache-dir --force-reinstall "
            f"llama-cpp-python=={version})")
