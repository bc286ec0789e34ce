"""``bench --pairs``: compare target/draft pairs (quantizations and sizes of one model family)
on this machine: speed, speculation figures and memory, and with ``--reference`` each
target's fidelity to a higher-precision file of the same model.

Targets run one after another.  Each is opened once, with all its drafts, from a
``llama.loading.ModelPool`` (``Engine.from_pool``), and runs plainly (``none``) and with
``auto`` and each draft, interleaved per prompt and seed after one warm-up each, as
``bench`` runs its methods; then its models are closed.  A pair that cannot run (a file that
does not load, a vocabulary mismatch: ``vocab.first_mismatch``) is a row with the reason,
and the run goes on.

Fidelity: KL(reference || target) of the next-token distributions (``fidelity``: raw
logits, temperature 1, no filters) on the tokens the reference itself writes greedily after
each prompt (teacher-forced: the same tokens for every target, so targets compare), and how
often the two models' most likely tokens agree.  ``pareto_front`` marks the rows that no
other row beats on both speed and KL.

It calls the engine, prints a table, writes JSON and the plot (``report``); the
computations (``fidelity``, ``fidelity_summary``, ``pareto_front``) are pure functions.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ..config import DraftParams, ModelParams, ReasoningParams, SamplingParams
from ..errors import UserError
from ..progress import bar as progress_bar
from . import inputs, measure
from .report import peak_rss_mb as process_peak_rss_mb
from .report import require_pyplot, write_report

# --------------------------------------------------------------------------- inputs


def parse_models(text: str | None) -> list[str]:
    """A comma-separated ``--target``/``--draft`` list: each item is a path, an ``hf:`` spec
    or a preset name; blanks dropped, repeats kept once."""
    return list(dict.fromkeys(m.strip() for m in (text or "").split(",") if m.strip()))


def pair_list(targets: list[str], drafts: list[str] | None) -> list[tuple[str, list[str]]]:
    """``[(target, its drafts)]``: every draft for every target; ``drafts`` None (no
    ``--draft``): a preset target's own draft (``presets.draft_spec``), none for the others."""
    from ..llama import presets

    if drafts is not None:
        return [(t, list(drafts)) for t in targets]
    return [(t, [d] if (d := presets.draft_spec(t, None)) else []) for t in targets]


# --------------------------------------------------------------------------- fidelity (pure)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)  # [n, V]
    top = x.max(axis=1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))


def fidelity(reference: np.ndarray, target: np.ndarray, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``(kl, top1)`` per row: KL(p || q) in nats and whether argmax p == argmax q, where p
    and q are the softmax at temperature 1 of a ``reference`` and a ``target`` logits row
    (``[n, V_ref]`` and ``[n, V_target]``, the rows for the same positions; no top-k/top-p
    filters).  Vocabularies of different sizes compare on the tokens both have (the first
    min(V) ids), each distribution renormalised there.  A term whose p is 0 adds nothing;
    rounding below 0 is clipped, so identical rows give exactly 0.  Works ``chunk`` rows at
    a time in float64 (a row of a 152k vocabulary is 1.2 MB)."""
    reference, target = np.asarray(reference), np.asarray(target)
    if reference.ndim != 2 or target.ndim != 2 or len(reference) != len(target):
        raise ValueError(f"expected two [n, V] arrays of equal n, got {reference.shape} and {target.shape}")
    v = min(reference.shape[1], target.shape[1])
    kl = np.empty(len(reference))
    top1 = np.empty(len(reference), dtype=bool)
    for start in range(0, len(reference), chunk):
        a = _log_softmax(reference[start:start + chunk, :v])  # [c, v] log p
        b = _log_softmax(target[start:start + chunk, :v])  # [c, v] log q
        p = np.exp(a)
        with np.errstate(invalid="ignore"):
            terms = np.where(p > 0, p * (a - b), 0.0)
        kl[start:start + chunk] = np.maximum(terms.sum(axis=1), 0.0)
        top1[start:start + chunk] = a.argmax(axis=1) == b.argmax(axis=1)
    return kl, top1


def fidelity_summary(kl: np.ndarray, top1: np.ndarray) -> dict:
    """``{"kl_mean", "kl_p99", "top1", "positions"}`` over pooled positions: the mean KL,
    its 99th percentile (linear interpolation, NumPy's default) and the fraction of
    positions whose top tokens agree; None for all three with no position."""
    if len(kl) == 0:
        return {"kl_mean": None, "kl_p99": None, "top1": None, "positions": 0}
    return {"kl_mean": float(np.mean(kl)), "kl_p99": float(np.percentile(kl, 99)), "top1": float(np.mean(top1)),
            "positions": int(len(kl))}


def pareto_front(points: list[tuple[float | None, float | None]]) -> set[int]:
    """The indices of ``(speed, kl)`` points that no other point dominates (as fast or
    faster and as close or closer, better in one); points with a None are left out."""
    known = [(i, s, k) for i, (s, k) in enumerate(points) if s is not None and k is not None]
    return {i for i, s, k in known
            if not any(s2 >= s and k2 <= k and (s2 > s or k2 < k) for _, s2, k2 in known)}


# --------------------------------------------------------------------------- memory


def reset_peak_rss() -> str:
    """Restart the peak resident-set count where Linux allows it (``/proc/self/clear_refs``
    "5" resets ``VmHWM``); returns what ``peak_rss_mb`` then reads: "VmHWM" (the peak since
    this reset) or "ru_maxrss" (``getrusage``: the process's peak since it started)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return "VmHWM"
    except OSError:
        return "ru_maxrss"


def peak_rss_mb(source: str) -> float:
    """The peak resident set in MiB, read as ``source`` ("VmHWM" or "ru_maxrss") says."""
    if source == "VmHWM":
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    return process_peak_rss_mb()


# --------------------------------------------------------------------------- runs


def _engines(pool, target: str, drafts: list[str]):
    """``(variants, refused)``: ``[(draft or None, engine)]`` with plain first, and
    ``[(draft or None, reason)]`` for what cannot run (every pair when the target fails)."""
    from ..engine import Engine

    try:
        variants = [(None, Engine.from_pool(pool, target))]
    except UserError as e:
        return [], [(d, str(e)) for d in [None, *drafts]]
    refused = []
    for d in drafts:
        try:
            variants.append((d, Engine.from_pool(pool, target, d)))
        except UserError as e:
            refused.append((d, str(e)))
    return variants, refused


def _interleaved(variants, prompts, temperatures, sp: SamplingParams, dp: DraftParams, repeat, bar):
    """``{temperature: {draft: summary}}``: every variant on every prompt in turn, per
    temperature, repeat and prompt (``measure.run_variants``' order and seeds), after one
    warm-up each; plain is each summary's baseline."""
    modes = [(d, engine, dp.replace(method="none" if d is None else "auto")) for d, engine in variants]
    first, plan = prompts[0]
    for _, engine, mode in modes:
        engine.generate(first, sp.replace(max_tokens=8, seed=0), mode, constraint=inputs.as_run(plan, None))
    out = {}
    for t in temperatures:
        runs: dict = {d: [] for d, _, _ in modes}
        for r in range(repeat):
            for i, (pt, plan) in enumerate(prompts):
                seed = (sp.seed or 0) + 1000 * r + i
                for d, engine, mode in modes:
                    res = engine.generate(pt, sp.replace(temperature=t, seed=seed), mode,
                                          constraint=inputs.as_run(plan, None))
                    runs[d].append(((r, i), res.stats))
                    bar.update(1)
        baseline = {key: s.tokens_per_s for key, s in runs[None]}
        out[t] = {d: measure.summarise(runs[d], baseline) for d in runs}
    return out


def reference_sequences(pool, reference: str, items: list[dict], max_tokens: int, bar) -> list[tuple[list[int], int]]:
    """``[(tokens, n0)]`` per prompt: the prompt and the reference's greedy continuation of
    at most ``max_tokens`` tokens (plain decoding), with ``n0`` the index of the last prompt
    token, from which on the next-token distributions are compared."""
    from ..engine import Engine

    ref = Engine.from_pool(pool, reference, prepare=False)
    greedy = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=max_tokens, seed=0)
    out = []
    for item in items:
        pt = inputs.prompt_tokens(ref, item)
        res = ref.generate(pt, greedy, DraftParams(method="none"))
        out.append((pt + list(res.tokens), len(pt) - 1))
        bar.update(1)
    ref.close()
    return out


def target_fidelity(pool, reference: str, engine, sequences, bar) -> dict:
    """``fidelity_summary`` of ``engine``'s target against the reference on ``sequences``
    (``reference_sequences``), cut before any token the target's vocabulary lacks."""
    from ..engine import Engine

    ref = Engine.from_pool(pool, reference, prepare=False)
    kls, tops = [], []
    for tokens, n0 in sequences:
        cut = next((j for j, tok in enumerate(tokens) if tok >= engine.n_vocab), len(tokens))
        if cut > n0:
            kl, top1 = fidelity(ref.reference_logits(tokens[:cut])[n0:], engine.reference_logits(tokens[:cut])[n0:])
            kls.append(kl)
            tops.append(top1)
        bar.update(1)
    ref.close()
    return fidelity_summary(np.concatenate(kls) if kls else np.zeros(0), np.concatenate(tops) if tops else np.zeros(0))


def short_names(specs) -> dict[str, str]:
    """How the table names each model spec: its file's name (a preset's name), with as
    many of the folders above it as tell apart two specs whose names are the same."""
    specs = list(dict.fromkeys(specs))
    parts = {s: [p for p in s.replace(os.sep, "/").split("/") if p] or [s] for s in specs}
    depth = {s: 1 for s in specs}
    while True:
        names = {s: "/".join(parts[s][-depth[s]:]) for s in specs}
        clash = [s for s in specs if list(names.values()).count(names[s]) > 1 and depth[s] < len(parts[s])]
        if not clash:
            return names
        for s in clash:
            depth[s] += 1


def _size(pool, spec: str | None, role: str) -> int | None:
    return os.path.getsize(pool.path(spec, role)) if spec is not None else None


def _target_rows(pool, target: str, drafts: list[str], run: dict, bar) -> tuple[list[dict], list[str]]:
    """The rows of one target (plain and each draft, per temperature; then each refused
    pair) and the notes to print; its models are opened here and closed after."""
    n_items = sum(len(p) for p in run["workloads"].values())
    per_variant = n_items * len(run["temperatures"]) * run["repeat"]
    source = reset_peak_rss()
    variants, refused = _engines(pool, target, drafts)
    bar.update(per_variant * len(refused))
    rows, notes, fid = [], [], fidelity_summary(np.zeros(0), np.zeros(0))
    try:
        if variants:
            plain = variants[0][1]
            prompts = [tp for ps in inputs.planned_prompts(plain, run["workloads"], run["reasoning"]).values()
                       for tp in ps]
            summaries = _interleaved(variants, prompts, run["temperatures"], run["sp"], run["dp"], run["repeat"], bar)
            rss = peak_rss_mb(source)
            if run["reference"] is not None:
                why = pool.mismatch(target, run["reference"], role="target")
                if why is None:
                    fid = target_fidelity(pool, run["reference"], plain, run["sequences"], bar)
                else:
                    notes.append(f"no fidelity for {target}: its vocabulary and the reference's differ: {why}")
                    bar.update(n_items)
            routes = {d: _route(engine) for d, engine in variants}
            for t, by_draft in summaries.items():
                for d, s in by_draft.items():
                    rows.append(_row(pool, target, d, t, s, fid, rss) | {"route": routes[d]})
        elif run["reference"] is not None:
            bar.update(n_items)
    finally:
        for _, engine in variants:
            engine.close()
        pool.close()
    rows += [{"target": target, "draft": d, "error": why} for d, why in refused]
    return rows, notes


def _route(engine) -> str | None:
    """How an engine's draft serves its target: ``"same"`` (one vocabulary), ``"text"`` (another,
    read through text), None without a draft."""
    draft = engine.info()["draft"]
    return None if draft is None else draft.get("route", "same")


def _row(pool, target: str, draft: str | None, temperature: float, s: dict, fid: dict, rss: float) -> dict:
    return {"target": target, "draft": draft, "method": "none" if draft is None else "auto",
            "temperature": temperature, "tokens_per_s": s["tokens_per_s"], "speedup_vs_plain": s["speedup_vs_none"],
            "tau": s["tau"], "accept_by_depth": s["accept_by_depth"], "kl_mean": fid["kl_mean"],
            "kl_p99": fid["kl_p99"], "top1": fid["top1"], "rss_mb": rss,
            "target_bytes": _size(pool, target, "target"), "draft_bytes": _size(pool, draft, "draft")}


def run_pairs(pool, pairs: list[tuple[str, list[str]]], workloads: dict, temperatures, sp: SamplingParams,
              dp: DraftParams, *, repeat: int = 1, reference: str | None = None,
              reasoning: ReasoningParams | None = None, progress: bool = True) -> dict:
    """Run every pair of ``pairs`` (``pair_list``) on ``pool``'s models; returns the report
    (``REPORT_SCHEMA``) with the notes to print under ``"notes"``.  ``reference``: the
    model spec the targets' fidelity is measured against (its file failing is a
    ``UserError``, before any run); ``dp``: auto's bounds (its method is ignored)."""
    items = [p for ps in workloads.values() for p in ps]
    n_runs = sum(1 + len(ds) for _, ds in pairs) * len(items) * len(temperatures) * repeat
    n_fidelity = len(items) * (1 + len(pairs)) if reference is not None else 0
    bar = progress_bar(n_runs + n_fidelity, "pairs", progress, unit="run", leave=False)
    run = {"workloads": workloads, "temperatures": list(temperatures), "sp": sp, "dp": dp, "repeat": repeat,
           "reasoning": reasoning, "reference": reference, "sequences": None}
    rows, notes, source = [], [], reset_peak_rss()
    try:
        if reference is not None:
            try:
                run["sequences"] = reference_sequences(pool, reference, items, sp.max_tokens, bar)
            finally:
                pool.close()
        for target, drafts in pairs:
            more, said = _target_rows(pool, target, drafts, run, bar)
            rows += more
            notes += said
    finally:
        bar.close()
    ref = None
    if reference is not None:
        ref = {"model": reference, "bytes": _size(pool, reference, "target"),
               "positions": sum(len(tokens) - n0 for tokens, n0 in run["sequences"])}
    return {"pairs": rows, "rss": source, "reference": ref, "notes": notes,
            "config": {"targets": [t for t, _ in pairs], "drafts": {t: ds for t, ds in pairs},
                       "temperatures": list(temperatures), "max_tokens": sp.max_tokens, "seed": sp.seed,
                       "repeat": repeat, "prompts": len(items),
                       "draft_params": {k: getattr(dp, k) for k in ("draws", "depth", "budget", "draft_support")}}}


# --------------------------------------------------------------------------- the report

_NUMBER_OR_NULL = {"type": ["number", "null"]}
_RESULT = {
    "type": "object", "additionalProperties": False,
    "required": ["target", "draft", "method", "temperature", "tokens_per_s", "speedup_vs_plain", "tau",
                 "accept_by_depth", "kl_mean", "kl_p99", "top1", "rss_mb", "target_bytes", "draft_bytes", "route"],
    "properties": {
        "target": {"type": "string"}, "draft": {"type": ["string", "null"]}, "method": {"enum": ["none", "auto"]},
        "temperature": {"type": "number", "minimum": 0}, "tokens_per_s": {"type": "number", "minimum": 0},
        "speedup_vs_plain": _NUMBER_OR_NULL, "tau": _NUMBER_OR_NULL,
        "accept_by_depth": {"type": "array", "items": _NUMBER_OR_NULL},
        "kl_mean": {"type": ["number", "null"], "minimum": 0}, "kl_p99": {"type": ["number", "null"], "minimum": 0},
        "top1": {"type": ["number", "null"], "minimum": 0, "maximum": 1}, "rss_mb": {"type": "number", "minimum": 0},
        "target_bytes": {"type": "integer"}, "draft_bytes": {"type": ["integer", "null"]},
        "route": {"enum": ["same", "text", None]},
    },
}
_REFUSED = {
    "type": "object", "additionalProperties": False, "required": ["target", "draft", "error"],
    "properties": {"target": {"type": "string"}, "draft": {"type": ["string", "null"]}, "error": {"type": "string"}},
}
#: What ``bench --pairs --json`` writes (JSON Schema; documented in docs/benchmarks.md).
REPORT_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["pairs", "rss", "reference", "notes", "config"],
    "properties": {
        "pairs": {"type": "array", "items": {"oneOf": [_RESULT, _REFUSED]}},
        "rss": {"enum": ["VmHWM", "ru_maxrss"]},
        "reference": {"oneOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False, "required": ["model", "bytes", "positions"],
            "properties": {"model": {"type": "string"}, "bytes": {"type": "integer"},
                           "positions": {"type": "integer", "minimum": 0}}}]},
        "notes": {"type": "array", "items": {"type": "string"}},
        "config": {"type": "object"},
    },
}


def _num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _pair_label(r: dict, names: dict[str, str]) -> str:
    """A row's pair; a draft read through text (``route`` "text") is marked ``(text)``."""
    text = " (text)" if r.get("route") == "text" else ""
    return names[r["target"]] + (f" + {names[r['draft']]}{text}" if r["draft"] else " (plain)")


def _names(rows: list[dict]) -> dict[str, str]:
    return short_names([r["target"] for r in rows] + [r["draft"] for r in rows if r["draft"]])


def _mb(n: int) -> str:
    mb = n / 2**20
    return f"{mb:.0f}" if mb >= 10 else f"{mb:.1f}"


def _front(rows: list[dict]) -> set[int]:
    """Indices in ``rows`` on their temperature's Pareto front of speed against KL."""
    out = set()
    for t in dict.fromkeys(r["temperature"] for r in rows if "error" not in r):
        at = [i for i, r in enumerate(rows) if "error" not in r and r["temperature"] == t]
        out |= {at[j] for j in pareto_front([(rows[i]["tokens_per_s"], rows[i]["kl_mean"]) for i in at])}
    return out


def format_pairs(report: dict) -> str:
    """The table: a row per pair and temperature, plain first for each target, then a line
    per refused pair and the notes; with a reference, ``*`` after tok/s marks the Pareto
    front of speed against KL (per temperature)."""
    rows = report["pairs"]
    front, names = _front(rows), _names(rows)
    width = max([4] + [len(_pair_label(r, names)) for r in rows if "error" not in r])
    head = (f"{'pair':<{width}} {'T':>4} {'tok/s':>8} {'x plain':>8} {'tau':>5} {'KL mean':>8} {'KL p99':>8} "
            f"{'top1':>6} {'MB t+d':>11} {'RSS MB':>7}  accept by depth")
    lines = [head, "-" * len(head)]
    for i, r in enumerate(rows):
        if "error" in r:
            continue
        mb = _mb(r["target_bytes"]) + (f"+{_mb(r['draft_bytes'])}" if r["draft"] else "")
        by_depth = " ".join(_num(a, ".2f") for a in r["accept_by_depth"][:6]) if r["draft"] else "-"
        lines.append(f"{_pair_label(r, names):<{width}} {r['temperature']:>4} {r['tokens_per_s']:>7.2f}"
                     f"{'*' if i in front else ' '} {_num(r['speedup_vs_plain'], '.3f'):>8} {_num(r['tau'], '.2f'):>5} "
                     f"{_num(r['kl_mean'], '.4f'):>8} {_num(r['kl_p99'], '.4f'):>8} {_num(r['top1'], '.3f'):>6} "
                     f"{mb:>11} {r['rss_mb']:>7.0f}  {by_depth}")
    lines += [f"refused {_pair_label(r, names)}: {r['error']}" for r in rows if "error" in r]
    return "\n".join(lines + report["notes"])


def plot_pairs(report: dict, path: str) -> None:
    """Speed (tokens/s) against KL(reference || target), a point per pair and temperature,
    each temperature's Pareto front joined by a line."""
    plt = require_pyplot()
    rows = [r for r in report["pairs"] if "error" not in r and r["kl_mean"] is not None]
    names = _names(rows)
    fig, ax = plt.subplots(figsize=(8, 5))
    for t in dict.fromkeys(r["temperature"] for r in rows):
        at = [r for r in rows if r["temperature"] == t]
        points = ax.scatter([r["kl_mean"] for r in at], [r["tokens_per_s"] for r in at], label=f"T={t}")
        front = sorted((at[i] for i in pareto_front([(r["tokens_per_s"], r["kl_mean"]) for r in at])),
                       key=lambda r: r["kl_mean"])
        ax.plot([r["kl_mean"] for r in front], [r["tokens_per_s"] for r in front], "--",
                color=points.get_facecolor()[0])
        for r in at:
            ax.annotate(_pair_label(r, names),
                        (r["kl_mean"], r["tokens_per_s"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("symlog", linthresh=1e-4)  # a target's KL against itself is 0
    ax.set_xlabel("KL(reference || target), nats per token (lower: closer)")
    ax.set_ylabel("tokens/s (higher: faster)")
    ax.set_title("speed against fidelity (dashed: Pareto front)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def pairs_command(model: ModelParams, workloads: dict, temperatures, sp: SamplingParams, dp: DraftParams, *,
                  repeat: int = 1, reference: str | None = None, json_path: str | None = None,
                  plot_path: str | None = None, reasoning: ReasoningParams | None = None,
                  progress: bool = True) -> dict:
    """``bench --pairs``: ``model.target`` and ``model.draft`` are comma-separated lists
    (``parse_models``; ``draft`` None: each preset target's own draft); run every pair
    (``run_pairs``), print the table, write the JSON report and the plot when asked;
    returns the report.  ``model``'s other settings open every model."""
    from ..llama.loading import ModelPool

    if plot_path:
        require_pyplot()
        if reference is None:
            raise UserError("--pairs --plot draws speed against fidelity: give --reference")
    targets = parse_models(model.target)
    if not targets:
        raise UserError("--target names no model")
    pairs = pair_list(targets, parse_models(model.draft) if model.draft is not None else None)
    pool = ModelPool(model, progress=progress)
    try:
        report = run_pairs(pool, pairs, workloads, temperatures, sp, dp, repeat=repeat, reference=reference,
                           reasoning=reasoning, progress=progress)
    finally:
        pool.close()
    print(format_pairs(report))
    print(f"RSS: {'VmHWM per target' if report['rss'] == 'VmHWM' else 'ru_maxrss (process peak)'}", file=sys.stderr)
    return write_report(report, json_path, plot_path, lambda path: plot_pairs(report, path))
