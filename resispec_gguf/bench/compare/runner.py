"""The comparison's driver and its one-request-at-a-time mode: ``run`` checks the options and
the binaries, resolves the models and picks the mode (``concurrency``, ``agent`` or
``run_single``); ``run_single`` runs, per temperature and prompt, llama.cpp's
speculative-simple, llama-bench's tg at depth 0 and at the prompt's depth, llama-server and
our methods, and prints one table per workload and our plain decoding against llama.cpp's.
The summaries and tables are pure."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

from . import agent, concurrency
from . import server_client as srv
from .binaries import LlamaCpp
from .common import (DEFAULT_TOKENS, CompareError, Options, fmt, load_note, median, method_params, note, server_body,
                     write_json)

BENCH_D0 = "llama.cpp llama-bench tg d=0"
BENCH_AT = "llama.cpp llama-bench tg d=prompt"
SERVER_ROW = "llama.cpp llama-server"


def summarise(runs: list[dict], baselines: dict[str, list]) -> dict:
    """runs: per prompt ``{"tokens_per_s", "tokens", "accepted", "drafted"}``; ``vs_<name>``
    for every baseline (per-prompt tokens/s: ``none`` ours, ``bench`` llama-bench tg at the
    prompt's depth, ``server`` llama-server) is the median of per-prompt ratios against the
    same prompt's baseline speed."""
    tps = [r["tokens_per_s"] for r in runs]
    acc_num = sum(r.get("accepted") or 0 for r in runs)
    acc_den = sum(r.get("drafted") or 0 for r in runs)
    out = {"tokens_per_s": median(tps)}
    for name, base in baselines.items():
        out[f"vs_{name}"] = median([t / b for t, b in zip(tps, base) if t is not None and b])
    out.update(acceptance=acc_num / acc_den if acc_den else None,
               tokens=sum(r.get("tokens") or 0 for r in runs), runs=len(runs))
    return out


def format_table(results: list[dict]) -> str:
    head = (f"{'T':>4}  {'system / method':<34} {'tok/s':>7} {'vs ours none':>13} {'vs bench@depth':>15} "
            f"{'vs server':>10} {'accept':>7} {'tokens':>7}")
    lines = []
    workload = object()
    for block in results:
        if block.get("workload") != workload:
            workload = block.get("workload")
            if lines:
                lines.append("")
            if workload is not None:
                lines.append(f"workload: {workload}")
            lines += [head, "-" * len(head)]
        for name, s in block["rows"].items():
            lines.append(
                f"{block['temperature']:>4}  {name:<34} {fmt(s['tokens_per_s'], '.2f'):>7} {fmt(s.get('vs_none'), '.3f'):>13} "
                f"{fmt(s.get('vs_bench'), '.3f'):>15} {fmt(s.get('vs_server'), '.3f'):>10} "
                f"{fmt(s['acceptance'], '.3f'):>7} {s['tokens'] or '-':>7}"
            )
    return "\n".join(lines)


def plain_ratios(per: dict[str, list]) -> dict[str, list]:
    """Per prompt, our ``none`` tokens/s over llama.cpp's plain decoding: ``bench0``
    (llama-bench tg at depth 0), ``bench`` (at the prompt's depth), ``server`` (llama-server);
    a prompt where either speed is missing is left out."""
    ours = [r["tokens_per_s"] for r in per["ours none"]]
    out = {}
    for name, row in (("bench0", BENCH_D0), ("bench", BENCH_AT), ("server", SERVER_ROW)):
        out[name] = [o / r["tokens_per_s"] for o, r in zip(ours, per.get(row, [])) if o and r["tokens_per_s"]]
    return out


def plain_summary(records: list[dict]) -> str:
    """One line per block (``{"workload", "temperature", "runs"}``) and one over every prompt
    of the run: our ``none`` against llama.cpp's plain decoding, medians of per-prompt ratios."""
    def line(label, ratios, n):
        return (f"{label}: ours none / llama-bench tg at depth 0 {fmt(median(ratios['bench0']), '.3f')}, "
                f"at the prompt's depth {fmt(median(ratios['bench']), '.3f')}; / llama-server "
                f"{fmt(median(ratios['server']), '.3f')} ({n} prompts)")

    lines, pooled = [], {"bench0": [], "bench": [], "server": []}
    for block in records:
        ratios = plain_ratios(block["runs"])
        for k, v in ratios.items():
            pooled[k] += v
        where = f"{block['workload']} " if block.get("workload") is not None else ""
        lines.append(line(f"{where}T={block['temperature']}", ratios, len(block["runs"]["ours none"])))
    if len(records) > 1:
        lines.append(line("all", pooled, sum(len(b["runs"]["ours none"]) for b in records)))
    return "\n".join(lines)


def _check_args(a) -> None:
    if a.max_tokens is not None and a.max_tokens < 1:
        raise CompareError(f"--max-tokens must be >= 1, got {a.max_tokens}")
    if a.threads is not None and a.threads < 1:
        raise CompareError(f"--threads must be >= 1, got {a.threads}")
    if a.ctx < 16:
        raise CompareError(f"--ctx must be at least 16, got {a.ctx}")
    if a.n_prompts is not None and a.n_prompts < 1:
        raise CompareError(f"--n-prompts must be >= 1, got {a.n_prompts}")
    for n in a.draft_max or ():
        if n < 1:
            raise CompareError(f"--draft-max must be >= 1, got {n}")
    if a.rounds < 1:
        raise CompareError(f"--rounds must be >= 1, got {a.rounds}")
    if a.bench_reps < 1:
        raise CompareError(f"--bench-reps must be >= 1, got {a.bench_reps}")
    if a.timeout <= 0:
        raise CompareError(f"--timeout must be > 0, got {a.timeout}")
    for t in a.temperature:
        if not 0 <= t <= 100:
            raise CompareError(f"--temperature must be in [0, 100], got {t}")


def _ours_record(stats) -> dict:
    return {
        "tokens_per_s": stats.tokens_per_s,
        "tokens": stats.tokens,
        "accepted": sum(stats.accepted_by_depth),
        "drafted": sum(stats.reached_by_depth),
        "decode_s": stats.total_time,
        "tau": stats.tau,
    }


def _setup(a, prepare=None) -> dict:
    """Everything the modes need, checked before anything heavy: the binaries, our methods,
    the prompts, the concurrency levels, then ``prepare()`` (the command line's build check),
    both models, the sampling settings."""
    _check_args(a)
    llama = LlamaCpp(a.llama_cpp_bin)

    from .. import concurrency, inputs
    from ...config import SamplingParams
    from ...llama import models

    levels = a.concurrency
    if isinstance(levels, str):
        levels = concurrency.parse_levels(levels)
    methods = inputs.parse_methods(a.methods or ("none,auto" if levels else "none,resispec,auto"))
    workloads = {w: ps[: a.n_prompts] for w, ps in inputs.select_prompts(a.prompts, a.workload).items()}
    if a.max_tokens is not None:  # for every item; else the agent items ask their own
        workloads = inputs.without_max_tokens(workloads)
    a.max_tokens = a.max_tokens or DEFAULT_TOKENS
    sequential = [w for w, items in workloads.items() if inputs.is_sequential(items)]
    if sequential and (len(workloads) > 1 or levels):
        raise CompareError(f"--workload {sequential[0]} (a tool loop) runs alone, without --concurrency")
    if prepare is not None:
        prepare()
    kind, _ = models.parse_model_spec(a.target)
    draft_spec = a.draft if a.draft is not None else (a.target if kind == "preset" else None)
    if not draft_spec:
        raise CompareError("--draft is required when --target is not a preset")
    target = models.resolve_model(a.target, role="target")
    draft = models.resolve_model(draft_spec, role="draft")
    try:
        sp0 = SamplingParams(temperature=a.temperature[0], top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                             max_tokens=a.max_tokens, seed=a.seed)
    except ValueError as e:
        raise CompareError(str(e)) from None
    note(f"llama.cpp {llama.version} from {Path(a.llama_cpp_bin).expanduser().resolve()}")
    return dict(llama=llama, levels=levels, methods=methods, workloads=workloads, target=target, draft=draft,
                sp0=sp0, sequential=bool(sequential))


def run(a: Options, prepare=None) -> int:
    """The comparison ``a`` asks for (``--concurrency``, ``--workload agent`` or one request
    at a time); ``prepare()`` runs once the options and binaries are checked, before any model
    is resolved or loaded.  A
    SIGTERM unwinds like an interrupt, so that a started llama-server is always stopped."""
    with _sigterm_unwinds():
        cfg = _setup(a, prepare)
        if cfg["levels"]:
            return concurrency.run_concurrency(a, cfg)
        if cfg["sequential"]:
            return agent.run_mode(a, cfg)
        return run_single(a, cfg)


@contextlib.contextmanager
def _sigterm_unwinds():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_on_sigterm(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds the with-blocks: a started llama-server is stopped


def run_single(a, cfg) -> int:
    """One request at a time: per temperature and prompt, llama.cpp's speculative-simple,
    llama-bench tg (depth 0 and the prompt's depth), llama-server, then our methods."""
    from ...engine import Engine

    target, draft = cfg["target"], cfg["draft"]
    with Engine.load(str(target), str(draft), n_ctx=a.ctx, n_threads=a.threads) as engine:
        run = _single_setup(a, cfg, engine)
        results, records = [], []
        total = len(a.temperature) * sum(len(t) for t in run["texts"].values())
        done = 0
        with srv.LlamaServer(run["server_cmd"], request_timeout=a.timeout) as server:
            server.complete(server_body(a, run["first_toks"], temp=a.temperature[0], seed=a.seed) | {"n_predict": 8})
            for workload in run["texts"]:
                for temp in a.temperature:
                    per: dict[str, list] = {**{f"ours {m}": [] for m in cfg["methods"]},
                                            **{n: [] for n in run["spec_names"].values()},
                                            BENCH_D0: [], BENCH_AT: [], SERVER_ROW: []}
                    for i, (text, pt) in enumerate(zip(run["texts"][workload], run["toks"][workload])):
                        t0 = time.perf_counter()
                        _single_prompt(a, cfg, run, engine, server, per, text, pt, temp, a.seed + i)
                        done += 1
                        note(f"[{done}/{total}] {workload} T={temp} prompt {i} ({len(pt)} tokens): "
                             + ", ".join(f"{k} {fmt(v[-1]['tokens_per_s'], '.2f')}" for k, v in per.items())
                             + f" tok/s ({time.perf_counter() - t0:.0f} s{load_note()})")
                    base = {name: [r["tokens_per_s"] for r in per[row]]
                            for name, row in (("none", "ours none"), ("bench", BENCH_AT), ("server", SERVER_ROW))}
                    rows = {name: summarise(rs, base) for name, rs in per.items()}
                    results.append({"workload": workload, "temperature": temp, "rows": rows})
                    records.append({"workload": workload, "temperature": temp, "runs": per})
    _single_report(a, cfg, run, results, records)
    return 0


def _single_setup(a, cfg, engine) -> dict:
    """What every prompt of ``run_single`` shares: the prompts as text and as our tokens, the
    threads, speculative-simple's settings and row names (one per ``--draft-max``, its warm-up
    run), llama-server's command; our methods warmed up first."""
    from ...config import DraftParams

    llama, target, draft = cfg["llama"], cfg["target"], cfg["draft"]
    threads = a.threads or engine.n_threads
    texts = {w: [engine.render_chat(p["messages"]) if "messages" in p else p["prompt"] for p in ps]
             for w, ps in cfg["workloads"].items()}
    toks = {w: [engine.text_tokens(t) for t in ts] for w, ts in texts.items()}
    first_text, first_toks = next(iter(texts.values()))[0], next(iter(toks.values()))[0]
    # warm-up: Numba kernels, auto's cost curves, page cache for llama.cpp's mmap
    for m in cfg["methods"]:
        engine.generate(first_toks, cfg["sp0"].replace(max_tokens=8), DraftParams(method=m))
    spec_common = dict(top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, threads=threads, ctx=a.ctx,
                       backend_sampling=a.llama_backend_sampling)
    spec_names = {}
    for dm in [] if a.no_spec_simple else a.draft_max or [None]:
        w = llama.run_spec(llama.spec_cmd(target, draft, first_text, n=8, temp=a.temperature[0], seed=a.seed,
                                          draft_max=dm, **spec_common), a.timeout)
        spec_names[dm] = f"llama.cpp spec-simple n_max={w.get('n_draft', dm if dm is not None else '?')}"
    return {"threads": threads, "texts": texts, "toks": toks, "first_toks": first_toks, "spec_common": spec_common,
            "spec_names": spec_names, "server_cmd": llama.server_cmd(target, parallel=1, ctx=a.ctx, threads=threads)}


def _single_prompt(a, cfg, run, engine, server, per: dict, text: str, pt: list, temp: float, seed: int) -> None:
    """One prompt on every system, llama.cpp first, then ours (the same load conditions for
    all): each system's record appended to its row of ``per``."""
    llama, target, draft = cfg["llama"], cfg["target"], cfg["draft"]
    for dm, name in run["spec_names"].items():
        cmd = llama.spec_cmd(target, draft, text, n=a.max_tokens, temp=temp, seed=seed, draft_max=dm,
                             **run["spec_common"])
        s = llama.run_spec(cmd, a.timeout)
        per[name].append({"tokens_per_s": s["tokens_per_s"], "tokens": s["decoded_tokens"],
                          "accepted": s.get("n_accept"), "drafted": s.get("n_drafted"), "raw": s})
    tg = llama.run_bench(llama.bench_cmd(target, n=a.max_tokens, threads=run["threads"], reps=a.bench_reps,
                                         depths=(0, len(pt))), a.timeout)
    n_bench = a.max_tokens * a.bench_reps
    per[BENCH_D0].append({"tokens_per_s": tg.get(0), "tokens": n_bench, "depth": 0})
    per[BENCH_AT].append({"tokens_per_s": tg.get(len(pt)), "tokens": n_bench, "depth": len(pt)})
    r = server.complete(server_body(a, pt, temp=temp, seed=seed))
    if r["prompt_tokens"] != len(pt):  # e.g. a BOS added: then the depths differ
        note(f"note: llama-server decoded after {r['prompt_tokens']} prompt tokens, ours {len(pt)}")
    per[SERVER_ROW].append(r)
    for m in cfg["methods"]:
        res = engine.generate(pt, cfg["sp0"].replace(temperature=temp, seed=seed), method_params(m, a))
        per[f"ours {m}"].append(_ours_record(res.stats))


def _single_report(a, cfg, run, results: list[dict], records: list[dict]) -> None:
    """``run_single``'s tables and notes; its ``--json`` report with llama.cpp's commands."""
    llama, target, draft, threads = cfg["llama"], cfg["target"], cfg["draft"], run["threads"]
    print(format_table(results))
    print(plain_summary(records))
    print(f"llama.cpp {llama.version}; threads {threads}; prompts per workload: "
          f"{', '.join(f'{w} {len(t)}' for w, t in run['texts'].items())}; max tokens {a.max_tokens}; "
          f"top-k {a.top_k} top-p {a.top_p} min-p {a.min_p}; seed {a.seed}+i")
    print("tok/s: median over prompts of decode speed (prompt processing excluded); ratios: median per-prompt ratio; "
          "bench@depth: llama-bench tg with the prompt's tokens in the KV cache (-d), where every system decodes.")
    print("accept: ours = accepted/verified draft tokens over all tree nodes; llama.cpp = n_accept/n_drafted "
          "(greedy draft, accepted when the target's sampler picks the same token), as printed.")
    if a.json:
        write_json(a, cfg, threads, {
            "llama_cpp": {"version": llama.version, "bin": str(Path(a.llama_cpp_bin).expanduser().resolve()),
                          "spec_cmd_examples": [llama.spec_cmd(target, draft, "<PROMPT>", n=a.max_tokens, draft_max=dm,
                                                               temp=a.temperature[0], seed=a.seed,
                                                               **run["spec_common"])
                                                for dm in run["spec_names"]],
                          "bench_cmd": llama.bench_cmd(target, n=a.max_tokens, threads=threads, reps=a.bench_reps,
                                                       depths=(0, len(run["first_toks"]))),
                          "server_cmd": run["server_cmd"]},
            "results": results, "runs": records})
