"""A JSON schema's effect on speculative speed, on the real pair, in GPU-like modelled time.

On a CPU where a decode of n rows costs about n times one row (the 2-core AMD development
machine: 6 rows cost 5.4x one row at one thread), no multi-token verification can pay, so
the grammar's candidates (forced tokens proposed as a free chain, certain positions taken
without a draw) cannot show what they give where rows are nearly free.  This runs the real
models and the real grammar, so every draw, mask, acceptance and tree is the real one, but
clocks each ``decode`` at a cost curve's price instead of its CPU time: by default a GPU-like
target at 20 ms + 0.2 ms per row and draft at 2 ms + 0.1 ms per row (as
``auto_gpu_like.py`` and ``batch_gpu_like.py``), and ``auto`` plans on those same curves.

For every prompt it runs each method unconstrained and under the schema, same seed, and
prints per method the modelled tokens/s, tau, and the
ratio of the schema run to the same method unconstrained (the median per prompt), twice:
with the host work measured outside the decodes (masks included; on this CPU it runs cold
after each real decode, so it is larger than a GPU machine's) and without it.  Nothing is
asserted.

    python scripts/schema_gpu_like.py [--target default] [--draft ...] \\
        [--prompts scripts/data/contacts.jsonl] [--schema scripts/data/contact.schema.json] \\
        [--methods none,chain,resispec,auto] [--max-tokens 48] [--temperature 0.6] \\
        [--target-ms 20,0.2] [--draft-ms 2,0.1] [--threads 2] [--seed 0] [--json OUT]

Errors (a missing file, a bad flag, a model that cannot be loaded) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

HERE = os.path.dirname(os.path.abspath(__file__))


def curve(fixed_ms: float, per_row_ms: float):
    from resispec_gguf.decoding import costs

    rows = costs.ROW_COUNTS
    return costs.CostCurve(rows, tuple((fixed_ms + per_row_ms * n) / 1000 for n in rows))


def clock(model, role: str, price, calls: list) -> None:
    """Make every decode of ``model`` append ``(role, kind, price(rows))`` to ``calls``
    (seconds): kind "tree" for ``decode_slots`` (``decode`` goes through it), "sync" for
    ``sync_slot`` (a prompt's prefill or a re-sync, priced at the rows it decodes)."""
    tree, sync = model.decode_slots, model.sync_slot

    def decode_slots(tokens, *args, **kwargs):
        prefill = kwargs.get("prefill") or (args[3] if len(args) > 3 else None) or {}
        calls.append((role, "tree", price(len(tokens) + sum(len(p) for p in prefill.values()))))
        return tree(tokens, *args, **kwargs)

    def sync_slot(slot, tokens):
        reused = sync(slot, tokens)
        rows = len(tokens) - 1 - reused
        if rows > 0:
            calls.append((role, "sync", price(rows)))
        return reused

    model.decode_slots, model.sync_slot = decode_slots, sync_slot


def generation_seconds(calls: list) -> float:
    """The modelled decode time of one generation's ``calls``, without its prompt's
    prefill (each model's first sync, which ``tokens/s`` leaves out as ``bench`` does)."""
    seen, total = set(), 0.0
    for role, kind, seconds in calls:
        if kind == "sync" and role not in seen:
            seen.add(role)
            continue
        total += seconds
    return total


def parse_ms(text: str, flag: str) -> tuple[float, float]:
    try:
        fixed, per_row = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} takes FIXED_MS,PER_ROW_MS (e.g. 20,0.2), got {text!r}") from None
    if fixed < 0 or per_row < 0:
        raise ValueError(f"{flag} must not be negative")
    return fixed, per_row


def run(engine, prompts, schema, methods, sp, seed, calls: list) -> dict:
    """``{variant: [(tokens, modelled decode seconds, host seconds, tau)]}`` per prompt,
    variants METHOD and METHOD+schema, interleaved per prompt."""
    from resispec_gguf.config import DraftParams

    constraint = engine.compile_constraint(json_schema=schema)
    out: dict[str, list] = {}
    for i, tokens in enumerate(prompts):
        for m in methods:
            for name, c in ((m, None), (m + "+schema", constraint)):
                calls.clear()
                res = engine.generate(tokens, sp.replace(seed=seed + i), DraftParams(method=m), constraint=c)
                st = res.stats
                out.setdefault(name, []).append((st.tokens, generation_seconds(calls), st.overhead_time, st.tau))
    return out


def summarise(results: dict, methods, host: bool) -> list[dict]:
    """Per variant: modelled tokens/s (with the host work or without), mean tau, and the
    median per-prompt ratio of a schema run to the same method's unconstrained one."""
    results = {name: [(r[0], r[1] + (r[2] if host else 0.0), r[3]) for r in runs] for name, runs in results.items()}
    rows = []
    for m in methods:
        for name in (m, m + "+schema"):
            runs = results[name]
            tok = sum(r[0] for r in runs)
            sec = sum(r[1] for r in runs)
            row = {"variant": name, "tok_s": tok / sec if sec else 0.0,
                   "tau": statistics.mean(r[2] for r in runs), "tokens": tok}
            if name.endswith("+schema"):
                free = results[m]
                row["vs_free"] = statistics.median((s[0] / s[1]) / (f[0] / f[1]) for s, f in zip(runs, free)
                                                   if s[1] > 0 and f[1] > 0 and f[0] > 0)
            rows.append(row)
    base = next(r["tok_s"] for r in rows if r["variant"] == "none")
    for r in rows:
        r["vs_none"] = r["tok_s"] / base if base else 0.0
    return rows


def print_tables(results: dict, methods) -> dict:
    """Print ``summarise``'s table with the host work and without it; returns both."""
    tables = {}
    for host in (True, False):
        rows = tables["with_host" if host else "decode_only"] = summarise(results, methods, host)
        print("modelled decode time plus the measured host work:" if host else "modelled decode time only:")
        print(f"  {'variant':18s} {'tok/s':>8s} {'vs none':>8s} {'tau':>5s} {'vs free':>8s}")
        for r in rows:
            vs_free = f"{r['vs_free']:.3f}x" if "vs_free" in r else ""
            print(f"  {r['variant']:18s} {r['tok_s']:8.2f} {r['vs_none']:8.3f} {r['tau']:5.2f} {vs_free:>8s}")
    return tables


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft")
    ap.add_argument("--prompts", default=os.path.join(HERE, "data", "contacts.jsonl"))
    ap.add_argument("--schema", default=os.path.join(HERE, "data", "contact.schema.json"))
    ap.add_argument("--methods", default="none,chain,resispec,auto")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--target-ms", default="20,0.2")
    ap.add_argument("--draft-ms", default="2,0.1")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    try:
        t_ms, d_ms = parse_ms(args.target_ms, "--target-ms"), parse_ms(args.draft_ms, "--draft-ms")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    methods = ["none"] + [m for m in dict.fromkeys(args.methods.split(",")) if m and m != "none"]

    from resispec_gguf.config import ModelParams, SamplingParams
    from resispec_gguf.engine import Engine
    from resispec_gguf.errors import UserError
    from resispec_gguf.llama import loading
    from resispec_gguf.bench import inputs as bench

    try:
        with open(args.schema, encoding="utf-8") as f:
            schema = json.load(f)
        items = bench.parse_prompts(args.prompts)
        named = {"target": args.target, "draft": args.draft}
        params = ModelParams(**{k: v for k, v in named.items() if v is not None},
                             **({"n_threads": args.threads} if args.threads else {}))
        t, d = loading.open_pair(params, progress=False)
    except (OSError, ValueError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if d is None:
        print("error: this needs a draft model", file=sys.stderr)
        return 2
    tc, dc = curve(*t_ms), curve(*d_ms)
    calls: list = []
    clock(t, "target", tc, calls)
    clock(d, "draft", dc, calls)
    engine = Engine(t, d, cost_curves=(tc, dc))
    try:
        prompts = [bench.prompt_tokens(engine, item) for item in items]
        sp = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens)
        engine.generate(prompts[0], sp.replace(max_tokens=4, seed=0))  # warm-up
        results = run(engine, prompts, schema, methods, sp, args.seed, calls)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        engine.close()
    print(f"modelled: target {t_ms[0]:g} ms + {t_ms[1]:g} ms/row, draft {d_ms[0]:g} ms + {d_ms[1]:g} ms/row; "
          f"{len(prompts)} prompts, T {args.temperature:g}, {args.max_tokens} tokens")
    tables = print_tables(results, methods)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "tables": tables, "runs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
