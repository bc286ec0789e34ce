"""``bench --concurrency 1,2,4``: several clients at once on one engine.

At each concurrency c, c client threads share a workload's prompts (client i takes prompts
i, i + c, ...) and send them back to back through ``Engine.submit``, so every level does the
same work; the engine's slots step the running requests together.  Per method (plain and
``auto`` by default) and level it reports the aggregate tokens/s (all tokens over the
level's wall time), the mean per-request tokens/s, and the time to first token and the
end-to-end time of the requests (p50, p95).

It calls the engine, prints a table and writes the JSON report (``report``).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Sequence

import numpy as np

from ..config import DraftParams, ModelParams, ReasoningParams, SamplingParams
from ..errors import UserError
from .inputs import as_run, planned_prompts
from .report import peak_rss_mb, write_report

__all__ = ["format_concurrency", "parse_levels", "report_concurrency", "run_concurrency"]

# the most clients a level may have (each needs a slot: config.MAX_SLOTS)
MAX_LEVEL = 32


def parse_levels(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` (each from 1 to ``MAX_LEVEL``)."""
    try:
        levels = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        levels = []
    if not levels or any(not 1 <= c <= MAX_LEVEL for c in levels):
        raise UserError(f"--concurrency takes a comma-separated list of client counts from 1 to {MAX_LEVEL}, "
                        f"got {text!r}")
    return list(dict.fromkeys(levels))


def _request(engine, item, sp: SamplingParams, dp: DraftParams) -> dict:
    """Send one prompt (``(index, (tokens, plan))``, ``inputs.prompt_plan``; prompt i seeded
    ``seed + i``) and read it to its end: its ``ttft``, ``e2e`` and ``tokens``."""
    i, (tokens, plan) = item
    t0 = time.perf_counter()
    ticket = engine.submit(tokens, sp.replace(seed=(sp.seed or 0) + i), dp, constraint=as_run(plan, None))
    first = None
    for _ in ticket:
        if first is None:
            first = time.perf_counter() - t0
    res = ticket.result()
    end = time.perf_counter() - t0
    return {"ttft": first if first is not None else end, "e2e": end, "tokens": res.stats.tokens}


def shared_clients(items: Sequence, clients: int, send) -> tuple[list, float]:
    """``clients`` threads sharing ``items``: client i hands items i, i + clients, ... to
    ``send`` one after the other.  Returns what ``send`` returned (in the order the calls
    ended) and the wall seconds from the first start to the last end.  A client's exception
    ends that client and is raised here once every client has ended (also for
    ``compare.server_client``)."""
    records: list = []
    errors: list[BaseException] = []

    def client(mine):
        try:
            for item in mine:
                records.append(send(item))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(items[i::clients],)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return records, wall


def run_level(engine, prompts: list, clients: int, sp: SamplingParams, dp: DraftParams) -> dict:
    """One level: ``clients`` threads sharing ``prompts`` (``(tokens, plan)``, ``inputs.prompt_plan``);
    its figures."""
    records, wall = shared_clients(list(enumerate(prompts)), clients, lambda item: _request(engine, item, sp, dp))
    return level_figures(records, wall, clients)


def level_figures(records: list[dict], wall: float, clients: int) -> dict:
    """A level's figures from its requests' ``ttft``, ``e2e`` and ``tokens`` over ``wall``
    seconds (also what ``bench --against llama.cpp`` reports for llama-server)."""
    tokens = sum(r["tokens"] for r in records)
    ttft = np.array([r["ttft"] for r in records])
    e2e = np.array([r["e2e"] for r in records])
    return {
        "clients": clients, "requests": len(records), "tokens": tokens, "seconds": wall,
        "aggregate_tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "per_request_tokens_per_s": float(np.mean([r["tokens"] / r["e2e"] for r in records if r["e2e"] > 0])),
        "ttft_p50": float(np.percentile(ttft, 50)), "ttft_p95": float(np.percentile(ttft, 95)),
        "e2e_p50": float(np.percentile(e2e, 50)), "e2e_p95": float(np.percentile(e2e, 95)),
    }


def run_concurrency(engine, workloads: dict, levels: list[int], methods: list[str], sp: SamplingParams,
                    dp: DraftParams, reasoning: ReasoningParams | None = None) -> list[dict]:
    """Every method at every level, per workload: ``[{"workload", "method", **run_level}]``.
    The engine needs ``max(levels)`` slots for the clients to run at once (fewer: the rest
    wait in its queue, which the figures then include).  ``reasoning``: a reasoning model's
    settings for the chat prompts (its thinking's budget).

    Each method first serves the workload once at the top level, untimed: the slots and the
    RAM prompt cache then hold its prompts at every level alike, where otherwise the first
    level timed would pay every prompt's prefill and the later ones find them cached."""
    if engine.n_slots < max(levels):
        raise UserError(f"--concurrency {max(levels)} needs --parallel {max(levels)} or more "
                        f"(the engine has {engine.n_slots} slots)")
    out = []
    for name, prompts in planned_prompts(engine, workloads, reasoning).items():
        for method in methods:
            mdp = dp.replace(method=method)
            run_level(engine, prompts, max(levels), sp, mdp)  # untimed
            for c in levels:
                engine.start_afresh()  # each level draws what the first drew (``decoding.seeding``)
                out.append({"workload": name, "method": method, **run_level(engine, prompts, c, sp, mdp)})
    return out


def format_concurrency(rows: list[dict]) -> str:
    head = (f"{'workload':10} {'method':7} {'clients':>7} {'agg tok/s':>9} {'req tok/s':>9} "
            f"{'TTFT p50':>9} {'TTFT p95':>9} {'e2e p50':>8} {'e2e p95':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['workload']:10} {r['method']:7} {r['clients']:>7} {r['aggregate_tokens_per_s']:>9.2f} "
                     f"{r['per_request_tokens_per_s']:>9.2f} {r['ttft_p50']:>8.2f}s {r['ttft_p95']:>8.2f}s "
                     f"{r['e2e_p50']:>7.2f}s {r['e2e_p95']:>7.2f}s")
    return "\n".join(lines)


def report_concurrency(rows: list[dict], levels: list[int], model: ModelParams, json_path: str | None = None) -> dict:
    """Print the table and the peak memory; write the JSON report (the levels, the engine's
    slots and context, the rows) when ``json_path`` is given; returns the report."""
    print(format_concurrency(rows))
    rss = peak_rss_mb()
    print(f"peak RSS {rss:.0f} MB", file=sys.stderr)
    report = {"levels": levels, "n_slots": model.n_slots, "n_ctx": model.n_ctx, "peak_rss_mb": rss, "rows": rows}
    return write_report(report, json_path)
