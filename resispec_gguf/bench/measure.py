"""``bench`` and ``analyze``: measure methods on the user's own pair and hardware.

``bench`` runs every method in one process on the same prompts and seeds, interleaved after a
warm-up, so the ratios it prints hold on a noisy machine, each run started cold (the
engine's memory of past answers emptied, its prompt caches dropped: no method finds the
prompt, or another method's answer to it, left by the run before); a tool loop (the
``agent`` workload) runs method by method instead, each method's sequence started cold, so
that every method sees the same history.  Beside the decode speed it reports the
end-to-end speed and where a request's time went (its tables, in words: ``tables``).  ``analyze`` samples answers with
the target, records p and q at every position and prints the *exact* expected first-level
acceptance per method and K (the residual drift of ``docs/verification.md``, "The methods"),
with the optimum alpha*.

They call the engine and the verify module, print tables (``tables``) and write the JSON report
(``report``).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys

import numpy as np

from ..config import DraftParams, ModelParams, ReasoningParams, SamplingParams
from ..engine import Stats
from ..errors import UserError
# the inputs (and the built-in workloads), importable from here as before
from .inputs import (as_run, forget, is_sequential, parse_methods, parse_prompts, parse_workloads,  # noqa: F401
                     planned_prompts, prompt_plan, prompt_tokens, run_order, select_prompts, without_max_tokens)
from .report import peak_rss_mb, require_pyplot, write_report  # noqa: F401  (require_pyplot: re-exported)
from .tables import format_phases, format_table  # noqa: F401  (bench's tables: re-exported)
from .workloads import WORKLOADS  # noqa: F401


# --------------------------------------------------------------------------- bench


def summarise(runs: list, baseline: dict, e2e_baseline: dict | None = None) -> dict:
    """Aggregate one method's runs (``(prompt_index, Stats)``) against the baseline's
    tokens/s per prompt run (``e2e_baseline``: its end-to-end tokens/s, prompt included).
    The ``*_s`` figures are seconds per request, means over the runs: the prompt's target,
    draft and host parts, then the decode's (``Stats``)."""
    st = [s for _, s in runs]
    total = Stats()
    for s in st:
        total.merge(s)
    steps = total.steps or 1
    n = len(st) or 1
    speedups = [s.tokens_per_s / baseline[key] for key, s in runs if baseline.get(key)]
    e2e = [s.end_to_end_tokens_per_s / e2e_baseline[key] for key, s in runs if (e2e_baseline or {}).get(key)]
    return {
        "tokens_per_s": statistics.median(s.tokens_per_s for s in st),
        "speedup_vs_none": statistics.median(speedups) if speedups else None,
        "end_to_end_tokens_per_s": statistics.median(s.end_to_end_tokens_per_s for s in st),
        "end_to_end_vs_none": statistics.median(e2e) if e2e else None,
        "tau": total.tau,
        "accept_by_depth": total.acceptance_by_depth,
        "acceptance_rate": total.acceptance_rate,
        "nodes_per_step": total.nodes_per_step,
        "draft_ms_per_step": 1000 * total.draft_time / steps,
        "target_ms_per_step": 1000 * total.target_time / steps,
        "overhead_ms_per_step": 1000 * total.overhead_time / steps,
        "overhead_fraction": total.overhead_time / max(1e-12, total.total_time),
        "prompt_tokens": total.prompt_tokens / n,
        "prompt_reused": total.prompt_reused / n,
        "prompt_target_s": total.prompt_target_time / n,
        # the draft's prompt work: at the start, or (auto) where a step first calls the draft
        "prompt_draft_s": (total.prompt_draft_time + total.draft_sync_time) / n,
        "prompt_host_s": total.prompt_host_time / n,
        "decode_s": total.total_time / n,
        "decode_draft_s": total.draft_time / n,
        "decode_target_s": total.target_time / n,
        "decode_host_s": total.overhead_time / n,
        "tokens": total.tokens,
        "runs": len(st),
        "mask_ms_median": 1000 * statistics.median(total.mask_seconds) if total.mask_seconds else None,
        "steps_by_kind": dict(total.steps_by_kind),
        "step_times": {k: list(v) for k, v in total.step_times.items()},  # auto: [steps, predicted s, measured s]
    }


def pooled_vs(runs: list, base_runs: list) -> dict:
    """Speed over all the runs pooled (total tokens over total seconds) against the baseline's
    on the same prompt runs, decode only and end to end.  Beside the median of per-request
    ratios: sampled replies differ in length between methods, and a user waits for the total."""
    base = dict(base_runs)
    mine = [(s, base[key]) for key, s in runs if key in base]

    def ratio(seconds) -> float | None:
        ours, theirs = sum(seconds(s) for s, _ in mine), sum(seconds(b) for _, b in mine)
        if ours <= 0 or theirs <= 0 or not any(b.tokens for _, b in mine):
            return None
        return (sum(s.tokens for s, _ in mine) / ours) / (sum(b.tokens for _, b in mine) / theirs)

    return {"pooled_vs_none": ratio(lambda s: s.total_time),
            "end_to_end_pooled_vs_none": ratio(lambda s: s.end_to_end_time)}


def request_record(key, s: Stats, base_tps: float | None, base_e2e: float | None) -> dict:
    """One request of a bench block: which prompt run (``repeat``, ``prompt``), its tokens, τ
    and speeds, and its speed against the baseline's on the same prompt and seed."""
    return {"repeat": key[0], "prompt": key[1], "tokens": s.tokens, "tau": s.tau,
            "tokens_per_s": s.tokens_per_s, "end_to_end_tokens_per_s": s.end_to_end_tokens_per_s,
            "vs_none": s.tokens_per_s / base_tps if base_tps else None,
            "end_to_end_vs_none": s.end_to_end_tokens_per_s / base_e2e if base_e2e else None,
            "steps_by_kind": dict(s.steps_by_kind)}


def run_bench(engine, workloads: dict, methods, temperatures, sp: SamplingParams, dp: DraftParams, repeat=1, progress=True,
              constraint=None, reasoning: ReasoningParams | None = None):
    """Interleaved runs per workload; returns ``[{"workload", "temperature", "methods": {name:
    summary}}]``, each method compared with ``none`` on the same prompts and seeds.  With a
    ``constraint`` every method also runs under it, as ``METHOD+schema`` (its
    ``speedup_vs_free``: the median per-prompt speed against the same method unconstrained).
    ``reasoning``: a reasoning model's settings for the chat prompts (``prompt_plan``)."""
    variants = [(m, dp.replace(method=m), None) for m in methods]
    if constraint is not None:
        variants += [(m + "+schema", dp.replace(method=m), constraint) for m in methods]
    results = run_variants(engine, workloads, variants, temperatures, sp, repeat=repeat, progress=progress,
                           reasoning=reasoning)
    for block in results:
        summary = block["methods"]
        for name, m, c in variants:
            if c is not None:  # against the same method without the constraint
                free = {key: s.tokens_per_s for key, s in block["runs"][m.method]}
                summary[name]["speedup_vs_free"] = summarise(block["runs"][name], free)["speedup_vs_none"]
        del block["runs"]
    return results


def run_variants(engine, workloads: dict, variants, temperatures, sp: SamplingParams, repeat=1, progress=True,
                 reasoning: ReasoningParams | None = None):
    """Run every variant ``(name, DraftParams, constraint or None)`` on every prompt, after
    one warm-up generation each: in turn per prompt and seed, each run started cold (the
    engine's memory of past answers emptied and its prompt caches dropped: ``forget``), or,
    for a tool loop (``is_sequential``), each variant's whole sequence in turn, started cold
    (``run_order``).  A chat prompt runs as
    planned (``prompt_plan``, ``as_run``); an item's own ``max_tokens`` replaces ``sp``'s.
    The first variant is the baseline of ``speedup_vs_none``.  Returns ``[{"workload",
    "temperature", "methods": {name: summary}, "runs": {name: [(key, Stats)]}}]``."""
    from tqdm import tqdm

    toks = planned_prompts(engine, workloads, reasoning)
    total = len(temperatures) * sum(len(t) for t in toks.values()) * repeat * len(variants)
    bar = tqdm(total=total, desc="bench", disable=not progress, file=sys.stderr, leave=False)
    # warm-up: page the weights in, settle the caches (Engine.load prepared kernels and costs)
    first, plan = next(iter(toks.values()))[0]
    for _, d, c in variants:
        engine.generate(first, sp.replace(max_tokens=8, seed=0), d, constraint=as_run(plan, c))
    base = variants[0][0]
    out = []
    for w, prompt_toks in toks.items():
        items, sequential = workloads[w], is_sequential(workloads[w])
        for t in temperatures:
            runs: dict[str, list] = {name: [] for name, _, _ in variants}
            failed: dict[str, list] = {name: [] for name, _, _ in variants}  # replies ended by an error
            for r in range(repeat):
                for i, v in run_order(len(prompt_toks), len(variants), sequential):
                    if sequential and i == 0:
                        forget(engine)
                    elif not sequential:
                        # interleaved, every run starts cold too: otherwise a method would find the
                        # prompt in the cache and, in the memory of past answers, the answer the
                        # method before it gave to the same prompt (at T 0, its own reply); what
                        # auto learnt of the memory's candidates stays, as between a user's requests
                        forget(engine, learnt=False)
                    (pt, plan), (name, d, c) = prompt_toks[i], variants[v]
                    item_sp = sp.replace(temperature=t, seed=(sp.seed or 0) + 1000 * r + i,
                                         max_tokens=items[i].get("max_tokens", sp.max_tokens))
                    res = engine.generate(pt, item_sp, d, constraint=as_run(plan, c))
                    runs[name].append(((r, i), res.stats))
                    if res.finish_reason == "error":
                        failed[name].append(res.error or "unknown error")
                    bar.update(1)
            baseline = {key: s.tokens_per_s for key, s in runs[base]}
            e2e = {key: s.end_to_end_tokens_per_s for key, s in runs[base]}
            summary = {name: summarise(runs[name], baseline, e2e) for name, _, _ in variants}
            for name, _, _ in variants:
                summary[name].update(pooled_vs(runs[name], runs[base]))
                summary[name]["requests"] = [request_record(key, s, baseline.get(key), e2e.get(key))
                                             for key, s in runs[name]]
            for name, errors in failed.items():
                summary[name]["errors"] = len(errors)
                summary[name]["first_error"] = errors[0] if errors else None
            out.append({"workload": w, "temperature": t, "sequential": sequential, "methods": summary, "runs": runs})
    bar.close()
    return out


# --------------------------------------------------------------------------- bench --sweep

SWEEPS = ("quick", "full")


def sweep_grid(size: str, dp: DraftParams) -> list[tuple[str, DraftParams]]:
    """The fixed settings ``bench --sweep`` compares, ``(label, DraftParams)``, plain first and
    ``auto`` last (with ``dp``'s bounds).  ``dp`` gives what the grid does not set
    (``draft_support``, ``policy``).  "full": plain; chain at depth 1, 2, 3, 5; context lookup
    alone (no draft model call) at lengths 4, 8, 16; resispec at K 2, 4 x depth 3, 5 x budget
    8, 16, 32; chain and resispec with and without lookup.  "quick": a few of those, for a
    first look or a test."""
    if size not in SWEEPS:
        raise UserError(f"unknown sweep {size!r}; choose from {', '.join(SWEEPS)}")
    base = dp.replace(lookup=False, use_draft=True)
    fixed = [("none", base.replace(method="none"))]

    def chain(depth, look):
        fixed.append((f"chain-d{depth}" + ("+lk" if look else ""), base.replace(method="chain", depth=depth,
                                                                                budget=depth, lookup=look)))

    def lookup_alone(length):
        fixed.append((f"lookup-{length}", base.replace(method="chain", depth=length, budget=length, lookup=True,
                                                       use_draft=False)))

    def resispec(k, depth, budget, look):
        fixed.append((f"resispec-K{k}d{depth}b{budget}" + ("+lk" if look else ""),
                      base.replace(method="resispec", draws=k, depth=depth, budget=budget, lookup=look)))

    if size == "quick":
        chain(1, False)
        chain(3, False)
        chain(3, True)
        lookup_alone(8)
        resispec(2, 3, 8, False)
        resispec(2, 3, 8, True)
        resispec(4, 5, 16, False)
    else:
        for look in (False, True):
            for depth in (1, 2, 3, 5):
                chain(depth, look)
        for length in (4, 8, 16):
            lookup_alone(length)
        for look in (False, True):
            for k in (2, 4):
                for depth in (3, 5):
                    for budget in (8, 16, 32):
                        resispec(k, depth, budget, look)
    return fixed + [("auto", dp.replace(method="auto"))]


def run_sweep(engine, workloads: dict, size: str, temperatures, sp: SamplingParams, dp: DraftParams, repeat=1,
              progress=True, reasoning: ReasoningParams | None = None):
    """``bench --sweep``: the grid of ``sweep_grid`` run like ``run_bench`` (one process,
    interleaved per prompt).  Settings that need a draft model are left out when none is
    loaded.  Each result block also has ``"best"``: the fixed setting with the highest
    median speed-up over plain decoding (plain itself included), and ``auto``'s speed against
    it (``auto_vs_best``: the median of per-prompt ratios) and against plain."""
    grid = [(name, d) for name, d in sweep_grid(size, dp)
            if engine.has_draft or d.method in ("none", "auto") or not d.use_draft]
    results = run_variants(engine, workloads, [(name, d, None) for name, d in grid], temperatures, sp,
                           repeat=repeat, progress=progress, reasoning=reasoning)
    params = dict(grid)
    for block in results:
        summary = block["methods"]
        fixed = [name for name in summary if name != "auto"]
        best = max(fixed, key=lambda n: summary[n]["speedup_vs_none"] or 0.0)
        best_tps = {key: s.tokens_per_s for key, s in block["runs"][best]}
        block["best"] = {
            "setting": best,
            "speedup_vs_none": summary[best]["speedup_vs_none"],
            "draft_params": _draft_fields(params[best]),
            "auto_vs_best": summarise(block["runs"]["auto"], best_tps)["speedup_vs_none"],
            "auto_vs_none": summary["auto"]["speedup_vs_none"],
        }
        del block["runs"]
    return results, params


def _draft_fields(dp: DraftParams) -> dict:
    return {k: getattr(dp, k) for k in ("method", "draws", "depth", "budget", "draft_support", "policy", "lookup",
                                        "use_draft")}


def reproduce_command(model: ModelParams, sp: SamplingParams, dp: DraftParams, temperature: float) -> str:
    """The ``generate`` command line that runs ``dp`` with these models and sampling
    settings: every setting away from its default, by its long flag; lookup without the
    draft model as ``--draft ''``."""
    import shlex

    from .. import config

    words = ["python", "-m", "resispec_gguf", "generate"]

    def flag(f):
        return next((x for x in f.metadata["flags"] if x.startswith("--")), f.metadata["flags"][0])

    def add(cls, obj, skip=(), always=()):
        default = cls()
        for f in config.settings(cls):
            value = getattr(obj, f.name)
            if f.name in skip or (value == getattr(default, f.name) and f.name not in always) or f.name == "stop":
                continue
            if isinstance(value, bool):
                words.append(flag(f) if value else "--no-" + flag(f)[2:])
            elif value is None:
                continue
            else:
                words.extend([flag(f), str(value)])

    if not dp.use_draft:
        model = model.replace(draft="")
    add(ModelParams, model, skip=("verbose",))
    add(SamplingParams, sp.replace(temperature=temperature), skip=("max_tokens", "seed"))
    # the tree's shape in full, so that the line does not depend on today's defaults
    shape = {"none": ("method",), "chain": ("method", "depth", "budget")}.get(dp.method, ("method", "draws", "depth",
                                                                                           "budget"))
    add(DraftParams, dp.replace(use_draft=True), skip=("draws",) if dp.method in ("none", "chain") else (),
        always=shape if dp.method != "auto" else ())
    return " ".join(shlex.quote(w) for w in words)


def format_sweep(results, params, model: ModelParams, sp: SamplingParams) -> str:
    """One line per workload and temperature: the best fixed setting, ``auto`` beside it,
    and the command line that reproduces the best."""
    lines = ["", "best fixed setting per workload (speed-ups are medians of per-prompt ratios):"]
    for block in results:
        b = block["best"]

        def x(v):
            return f"{v:.3f}" if v is not None else "-"

        lines.append(f"  {block['workload']} T={block['temperature']}: best {b['setting']} ({x(b['speedup_vs_none'])}x "
                     f"plain); auto {x(b['auto_vs_best'])}x best, {x(b['auto_vs_none'])}x plain")
        lines.append("    " + reproduce_command(model, sp, params[b["setting"]], block["temperature"]))
    return "\n".join(lines)


def machine_info(engine) -> dict:
    import numba

    info = engine.info()
    target = info["target"]
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "llama_cpp_python": target["llama_cpp_python"],
        "numpy": np.__version__,
        "numba": numba.__version__,
        "gpu_offload_supported": target["gpu_offload_supported"],
        "devices": {role: m["devices"] if m is not None else None for role, m in info.items()},
        "threads": engine.n_threads,
    }


def model_info(path: str) -> dict:
    from ..llama import models

    return {"path": path, "bytes": os.path.getsize(path), "sha256": models.file_sha256(path)}


def bench_command(engine, model: ModelParams, workloads: dict, methods, temperatures, sp: SamplingParams, dp: DraftParams, *,
          repeat: int = 1, json_path: str | None = None, plot_path: str | None = None, json_schema=None,
          sweep: str | None = None, reasoning: ReasoningParams | None = None) -> dict:
    """``bench``: run, print the table, write the JSON report and the plot when asked;
    returns the report.  ``model``: what was asked to load (recorded in the report).
    ``json_schema``: also run every method under this schema (see ``run_bench``).
    ``sweep`` ("quick" or "full"): run ``sweep_grid``'s settings instead of ``methods`` and
    print, per workload, the best of them with ``auto`` beside it and the command line that
    reproduces the best (``run_sweep``).  ``reasoning``: a reasoning model's settings for the
    chat prompts (its thinking's budget)."""
    if plot_path:
        require_pyplot()
    if sweep is not None and json_schema is not None:
        raise UserError("--sweep runs without a schema: give one of --sweep and --json-schema")
    constraint = engine.compile_constraint(json_schema=json_schema) if json_schema is not None else None
    if sweep is not None:
        results, params = run_sweep(engine, workloads, sweep, temperatures, sp, dp, repeat=repeat, reasoning=reasoning)
        methods = list(params)
        print(format_table(results, engine.auto_outlook()))
        print(format_sweep(results, params, model, sp))
    else:
        results = run_bench(engine, workloads, methods, temperatures, sp, dp, repeat=repeat, constraint=constraint,
                            reasoning=reasoning)
        print(format_table(results, engine.auto_outlook() if any(m.startswith("auto") for m in methods) else None))
    ceiling = copy_ceiling_line(engine)
    if ceiling:
        print(ceiling)
    print(f"peak RSS {peak_rss_mb():.0f} MB", file=sys.stderr)
    report = bench_report(engine, model, workloads, methods, temperatures, sp, dp, results, repeat=repeat,
                          json_schema=json_schema, reasoning=reasoning)
    if sweep is not None:
        report["config"]["sweep"] = sweep
        report["config"]["settings"] = {name: _draft_fields(d) for name, d in params.items()}
        for block in results:
            block["best"]["command"] = reproduce_command(model, sp, params[block["best"]["setting"]],
                                                         block["temperature"])
    return write_report(report, json_path, plot_path, lambda path: plot(results, path))


def bench_report(engine, model: ModelParams, workloads: dict, methods, temperatures, sp: SamplingParams,
                 dp: DraftParams, results, *, repeat: int, json_schema, reasoning: ReasoningParams | None) -> dict:
    """``bench``'s JSON report: the settings it ran with, the machine, the models' files, the
    peak memory and the ``results``; ``methods``: the first block's summaries."""
    info = engine.info()
    return {
        "config": {
            "target": model.target, "draft": model.draft, "methods": list(methods), "temperatures": list(temperatures),
            "max_tokens": sp.max_tokens, "seed": sp.seed, "repeat": repeat, "prompts": workloads,
            "sampling": {k: getattr(sp, k) for k in ("top_k", "top_p", "min_p")},
            "draft_params": {k: getattr(dp, k) for k in ("draws", "depth", "budget", "draft_support", "policy")},
            "n_ctx": info["target"]["n_ctx"], "n_gpu_layers": info["target"]["n_gpu_layers"],
            "json_schema": json_schema,
            "reasoning_budget": (reasoning or ReasoningParams()).reasoning_budget,
        },
        "machine": machine_info(engine),
        "copy_ceiling": _copy_ceiling(engine),
        "models": {role: model_info(m["path"]) if m else None for role, m in info.items()},
        "peak_rss_mb": peak_rss_mb(),
        "results": results,
        "methods": results[0]["methods"],
    }


def plot(results, path: str) -> None:
    plt = require_pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for block in results:
        names = list(block["methods"])
        axes[0].plot(names, [block["methods"][n]["speedup_vs_none"] or 0 for n in names], "o-", label=f"T={block['temperature']}")
        axes[1].plot(names, [block["methods"][n]["tau"] or float("nan") for n in names], "o-", label=f"T={block['temperature']}")
    axes[0].set_title("speed-up vs none")
    axes[1].set_title("tokens per target call")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)


# --------------------------------------------------------------------------- analyze


def _copy_ceiling(engine) -> dict | None:
    """``{"speedup", "rows"}``: the target's cost curve's perfect-copy ceiling
    (``CostCurve.copy_ceiling``), None for an engine without curves."""
    curves = getattr(engine, "_auto_curves", None)
    target = curves()[0] if curves is not None else None
    if target is None:
        return None
    speedup, rows = target.copy_ceiling()
    return {"speedup": speedup, "rows": rows, "cost_of_rows": target(rows) / target(1)}


def copy_ceiling_line(engine) -> str:
    """The line under ``bench``'s tables that puts every speed-up beside this machine's
    limit: how much faster than plain decoding a reply copied whole could decode."""
    c = _copy_ceiling(engine)
    if c is None:
        return ""
    return (f"perfect-copy ceiling on this machine: {c['speedup']:.2f}x plain decoding's speed (a {c['rows']}-row "
            f"decode costs {c['cost_of_rows']:.2f}x one row and would bring {c['rows']} tokens of a reply copied "
            f"whole); a speed-up is as close to it as a workload copies")


def analyze(engine, prompts, temperatures, ks, max_tokens, cap, seed=0, rrs_samples=0, progress=True):
    """Exact expected first-level acceptance per method and K, averaged over positions."""
    from tqdm import tqdm

    from ..kernels import sampling, verify

    out = []
    for t in temperatures:
        rows = []
        for i, item in enumerate(tqdm(prompts, desc=f"analyze T={t}", disable=not progress, file=sys.stderr, leave=False)):
            pt = prompt_tokens(engine, item)
            res = engine.generate(pt, SamplingParams(temperature=t, top_k=0, top_p=1.0, min_p=0.0, max_tokens=max_tokens, seed=seed + i), DraftParams(method="none"))
            seq = pt + res.tokens
            n0 = len(pt) - 1
            tl = engine.reference_logits(seq)[n0:]
            dl = engine.reference_logits(seq, draft=True)[n0:]
            rng = np.random.default_rng(seed + i)
            for a, b in zip(tl, dl):
                p = sampling.probs_dense(a, t)
                ids, probs = sampling.probs_sparse(b[: engine.n_vocab], t, 0, 1.0, 0.0, cap)
                q = np.zeros_like(p)
                q[ids] = probs
                row = {}
                for k in ks:
                    row[("specinfer", k)] = verify.expected_acceptance("specinfer", p, q, k)
                    row[("resispec", k)] = verify.expected_acceptance("resispec", p, q, k)
                    row[("optimal", k)] = verify.optimal_acceptance(p, q, k)
                    row[("distinct", k)] = verify.expected_distinct(q, k)
                    if rrs_samples:
                        row[("rrs", k)] = _rrs_monte_carlo(p, ids, probs, k, rrs_samples, rng)
                rows.append(row)
        table = {}
        for k in ks:
            entry = {name: float(np.mean([r[(name, k)] for r in rows])) for name in ("specinfer", "resispec", "optimal", "distinct")}
            if rrs_samples:
                entry["rrs_mc"] = float(np.mean([r[("rrs", k)] for r in rows]))
            table[k] = entry
        out.append({"temperature": t, "positions": len(rows), "by_k": table})
    return out


def _rrs_monte_carlo(p, ids, probs, k, n, rng):
    """Acceptance of rrs estimated by running its kernel on n sampled draw sequences."""
    from ..kernels import sampling, verify

    if k > len(ids):
        k = len(ids)
    hits = 0
    for _ in range(n):
        draws = sampling.sample_without_replacement(ids, probs, rng.random(k))
        _, idx = verify.verify("rrs", p, (ids, probs), draws, rng.random(len(draws) + 1))
        hits += idx >= 0
    return hits / n


def format_analysis(results) -> str:
    lines = [f"{'T':>4} {'K':>3} {'chain':>7} {'specinfer':>9} {'resispec':>9} {'alpha*':>7} {'nodes':>6} {'rrs(MC)':>8}  positions"]
    for block in results:
        chain = block["by_k"].get(1, {}).get("resispec")
        for k, e in block["by_k"].items():
            rrs = f"{e['rrs_mc']:.3f}" if "rrs_mc" in e else "-"
            ch = f"{chain:.3f}" if chain is not None else "-"
            lines.append(
                f"{block['temperature']:>4} {k:>3} {ch:>7} {e['specinfer']:>9.3f} {e['resispec']:>9.3f} {e['optimal']:>7.3f} {e['distinct']:>6.2f} {rrs:>8}  {block['positions']}"
            )
    return "\n".join(lines)


def analyze_command(engine, model: ModelParams, prompts, temperatures, ks, *, max_tokens: int, cap: int, seed: int,
                    rrs_samples: int = 0, json_path: str | None = None) -> dict:
    """``analyze``: compute, print the table, write the JSON when asked; returns the JSON."""
    if not engine.has_draft:
        raise UserError("analyze needs a draft model")
    results = analyze(engine, prompts, temperatures, ks, max_tokens, cap, seed=seed, rrs_samples=rrs_samples)
    print(format_analysis(results))
    report = {
        "config": {"target": model.target, "draft": model.draft, "temperatures": list(temperatures), "k": list(ks),
                   "max_tokens": max_tokens, "draft_support": cap, "seed": seed, "rrs_samples": rrs_samples,
                   "prompts": prompts},
        "machine": machine_info(engine),
        "results": results,
    }
    return write_report(report, json_path)
