"""``LlamaDraft`` inside llama-cpp-python's ``Llama`` against plain ``Llama``, on this machine.

Two ``llama_cpp.Llama`` objects on the same target, one with ``draft_model=LlamaDraft(draft)``,
run interleaved on the same prompts, sampling settings and seeds; the decode speed of each run
(tokens per second from the first generated token to the last, so prompt processing is left
out) is compared per prompt, and the table gives the median ratio per workload and
temperature, with the draft's statistics.

Workloads are the built-in ``code`` prompts (raw text) and ``infill`` items (laid out as
``<|fim_prefix|>prefix<|fim_suffix|>suffix<|fim_middle|>``, for a target with those tokens).

    python scripts/llama_draft_bench.py [--target default] [--draft ...] [--workload code,infill] \\
        [--temperature 0 0.8] [--max-tokens 64] [--threads N] [--ctx 2048] [--num-pred-tokens 8] \\
        [--p-min 0.75] [--limit N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import llama_cpp

from resispec_gguf import LlamaDraft
from resispec_gguf.llama import models
from resispec_gguf.bench.workloads import WORKLOADS


def prompt_text(item: dict) -> str:
    if "infill" in item:
        f = item["infill"]
        return f"<|fim_prefix|>{f['input_prefix']}<|fim_suffix|>{f['input_suffix']}<|fim_middle|>"
    return item["prompt"]


def decode_speed(llm, tokens, temperature: float, max_tokens: int, seed: int) -> tuple[int, float]:
    """(tokens generated, seconds from the first generated token to the last)."""
    llm.set_seed(seed)
    n, t0 = 0, None
    for tok in llm.generate(tokens, top_k=40, top_p=0.95, min_p=0.05, temp=temperature, reset=True):
        n += 1
        if t0 is None:
            t0 = time.perf_counter()
        if llm.token_eos() == tok or llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok) or n >= max_tokens:
            break
    return n, time.perf_counter() - t0 if t0 is not None else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--workload", default="code,infill")
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--num-pred-tokens", type=int, default=8)
    ap.add_argument("--p-min", type=float, default=0.75)
    ap.add_argument("--limit", type=int, default=0, help="at most this many prompts per workload (0: all)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    target = models.resolve_model(args.target, role="target")
    draft_path = models.resolve_model(models.draft_spec(args.target, args.draft), role="draft")
    common = dict(n_ctx=args.ctx, n_threads=args.threads, verbose=False)
    plain = llama_cpp.Llama(model_path=str(target), **common)
    draft = LlamaDraft(draft_path, n_ctx=args.ctx, n_threads=args.threads, num_pred_tokens=args.num_pred_tokens,
                       p_min=args.p_min)
    drafted = llama_cpp.Llama(model_path=str(target), draft_model=draft, **common)
    results = []
    warm = plain.tokenize(b"def main():\n")
    for llm in (plain, drafted):  # page the weights in
        decode_speed(llm, warm, 0.0, 8, 0)
    for workload in args.workload.split(","):
        items = WORKLOADS[workload][: args.limit or None]
        for temp in args.temperature:
            ratios, speeds, generated = [], {"plain": [], "draft": []}, 0
            before = dict(draft.stats)
            for i, item in enumerate(items):
                tokens = plain.tokenize(prompt_text(item).encode(), special=True)
                n_a, s_a = decode_speed(plain, tokens, temp, args.max_tokens, seed=i)
                n_b, s_b = decode_speed(drafted, tokens, temp, args.max_tokens, seed=i)
                generated += n_b
                if s_a > 0 and s_b > 0 and n_a > 1 and n_b > 1:
                    speeds["plain"].append(n_a / s_a)
                    speeds["draft"].append(n_b / s_b)
                    ratios.append((n_b / s_b) / (n_a / s_a))
                print(f"  {workload} T={temp} #{i}: plain {n_a} tok in {s_a:.2f}s, draft {n_b} tok in {s_b:.2f}s",
                      file=sys.stderr)
            st = {k: draft.stats[k] - before[k] for k in draft.stats}
            results.append({
                "workload": workload, "temperature": temp,
                "plain_tokens_per_s": statistics.median(speeds["plain"]) if ratios else None,
                "draft_tokens_per_s": statistics.median(speeds["draft"]) if ratios else None,
                "ratio_median": statistics.median(ratios) if ratios else None,
                "draft_calls": st["calls"], "drafted": st["drafted"], "lookup_drafts": st["lookup_drafts"],
                "model_decodes": st["model_decodes"],
                # every call but a run's first follows one sampled token; the rest were drafts kept
                "accepted": generated - st["calls"] - len(items),
            })
    print(f"{'workload':<8} {'T':>4} {'plain tok/s':>11} {'draft tok/s':>11} {'ratio':>6} {'calls':>6} "
          f"{'drafted':>8} {'kept':>6} {'lookup':>7}")
    for r in results:
        ratio = f"{r['ratio_median']:.3f}" if r["ratio_median"] is not None else "-"
        print(f"{r['workload']:<8} {r['temperature']:>4} {r['plain_tokens_per_s'] or 0:>11.2f} "
              f"{r['draft_tokens_per_s'] or 0:>11.2f} {ratio:>6} {r['draft_calls']:>6} {r['drafted']:>8} "
              f"{r['accepted']:>6} {r['lookup_drafts']:>7}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"config": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
