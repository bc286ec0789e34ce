"""``bench --against llama.cpp DIR --concurrency 1,4``: serving compared.  At each level c,
c client threads share a workload's prompts and send them back to back, to our engine
(exactly ``bench --concurrency``, per method) and, interleaved, streamed over HTTP to
``llama-server -np max(levels)`` without and with its draft; ``--rounds R`` repeats the
levels (odd rounds in reverse order) and the table gives medians.  See the package's
docstring for the warm-up and the caches."""

from __future__ import annotations

import contextlib
import statistics

from . import server_client as srv
from .common import fmt, load_note, method_params, note, server_body, write_json


FIGURES = ("aggregate_tokens_per_s", "per_request_tokens_per_s", "ttft_p50", "ttft_p95", "e2e_p50", "e2e_p95")


def median_rows(rows: list[dict]) -> list[dict]:
    """One row per (workload, system, clients), in first-seen order, each figure the median
    over its rounds; ``rounds`` says how many."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["system"], r["clients"]), []).append(r)
    return [{"workload": w, "system": s, "clients": c, "rounds": len(rs),
             **{k: statistics.median(r[k] for r in rs) for k in FIGURES}}
            for (w, s, c), rs in groups.items()]


def format_concurrency_table(rows: list[dict]) -> str:
    """Per workload and level, every system's figures and its aggregate against ours ``none``
    at the same level."""
    head = (f"{'workload':9} {'system':36} {'clients':>7} {'agg tok/s':>9} {'vs none':>7} {'req tok/s':>9} "
            f"{'TTFT p50':>9} {'TTFT p95':>9} {'e2e p50':>8} {'e2e p95':>8}")
    lines = [head, "-" * len(head)]
    base = {(r["workload"], r["clients"]): r["aggregate_tokens_per_s"] for r in rows if r["system"] == "ours none"}
    for r in rows:
        b = base.get((r["workload"], r["clients"]))
        vs = r["aggregate_tokens_per_s"] / b if b else None
        lines.append(f"{r['workload']:9} {r['system']:36} {r['clients']:>7} {r['aggregate_tokens_per_s']:>9.2f} "
                     f"{fmt(vs, '.3f'):>7} {r['per_request_tokens_per_s']:>9.2f} {r['ttft_p50']:>8.2f}s "
                     f"{r['ttft_p95']:>8.2f}s {r['e2e_p50']:>7.2f}s {r['e2e_p95']:>7.2f}s")
    return "\n".join(lines)


def run_concurrency(a, cfg) -> int:
    """``--concurrency``: per workload, round and level, interleaved, our engine (``bench
    --concurrency``'s clients, per method) and llama-server ``-np max(levels)`` without and
    with its draft (per ``--draft-max``), the same prompt tokens sent back to back by the same
    number of client threads; odd rounds reverse the order.  Medians over the rounds."""
    from ...config import DraftParams
    from ...engine import Engine
    from .. import concurrency, inputs

    llama, levels, methods, workloads, target, draft, sp0 = (
        cfg[k] for k in ("llama", "levels", "methods", "workloads", "target", "draft", "sp0"))
    temp = a.temperature[0]
    if len(a.temperature) > 1:
        note(f"--concurrency runs at the first --temperature only ({temp})")
    slots = max(levels)
    with Engine.load(str(target), str(draft), n_ctx=a.ctx, n_threads=a.threads, n_slots=slots) as engine:
        threads = a.threads or engine.n_threads
        prompts = inputs.planned_prompts(engine, workloads, None)
        sp = sp0.replace(temperature=temp)
        first = next(iter(prompts.values()))[0][0]
        for m in methods:  # warm-up, as in the single-request mode
            engine.generate(first, sp.replace(max_tokens=8), DraftParams(method=m))
        cmds = server_cmds(a, llama, target, draft, slots, threads)
        rows = []
        with contextlib.ExitStack() as stack:
            servers = {name: stack.enter_context(srv.LlamaServer(cmd, request_timeout=a.timeout))
                       for name, cmd in cmds.items()}
            for s in servers.values():
                s.complete(server_body(a, first, temp=temp, seed=a.seed) | {"n_predict": 8})
            for workload, items in prompts.items():
                bodies = [server_body(a, tokens, temp=temp, seed=a.seed + i, stream=True)
                          for i, (tokens, _plan) in enumerate(items)]
                systems = [(f"ours {m}", lambda c, m=m: concurrency.run_level(engine, items, c, sp, method_params(m, a)))
                           for m in methods]
                systems += [(name, lambda c, s=s: srv.run_level(s, bodies, c)) for name, s in servers.items()]
                # untimed: every system serves the workload once at the top level, so that all
                # start the rounds with its prompts cached as far as their caches hold them
                for name, level in systems:
                    level(slots)
                note(f"{workload}: every system served the workload once (untimed){load_note()}")
                for rnd in range(a.rounds):
                    for c in levels:
                        # odd rounds run the systems in reverse order: neither side always goes first
                        for name, level in systems[::-1] if rnd % 2 else systems:
                            rows.append({"workload": workload, "system": name, "round": rnd, **level(c)})
                            _note_level(rows[-1])
    _report(a, cfg, rows, cmds, prompts, threads, temp)
    return 0


def server_cmds(a, llama, target, draft, slots: int, threads: int) -> dict[str, list]:
    """``{row name: command}``: llama-server ``-np slots`` without its draft, then with it per
    ``--draft-max``."""
    cmds = {f"llama.cpp server -np {slots}": llama.server_cmd(target, parallel=slots, ctx=a.ctx, threads=threads)}
    for dm in a.draft_max or [None]:
        n_max = dm if dm is not None else llama.server_draft_max_default
        cmds[f"llama.cpp server -np {slots} +draft n_max={n_max if n_max is not None else '?'}"] = llama.server_cmd(
            target, draft=draft, draft_max=dm, parallel=slots, ctx=a.ctx, threads=threads,
            backend_sampling=a.llama_backend_sampling)
    return cmds


def _report(a, cfg, rows: list[dict], cmds: dict, prompts: dict, threads: int, temp: float) -> None:
    """The table of medians and its notes; the ``--json`` report with every round's rows."""
    llama, levels = cfg["llama"], cfg["levels"]
    slots = max(levels)
    print(format_concurrency_table(median_rows(rows)))
    print(f"llama.cpp {llama.version}; threads {threads}; slots {slots} (llama-server -np {slots}, unified KV); "
          f"prompts per workload: {', '.join(f'{w} {len(p)}' for w, p in prompts.items())}; max tokens "
          f"{a.max_tokens}; T {temp} top-k {a.top_k} top-p {a.top_p} min-p {a.min_p}; seed {a.seed}+i")
    print(f"agg tok/s: all tokens over the level's wall time; vs none: against ours none at the same level; "
          f"req tok/s: mean of tokens / end-to-end time; TTFT and e2e as the client sees them; "
          f"medians over {a.rounds} round(s).")
    if a.json:
        write_json(a, cfg, threads, {"llama_cpp": {"version": llama.version, "server_cmds": cmds}, "levels": levels,
                                      "rows": rows})


def _note_level(r: dict) -> None:
    note(f"{r['workload']} {r['system']} c={r['clients']}: {r['aggregate_tokens_per_s']:.2f} tok/s aggregate, "
          f"TTFT p50 {r['ttft_p50']:.2f} s{load_note()}")
