"""Micro-benchmark of the suffix index (``decoding.suffix_index.SuffixIndex``): appends, queries, memory.

The token streams are this repository's own text (``*.py`` and ``*.md``: code and prose, as
assistants' answers are), cut into words, spaces and punctuation marks, each mapped to an id:
a stand-in for a model's tokens with the repeats real answers have.

* per request: one sequence grows one token per ``extend`` call (the prompt + output index),
  then whole sequences are ``add``-ed (a past answer going into the global index);
* global: the corpus cut in answers of ``--answer`` tokens, all added in turn to an index
  bounded to ``--tokens`` tokens (so the oldest are evicted as it goes), then queries: a
  ``match`` of a 32-token context (text held, and text evicted) + ``top(cursor, 4)``, and
  the walk of a drafted path (``advance`` + ``top`` per token);
* eviction (``remove`` per token), ``save`` and ``load``.

Each figure is the median of ``--repeats`` runs of the median per operation; the figures
printed are microseconds per token or per query.  arctic-inference's ``SuffixTree`` (behind its
``SuffixDecodingCache``) is measured on the same data when it imports (``bench_arctic``; it
does not install from PyPI without torch: docs/memory.md says how it was built to compare).
Nothing is asserted.

    python scripts/bench_suffix.py [--tokens 400000] [--answer 300] [--depth 24] [--repeats 5] [--limit N]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from resispec_gguf.decoding.suffix_index import SuffixIndex, warm_up  # noqa: E402

_WORD = re.compile(r"\w+|\s+|[^\w\s]")


def corpus() -> np.ndarray:
    """This repository's text as token ids (first seen, first numbered)."""
    vocab: dict[str, int] = {}
    ids = []
    for path in sorted([*ROOT.rglob("*.py"), *ROOT.rglob("*.md")]):
        if ".git" in path.parts or ".venv" in path.parts:
            continue
        for piece in _WORD.findall(path.read_text(encoding="utf-8", errors="replace")):
            ids.append(vocab.setdefault(piece, len(vocab)))
    return np.array(ids, np.int64)


def _median_of_runs(run, repeats: int) -> float:
    """``run()`` gives per-operation seconds; the median over runs of their medians, in us."""
    return 1e6 * statistics.median(statistics.median(run()) for _ in range(repeats))


def bench_appends(tokens: np.ndarray, depth: int, repeats: int, n: int = 4000) -> dict:
    def one_by_one():
        index, times = SuffixIndex(max_depth=depth), []
        seq = tokens[:n].tolist()
        for t in seq:
            t0 = time.perf_counter()
            index.extend(0, [t])
            times.append(time.perf_counter() - t0)
        return times

    def whole():
        index, times = SuffixIndex(max_depth=depth), []
        for j in range(0, 40 * 300, 300):
            part = tokens[j:j + 300]
            t0 = time.perf_counter()
            index.add(j, part)
            times.append((time.perf_counter() - t0) / part.size)
        return times

    return {"extend 1 token per call (us/token)": _median_of_runs(one_by_one, repeats),
            "add 300-token sequence (us/token)": _median_of_runs(whole, repeats)}


def build_global(tokens: np.ndarray, depth: int, budget: int, answer: int) -> tuple[SuffixIndex, float]:
    """Every answer of the corpus in turn, FIFO-evicted to ``budget`` tokens: the index ends
    holding the corpus's last ``budget`` tokens or so, after churn."""
    index = SuffixIndex(max_depth=depth, max_tokens=budget)
    t0 = time.perf_counter()
    for j in range(0, tokens.size, answer):
        index.add(j, tokens[j:j + answer])
    return index, (time.perf_counter() - t0) / tokens.size


def bench_queries(index: SuffixIndex, tokens: np.ndarray, repeats: int, n: int = 2000) -> dict:
    rng = np.random.default_rng(0)
    first_held = index.seq_ids()[0]  # ids are start offsets: the text before it was evicted
    out = {}
    for name, lo, hi in (("held", first_held + 32, tokens.size - 64), ("not held", 32, first_held - 64)):
        if hi <= lo:
            continue
        starts = rng.integers(lo, hi, n)
        contexts = [tokens[s - 32:s].tolist() for s in starts]

        def query():
            times, lengths = [], []
            for ctx in contexts:
                t0 = time.perf_counter()
                cursor = index.match(ctx)
                index.top(cursor, 4)
                times.append(time.perf_counter() - t0)
                lengths.append(cursor.length)
            out[f"match length, context {name} (median)"] = statistics.median(lengths)
            return times

        def walk():
            times = []
            for s, ctx in zip(starts, contexts):
                cursor = index.match(ctx)
                path = tokens[s:s + 8].tolist()  # the text that did follow: a drafted path
                t0 = time.perf_counter()
                for t in path:
                    index.top(cursor, 4)
                    cursor = index.advance(cursor, t)
                times.append((time.perf_counter() - t0) / len(path))
            return times

        out[f"match 32 + top-4, context {name} (us/query)"] = _median_of_runs(query, repeats)
        out[f"advance + top-4 along a path, context {name} (us/token)"] = _median_of_runs(walk, repeats)
    return out


def bench_files(index: SuffixIndex) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "suffix.npz"
        t0 = time.perf_counter()
        index.save(path)
        t1 = time.perf_counter()
        loaded, warning = SuffixIndex.load(path, index.vocab_key)
        t2 = time.perf_counter()
        assert warning is None and loaded.total_tokens == index.total_tokens
        size = path.stat().st_size
    return {"save (s)": t1 - t0, "load (s)": t2 - t1, "file (bytes/token)": size / index.total_tokens}


def bench_eviction(index: SuffixIndex) -> dict:
    times = []
    for sid in index.seq_ids()[:200]:
        size = index.tokens(sid).size
        t0 = time.perf_counter()
        index.remove(sid)
        times.append((time.perf_counter() - t0) / size)
    return {"remove (us/token)": 1e6 * statistics.median(times)}


def bench_arctic(tokens: np.ndarray, depth: int, budget: int, answer: int, repeats: int) -> dict | str:
    """The same figures for arctic-inference's C++ ``SuffixTree`` (what its
    ``SuffixDecodingCache`` keeps per request and globally), when it imports.  Its query is
    ``speculate``: every match length of the context, then a draft of up to 4 tokens (a tree,
    as vLLM's ``suffix`` method asks); FIFO is done here, as its cache does, by ``remove``."""
    try:
        from arctic_inference.suffix_decoding._C import SuffixTree
    except Exception as e:  # it does not install here without torch: docs/memory.md
        return f"arctic-inference not measured: {type(e).__name__}: {e}"

    def one_by_one():
        tree, times = SuffixTree(depth), []
        for t in tokens[:4000].tolist():
            t0 = time.perf_counter()
            tree.extend(0, [t])
            times.append(time.perf_counter() - t0)
        return times

    def whole():
        tree, times = SuffixTree(depth), []
        for j in range(0, 40 * 300, 300):
            part = tokens[j:j + 300].tolist()
            t0 = time.perf_counter()
            tree.extend(j, part)
            times.append((time.perf_counter() - t0) / len(part))
        return times

    rows = {"arctic extend 1 token per call (us/token)": _median_of_runs(one_by_one, repeats),
            "arctic extend 300-token sequence (us/token)": _median_of_runs(whole, repeats)}
    tree, held, t0 = SuffixTree(depth), [], time.perf_counter()
    for j in range(0, tokens.size, answer):
        tree.extend(j, tokens[j:j + answer].tolist())
        held.append((j, min(answer, tokens.size - j)))
        while sum(n for _, n in held) > budget:
            tree.remove(held.pop(0)[0])
    rows["arctic global build with FIFO churn (us/token)"] = 1e6 * (time.perf_counter() - t0) / tokens.size
    rows["arctic global: bytes per token (estimate_memory)"] = tree.estimate_memory() / sum(n for _, n in held)
    rng = np.random.default_rng(0)
    first_held = held[0][0]
    for name, lo, hi in (("held", first_held + 32, tokens.size - 64), ("not held", 32, first_held - 64)):
        contexts = [tokens[s - depth:s].tolist() for s in rng.integers(lo, hi, 2000)]

        def query():
            times = []
            for ctx in contexts:
                t0 = time.perf_counter()
                tree.speculate(ctx, 4, 1.0, 0.0, 0.1, True)
                times.append(time.perf_counter() - t0)
            return times

        rows[f"arctic speculate 4 from a {depth}-token context {name} (us/query)"] = _median_of_runs(query, repeats)
    times = []
    for j, n in held[:200]:
        t0 = time.perf_counter()
        tree.remove(j)
        times.append((time.perf_counter() - t0) / n)
    rows["arctic remove (us/token)"] = 1e6 * statistics.median(times)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=400_000, help="global index budget (tokens)")
    ap.add_argument("--answer", type=int, default=300, help="tokens per past answer")
    ap.add_argument("--depth", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None, help="use only the corpus's first LIMIT tokens")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    warm_up()
    print(f"warm-up (compile or cache load): {time.perf_counter() - t0:.2f} s")
    tokens = corpus()[:args.limit]
    print(f"corpus: {tokens.size} tokens, {np.unique(tokens).size} distinct; depth {args.depth}")
    rows = bench_appends(tokens, args.depth, args.repeats)
    index, add_s = build_global(tokens, args.depth, args.tokens, args.answer)
    stats = index.stats()
    rows["global build with FIFO churn, add (us/token)"] = 1e6 * add_s
    rows["global: sequences"] = stats["sequences"]
    rows["global: tokens"] = stats["tokens"]
    rows["global: nodes per token"] = stats["nodes"] / stats["tokens"]
    rows["global: bytes per token (array capacity)"] = stats["bytes"] / stats["tokens"]
    rows.update(bench_queries(index, tokens, args.repeats))
    rows.update(bench_files(index))
    rows.update(bench_eviction(index))
    arctic = bench_arctic(tokens, args.depth, args.tokens, args.answer, args.repeats)
    if isinstance(arctic, dict):
        rows.update(arctic)
    width = max(map(len, rows))
    for name, value in rows.items():
        print(f"{name:<{width}}  {value:.3f}" if isinstance(value, float) else f"{name:<{width}}  {value}")
    if isinstance(arctic, str):
        print(arctic)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
