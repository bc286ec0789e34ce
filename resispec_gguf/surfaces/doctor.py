"""``python -m resispec_gguf doctor``: one screen a user can paste into a bug report.

One line per subject: this package's version and commit (``version_text``, also
``--version``), the llama-cpp-python build (version, features from its system info, whether it
can offload and whether a GPU was found),
whether it keeps recurrent-state snapshots (what a recurrent or hybrid model needs to
speculate), the CPU features that matter (``/proc/cpuinfo``), the crash check (``llama.buildcheck``, run
afresh in a child process), the ggml devices and their free memory, Numba and its cache, the
preset models in the cache (hash-checked; a preset draft of another vocabulary says it takes
the text route), free memory against what the default pair
needs at ``--ctx``, the load average, the cost cache's state and age (``decoding.costs``), and
the optional libraries installed (the server's, the client libraries the examples import).  A line that finds a problem is followed by ``  problem: ...`` and
``  fix: COMMAND``; ``run`` returns 1 when there was one, else 0.

Each subject is a function of what the probes found (``_probe_*``, module-level so that tests
replace them), so every problem branch is testable without the machine having it.  A surface:
imports ``llama.buildcheck``, ``llama.models``, ``llama.presets``, ``kernels.cache``, never
llama_cpp (the build's facts come from the check's child process).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from .. import __version__
from ..config import ModelParams
from ..decoding import costs
from ..llama import buildcheck, presets

__all__ = ["Line", "run", "report", "version_text"]

PIN = "0.3.36"  # the llama-cpp-python this package is written against (pyproject.toml)
_FEATURES = ("CUDA", "METAL", "VULKAN", "HIP", "SYCL", "RPC", "AMX", "AVX512", "AVX2")
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "neon")
# build features whose instructions the CPU must have (llama_print_system_info name -> cpuinfo flag)
_NEEDS = {"AVX2": "avx2", "AVX512": "avx512f", "AMX_INT8": "amx_int8"}
RS_CHAIN = 8  # the snapshots a recurrent or hybrid model's context keeps (``backend.recurrent.RS_SNAPSHOTS``)
_SLACK_MIB = 256  # compute buffers and the rest, beyond weights, KV cache and logits
# the optional libraries a user may need, by what needs them (pip install NAME)
_OPTIONAL = (("server", ("starlette", "uvicorn")), ("clients", ("openai", "anthropic", "httpx")),
             ("plot", ("matplotlib",)))


@dataclass
class Line:
    """One subject: ``label``, what was found, and for a problem what is wrong and the one
    command that fixes it."""

    label: str
    text: str
    problem: str | None = None
    fix: str | None = None


# ------------------------------------------------------------------ probes (replaced in tests)


def _probe_commit() -> str | None:
    """The git commit of this package's checkout (short; "+" when it has uncommitted
    changes to tracked files), None for an installed copy or without git."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--", "resispec_gguf"],
                               capture_output=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (head.stdout.strip() + ("+" if dirty.returncode == 1 else "")) if head.returncode == 0 else None


def _probe_load() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return None


def _probe_costs() -> dict:
    return costs.cache_state()


def _probe_optional() -> dict[str, str | None]:
    """Each optional library's installed version, None when it is not installed."""
    from importlib import metadata

    found = {}
    for _, names in _OPTIONAL:
        for name in names:
            try:
                found[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                found[name] = None
    return found


def _probe_build() -> buildcheck.Verdict:
    return buildcheck.check(use_cache=False)


def _probe_cpu() -> tuple[str, set[str]]:
    return buildcheck.cpu_info()


def _probe_nvidia() -> bool:
    """Whether an NVIDIA GPU is visible to this machine (its device node)."""
    return os.path.exists("/dev/nvidia0")


def _probe_numba() -> tuple[str | None, str, bool]:
    """``(version or None, where the kernels' cache is, whether it can be written)``."""
    from ..kernels import cache

    try:
        import numba
    except ImportError:
        return None, "", False
    where = cache.location()
    folder = where if where.is_dir() else where.parent
    return numba.__version__, str(where), os.access(folder, os.W_OK)


def _probe_models() -> list[dict]:
    """Per preset file: name, role, file, ``state`` (``missing``, ``ok`` or ``bad``), the pair's ``route``."""
    from ..llama import models

    rows = []
    for row in models.list_presets():
        model = presets.PRESETS[row["name"]].model(row["role"])
        path = models.cache_dir() / model.filename
        state = "missing"
        if path.is_file():
            ok = path.stat().st_size == model.size and models.file_sha256(path) == model.sha256.lower()
            state = "ok" if ok else "bad"
        rows.append({**row, "state": state, "path": str(path), "route": presets.PRESETS[row["name"]].route})
    return rows


def _probe_memory() -> int | None:
    """MiB of memory available (``MemAvailable``), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# ------------------------------------------------------------------ lines


def _features(info: str) -> list[str]:
    on = [part.split("=")[0].strip() for part in info.replace("|", "\n").splitlines() if part.strip().endswith("= 1")]
    return [f for f in on if any(f.upper().startswith(name) for name in _FEATURES)]


def version_text(commit: str | None = None) -> str:
    """``resispec-gguf VERSION`` and the checkout's commit when there is one (``--version``)."""
    commit = _probe_commit() if commit is None else commit
    return f"resispec-gguf {__version__}" + (f" (commit {commit})" if commit else "")


def _gpu_words(facts: dict) -> str:
    """Whether the build can offload, and whether it found a GPU to offload to."""
    gpus = [d for d in facts.get("devices") or [] if d.get("type") != "CPU"]
    if not facts.get("gpu_offload"):
        return "GPU offload no (a CPU build)"
    return f"GPU offload yes, to {', '.join(d['name'] for d in gpus)}" if gpus else \
        "GPU offload: the build can offload; no GPU found"


def load_line(load: tuple[float, float, float] | None) -> Line:
    if load is None:
        return Line("load", "no load average on this platform")
    cores = os.cpu_count() or 1
    busy = load[0] > costs.BUSY_LOAD * cores
    return Line("load", f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {cores} cores"
                        + ("; busy: speeds measured now are slower than this machine's own" if busy else ""))


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def costs_line(state: dict, now: float) -> Line:
    if not state["curves"]:
        return Line("costs", f"{state['path']}: empty (the first start with a model measures its decode costs, "
                             f"about {costs.MEASURE_BUDGET_S:.0f} s per model)")
    ages = f"newest {_age(now - state['newest'])} old" if state["newest"] else "age unknown"
    if state["oldest"] and state["oldest"] != state["newest"]:
        ages += f", oldest {_age(now - state['oldest'])}"
    return Line("costs", f"{state['path']}: {state['curves']} curve{'s' * (state['curves'] != 1)}, {ages}; "
                         f"{state['busy']} measured while the machine was busy, {state['corrected']} corrected "
                         "from measured steps")


def optional_line(found: dict[str, str | None]) -> Line:
    parts = []
    for need, names in _OPTIONAL:
        parts.append(f"{need}: " + ", ".join(f"{n} {found[n]}" if found.get(n) else f"{n} not installed"
                                             for n in names))
    missing = [n for n in ("starlette", "uvicorn") if not found.get(n)]
    if missing:  # not a problem: only serve needs them, and it says so
        parts.append("serve needs: pip install 'resispec-gguf[server]'")
    return Line("optional", "; ".join(parts))


def build_line(v: buildcheck.Verdict) -> Line:
    facts = v.facts
    if not facts:
        return Line("llama-cpp-python", "not loadable",
                    f"the child process could not import it ({v.detail or v.status})",
                    f"pip install --no-cache-dir --force-reinstall llama-cpp-python=={PIN}")
    version = facts.get("llama_cpp_python", "?")
    text = (f"{version}; {' '.join(_features(facts.get('system_info', ''))) or 'no optional features'}; "
            f"{_gpu_words(facts)}; RPC {'yes' if facts.get('rpc') else 'no'}")
    if version != PIN:
        return Line("llama-cpp-python", text, f"resispec-gguf is written against llama-cpp-python {PIN}",
                    buildcheck.rebuild_command(PIN, no_amx=False, rpc=bool(facts.get("rpc"))))
    return Line("llama-cpp-python", text)


def recurrent_line(v: buildcheck.Verdict) -> Line:
    """Whether this build can roll back a recurrent or hybrid model (``rs_snapshots``), and so
    whether such a model speculates or decodes plainly; never a problem (plain decoding is
    exact, and the default pair is attention-only)."""
    snapshots = v.facts.get("rs_snapshots")
    if snapshots is None:
        return Line("recurrent", "unknown (the build's facts do not say whether it keeps recurrent-state snapshots)")
    if not snapshots:
        return Line("recurrent", "no recurrent-state snapshots (llama_n_rs_seq) in this build: recurrent and hybrid "
                                 "models (Mamba, LFM2, Qwen3.5, Granite 4, Nemotron-H) decode plainly")
    return Line("recurrent", "snapshots supported (llama_n_rs_seq): hybrid models llama.cpp rolls back (lfm2, qwen35, "
                             f"qwen35moe, nemotron_h) speculate in chains of up to {RS_CHAIN}; other recurrent and "
                             "hybrid models decode plainly; the default pair is attention-only")


def cpu_line(model: str, flags: set[str], v: buildcheck.Verdict) -> Line:
    have = [f for f in _CPU_FLAGS if f in flags]
    text = f"{model or 'unknown'}, {os.cpu_count()} cores; {' '.join(have) or 'none of ' + ' '.join(_CPU_FLAGS[:3])}"
    info = v.facts.get("system_info", "")
    built = [name for name in _NEEDS if f"{name} = 1" in info]
    missing = [name for name in built if _NEEDS[name] not in flags] if flags else []
    if missing:
        return Line("CPU", text, f"the build uses {', '.join(missing)}, which this CPU does not advertise "
                                 "(a build made on another machine)",
                    buildcheck.rebuild_command(v.facts.get("llama_cpp_python", PIN), no_amx=False,
                                               rpc=bool(v.facts.get("rpc"))))
    return Line("CPU", text)


def check_line(v: buildcheck.Verdict, flags: set[str]) -> Line:
    if v.status == "ok":
        return Line("crash check", f"ok: loads and decodes a Q4_K_M model ({v.seconds:.1f} s in a child process)")
    if v.status == "crashes":
        cause, command = buildcheck.crash_cause(v, flags)
        return Line("crash check", f"crashes ({v.signal})", cause, command)
    return Line("crash check", f"{v.status}: {v.detail}", "the check could not load the probe model",
                f"pip install --no-cache-dir --force-reinstall llama-cpp-python=={PIN}")


def devices_line(v: buildcheck.Verdict, nvidia: bool) -> Line:
    devs = v.facts.get("devices") or []
    text = "; ".join(f"{d['name']} ({d['description']}, {d['free_mib']} of {d['total_mib']} MiB free)"
                     for d in devs) or "none reported"
    if nvidia and not any(d.get("type") != "CPU" and d["name"].upper().startswith("CUDA") for d in devs):
        return Line("devices", text, "an NVIDIA GPU is present but this llama-cpp-python has no CUDA device",
                    f"CMAKE_ARGS='-DGGML_CUDA=on' pip install --no-cache-dir --force-reinstall llama-cpp-python=={PIN}")
    return Line("devices", text)


def numba_line(version: str | None, where: str, writable: bool) -> Line:
    if version is None:
        return Line("numba", "not installed", "the kernels need Numba", "pip install 'numba>=0.59'")
    if not writable:
        return Line("numba", f"{version}; cache {where}", "the kernels' cache cannot be written: every start compiles",
                    f"export NUMBA_CACHE_DIR={os.path.expanduser('~/.cache/resispec-gguf/numba')}")
    return Line("numba", f"{version}; cache {where}")


def models_line(rows: list[dict]) -> Line:
    states = {"ok": "cached, sha256 ok (size and verified marker)", "missing": "not cached (fetched on first use)",
              "bad": "WRONG HASH"}
    parts = [f"{r['name']} {r['role']} {r['file']}: {states[r['state']]}"
             + (" (draft vocabulary differs: text route)" if r["role"] == "draft" and r.get("route") == "text" else "")
             for r in rows]
    bad = [r for r in rows if r["state"] == "bad"]
    if bad:
        return Line("models", "; ".join(parts), f"{bad[0]['path']} does not match its pinned sha256",
                    f"rm {bad[0]['path']} && python -m resispec_gguf models fetch {bad[0]['name']}")
    return Line("models", "; ".join(parts))


def need_mib(n_ctx: int, n_batch: int = ModelParams().n_batch) -> int:
    """MiB the default pair needs at ``n_ctx``: weights, KV cache, logits rows, and slack."""
    pair = presets.PRESETS["default"]
    total = 0
    for m in (pair.target, pair.draft):
        total += m.size + m.kv_bytes_per_token * n_ctx + 4 * m.n_vocab * n_batch
    return (total >> 20) + _SLACK_MIB


def memory_line(available: int | None, n_ctx: int) -> Line:
    need = need_mib(n_ctx)
    if available is None:
        return Line("memory", f"available unknown; the default pair at --ctx {n_ctx} needs about {need} MiB")
    text = f"{available} MiB available; the default pair at --ctx {n_ctx} needs about {need} MiB"
    if available < need:
        smaller = max(ModelParams().n_ctx // 4, 256)
        return Line("memory", text, "not enough free memory for the default pair",
                    f"python -m resispec_gguf chat --ctx {smaller}  (or close other programs)")
    return Line("memory", text)


def report(n_ctx: int) -> list[Line]:
    """Every line, from the probes."""
    verdict = _probe_build()
    model, flags = _probe_cpu()
    import time

    return [Line("resispec-gguf", version_text().split(" ", 1)[1]), build_line(verdict), recurrent_line(verdict),
            cpu_line(model, flags, verdict), check_line(verdict, flags), devices_line(verdict, _probe_nvidia()),
            numba_line(*_probe_numba()), models_line(_probe_models()), memory_line(_probe_memory(), n_ctx),
            load_line(_probe_load()), costs_line(_probe_costs(), time.time()), optional_line(_probe_optional())]


def run(ctx: int = ModelParams().n_ctx, out=None) -> int:
    """Print the report on ``out`` (stdout); 1 when a line found a problem, else 0."""
    ModelParams(n_ctx=ctx)  # a context out of bounds: one line
    out = out or sys.stdout
    lines = report(ctx)
    width = max(len(line.label) for line in lines)
    print(f"resispec-gguf doctor (Python {sys.version.split()[0]}, {sys.platform})", file=out)
    for line in lines:
        print(f"{line.label:<{width}}  {line.text}", file=out)
        if line.problem:
            print(f"{'':<{width}}  problem: {line.problem}", file=out)
            print(f"{'':<{width}}  fix: {line.fix}", file=out)
    problems = sum(1 for line in lines if line.problem)
    print("all well" if not problems else f"{problems} problem{'s' if problems > 1 else ''} found", file=out)
    return 1 if problems else 0
