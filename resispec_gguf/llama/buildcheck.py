"""Can this llama.cpp build load and decode a quantized model on this machine?  Asked in a child
process, so that a crash there is only a verdict.

Some builds die inside ``llama_model_load_from_file`` or the first decode of a quantized model
(``-march=native`` builds on virtual machines that advertise AMX but fault on it), with a bare
"Segmentation fault" or "Illegal instruction".  ``check`` runs ``python -m
resispec_gguf.llama.buildcheck DIR`` (``_child``): it prints the build's facts
(``backend.build_facts``) first, then writes a one-layer F32 llama GGUF
(``gguf_file.write_probe_model``, rows 256 wide), quantizes it to Q4_K_M with llama.cpp's own
quantizer (Q4_K and Q6_K blocks, repacked at load as the default pair's are), loads it and
decodes a batch and a single token, and prints ``{"ok": true}``.  A child killed by a signal
is the verdict ``crashes``; any other failure is ``fails`` (the check could not tell), an
overrun ``timeout``.

Verdicts ``ok`` and ``crashes`` are cached in ``$RESISPEC_BUILDCHECK``, else
``buildcheck.json`` in ``paths.cache_dir()``,
keyed by llama_cpp's shared libraries (path, size, mtime), the CPU (model name and flags) and
the Python executable, so only the first start after an install pays.  ``crash_message`` is
the one line a user gets: the cause as far as known (AMX in ``/proc/cpuinfo`` and in the
build → the rebuild without AMX; otherwise the signal) and the command that fixes it.
``RESISPEC_SKIP_BUILD_CHECK=1`` skips the check (``require_working_build``);
``RESISPEC_BUILD_CHECK_FAULT=segv`` makes the child kill itself where a faulting build dies
(a test hook).

Imports ``backend`` (and with it llama_cpp) only in the child; the parent imports
``gguf_file``, ``paths`` and ``errors``.  Never a surface.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UserError
from ..paths import cache_dir, read_json_dict, write_json_atomic

__all__ = ["AMX_REBUILD", "Verdict", "check", "cpu_info", "crash_cause", "crash_message", "library_files",
           "rebuild_command",
           "require_working_build"]

PROBE_VERSION = 2  # bump when the probe changes: cached verdicts then no longer count
TIMEOUT_S = 120.0
SKIP_ENV = "RESISPEC_SKIP_BUILD_CHECK"
FAULT_ENV = "RESISPEC_BUILD_CHECK_FAULT"
CACHE_ENV = "RESISPEC_BUILDCHECK"  # the verdict file, when not the model cache's
_CACHE_FILE = "buildcheck.json"
_KEEP = 8  # verdicts kept in the cache file (one per build and machine)
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


@dataclass
class Verdict:
    """What the child found: ``status`` ``ok``, ``crashes``, ``fails`` or ``timeout``;
    ``signal`` (``SIGSEGV``...) for a crash; ``detail`` for a failure; ``facts``: the build's
    (``backend.build_facts``, empty if the child died before printing them); ``seconds`` the
    child took; ``cached``: read from the cache rather than run."""

    status: str
    signal: str | None = None
    detail: str = ""
    facts: dict = field(default_factory=dict)
    seconds: float = 0.0
    cached: bool = False


def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version, without importing it ("0.3.36" if unknown)."""
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return "0.3.36"


def library_files() -> list[list]:
    """``[path, size, mtime_ns]`` of each shared library llama_cpp loads (its ``lib/``, or
    ``$LLAMA_CPP_LIB_PATH``), found without importing it; empty when there is none."""
    spec = importlib.util.find_spec("llama_cpp")
    folders = [Path(f) / "lib" for f in (spec.submodule_search_locations or [])] if spec else []
    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        folders.insert(0, Path(os.environ["LLAMA_CPP_LIB_PATH"]))
    out = []
    for lib in folders:
        for p in sorted(lib.iterdir()) if lib.is_dir() else ():
            if p.suffix in (".so", ".dylib", ".dll") or ".so." in p.name:
                st = p.stat()
                out.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
    return out


def cpu_info(text: str | None = None) -> tuple[str, set[str]]:
    """``(model name, flags)`` from ``/proc/cpuinfo`` (or ``text``); ``("", set())`` where
    there is none (macOS, Windows)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "", set()
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, flags


def _cache_key() -> str:
    model, flags = cpu_info()
    return json.dumps([PROBE_VERSION, sys.executable, library_files(), model, sorted(flags)])


def _cache_path() -> Path:
    return Path(os.environ.get(CACHE_ENV) or cache_dir() / _CACHE_FILE)


def _read_cache() -> dict:
    return read_json_dict(_cache_path())


def _write_cache(key: str, verdict: Verdict) -> None:
    """Keep ``verdict`` under ``key`` (the newest ``_KEEP``); a cache that cannot be written is
    left alone (the next start checks again)."""
    data = _read_cache()
    data.pop(key, None)
    data[key] = {k: v for k, v in asdict(verdict).items() if k != "cached"}
    with contextlib.suppress(OSError):
        write_json_atomic(_cache_path(), dict(list(data.items())[-_KEEP:]))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _verdict_of(proc: subprocess.CompletedProcess, seconds: float) -> Verdict:
    facts, ok = {}, False
    for line in proc.stdout.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            facts = item.get("facts", facts) if isinstance(item, dict) else facts
            ok = ok or (isinstance(item, dict) and item.get("ok") is True)
    if proc.returncode < 0:
        return Verdict("crashes", signal=_signal_name(-proc.returncode), facts=facts, seconds=seconds)
    if proc.returncode >= 0xC0000000:  # Windows: an NTSTATUS exception code (access violation, illegal instruction)
        return Verdict("crashes", signal=f"exception 0x{proc.returncode:X}", facts=facts, seconds=seconds)
    if proc.returncode == 0 and ok:
        return Verdict("ok", facts=facts, seconds=seconds)
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    detail = lines[-1].strip() if lines else f"exit status {proc.returncode}"
    return Verdict("fails", detail=detail[:300], facts=facts, seconds=seconds)


def run_child(timeout: float = TIMEOUT_S, env: dict | None = None) -> Verdict:
    """Run the probe in a child process (see the module docstring) and read its verdict."""
    start = time.monotonic()
    env = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[2])  # where this package is importable from, first
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    with tempfile.TemporaryDirectory(prefix="resispec-buildcheck-") as tmp:
        try:
            proc = subprocess.run([sys.executable, "-m", "resispec_gguf.llama.buildcheck", tmp],
                                  capture_output=True, text=True, errors="replace", timeout=timeout,
                                  env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Verdict("timeout", detail=f"no answer in {timeout:.0f} s", seconds=time.monotonic() - start)
    return _verdict_of(proc, time.monotonic() - start)


# told before the check runs (it is cached per build and machine, so said once)
RUNNING = ("checking that this llama.cpp build can load and decode a quantized model here "
           "(once per build, a few seconds, in a child process)")


def check(*, use_cache: bool = True, run=run_child, note=None) -> Verdict:
    """This build's verdict: from the cache when it holds one for this build and machine
    (unless ``use_cache`` is false), else from ``run()`` (``note(RUNNING)`` told first);
    ``ok`` and ``crashes`` are cached."""
    key = _cache_key()
    if use_cache:
        hit = _read_cache().get(key)
        if isinstance(hit, dict):
            with contextlib.suppress(TypeError):
                return Verdict(**{**hit, "cached": True})
    if note is not None:
        note(RUNNING)
    verdict = run()
    if verdict.status in ("ok", "crashes"):
        _write_cache(key, verdict)
    return verdict


def rebuild_command(version: str, *, no_amx: bool, rpc: bool = False) -> str:
    """The pip command that rebuilds llama-cpp-python ``version`` from source (without AMX,
    keeping RPC when the build had it)."""
    args = []
    if no_amx:
        args += [f'-DCMAKE_C_FLAGS="{_NO_AMX}"', f'-DCMAKE_CXX_FLAGS="{_NO_AMX}"']
    if rpc:
        args.append("-DGGML_RPC=on")
    env = f"CMAKE_ARGS='{' '.join(args)}' " if args else ""
    return f"{env}pip install --no-cache-dir --force-reinstall llama-cpp-python=={version}"


AMX_REBUILD = rebuild_command("0.3.36", no_amx=True)


def amx_suspected(verdict: Verdict, flags: set[str]) -> bool:
    """Whether AMX is the likely cause: the CPU advertises it and the build uses it (or the
    child died before saying what the build uses)."""
    info = verdict.facts.get("system_info")
    return "amx_tile" in flags and (info is None or "AMX" in info)


def crash_cause(verdict: Verdict, flags: set[str] | None = None, version: str | None = None) -> tuple[str, str]:
    """``(what happened and its likely cause, the command that fixes it)`` for a crashing build."""
    flags = cpu_info()[1] if flags is None else flags
    version = version or verdict.facts.get("llama_cpp_python") or llama_cpp_version()
    rpc = bool(verdict.facts.get("rpc"))
    head = (f"this llama-cpp-python build crashes ({verdict.signal}) loading and decoding a quantized model "
            "on this machine")
    if amx_suspected(verdict, flags):
        return (f"{head}: the CPU advertises AMX (amx_tile) and the build uses it, which faults on some virtual "
                "machines; rebuild it without AMX", rebuild_command(version, no_amx=True, rpc=rpc))
    return f"{head}; rebuild it from source for this machine", rebuild_command(version, no_amx=False, rpc=rpc)


def crash_message(verdict: Verdict, flags: set[str] | None = None, version: str | None = None) -> str:
    """The one line for a crashing build: what killed the probe, the likely cause and the
    command that fixes it (``crash_cause``)."""
    cause, command = crash_cause(verdict, flags, version)
    return f"{cause}: {command} ({SKIP_ENV}=1 skips this check)"


def require_working_build(note=None) -> Verdict | None:
    """The start-up check: None when ``RESISPEC_SKIP_BUILD_CHECK=1``; ``UserError`` with
    ``crash_message`` when the build crashes; otherwise the verdict (``note(line)`` is told
    before the check runs, and when it could not decide)."""
    if os.environ.get(SKIP_ENV, "") not in ("", "0"):
        return None
    verdict = check(note=note)
    if verdict.status == "crashes":
        raise UserError(crash_message(verdict))
    if verdict.status != "ok" and note is not None:
        note(f"the llama.cpp build check could not decide ({verdict.status}: {verdict.detail}); carrying on")
    return verdict


# --------------------------------------------------------------------------- the child process


def _child(folder: str) -> None:
    """Print the build's facts, then load and decode a tiny Q4_K_M model; ``{"ok": true}``."""
    import numpy as np

    from . import backend, gguf_file

    print(json.dumps({"facts": backend.build_facts()}), flush=True)
    if os.environ.get(FAULT_ENV) == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    src, dst = os.path.join(folder, "probe-f32.gguf"), os.path.join(folder, "probe-q4_k_m.gguf")
    gguf_file.write_probe_model(src)
    backend.quantize(src, dst, "Q4_K_M")
    model = backend.LlamaModel(dst, n_ctx=64, n_batch=64, n_seq_max=1, n_threads=min(2, os.cpu_count() or 1))
    try:
        rows = model.logits_of_sequence([1, 40, 41, 42, 43, 44, 45, 46])  # a batch: the matrix-matrix path
        row = model.logits_of_sequence([1])  # one row: the matrix-vector path
    finally:
        model.close()
    if not (np.isfinite(rows).all() and np.isfinite(row).all()):
        raise SystemExit("the probe model's logits are not finite")
    print(json.dumps({"ok": True}), flush=True)


if __name__ == "__main__":  # pragma: no cover - run as a child process
    _child(sys.argv[1])
