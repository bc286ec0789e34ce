"""Time to first token of uncached prompts that arrive together, against the bound we set:
each prompt's own prefill, plus one chunk, plus one step.

One engine with N slots and no RAM prompt cache; every slot is emptied before each
measurement, so nothing of any prompt is cached (not even a chat template's shared system
part).  Per round:

* ``together``: the workload's first N prompts admitted at once into one ``Engine.batch()``
  and stepped until each has its first token (its time to first token from admission);
* ``alone``: each prompt on its own, the same way (its own prefill and one step);
* ``chunk``: one decode of ``chunk`` prompt tokens (the batch's prefill per step; the
  draft's too when the method uses it);
* ``step``: the median step once every prompt of ``together`` has started.

A prompt's bound is its ``alone`` time plus ``chunk`` plus ``step``; the table gives the
medians over rounds of the p50/p95 of each, and how many prompts came within their bound.

    python scripts/cold_ttft.py [--target default] [--draft ...] [--workload chat] [--prompts 4] \\
        [--rounds 2] [--threads N] [--ctx 2048] [--method none] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from resispec_gguf.config import DraftParams, ModelParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.bench.inputs import planned_prompts
from resispec_gguf.bench.workloads import WORKLOADS

SAMPLING = SamplingParams(temperature=0.0, max_tokens=4)


def _empty(engine) -> None:
    engine.target.reset()
    if engine.draft is not None:
        engine.draft.reset()


def together(engine, prompts: list[list[int]], dp: DraftParams) -> tuple[list[float], list[int], float]:
    """``(time to first token per prompt, the step that gave it (from 1), median step once
    all have started)``: the prompts admitted at once into emptied slots."""
    _empty(engine)
    batch = engine.batch()
    batch.ram = None
    t0 = time.perf_counter()
    reqs = [batch.admit(engine.generation(p, SAMPLING, dp)) for p in prompts]
    first: dict[int, float] = {}
    at: dict[int, int] = {}
    steps = []
    while batch.busy:
        all_started = all(r.started for r in reqs)
        t = time.perf_counter()
        batch.step()
        if all_started:
            steps.append(time.perf_counter() - t)
        for i, r in enumerate(reqs):
            if i not in first and (r.gen.out or r.done):
                first[i], at[i] = time.perf_counter() - t0, len(steps) + (not all_started)
    order = range(len(reqs))
    return [first[i] for i in order], [at[i] for i in order], statistics.median(steps) if steps else 0.0


def alone(engine, tokens: list[int], dp: DraftParams) -> float:
    """Time to the first token of ``tokens`` on its own, from emptied slots."""
    seconds, _, _ = together(engine, [tokens], dp)
    return seconds[0]


def chunk_seconds(engine, tokens: list[int], chunk: int, uses_draft: bool) -> float:
    """One decode of ``chunk`` prompt tokens into an emptied slot (each model the method uses)."""
    _empty(engine)
    piece = (tokens * (chunk // max(1, len(tokens)) + 1))[:chunk]
    t = time.perf_counter()
    engine.target.decode_slots([], [], [], prefill={0: piece})
    if uses_draft and engine.draft is not None:
        engine.draft.decode_slots([], [], [], prefill={0: piece})
    seconds = time.perf_counter() - t
    _empty(engine)
    return seconds


def measure(engine, prompts: list[list[int]], rounds: int, dp: DraftParams, chunk: int) -> list[dict]:
    """Per round: every prompt's ``together`` and ``alone`` times, ``chunk`` and ``step``."""
    uses_draft = engine.generation(prompts[0], SAMPLING, dp).uses_draft
    out = []
    for r in range(rounds):
        ttft, at, step = together(engine, prompts, dp)
        solo = [alone(engine, p, dp) for p in prompts]
        c = chunk_seconds(engine, prompts[0], chunk, uses_draft)
        out.append({"round": r, "together": ttft, "first_step": at, "alone": solo, "chunk": c, "step": step,
                    "bound": [a + c + step for a in solo], "prompt_tokens": [len(p) for p in prompts]})
    return out


def summary(rows: list[dict]) -> dict:
    """Medians over rounds of each figure's p50 and p95, and the prompts within their bound."""
    def med(key, q):
        return statistics.median(float(np.percentile(x[key], q)) for x in rows)

    return {
        "together_p50": med("together", 50), "together_p95": med("together", 95),
        "alone_p50": med("alone", 50), "alone_p95": med("alone", 95),
        "bound_p95": med("bound", 95),
        "chunk": statistics.median(x["chunk"] for x in rows), "step": statistics.median(x["step"] for x in rows),
        "within": sum(t <= b for x in rows for t, b in zip(x["together"], x["bound"])),
        "requests": sum(len(x["together"]) for x in rows),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--workload", default="chat", choices=sorted(WORKLOADS))
    ap.add_argument("--prompts", type=int, default=4, help="prompts arriving together (and slots)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--method", default="none")
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args(argv)
    if a.prompts < 1 or a.rounds < 1:
        print("cold_ttft: --prompts and --rounds must be at least 1", file=sys.stderr)
        return 2
    params = ModelParams(target=a.target, draft=a.draft, n_ctx=a.ctx, n_threads=a.threads, n_slots=a.prompts,
                         cache_ram_mib=0)
    dp = DraftParams(method=a.method)
    with Engine.load(params, progress=False) as engine:
        prompts = [tokens for tokens, _ in planned_prompts(engine, {a.workload: WORKLOADS[a.workload][: a.prompts]},
                                                           None)[a.workload]]
        engine.generate(prompts[0], SAMPLING, dp)  # compiles the kernels before anything is timed
        rows = measure(engine, prompts, a.rounds, dp, engine.batch().chunk)
    s = summary(rows)
    print(report(rows, s, a.workload, a.method))
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "summary": s}, indent=1))
    return 0


def report(rows: list[dict], s: dict, workload: str, method: str) -> str:
    """The table's lines for ``summary`` ``s`` of ``rows``."""
    tokens = ", ".join(map(str, rows[0]["prompt_tokens"]))
    return "\n".join([
        f"{workload}: {len(rows[0]['together'])} uncached prompts ({tokens} tokens) arriving together, method {method}, "
        f"medians over {len(rows)} round(s)",
        f"  time to first token together: p50 {s['together_p50']:.3f} s, p95 {s['together_p95']:.3f} s",
        f"  each alone (own prefill + a step): p50 {s['alone_p50']:.3f} s, p95 {s['alone_p95']:.3f} s",
        f"  one chunk {s['chunk']:.3f} s, one step {s['step']:.3f} s; bound p95 {s['bound_p95']:.3f} s; "
        f"within their bound: {s['within']} of {s['requests']}",
    ])


if __name__ == "__main__":
    sys.exit(main())
