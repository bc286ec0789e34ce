"""Where a model's layers run, as llama.cpp reports it, and what a build can offload to.

llama.cpp has no call that says which device holds a layer, but its load log does
(``load_tensors: layer N assigned to device CUDA0, ...``): ``backend`` captures the log while
a model loads and ``layer_devices`` reads the device names off it (CPU, CUDA0, Vulkan0,
RPC0[host:port], ...), in layer order, each once.  ``offload_devices`` picks the devices of
a ``backend.build_facts()`` list that can hold offloaded layers (GPUs, accelerators), and
``summary`` writes the start-up line's part (with, for a recurrent or hybrid model, its
memory, rollback and state size); ``cpu_only_warning`` the line for ``-ngl`` layers that
found no device but the CPU.  ``memory_mib`` reads what a context's memory takes off its
creation log (``llama_kv_cache: size = ...``, ``llama_memory_recurrent: size = ...``): llama.cpp
has no call that says it either.  Plain Python on text; imports nothing from the package and
never llama_cpp.
"""

from __future__ import annotations

import re

__all__ = ["cpu_only_warning", "layer_devices", "memory_mib", "offload_devices", "summary"]

_ASSIGNED = re.compile(r"layer\s+\d+\s+assigned to device\s+([^,\s]+)")
# a memory module's total, as llama.cpp logs it when a context is created
_SIZE = re.compile(r"^(llama_kv_cache|llama_memory_recurrent)\S*:\s+size\s*=\s*([0-9.]+)\s*MiB", re.M)
_MEMORY = {"llama_kv_cache": "kv", "llama_memory_recurrent": "recurrent"}


def layer_devices(log: str) -> list[str]:
    """The devices the load log ``log`` assigns layers to, first appearance first; ``["CPU"]``
    when the log names none (an older llama.cpp, or a load that failed early)."""
    found: list[str] = []
    for name in _ASSIGNED.findall(log):
        if name not in found:
            found.append(name)
    return found or ["CPU"]


def memory_mib(log: str) -> dict[str, float]:
    """MiB of each memory module a context's creation log ``log`` reports: ``"kv"`` (the
    attention layers' KV cache, both caches of a sliding-window model summed) and
    ``"recurrent"`` (the recurrent states, their snapshots included); a kind the log does
    not report is absent."""
    out: dict[str, float] = {}
    for name, mib in _SIZE.findall(log):
        out[_MEMORY[name]] = out.get(_MEMORY[name], 0.0) + float(mib)
    return out


def offload_devices(devices: list[dict]) -> list[str]:
    """The names of the devices (``ggml.devices()`` entries) that ``-ngl`` layers can go to:
    every one that is not the CPU."""
    return [d["name"] for d in devices if d.get("type") != "CPU"]


def summary(info: dict) -> str:
    """``"target on CUDA0, CPU; draft on CPU"`` from ``Engine.info()``."""
    parts = [f"{role} on {', '.join(m.get('devices') or ['CPU'])}{_memory_words(m)}" for role, m in info.items()
             if m is not None]
    return "; ".join(parts)


def _memory_words(m: dict) -> str:
    """For a model on recurrent or hybrid memory (its ``describe()``): the kind, the tokens a
    step may roll back (0: it decodes plainly) and the recurrent state's size; "" otherwise."""
    kind = m.get("memory", "attention")
    if kind == "attention":
        return ""
    rollback = m.get("rollback", 0)
    state = m.get("state_bytes", 0) / 2**20
    return (f" ({kind} memory, rollback {rollback} tokens{'' if rollback else ': plain decoding'}, "
            f"recurrent state {state:.{2 if state < 10 else 0}f} MiB)")


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
