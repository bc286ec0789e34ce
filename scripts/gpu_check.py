"""What speculation would buy on this machine's accelerator, and what the host costs there:
one run, no network, a few minutes on an H200 once llama-cpp-python is built.

1. (``--build SDIST``) builds llama-cpp-python with CUDA (``--cuda-arch``, 90: the H100 and
   H200) from the source archive or folder it is given, with this interpreter's own
   packages (scikit-build-core, CMake), into ``WORKDIR/llama_cpp_cuda``, and runs the rest of
   the script again with that build first on the path.  cuBLAS comes from the toolkit or,
   where the toolkit lacks it (one made of NVIDIA's wheels), from NVIDIA's cuBLAS wheel on
   this Python's path (PyTorch's); the driver's libcuda is linked where found, else ggml's
   virtual-memory pool is turned off.  A later call with the same
   ``--build`` and ``--workdir`` reuses the build, and one cut short (a time limit) goes on
   where it stopped (CMake's build folder is kept there); ``--build-only`` stops after it
   (a build and the check then fit two commands of 10 minutes).  A machine without the CUDA compiler,
   an NVIDIA GPU, CMake, scikit-build-core or cuBLAS, or a build that does not load or
   cannot offload, fails with one line (exit 2).
   ``--pack-sdist SRC OUT`` (where the source is) first writes an archive without what the
   build never reads (llama.cpp's test models, docs, benches and tests): 48 MiB instead of
   73 MiB for 0.3.36, small enough to carry.  Without ``--build``, the llama-cpp-python
   already installed is used.
2. Writes random-weight GGUF models with the default pair's exact shapes (Qwen2.5-Coder
   1.5B target, 0.5B draft: layers, widths, heads, the 151,936-token vocabulary; Q4_0
   matrices written directly as random blocks, so nothing is quantized or downloaded; logits
   of a std of about 2.5, as a real model's).  ``--shapes tiny`` writes small models of the
   same architecture instead (the CPU check).
3. ``curves``: the target's and the draft's cost curves, one decode of 1 to 64 rows, with
   ``-ngl``, at an empty context and after ``--context`` tokens.
4. Host work per step (issue #28's goals, ms per step: plain <= 0.3, resispec K4 d5 b12 <= 1.0,
   K4 d6 b64 <= 3.0, ``auto`` <= 1.5; 32k -> 256k vocabulary adds <= 30 %):
   a. ``kernels``: ``bench_kernels.py --steps``, the engine on fake models at no model cost;
   b. ``host``: ``host_bench.py``'s split on thin random models (one 64-wide layer) at
      V = 32,000, 151,936 and 262,144 (tiny: 1,024, 2,048, 4,096), offloaded with ``-ngl``,
      for plain, K4 d5 b12, K4 d6 b64 and ``auto``, and each shape's growth from the
      smallest to the largest vocabulary;
   c. ``pair``: the same on the random default pair of step 2, offloaded: ``bench``'s
      ``overhead_ms_per_step``.  The draft shares no weights with the target, so its trees
      are rarely accepted (``tau`` about 1).
   Every llama_decode waits for its device (the backend synchronizes: on a GPU
   llama_decode returns once the graph is queued, and the wait would otherwise count as
   host work, in the first row read).  Times are wall-clock.
5. ``sampling`` (run last, after 6): llama.cpp's backend sampling as the GPU path, on the
   target of step 2, offloaded (``backend_sampling_probe.py``): part 1, whether a forest
   decode returns the right rows (wrong-row counts without, and with, a new graph plan
   before every decode), and part 3, ms per row of an 8-node tree decode: whole rows and
   our host distribution against the backend chain with a re-plan before each decode.
6. Prints the projected speed-up of each method over plain decoding from the curves and
   the first-level acceptance that ``analyze`` measures (``--accept``, or ``--analyze-json``
   from ``python -m resispec_gguf analyze --json``), under the approximation that each
   depth of the accepted path is accepted with the method's first-level rate; then a
   summary of 4 and 5 to paste into a note.

``--skip`` leaves out any of ``curves`` (and the projection), ``kernels``, ``host``,
``pair``, ``sampling``.  A part that fails prints why and the others still run; ``--json``
is written after each part (steps 2 to 6 are in ``gpu_check_parts.py``).  Nothing is
asserted; ``tests/llama/test_gpu_check_script.py`` runs the CPU check and checks that every
figure is there.

    python scripts/gpu_check.py -ngl 99                      # on the GPU machine
    python scripts/gpu_check.py --shapes tiny -ngl 0 --rows 1,2,4 --threads 1   # CPU check
    python scripts/gpu_check.py --pack-sdist llama_cpp_python-0.3.36.tar.gz src/llama.tar.gz
    python scripts/gpu_check.py --build src/llama.tar.gz --workdir build/gpu --build-only
    python scripts/gpu_check.py --build src/llama.tar.gz --workdir build/gpu -ngl 99 --json out.json
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's package
sys.path.insert(0, str(HERE))  # bench_kernels, host_bench, backend_sampling_probe, random_gguf, gpu_check_parts

from gpu_check_parts import (  # noqa: E402  (HOST_GOALS: the goals, which the tests read here too)
    HOST_GOALS, _accept, _goal_vocab, backend_sampling, host_work, kernels_work, measure_curves, pair_work,
    print_host, print_pair, print_projection, print_summary, sampling_summary, write_pair)

# Qwen2.5-Coder-1.5B / 0.5B (config.json of the default pair); tied embeddings, q/k/v biases.
SHAPES = {
    "default": {
        "target": dict(n_layer=28, n_embd=1536, n_ff=8960, n_head=12, n_head_kv=2),
        "draft": dict(n_layer=24, n_embd=896, n_ff=4864, n_head=14, n_head_kv=2),
        "n_vocab": 151_936,
        "host_vocabs": (32_000, 151_936, 262_144),
    },
    "tiny": {
        "target": dict(n_layer=2, n_embd=128, n_ff=256, n_head=4, n_head_kv=2),
        "draft": dict(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=1),
        "n_vocab": 8_192,
        "host_vocabs": (1_024, 2_048, 4_096),
    },
}
PARTS = ("curves", "kernels", "host", "pair", "sampling")


# --------------------------------------------------------------------------- 1. build


CUDA_HOMES = ("/usr/local/cuda",)  # where the CUDA toolkit is looked for when nvcc is not on the PATH
NVIDIA_DEVICES = "/dev/nvidia[0-9]*"  # a GPU's device files
# what llama-cpp-python's build never reads (its own examples, llama.cpp's vocabulary test
# models, docs, benches and tests: llama.cpp builds its tests only as a project of its own)
PACK_EXCLUDED = ("examples", "docker", "vendor/llama.cpp/models", "vendor/llama.cpp/docs",
                 "vendor/llama.cpp/benches", "vendor/llama.cpp/tests")


def pack_source(src: Path, out: Path) -> Path:
    """llama-cpp-python's source (an sdist or its unpacked folder) as a .tar.gz without
    ``PACK_EXCLUDED``, the archive's top folder kept."""
    def kept(name: str) -> bool:
        rel = name.split("/", 1)[1] if "/" in name else ""
        return not any(rel == e or rel.startswith(e + "/") for e in PACK_EXCLUDED)

    with tarfile.open(out, "w:gz") as dst:
        if src.is_dir():
            dst.add(src, arcname=src.name, filter=lambda m: m if kept(m.name) else None)
        else:
            with tarfile.open(src) as tar:
                for m in tar:
                    if kept(m.name):
                        dst.addfile(m, tar.extractfile(m) if m.isfile() else None)
    return out


def _nvcc() -> str | None:
    """A CUDA compiler that runs: ``$CUDACXX``, ``nvcc`` on the PATH, in ``$CUDA_HOME/bin`` or
    in ``CUDA_HOMES``' (a wrapper left behind by a removed toolkit does not count)."""
    found = [os.environ.get("CUDACXX"), shutil.which("nvcc")]
    found += [os.path.join(h, "bin", "nvcc") for h in (os.environ.get("CUDA_HOME"), *CUDA_HOMES) if h]
    for nvcc in found:
        if nvcc and os.path.isfile(nvcc):
            try:
                if subprocess.run([nvcc, "--version"], capture_output=True, timeout=120).returncode == 0:
                    return nvcc
            except (OSError, subprocess.TimeoutExpired):
                pass
    return None


def _gpu() -> bool:
    """Whether this machine shows an NVIDIA GPU: a device file, or an nvidia-smi that lists one."""
    if glob.glob(NVIDIA_DEVICES):
        return True
    smi = shutil.which("nvidia-smi")
    try:
        return bool(smi) and subprocess.run([smi, "-L"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _toolkits(nvcc: str | None) -> list[Path]:
    """Where a CUDA toolkit may be: beside ``nvcc``, ``$CUDA_HOME`` and ``CUDA_HOMES``."""
    homes = [Path(nvcc).resolve().parent.parent] if nvcc else []
    return homes + [Path(h) for h in (os.environ.get("CUDA_HOME"), *CUDA_HOMES) if h]


def _wheel_cuda() -> list[Path]:
    """NVIDIA's CUDA wheels in this Python's path (as PyTorch installs them): their folders
    that hold ``lib`` and ``include``."""
    return [base / sub for base in map(Path, filter(None, sys.path)) for sub in ("nvidia/cu13", "nvidia/cublas")
            if (base / sub / "lib").is_dir()]


def cublas_args(nvcc: str) -> str | None:
    """CMake arguments that find cuBLAS: none when the toolkit has it, else NVIDIA's cuBLAS
    wheel (a toolkit made of NVIDIA's wheels may lack it); None when neither has it."""
    for home in _toolkits(nvcc):
        if any(home.glob("lib*/libcublas.so*")) or any(home.glob("targets/*/lib/libcublas.so*")):
            return ""
    for cuda in _wheel_cuda():
        libs = {n: sorted(cuda.glob(f"lib/lib{n}.so*"), key=lambda p: len(p.name)) for n in ("cublas", "cublasLt")}
        if all(libs.values()) and (cuda / "include" / "cublas_v2.h").is_file():
            inc = cuda / "include"
            return " ".join(f"-DCUDA_{n}_LIBRARY={p[0]}" for n, p in libs.items()) + \
                f" -DCMAKE_CUDA_FLAGS=-I{inc} -DCMAKE_CXX_FLAGS=-I{inc}"
    return None


DRIVER_DIRS = ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")


def driver_args(nvcc: str) -> str:
    """CMake arguments that find the CUDA driver's library (libcuda, which ggml links for its
    virtual-memory pool): its path when it is not where CMake looks (the toolkit's stubs), or
    the pool turned off (``GGML_CUDA_NO_VMM``) when there is none to link."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d] + list(DRIVER_DIRS)
    dirs += [str(home / sub) for home in _toolkits(nvcc) for sub in ("lib64/stubs", "lib/stubs",
                                                                      "targets/x86_64-linux/lib/stubs")]
    for d in dirs:
        found = sorted(Path(d).glob("libcuda.so*"), key=lambda p: len(p.name))
        if found:
            return f"-DCUDA_cuda_driver_LIBRARY={found[0]}"
    return "-DGGML_CUDA_NO_VMM=ON"


def _env_with(site: Path) -> dict:
    """This environment with ``site`` first on the Python path, and the CUDA libraries (the
    toolkits', then NVIDIA's wheels') on the loader's path, where the build's libraries
    find them."""
    libs = [str(d) for home in _toolkits(None) for d in (home / "lib64", home / "lib") if d.is_dir()]
    libs += [str(cuda / "lib") for cuda in _wheel_cuda()]
    libs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    return {**os.environ, "PYTHONPATH": _path_with(site), "LD_LIBRARY_PATH": os.pathsep.join(dict.fromkeys(libs))}


def _site(work: Path) -> Path:
    return work / "llama_cpp_cuda"


def _path_with(site: Path) -> str:
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)


def _built(site: Path) -> str | None:
    """None when ``site`` holds a llama-cpp-python that loads and can offload to a GPU, else
    why not (one line)."""
    if not (site / "llama_cpp").is_dir():
        return f"no llama_cpp in {site}"
    probe = "import llama_cpp; print(bool(llama_cpp.llama_supports_gpu_offload()))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env_with(site))
    if r.returncode:
        return "it does not load: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    offloads = r.stdout.strip().endswith("True")
    return None if offloads else "it has no GPU offload (llama_supports_gpu_offload() is false)"


def _source(sdist: Path, work: Path) -> Path:
    """``sdist``'s folder: itself, or the archive unpacked once into ``work/llama_cpp_src``."""
    if sdist.is_dir():
        return sdist.resolve()
    into = work / "llama_cpp_src"
    if not into.is_dir():
        with tarfile.open(sdist) as tar:
            tar.extractall(into.with_suffix(".part"), filter="data")
        into.with_suffix(".part").rename(into)
    [top] = [d for d in into.iterdir() if d.is_dir()]
    return top


def build(sdist: str, work: Path, cuda_arch: str) -> Path:
    """The folder holding llama-cpp-python built with CUDA from ``sdist`` (built once per
    ``work``); ``UserError`` (one line) when this machine cannot build it."""
    from resispec_gguf.errors import UserError

    site = _site(work)
    if _built(site) is None:
        print(f"reusing llama-cpp-python built with CUDA in {site}", file=sys.stderr)
        return site
    if not Path(sdist).exists():
        raise UserError(f"--build: no source archive or folder at {sdist}")
    nvcc = _nvcc()
    if nvcc is None:
        raise UserError("--build needs the CUDA toolkit: no nvcc that runs in $CUDACXX, on the PATH, in $CUDA_HOME/bin "
                        "or in " + ", ".join(f"{h}/bin" for h in CUDA_HOMES))
    if not _gpu():
        raise UserError("--build: this machine shows no NVIDIA GPU (no /dev/nvidia<N>, no nvidia-smi -L that lists "
                        "one), so a CUDA build could not run here")
    if not (shutil.which("cmake") or importlib.util.find_spec("cmake")):
        raise UserError("--build needs CMake (cmake on the PATH, or the cmake package)")
    if not importlib.util.find_spec("scikit_build_core"):
        raise UserError("--build needs scikit-build-core in this Python (llama-cpp-python's build backend; "
                        "no index is used)")
    cublas = cublas_args(nvcc)
    if cublas is None:
        raise UserError("--build needs cuBLAS: none in the CUDA toolkit (" + ", ".join(map(str, _toolkits(nvcc)))
                        + ") nor in NVIDIA's wheels on this Python's path (nvidia/cu13, nvidia/cublas)")
    # CMake's build folder stays in ``work`` with the source at a fixed place: a build cut
    # short (a command's time limit) goes on where it stopped when called again
    # no multimodal library (llama_cpp loads it only for image chats): one long compile less
    cmake = f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={cuda_arch} -DLLAVA_BUILD=OFF {driver_args(nvcc)} {cublas}"
    cmake = cmake.strip()
    env = {**os.environ, "CMAKE_ARGS": cmake, "FORCE_CMAKE": "1",
           "CUDACXX": nvcc, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1), "PIP_NO_INDEX": "1",
           "SKBUILD_BUILD_DIR": str(work / "llama_cpp_cmake")}
    print(f"building llama-cpp-python: CMAKE_ARGS={cmake}", file=sys.stderr)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--upgrade",
                        "--target", str(site), str(_source(Path(sdist), work))], env=env)
    if r.returncode:
        raise UserError(f"building llama-cpp-python with CUDA from {sdist} failed (pip exit {r.returncode}, "
                        "its output is above)")
    why = _built(site)
    if why:
        raise UserError(f"the llama-cpp-python built in {site} is not usable: {why}")
    print(f"built llama-cpp-python with CUDA ({nvcc}, arch {cuda_arch}) in {time.perf_counter() - t:.0f} s",
          file=sys.stderr)
    return site


# --------------------------------------------------------------------------- main


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99, help="layers offloaded (0: CPU only)")
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="default")
    ap.add_argument("--rows", default="1,2,3,4,6,8,12,16,24,32,48,64", help="rows per decode to time")
    ap.add_argument("--context", default="0,1024", help="committed tokens before timing (comma-separated)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="where the models (and --build's output) go (default: a "
                                                    "temporary folder)")
    ap.add_argument("--accept", default=None, help="first-level acceptance per K, e.g. 1=0.8,2=0.86,4=0.9")
    ap.add_argument("--analyze-json", default=None, help="take the acceptance from analyze --json's report")
    ap.add_argument("--step-tokens", type=int, default=64, help="tokens per generation of the kernels' host work")
    ap.add_argument("--host-vocab", default=None, help="vocabularies of the thin models (comma-separated; default "
                                                       "32000,151936,262144, tiny: 1024,2048,4096)")
    ap.add_argument("--host-tokens", type=int, default=48, help="tokens per generation of host and pair")
    ap.add_argument("--host-reps", type=int, default=2, help="generations per shape of host and pair (the quietest)")
    ap.add_argument("--probe-repeats", type=int, default=6, help="rounds of the backend-sampling cost")
    ap.add_argument("--skip", default="", help="parts left out, comma-separated: " + ", ".join(PARTS))
    ap.add_argument("--build", default=None, metavar="SDIST", help="build llama-cpp-python with CUDA from this first")
    ap.add_argument("--cuda-arch", default="90", help="with --build: CMAKE_CUDA_ARCHITECTURES (90: H100, H200; "
                                                      "native: this machine's GPU)")
    ap.add_argument("--build-only", action="store_true", help="stop after --build")
    ap.add_argument("--pack-sdist", nargs=2, metavar=("SRC", "OUT"), help="only write llama-cpp-python's source "
                                                                          "without what its build never reads")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    from resispec_gguf.errors import UserError

    args = _args(argv)
    try:
        return run(args, argv if argv is not None else sys.argv[1:])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(args, argv) -> int:
    """``--pack-sdist``, ``--build`` (and this script again, with the build), or the check."""
    from resispec_gguf.errors import UserError

    skip = {p.strip() for p in args.skip.split(",") if p.strip()}
    if skip - set(PARTS):
        raise UserError(f"--skip: unknown part {sorted(skip - set(PARTS))[0]} (one of {', '.join(PARTS)})")
    if args.pack_sdist:
        src, out = map(Path, args.pack_sdist)
        if not src.exists():
            raise UserError(f"--pack-sdist: no source archive or folder at {src}")
        pack_source(src, out)
        print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")
        return 0
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpu_check_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.build and not os.environ.get("GPU_CHECK_BUILT"):
        site = build(args.build, work, args.cuda_arch)
        if args.build_only:
            return 0
        env = {**_env_with(site), "GPU_CHECK_BUILT": "1"}
        return subprocess.run([sys.executable, __file__, *argv, "--workdir", str(work)], env=env).returncode
    check(args, work, skip)
    return 0


def _part(name: str, fn, report: dict, json_path: str | None):
    """``fn()``, timed; a part that fails is printed and noted in ``report["failed"]`` and
    the others still run.  The report so far is written after each part, so that a crash
    inside llama.cpp leaves the figures measured before it."""
    t = time.perf_counter()
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - one part's failure is a finding, not the end of the run
        traceback.print_exc()
        print(f"part {name} failed: {type(e).__name__}: {e}")
        report.setdefault("failed", {})[name] = f"{type(e).__name__}: {e}"
        out = None
    print(f"({name} in {time.perf_counter() - t:.0f} s)")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))
    return out


def check(args, work: Path, skip: set) -> dict:
    """Every part not in ``skip``, printed; the report of every figure (also written to
    ``--json``)."""
    import llama_cpp

    from resispec_gguf.errors import UserError
    from resispec_gguf.llama import backend

    shapes = SHAPES[args.shapes]
    vocabs = [int(x) for x in args.host_vocab.split(",")] if args.host_vocab else list(shapes["host_vocabs"])
    report = {"shapes": args.shapes, "ngl": args.n_gpu_layers, "llama_cpp_python": llama_cpp.__version__,
              "gpu_offload_supported": bool(llama_cpp.llama_supports_gpu_offload()),
              "backend_sampling_api": all(hasattr(llama_cpp, n) for n in (
                  "llama_set_sampler", "llama_get_sampled_probs_ith", "llama_get_sampled_candidates_ith")),
              "skipped": sorted(skip)}
    if os.environ.get("GPU_CHECK_BUILT") and not report["gpu_offload_supported"]:
        raise UserError(f"llama-cpp-python {llama_cpp.__file__} has no GPU offload: not the --build's")
    print(f"llama-cpp-python {report['llama_cpp_python']}, GPU offload {report['gpu_offload_supported']}, "
          f"-ngl {args.n_gpu_layers}, shapes {args.shapes}, backend-sampling API "
          f"{'present' if report['backend_sampling_api'] else 'absent'}")
    backend.set_verbose(False)
    started = time.perf_counter()
    os.environ.setdefault("RESISPEC_COSTS", str(work / "costs.json"))

    def part(name, fn):
        return None if name in skip else _part(name, fn, report, args.json)

    paths = _part("models", lambda: write_pair(work, shapes), report, args.json) \
        if {"curves", "pair", "sampling"} - skip else None
    curves = part("curves", lambda: measure_curves(paths, args, report)) if paths else None
    host = part("kernels", lambda: kernels_work(shapes["n_vocab"], args.step_tokens, report)) or {}
    part("host", lambda: host_part(report, host, vocabs, args, work))
    if paths:
        part("pair", lambda: pair_part(report, paths, args))
    if curves:
        _part("projection", lambda: print_projection(curves, host, _accept(args), report), report, args.json)
    if paths:  # last: the part most likely to stop the process (an abort in llama.cpp)
        part("sampling", lambda: sampling_part(report, paths["target"], args))
    print_summary(report, vocabs)
    print(f"(the check took {time.perf_counter() - started:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


def host_part(report: dict, host: dict, vocabs, args, work: Path) -> None:
    """4b into ``report``, printed; ``host`` gets the shapes' host work at the goals' vocabulary."""
    rows = host_work(vocabs, args.n_gpu_layers, args.threads or 1, args.host_tokens, args.host_reps, work)
    report["host_thin"], report["host_growth"] = rows, print_host(rows, vocabs, args.n_gpu_layers)
    v = _goal_vocab(vocabs)  # the real backend's host work, for the projection
    host.update({r["shape"]: r["unprofiled"] for r in rows if r["vocab"] == v})


def pair_part(report: dict, paths: dict, args) -> None:
    """4c into ``report``, printed."""
    report["pair"] = pair_work(paths, args.n_gpu_layers, args.threads, args.host_tokens, args.host_reps)
    print_pair(report["pair"], args.n_gpu_layers)


def sampling_part(report: dict, target: Path, args) -> None:
    """5 into ``report`` (the probe prints its findings)."""
    probe = backend_sampling(target, args.n_gpu_layers, args.threads, args.probe_repeats)
    report["backend_sampling"], report["backend_sampling_summary"] = probe, sampling_summary(probe)




if __name__ == "__main__":
    sys.exit(main())
