"""Time to first token of a prompt that another prompt evicted from its slot, with the RAM
prompt cache (``--cache-ram``) off and on, interleaved in one process.

One engine with two slots; each prompt of a workload is sent, then another prompt of it
into the same slot (slot 0, which evicts the first), then the first again into slot 0,
timed: with the cache off its whole prompt is prefilled again, with it on its state is
restored from RAM.  Off and on alternate per prompt (their order flips each round), so
that both see the same load on a shared machine; the table gives the median time to first
token of each and the median of the per-pair ratios, and the tokens reused.

    python scripts/ram_cache_ttft.py [--target default] [--draft ...] [--workload edit] [--prompts 3] \\
        [--rounds 2] [--threads N] [--ctx 2048] [--method none] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from resispec_gguf.config import DraftParams, ModelParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.bench.inputs import planned_prompts
from resispec_gguf.bench.workloads import WORKLOADS

SAMPLING = SamplingParams(temperature=0.0, max_tokens=2)


def first_token(batch, engine, tokens, dp: DraftParams) -> tuple[float, int]:
    """``(seconds to its first token, prompt tokens reused)`` of one request run alone in
    ``batch``, in slot 0 (whatever ``free_slot`` would choose: the eviction is the point)."""
    t0 = time.perf_counter()
    req = batch.admit(engine.generation(tokens, SAMPLING, dp), slot=0)
    first = None
    while not req.done:
        batch.step()
        if first is None and (req.gen.out or req.done):
            first = time.perf_counter() - t0
    return first, req.reused


def measure(engine, prompts: list[list[int]], rounds: int, dp: DraftParams) -> list[dict]:
    """Per round, prompt and mode (``off``/``on``): the timed request's figures."""
    batch = engine.batch()
    ram = batch.ram
    rows = []
    for r in range(rounds):
        for i, tokens in enumerate(prompts):
            other = prompts[(i + 1) % len(prompts)]
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                batch.ram = ram if mode == "on" else None
                first_token(batch, engine, other, dp)  # evicts the prompt (saved to RAM when on)
                seconds, reused = first_token(batch, engine, tokens, dp)
                rows.append({"round": r, "prompt": i, "mode": mode, "ttft": seconds, "reused": reused,
                             "prompt_tokens": len(tokens)})
    return rows


def summary(rows: list[dict]) -> dict:
    off = {(x["round"], x["prompt"]): x for x in rows if x["mode"] == "off"}
    on = {(x["round"], x["prompt"]): x for x in rows if x["mode"] == "on"}
    return {"ttft_off": statistics.median(x["ttft"] for x in off.values()),
            "ttft_on": statistics.median(x["ttft"] for x in on.values()),
            "ratio": statistics.median(off[k]["ttft"] / on[k]["ttft"] for k in off),
            "reused_off": statistics.median(x["reused"] for x in off.values()),
            "reused_on": statistics.median(x["reused"] for x in on.values()),
            "prompt_tokens": statistics.median(x["prompt_tokens"] for x in on.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--workload", default="edit", choices=sorted(WORKLOADS))
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--method", default="none")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.prompts < 2 or args.rounds < 1:
        ap.error("--prompts must be at least 2 and --rounds at least 1")
    params = ModelParams(target=args.target, draft=args.draft, n_slots=2, n_threads=args.threads, n_ctx=args.ctx)
    with Engine.load(params, progress=False) as engine:
        items = {args.workload: WORKLOADS[args.workload][: args.prompts]}
        prompts = [tokens for tokens, _ in planned_prompts(engine, items, None)[args.workload]]
        rows = measure(engine, prompts, args.rounds, DraftParams(method=args.method))
    s = summary(rows)
    print(f"{args.workload}: {len(prompts)} prompts (median {s['prompt_tokens']:.0f} tokens), {args.rounds} rounds; "
          f"TTFT off {s['ttft_off']:.3f} s, on {s['ttft_on']:.3f} s, off/on {s['ratio']:.1f}x "
          f"(median per pair); reused tokens off {s['reused_off']:.0f}, on {s['reused_on']:.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": s}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
