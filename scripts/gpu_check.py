"""What speculation would buy on this machine's accelerator: one run, no network, < 10 min.

1. (``--build SDIST``) builds llama-cpp-python with CUDA from the source archive (or
   directory) it is given into a fresh virtual environment next to the work directory, with
   this machine's other packages visible, and runs the rest of the script there.  Without
   it, the llama-cpp-python already installed is used.
2. Writes random-weight GGUF models with the default pair's exact shapes (Qwen2.5-Coder
   1.5B target, 0.5B draft: layers, widths, heads, the 151,936-token vocabulary; Q4_0
   matrices written directly as random blocks, so nothing is quantized or downloaded).
   ``--shapes tiny`` writes small models of the same architecture instead (the CPU check).
3. Measures the target's and the draft's cost curves, one decode of 1 to 64 rows, with
   ``-ngl``, at an empty context and after ``--context`` tokens.
4. Measures the engine's host work per step at this vocabulary (``bench_kernels.py
   --steps``: fake models at no model cost), and says whether this llama.cpp build has the
   backend-sampling API (not used by the engine).
5. Prints the projected speed-up of each method over plain decoding from those curves and
   the first-level acceptance that ``analyze`` measures (``--accept``, or ``--analyze-json``
   from ``python -m resispec_gguf analyze --json``), under the approximation that each
   depth of the accepted path is accepted with the method's first-level rate.

Nothing is asserted and nothing here is part of the tests or CI.

    python scripts/gpu_check.py -ngl 99                      # on the GPU machine
    python scripts/gpu_check.py --shapes tiny -ngl 0 --rows 1,2,4 --threads 1   # CPU check
    python scripts/gpu_check.py --build llama_cpp_python-0.3.36.tar.gz -ngl 99
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's package
sys.path.insert(0, str(HERE))  # bench_kernels, random_gguf

from random_gguf import write_model  # noqa: E402

# Qwen2.5-Coder-1.5B / 0.5B (config.json of the default pair); tied embeddings, q/k/v biases.
SHAPES = {
    "default": {
        "target": dict(n_layer=28, n_embd=1536, n_ff=8960, n_head=12, n_head_kv=2),
        "draft": dict(n_layer=24, n_embd=896, n_ff=4864, n_head=14, n_head_kv=2),
        "n_vocab": 151_936,
    },
    "tiny": {
        "target": dict(n_layer=2, n_embd=128, n_ff=256, n_head=4, n_head_kv=2),
        "draft": dict(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=1),
        "n_vocab": 8_192,
    },
}
# first-level acceptance per K at T 0.8 (analyze on the default pair, code / chat mix)
DEFAULT_ACCEPT = {1: 0.80, 2: 0.86, 4: 0.90}


# --------------------------------------------------------------------------- 1. build


def build(sdist: str, venv: Path) -> Path:
    """``venv``'s python with llama-cpp-python built with CUDA from ``sdist``."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": "-DGGML_CUDA=on", "FORCE_CMAKE": "1", "PIP_NO_INDEX": "1"}
    t = time.perf_counter()
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--force-reinstall",
                    sdist], check=True, env=env)
    print(f"built llama-cpp-python with CUDA in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return python


# --------------------------------------------------------------------------- 2. models


# --------------------------------------------------------------------------- 3. cost curves


def cost_curves(path: Path, rows, contexts, ngl: int, threads: int | None, n_ctx: int) -> dict:
    """``{context: {rows: seconds}}``: the fastest of 3 decodes of a chain of n rows after
    ``context`` committed tokens."""
    from resispec_gguf.spec import autotune
    from resispec_gguf.spec import costs
    from resispec_gguf.llama import backend
    from resispec_gguf.config import MAX_TREE_NODES

    model = backend.LlamaModel(path, n_ctx=n_ctx, n_threads=threads, n_gpu_layers=ngl, n_seq_max=MAX_TREE_NODES + 2)
    out = {}
    try:
        rng = np.random.default_rng(0)
        for ctx in contexts:
            prompt = rng.integers(3, model.n_vocab, ctx + 1).tolist()
            model.reset()
            model.sync_prefix(prompt)  # commits all but the last token

            def decode(n):
                model.decode([int(t) for t in rng.integers(3, model.n_vocab, n)], [-1] + list(range(n - 1)))
                model.drop_uncommitted()

            curve = costs.measure_curve(decode, rows=tuple(rows), repeats=3)
            out[ctx] = dict(zip(curve.rows, curve.seconds))
    finally:
        model.close()
    return out


# --------------------------------------------------------------------------- 5. projection


def _curve(points: dict):
    from resispec_gguf.spec.autotune import CostCurve

    rows = sorted(points)
    return CostCurve(tuple(rows), tuple(points[r] for r in rows))


def project(target: dict, draft: dict, host_ms: dict, accept: dict) -> list[tuple[str, float, float]]:
    """``[(setting, expected tokens per step, speed-up over plain)]``.

    A tree of depth d and budget b with K draws per node keeps K children at each of its
    first ``L = min(d, b // K)`` levels along the accepted path, each level accepted with the
    first-level acceptance ``a_K`` at K, and spends what budget is left on a chain below
    (acceptance ``a_1`` per level): ``1 + a_K + ... + a_K^L + a_K^L (a_1 + ... )`` tokens per
    step.  It costs one draft call per level (``nodes / d`` rows each), one target call of
    ``1 + nodes`` rows (nodes = ``min(b, K d)``) and the measured host work."""
    t, d = _curve(target), _curve(draft)
    plain = t(1) + host_ms.get("plain", 0.0) / 1000
    shapes = [(f"chain d{n}", 1, n, n) for n in (1, 2, 3, 5, 8)]
    shapes += [(f"resispec K{k} d{n} b{b}", k, n, b) for k in (2, 4) for n in (3, 5) for b in (8, 16, 32, 64)]
    a1 = accept.get(1) or accept[min(accept)]
    out = []
    for name, k, depth, budget in shapes:
        a = accept.get(k) or accept[max(accept)]
        levels = min(depth, budget // k)
        tokens = sum(a ** i for i in range(levels + 1))
        rest = min(depth - levels, budget - levels * k)
        tokens += a ** levels * sum(a1 ** j for j in range(1, rest + 1))
        nodes = min(budget, k * depth)
        width = max(1, -(-nodes // depth))
        host = host_ms.get("chain d5" if k == 1 else "resispec K4 d6 b64" if nodes > 32 else
                           "resispec K4 d5 b12", 0.0) / 1000
        cost = d(1) + (depth - 1) * d(width) + t(1 + nodes) + host
        out.append((name, tokens, tokens / cost * plain))
    return out


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99, help="layers offloaded (0: CPU only)")
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="default")
    ap.add_argument("--rows", default="1,2,3,4,6,8,12,16,24,32,48,64", help="rows per decode to time")
    ap.add_argument("--context", default="0,1024", help="committed tokens before timing (comma-separated)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="where the models are written (default: a temporary folder)")
    ap.add_argument("--accept", default=None, help="first-level acceptance per K, e.g. 1=0.8,2=0.86,4=0.9")
    ap.add_argument("--analyze-json", default=None, help="take the acceptance from analyze --json's report")
    ap.add_argument("--step-tokens", type=int, default=64, help="tokens per generation of the host-work check")
    ap.add_argument("--build", default=None, metavar="SDIST", help="build llama-cpp-python with CUDA from this first")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    args = ap.parse_args(argv)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.build and not os.environ.get("GPU_CHECK_BUILT"):
        python = build(args.build, work / "venv")
        rest = [a for a in (argv if argv is not None else sys.argv[1:])]
        i = rest.index("--build")
        rest = rest[:i] + rest[i + 2:]
        env = {**os.environ, "GPU_CHECK_BUILT": "1"}
        return subprocess.run([str(python), __file__, *rest, "--workdir", str(work)], env=env).returncode

    import llama_cpp

    from resispec_gguf.llama import backend

    rows = [int(x) for x in args.rows.split(",")]
    contexts = [int(x) for x in args.context.split(",")]
    shapes = SHAPES[args.shapes]
    n_ctx = max(contexts) + max(rows) + 256
    report = {"shapes": args.shapes, "ngl": args.n_gpu_layers, "llama_cpp_python": llama_cpp.__version__,
              "gpu_offload_supported": bool(llama_cpp.llama_supports_gpu_offload()),
              "backend_sampling_api": all(hasattr(llama_cpp, n) for n in (
                  "llama_set_sampler", "llama_get_sampled_probs_ith", "llama_get_sampled_candidates_ith"))}
    print(f"llama-cpp-python {report['llama_cpp_python']}, GPU offload {report['gpu_offload_supported']}, "
          f"-ngl {args.n_gpu_layers}, shapes {args.shapes}, backend-sampling API "
          f"{'present (unused)' if report['backend_sampling_api'] else 'absent'}")
    backend.set_verbose(False)

    t = time.perf_counter()
    paths = {role: write_model(work / f"{role}.gguf", **shapes[role], n_vocab=shapes["n_vocab"], seed=i)
             for i, role in enumerate(("target", "draft"))}
    print(f"wrote random models in {time.perf_counter() - t:.0f} s: "
          + ", ".join(f"{r} {p.stat().st_size / 2**20:.0f} MiB" for r, p in paths.items()))

    curves = {}
    for role, path in paths.items():
        t = time.perf_counter()
        curves[role] = cost_curves(path, rows, contexts, args.n_gpu_layers, args.threads, n_ctx)
        print(f"{role} curves measured in {time.perf_counter() - t:.0f} s")
    report["curves_s"] = {role: {str(c): {str(r): s for r, s in pts.items()} for c, pts in by.items()}
                          for role, by in curves.items()}
    print(f"\ndecode cost of n rows / 1 row (1 row in ms), per context")
    print(f"{'model':<7} {'ctx':>5} {'1 row ms':>9} " + " ".join(f"{r:>6}" for r in rows))
    for role, by in curves.items():
        for ctx, pts in by.items():
            print(f"{role:<7} {ctx:>5} {1000 * pts[rows[0]]:>9.2f} " + " ".join(f"{pts[r] / pts[rows[0]]:>6.2f}"
                                                                            for r in rows))

    import bench_kernels

    os.environ.setdefault("RESISPEC_COSTS", str(work / "costs.json"))
    steps = bench_kernels.run_steps(shapes["n_vocab"], args.step_tokens, 0)
    host = {r["shape"]: r["overhead_ms_per_step"] for r in steps if r["sampling"] == "default sampling"}
    report["host_ms_per_step"] = host
    print("\nhost work per step (ms, default sampling, no backend sampling): "
          + ", ".join(f"{k} {v:.3f}" for k, v in host.items()))

    if args.analyze_json:
        data = json.loads(Path(args.analyze_json).read_text())
        accept = {int(k): v["resispec"] for k, v in data["results"][0]["by_k"].items()}
    elif args.accept:
        accept = {int(k): float(v) for k, v in (x.split("=") for x in args.accept.split(","))}
    else:
        accept = DEFAULT_ACCEPT
    report["accept"] = accept
    for ctx in contexts:
        proj = project(curves["target"][ctx], curves["draft"][ctx], host, accept)
        report.setdefault("projection", {})[str(ctx)] = [dict(setting=n, tokens=e, speedup=s) for n, e, s in proj]
        best = max(proj, key=lambda x: x[2])
        print(f"\nprojected speed-up over plain at context {ctx} (acceptance per K {accept}):")
        for name, tokens, speedup in proj:
            print(f"  {name:<22} {tokens:5.2f} tokens/step  {speedup:6.3f}x{'  <- best' if name == best[0] else ''}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
