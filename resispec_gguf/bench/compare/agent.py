"""``bench --against llama.cpp DIR --workload agent``: a coding agent's tool loop on our engine and on
``llama-server`` with each of its speculative types, every system running the same sequence
of chat requests in the same order.

The requests are ``bench``'s ``agent`` workload (chat requests with tools, a real source file
in a tool result, answered by a ``write_file`` call or JSON under a schema).  Each
``llama-server`` row is a fresh server (one slot) with one ``--spec-type``: ``none``,
``draft-simple`` (the draft model), ``ngram-mod`` (a hashed n-gram table that keeps what
every request's prompt and reply held, across requests), ``draft-simple,ngram-mod`` (both;
llama.cpp tries the n-grams first) and ``ngram-cache`` where the build has it, each with
llama.cpp's own defaults; they get the requests over ``/v1/chat/completions`` (rendered by
llama.cpp's template, so a prompt's token count may differ from ours by a few tokens; the
table shows both).  Ours runs them as ``bench --workload agent`` does: each method's whole
sequence in turn, started cold (its memory of past answers emptied, its prompt caches
dropped), so that every system sees the same history; a fresh server does the same for
llama.cpp.  The replies are kept in the JSON report (llama-server's text and calls).

Per system: the mean prompt length and cached prefix, the total prompt and decode seconds
(ours: prompt split into target and draft), output tokens, decode tokens/s, end-to-end
tokens/s (prompt included: what an agent waits for), its ratio to our ``none``, and the draft
acceptance.  Only the standard library and the package; the pure parts are tested without a
binary.
"""

from __future__ import annotations

import time

from . import server_client as srv
from .common import SPEC_ROWS, fmt as _f, method_params as _method_params, note as _note, write_json

WARM_UP = {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 4}


def server_rows(llama, target, draft, *, ctx, threads, draft_max=None, backend_sampling=False,
                only=None) -> list[tuple[str, list]]:
    """``(name, command)`` per ``SPEC_ROWS`` entry this build offers (those labelled in
    ``only`` when given); a build without ``--spec-type`` gets plain decoding and its one
    kind of draft-model speculation."""
    rows = []
    for label, types, drafts in SPEC_ROWS:
        if only is not None and label not in only:
            continue
        if not llama.server_spec_type:
            if types not in (None, "draft-simple"):
                continue
        elif types is not None and not set(types.split(",")) <= llama.server_spec_types:
            continue
        cmd = llama.server_cmd(target, draft=draft if drafts else None, draft_max=draft_max if drafts else None,
                               parallel=1, ctx=ctx, threads=threads, backend_sampling=backend_sampling,
                               spec_types=types)
        rows.append((f"llama-server {label}", cmd))
    return rows


def ours_record(stats) -> dict:
    """One of our requests as a row's record (``Stats``): the figures llama-server reports."""
    return {"tokens": stats.tokens, "prompt_tokens": stats.prompt_tokens, "prompt_cached": stats.prompt_reused,
            "prompt_s": stats.prompt_time, "prompt_target_s": stats.prompt_target_time,
            "prompt_draft_s": stats.prompt_draft_time, "decode_s": stats.total_time,
            "e2e": stats.prompt_time + stats.total_time, "accepted": sum(stats.accepted_by_depth),
            "drafted": sum(stats.reached_by_depth)}


def summarise_sequence(records: list[dict]) -> dict:
    """A system's run of the sequence: totals of seconds and tokens, means of the prompt's
    length and cached prefix, decode and end-to-end tokens/s over the totals, acceptance."""
    n = len(records) or 1
    tokens = sum(r["tokens"] for r in records)
    prompt_s, decode_s = sum(r["prompt_s"] for r in records), sum(r["decode_s"] for r in records)
    drafted = sum(r.get("drafted") or 0 for r in records)
    out = {"requests": len(records), "tokens": tokens, "prompt_tokens": sum(r["prompt_tokens"] for r in records) / n,
           "prompt_cached": sum(r.get("prompt_cached") or 0 for r in records) / n, "prompt_s": prompt_s,
           "decode_s": decode_s, "wall_s": sum(r["e2e"] for r in records),
           "decode_tokens_per_s": tokens / decode_s if decode_s > 0 else None,
           "e2e_tokens_per_s": tokens / (prompt_s + decode_s) if prompt_s + decode_s > 0 else None,
           "acceptance": sum(r.get("accepted") or 0 for r in records) / drafted if drafted else None}
    for part in ("prompt_target_s", "prompt_draft_s"):
        out[part] = sum(r[part] for r in records) if records and all(part in r for r in records) else None
    return out


def format_agent_table(blocks: list[dict]) -> str:
    """One block per temperature: a row per system, and its end-to-end speed against ours
    ``none``."""
    head = (f"{'T':>4}  {'system':<36} {'prompt tok':>10} {'cached':>7} {'prompt s':>9} {'tgt s':>7} {'dft s':>7} "
            f"{'decode s':>9} {'tokens':>7} {'dec tok/s':>9} {'e2e tok/s':>9} {'e2e vs none':>11} {'accept':>7}")
    lines = [head, "-" * len(head)]
    for block in blocks:
        base = block["rows"].get("ours none", {}).get("e2e_tokens_per_s")
        for name, s in block["rows"].items():
            vs = s["e2e_tokens_per_s"] / base if base and s["e2e_tokens_per_s"] else None
            lines.append(
                f"{block['temperature']:>4}  {name:<36} {s['prompt_tokens']:>10.0f} {s['prompt_cached']:>7.0f} "
                f"{s['prompt_s']:>9.2f} {_f(s['prompt_target_s'], '.2f'):>7} {_f(s['prompt_draft_s'], '.2f'):>7} "
                f"{s['decode_s']:>9.2f} {s['tokens']:>7} {_f(s['decode_tokens_per_s'], '.2f'):>9} "
                f"{_f(s['e2e_tokens_per_s'], '.2f'):>9} {_f(vs, '.3f'):>11} {_f(s['acceptance'], '.3f'):>7}")
    return "\n".join(lines)


def run_servers(rows, items, a, temp, note) -> dict[str, list]:
    """Every llama-server row, a fresh server each, through the whole sequence of ``items``
    in order (item i seeded ``a.seed + i``), after one short warm-up request."""
    out = {}
    for name, cmd in rows:
        t0 = time.perf_counter()
        with srv.LlamaServer(cmd, request_timeout=a.timeout) as server:
            server.chat(srv.chat_body(WARM_UP, n=4, temp=temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                                      seed=a.seed))
            out[name] = [server.chat(srv.chat_body(item, n=item.get("max_tokens", a.max_tokens), temp=temp,
                                                   top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, seed=a.seed + i))
                         for i, item in enumerate(items)]
        note(f"{name} T={temp}: {len(items)} requests in {time.perf_counter() - t0:.0f} s")
    return out


def sequence(cfg) -> tuple[str, list[dict]]:
    """``(name, items)`` of the sequential workload this mode runs: the only one, as ``runner``
    lets a sequential workload (``workloads.Workload.sequential``) run alone."""
    return next(iter(cfg["workloads"].items()))


def run_agent(a, cfg, method_params=_method_params, note=_note) -> dict:
    """The comparison (module docstring): llama-server's rows, then our methods, per
    temperature.  ``method_params(method, a)``: our ``DraftParams`` for a method.  Returns
    ``{"blocks", "server_cmds", "threads"}``; ``blocks``: ``{"temperature", "rows": {name:
    summary}, "runs": {name: [record]}}``."""
    from ...engine import Engine
    from .. import measure

    llama, methods, target, draft, sp0 = (cfg[k] for k in ("llama", "methods", "target", "draft", "sp0"))
    workload, items = sequence(cfg)
    with Engine.load(str(target), str(draft), n_ctx=a.ctx, n_threads=a.threads) as engine:
        threads = a.threads or engine.n_threads
        rows = server_rows(llama, target, draft, ctx=a.ctx, threads=threads, draft_max=(a.draft_max or [None])[0],
                           backend_sampling=a.llama_backend_sampling, only=a.spec_rows)
        variants = [(f"ours {m}", method_params(m, a), None) for m in methods]
        blocks = []
        for temp in a.temperature:
            runs = run_servers(rows, items, a, temp, note)
            t0 = time.perf_counter()
            ours = measure.run_variants(engine, {workload: items}, variants, [temp], sp0.replace(temperature=temp),
                                        progress=False)[0]
            note(f"ours T={temp}: {len(variants)} x {len(items)} requests in {time.perf_counter() - t0:.0f} s")
            for name, _, _ in variants:
                runs[name] = [ours_record(s) for _, s in ours["runs"][name]]
            blocks.append({"temperature": temp, "rows": {n: summarise_sequence(r) for n, r in runs.items()},
                           "runs": runs})
    return {"blocks": blocks, "server_cmds": dict(rows), "threads": threads}


def run_mode(a, cfg) -> int:
    """``--workload agent``: the tool loop on llama-server's speculative types and our
    methods, each in sequence (``run_agent``); prints the table, writes ``--json``."""
    out = run_agent(a, cfg)
    llama = cfg["llama"]
    print(format_agent_table(out["blocks"]))
    print(f"llama.cpp {llama.version}; threads {out['threads']}; {len(sequence(cfg)[1])} agent requests in "
          f"sequence per system (a fresh llama-server per row, ours started cold per method); top-k {a.top_k} "
          f"top-p {a.top_p} min-p {a.min_p}; seed {a.seed}+i")
    print("seconds are totals over the sequence; prompt s: prompt processing (ours: tgt s target, dft s draft); "
          "e2e tok/s: output tokens over prompt + decode seconds; accept: accepted/drafted tokens.")
    if a.json:
        write_json(a, cfg, out["threads"], {"llama_cpp": {"version": llama.version, "server_cmds": out["server_cmds"]},
                                            "results": [{k: b[k] for k in ("temperature", "rows")}
                                                        for b in out["blocks"]],
                                            "runs": out["blocks"]})
    return 0
