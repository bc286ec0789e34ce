"""The measuring and printing parts of ``gpu_check.py`` (steps 2 to 6 of its docstring: the
random models, the cost curves, the host work, backend sampling, the projection and the
summary); ``gpu_check.py`` builds, runs them and writes the report.  Not run by itself:
``gpu_check.py`` puts ``scripts/`` on the path before importing it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from random_gguf import write_model

# first-level acceptance per K at T 0.8 (analyze on the default pair, code / chat mix)
DEFAULT_ACCEPT = {1: 0.80, 2: 0.86, 4: 0.90}
# issue #28's goals for host work per step, ms (at V = 151,936), and for its growth 32k -> 256k
HOST_GOALS = {"plain": 0.3, "resispec K4 d5 b12": 1.0, "resispec K4 d6 b64": 3.0, "auto": 1.5}
GROWTH_GOAL = 0.30
LOGIT_STD = 2.5  # the random models' logits: about a real model's spread


# --------------------------------------------------------------------------- 2. models


def write_pair(work: Path, shapes: dict) -> dict[str, Path]:
    """The random target and draft of ``shapes`` in ``work``, logits of std ~``LOGIT_STD``."""
    return {role: write_model(work / f"{role}.gguf", **shapes[role], n_vocab=shapes["n_vocab"], seed=i,
                              embd_std=LOGIT_STD / shapes[role]["n_embd"] ** 0.5)
            for i, role in enumerate(("target", "draft"))}


# --------------------------------------------------------------------------- 3. cost curves


def cost_curves(path: Path, rows, contexts, ngl: int, threads: int | None, n_ctx: int) -> dict:
    """``{context: {rows: seconds}}``: the fastest of 3 decodes of a chain of n rows after
    ``context`` committed tokens."""
    from resispec_gguf.decoding import autotune
    from resispec_gguf.decoding import costs
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


# --------------------------------------------------------------------------- 4. host work


def _host_shapes():
    import host_bench

    return tuple(s for s in host_bench.SHAPES if s[0] in HOST_GOALS)


def host_work(vocabs, ngl: int, threads: int, tokens: int, reps: int, folder: Path) -> list[dict]:
    """4b: ``host_bench``'s rows (ms per step) on thin random models at each vocabulary,
    offloaded."""
    import host_bench

    return host_bench.run(vocabs, tokens, reps, threads, 0, _host_shapes(), folder, n_gpu_layers=ngl)


def pair_work(paths: dict, ngl: int, threads: int | None, tokens: int, reps: int) -> list[dict]:
    """4c: ``host_bench``'s rows on the random pair, offloaded (``bench``'s overhead per step
    among them)."""
    import host_bench

    return host_bench.run_pair(paths["target"], paths["draft"], "pair", reps=reps, tokens=tokens, threads=threads,
                               seed=0, shapes=_host_shapes(), n_gpu_layers=ngl)


def _goal_vocab(vocabs) -> int:
    return 151_936 if 151_936 in vocabs else vocabs[len(vocabs) // 2]


def _against_goals(ms: dict) -> str:
    return ", ".join(f"{s} {v:.3f} (goal {HOST_GOALS[s]}{'' if v <= HOST_GOALS[s] else ', over'})"
                     for s, v in ms.items())


def print_host(rows: list[dict], vocabs, ngl: int) -> dict:
    """4b's table, the shapes against the goals and their growth; returns the growth."""
    import host_bench

    host_bench.print_table(rows, f"\nhost work per step on llama.cpp, thin random models, -ngl {ngl}, "
                                 f"wall ms per step")
    v = _goal_vocab(vocabs)
    at_v = {r["shape"]: r["unprofiled"] for r in rows if r["vocab"] == v}
    print(f"host ms per step at V {v}: " + _against_goals(at_v))
    grown = host_bench.growth(rows, vocabs[0], vocabs[-1])
    print(f"growth V {vocabs[0]} -> {vocabs[-1]} (goal <= +{GROWTH_GOAL:.0%}): "
          + ", ".join(f"{s} {g:+.0%}{'' if g <= GROWTH_GOAL else ' (over)'}" for s, g in grown.items()))
    return grown


def print_pair(rows: list[dict], ngl: int) -> None:
    import host_bench

    host_bench.print_table(rows, f"\nhost work per step on the random default-shape pair, -ngl {ngl}, wall ms per step")
    print("bench's overhead_ms_per_step: " + _against_goals({r["shape"]: r["bench_unprofiled"] for r in rows}))


# --------------------------------------------------------------------------- 5. backend sampling


def backend_sampling(target: Path, ngl: int, threads: int | None, repeats: int) -> dict:
    """``backend_sampling_probe``'s parts 1 and 3 on ``target`` with ``ngl`` layers offloaded
    (it prints its findings); its report."""
    import backend_sampling_probe as probe

    report = {}
    print(f"\nbackend sampling on {target.name}, -ngl {ngl} (backend_sampling_probe parts 1 and 3):")
    probe.probe_build(report, target, ngl)
    if report["1"].get("a_api_bound"):
        probe.probe_cost(report, target, threads, repeats, ngl)
    return report


def sampling_summary(report: dict) -> dict:
    """Wrong rows without and with a new plan before every decode (bad, rows), and ms per row."""
    wrong = report["1"].get("f_wrong_rows", {})
    out = {}
    for key, replan in (("wrong_rows", False), ("wrong_rows_replanned", True)):
        found = [v for k, v in wrong.items() if ("re-planned" in k) == replan]
        out[key] = [sum(v["bad"] for v in found), sum(v["rows"] for v in found)]
    cost = report.get("3", {})
    out["ms_per_row"] = {k: cost.get(f"{k} total") for k in ("plain", "backend", "backend+re-plan")}
    return out


# --------------------------------------------------------------------------- 6. projection


def _curve(points: dict):
    from resispec_gguf.decoding.autotune import CostCurve

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



# --------------------------------------------------------------------------- the parts' figures, printed


def measure_curves(paths: dict, args, report: dict) -> dict:
    """3: ``{role: {context: {rows: seconds}}}``, printed and put in ``report``."""
    rows = [int(x) for x in args.rows.split(",")]
    contexts = [int(x) for x in args.context.split(",")]
    n_ctx = max(contexts) + max(rows) + 256
    curves = {role: cost_curves(path, rows, contexts, args.n_gpu_layers, args.threads, n_ctx)
              for role, path in paths.items()}
    report["curves_s"] = {role: {str(c): {str(r): s for r, s in pts.items()} for c, pts in by.items()}
                          for role, by in curves.items()}
    print(f"\ndecode cost of n rows / 1 row (1 row in ms), per context")
    print(f"{'model':<7} {'ctx':>5} {'1 row ms':>9} " + " ".join(f"{r:>6}" for r in rows))
    for role, by in curves.items():
        for ctx, pts in by.items():
            print(f"{role:<7} {ctx:>5} {1000 * pts[rows[0]]:>9.2f} "
                  + " ".join(f"{pts[r] / pts[rows[0]]:>6.2f}" for r in rows))
    return curves


def kernels_work(n_vocab: int, tokens: int, report: dict) -> dict:
    """4a: ``{shape: ms per step}`` of ``bench_kernels --steps`` (default sampling)."""
    import bench_kernels

    steps = bench_kernels.run_steps(n_vocab, tokens, 0)
    host = {r["shape"]: r["overhead_ms_per_step"] for r in steps if r["sampling"] == "default sampling"}
    report["host_ms_per_step"] = dict(host)
    print("\nhost work per step on fake models (bench_kernels --steps, ms, default sampling): "
          + ", ".join(f"{k} {v:.3f}" for k, v in host.items()))
    return host


def print_projection(curves: dict, host: dict, accept: dict, report: dict) -> None:
    """6, per context of the curves."""
    report["accept"] = accept
    for ctx in curves["target"]:
        proj = project(curves["target"][ctx], curves["draft"][ctx], host, accept)
        report.setdefault("projection", {})[str(ctx)] = [dict(setting=n, tokens=e, speedup=s) for n, e, s in proj]
        best = max(proj, key=lambda x: x[2])
        print(f"\nprojected speed-up over plain at context {ctx} (acceptance per K {accept}):")
        for name, tokens, speedup in proj:
            mark = "  <- best" if name == best[0] else ""
            print(f"  {name:<22} {tokens:5.2f} tokens/step  {speedup:6.3f}x{mark}")


def _accept(args) -> dict:
    if args.analyze_json:
        data = json.loads(Path(args.analyze_json).read_text())
        return {int(k): v["resispec"] for k, v in data["results"][0]["by_k"].items()}
    if args.accept:
        return {int(k): float(v) for k, v in (x.split("=") for x in args.accept.split(","))}
    return DEFAULT_ACCEPT


def print_summary(report: dict, vocabs) -> None:
    """The figures of 4 and 5 in a few lines, to paste into a note."""
    print(f"\nsummary: llama-cpp-python {report['llama_cpp_python']}, GPU offload {report['gpu_offload_supported']}, "
          f"-ngl {report['ngl']}, shapes {report['shapes']}, wall ms per step (issue #28's goals: "
          + ", ".join(f"{s} <= {g}" for s, g in HOST_GOALS.items()) + f"; growth <= +{GROWTH_GOAL:.0%})")
    if "host_thin" in report:
        for v in vocabs:
            print(f"  host work, thin models, V {v}: "
                  + ", ".join(f"{r['shape']} {r['unprofiled']:.3f}" for r in report["host_thin"] if r["vocab"] == v))
        print(f"  growth V {vocabs[0]} -> {vocabs[-1]}: "
              + ", ".join(f"{s} {g:+.0%}" for s, g in report["host_growth"].items()))
    if "pair" in report:
        print("  bench overhead_ms_per_step, default-shape pair: "
              + ", ".join(f"{r['shape']} {r['bench_unprofiled']:.3f}" for r in report["pair"]))
    if report.get("failed"):
        print("  failed: " + "; ".join(f"{k}: {v}" for k, v in report["failed"].items()))
    if "backend_sampling_summary" in report:
        b = report["backend_sampling_summary"]
        ms = ", ".join(f"{k} {v:.3f}" for k, v in b["ms_per_row"].items() if v is not None)
        print(f"  backend sampling: wrong rows {b['wrong_rows'][0]}/{b['wrong_rows'][1]} without a new plan, "
              f"{b['wrong_rows_replanned'][0]}/{b['wrong_rows_replanned'][1]} with a new plan before every decode; "
              f"ms per row of an 8-node tree (decode + distributions): {ms or 'not measured'}")
