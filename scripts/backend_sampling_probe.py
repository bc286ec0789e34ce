"""What llama.cpp's experimental backend sampling (in llama-cpp-python 0.3.36) does for our
forest decode: each finding printed as PASS/FAIL-style facts, reproducibly (issue #18).

Backend sampling runs a sampler chain (temperature, top-k, top-p, min-p, dist) inside the
model graph for every output row of a sequence that has a chain (``llama_set_sampler``) and
returns, per row, the filtered logits and their token ids (and probabilities and one sampled
token when the chain ends in ``dist``) instead of the ``[V]`` logits.  This script checks:

1. Does it serve ``backend.LlamaModel.decode``'s forest (one sequence per node, a node's cell
   also carrying its descendants' ids, several outputs per call)?  Tiny test models
   (``tests/tiny_gguf.py``, written to a temporary directory):
   a. the API is bound; b. a forest decode with the default context parameters is refused
   (``n_outputs_max_per_seq`` 1: an ancestor's cell counts as an output of each descendant's
   sequence); c. with ``n_outputs_max_per_seq`` 0 every output row gets its own filtered
   row, chains set after creation (``llama_set_sampler``) or at creation
   (``llama_context_params.samplers``); d. probabilities come only with ``dist``, which also
   draws one token per row; e. ``llama_get_logits_ith`` then returns the short sampled row
   (no ``[V]`` row exists); f. **rows come back wrong**: after a decode with n outputs, a
   decode with at most n outputs on other sequences returns, for all but its last output,
   another row's data or stale data (ids out of the vocabulary or in it), checked against a
   model without samplers; forcing llama.cpp to re-plan its graph before every decode (a
   fresh chain on one sequence) makes them right.
2. Semantics against ``sampling.probs_sparse`` on the real pair's target: next-token rows of
   ``--prompts`` prompts, one output per decode on a fresh cache (a pattern that 1f does not
   corrupt, verified row by row), chain temperature -> top-k -> top-p -> min-p (our order) at
   T 0.8/40/0.95/0.05 and at T 1 with no filter; the support sets and the largest
   probability difference (host float64 softmax of the returned logits, and ``dist``'s own
   float32 probabilities); ties at the top-k boundary and rows at min-p's boundary.
3. Cost on the CPU (or offloaded, ``-ngl``): ms per row of a tree decode (8 nodes) with and
   without a backend chain, in the same run, interleaved: the decode (until its device is
   done), then the host's work to get each row's distribution.

    python scripts/backend_sampling_probe.py [--target default] [--prompts 20] [--threads 1]
        [--repeats 6] [-ngl 0] [--skip-real] [--json OUT]

Errors (a model that cannot be found) print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from resispec_gguf.llama import backend
from resispec_gguf.kernels import sampling  # noqa: E402
from resispec_gguf.errors import UserError  # noqa: E402

_ll = backend._ll  # the probe reaches into llama_cpp on purpose: that is what it examines
API = ("llama_set_sampler", "llama_get_sampled_token_ith", "llama_get_sampled_probs_ith",
       "llama_get_sampled_probs_count_ith", "llama_get_sampled_logits_ith", "llama_get_sampled_logits_count_ith",
       "llama_get_sampled_candidates_ith", "llama_get_sampled_candidates_count_ith")

PROMPTS = [
    "def fibonacci(n):\n", "import numpy as np\n\ndef normalize(x):\n", "class Stack:\n    def __init__(self):\n",
    "# Read a CSV file and print the header\nimport csv\n", "SELECT name, age FROM users WHERE", "for i in range(10):\n",
    "def is_prime(n):\n    if n < 2:\n", "const express = require('express');\n", "#include <stdio.h>\n\nint main(",
    "The quick brown fox", "def merge_sort(arr):\n", "x = [1, 2, 3]\ny = [", "async def fetch(url):\n",
    "public static void main(String[] args) {\n", "try:\n    value = int(text)\nexcept", "git commit -m \"",
    "<html>\n<head>\n<title>", "fn main() {\n    let", "def add(a, b):\n    \"\"\"", "while True:\n    line = input(",
]


# --------------------------------------------------------------------------- helpers


class _PerSeqOutputs:
    """While active, contexts that ``backend.LlamaModel`` creates allow ``n`` outputs per
    sequence with backend sampling (0: as many as a batch holds; llama.cpp's default is 1)."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self._orig = _ll.llama_context_default_params

        def params():
            p = self._orig()
            p.n_outputs_max_per_seq = self.n
            return p

        _ll.llama_context_default_params = params
        return self

    def __exit__(self, *exc):
        _ll.llama_context_default_params = self._orig


def open_model(path, per_seq=None, n_seq_max=16, threads=1, n_ctx=1024, ngl=0):
    """``path`` as a ``LlamaModel`` with ``ngl`` layers offloaded; ``per_seq``: see ``_PerSeqOutputs``."""
    opts = dict(n_ctx=n_ctx, n_threads=threads, n_seq_max=n_seq_max, flash_attn=False, n_gpu_layers=ngl)
    if per_seq is None:
        return backend.LlamaModel(str(path), **opts)
    with _PerSeqOutputs(per_seq):
        return backend.LlamaModel(str(path), **opts)


def chain(*samplers):
    c = _ll.llama_sampler_chain_init(_ll.llama_sampler_chain_default_params())
    for s in samplers:
        _ll.llama_sampler_chain_add(c, s)
    return c


def filter_chain(t, k, p, min_p, dist=False):
    """Our transform order: temperature -> top-k -> top-p -> min-p (``sampling``)."""
    s = [_ll.llama_sampler_init_temp(t), _ll.llama_sampler_init_top_k(k), _ll.llama_sampler_init_top_p(p, 1),
         _ll.llama_sampler_init_min_p(min_p, 1)]
    if dist:
        s.append(_ll.llama_sampler_init_dist(1234))
    return chain(*s)


class Chains:
    """Chains set on sequences of one model; a chain may be initialised by llama.cpp once, so
    every setting is a fresh one; freed after the model."""

    def __init__(self, model):
        self.model, self.all = model, []

    def set(self, seqs, make):
        ok = []
        for s in seqs:
            c = make()
            self.all.append(c)
            ok.append(bool(_ll.llama_set_sampler(self.model._ctx, s, c)))
        return ok

    def close(self):
        self.model.close()
        for c in self.all:
            _ll.llama_sampler_free(c)


def sampled(model, b):
    """Output ``b``'s backend result: (ids, logits, probs or None, sampled token)."""
    ctx = model._ctx
    n = int(_ll.llama_get_sampled_logits_count_ith(ctx, b))
    nc = int(_ll.llama_get_sampled_candidates_count_ith(ctx, b))
    npr = int(_ll.llama_get_sampled_probs_count_ith(ctx, b))
    lp = _ll.llama_get_sampled_logits_ith(ctx, b)
    vals = np.ctypeslib.as_array(lp, shape=(n,)).copy() if lp and n else np.zeros(0, np.float32)
    cp = _ll.llama_get_sampled_candidates_ith(ctx, b)
    ids = np.ctypeslib.as_array(cp, shape=(nc if nc else n,)).astype(np.int64) if cp and n else np.zeros(0, np.int64)
    pp = _ll.llama_get_sampled_probs_ith(ctx, b)
    probs = np.ctypeslib.as_array(pp, shape=(npr,)).copy() if pp and npr else None
    return ids, vals, probs, int(_ll.llama_get_sampled_token_ith(ctx, b))


def row_ok(ids, vals, raw, scale=1.0):
    """Whether a returned top row is row ``raw``'s (ids in the vocabulary, values equal)."""
    if ids.size == 0 or ids.min() < 0 or ids.max() >= raw.shape[0]:
        return False
    fin = np.isfinite(vals)
    return bool(np.allclose(raw[ids[fin]].astype(np.float64) * scale, vals[fin], rtol=1e-5, atol=1e-4))


def host_probs(ids, vals):
    """float64 softmax of the finite returned logits: ``(ids, probs)``."""
    fin = np.isfinite(vals)
    x = vals[fin].astype(np.float64)
    w = np.exp(x - x.max())
    return ids[fin], w / w.sum()


def compare(ours, theirs):
    """(max |p - p'| over the union of supports, support equal?)"""
    a = dict(zip(ours[0].tolist(), ours[1].tolist()))
    b = dict(zip(theirs[0].tolist(), np.asarray(theirs[1], np.float64).tolist()))
    keys = set(a) | set(b)
    return max(abs(a.get(x, 0.0) - b.get(x, 0.0)) for x in keys), set(a) == set(b)


# --------------------------------------------------------------------------- 1: build facts


FOREST = ([80, 5, 6, 7, 8, 9], [-1, 0, 0, 1, 1, 2])
PROMPT = [1, 50, 60, 70, 80]


def probe_build(report, tiny, ngl=0):
    """Part 1 on the model ``tiny`` (any model: the tiny test one, or a random one of the
    default shapes on a GPU) with ``ngl`` layers offloaded."""
    out = report.setdefault("1", {})
    missing = [n for n in API if not hasattr(_ll, n)]
    out["a_api_bound"] = not missing
    print(f"1a. backend sampling API bound in llama_cpp {_ll.__version__}: {not missing}"
          + (f" (missing {missing})" if missing else ""))
    if missing:
        return

    ref = open_model(tiny, ngl=ngl)
    ref.sync_prefix(PROMPT)
    raw = [np.array(r) for r in ref.decode(*FOREST)]

    # b: the default per-sequence output limit refuses the forest
    m = Chains(open_model(tiny, per_seq=1, ngl=ngl))
    m.set(range(16), lambda: filter_chain(0.8, 5, 0.95, 0.05))
    m.model.sync_prefix(PROMPT)
    try:
        m.model.decode(*FOREST)
        refused = False
    except RuntimeError as e:
        refused = "failed" in str(e)
    m.close()
    out["b_default_refuses_forest"] = refused
    said = "refused (llama_decode -1: 'backend sampling supports at most 1 outputs per sequence')"
    print(f"1b. forest decode (6 nodes, 3 levels) with llama.cpp's default n_outputs_max_per_seq = 1: "
          f"{said if refused else 'accepted'}")

    # c: every output row, chains set later or at creation
    for how in ("later", "at creation"):
        if how == "later":
            m = Chains(open_model(tiny, per_seq=0, ngl=ngl))
            oks = m.set(range(16), lambda: filter_chain(0.8, 5, 0.95, 0.05))
        else:
            keep = [filter_chain(0.8, 5, 0.95, 0.05) for _ in range(16)]
            cfg = (_ll.llama_sampler_seq_config * 16)(*[_ll.llama_sampler_seq_config(s, ctypes.cast(keep[s], ctypes.c_void_p)) for s in range(16)])
            orig = _ll.llama_context_default_params

            def params(orig=orig, cfg=cfg):
                p = orig()
                p.n_outputs_max_per_seq = 0
                p.samplers = ctypes.cast(cfg, ctypes.POINTER(_ll.llama_sampler_seq_config))
                p.n_samplers = 16
                return p

            _ll.llama_context_default_params = params
            try:
                model = open_model(tiny, ngl=ngl)
            finally:
                _ll.llama_context_default_params = orig
            m = Chains(model)
            m.all.extend(keep)
            oks = [True]
        m.model.sync_prefix(PROMPT)
        m.model.decode(*FOREST)
        rows = [sampled(m.model, b) for b in range(len(FOREST[0]))]
        good = [row_ok(ids, vals, raw[b], 1 / 0.8) for b, (ids, vals, _, _) in enumerate(rows)]
        same = [set(host_probs(ids, vals)[0].tolist()) == set(sampling.probs_sparse(raw[b], 0.8, 5, 0.95, 0.05)[0].tolist())
                for b, (ids, vals, _, _) in enumerate(rows)]
        counts = [int(v.size) for _, v, _, _ in rows]
        out[f"c_{how}"] = {"set_ok": all(oks), "rows": len(rows), "counts": counts, "rows_right": sum(good),
                           "support_as_ours": sum(same)}
        print(f"1c. n_outputs_max_per_seq = 0, chains set {how}: set accepted {all(oks)}; forest rows with a "
              f"filtered row: {len(rows)}/6 (logits per row {counts}, top-k 5); rows equal to the model's: "
              f"{sum(good)}/6; support as probs_sparse's: {sum(same)}/6")
        if how == "later":
            ids, vals, probs, tok = rows[0]
            out["d_probs_without_dist"] = probs is not None
            out["e_logits_ith_is_sampled_row"] = bool(np.array_equal(
                np.ctypeslib.as_array(_ll.llama_get_logits_ith(m.model._ctx, 0), shape=(vals.size,)), vals))
            print(f"1d. probabilities without a dist sampler: {probs is not None}; sampled token: {tok} (-1: none)")
            print(f"1e. llama_get_logits_ith(0) returns the short sampled row instead of [V] logits: "
                  f"{out['e_logits_ith_is_sampled_row']}")
        m.close()
    m = Chains(open_model(tiny, per_seq=0, ngl=ngl))
    m.set(range(16), lambda: filter_chain(0.8, 5, 0.95, 0.05, dist=True))
    m.model.sync_prefix(PROMPT)
    m.model.decode(*FOREST)
    rows = [sampled(m.model, b) for b in range(len(FOREST[0]))]
    out["d_with_dist"] = {"probs_counts": [None if p is None else int(p.size) for _, _, p, _ in rows],
                          "tokens": [t for *_, t in rows]}
    print(f"1d. with dist last: probabilities per row {out['d_with_dist']['probs_counts']}, one sampled token per "
          f"row {out['d_with_dist']['tokens']}")
    m.close()

    # f: wrong rows
    patterns = {
        "1 then 3 then 3 outputs": [([40], [-1]), ([5, 6, 7], [0, 0, 0]), ([8, 9, 10], [1, 2, 3])],
        "1 then 3 then 2 outputs": [([40], [-1]), ([5, 6, 7], [0, 0, 0]), ([8, 9], [1, 2])],
        "1 then 3 then 3 roots": [([40], [-1]), ([5, 6, 7], [-1, -1, -1]), ([8, 9, 10], [-1, -1, -1])],
        "1 then 3 then 4 outputs": [([40], [-1]), ([5, 6, 7], [0, 0, 0]), ([8, 9, 10, 11], [1, 2, 3, 3])],
        "1 then 2 then 2 outputs": [([40], [-1]), ([5, 6], [0, 0]), ([8, 9], [1, 2])],
    }
    out["f_wrong_rows"] = {}
    for replan in (False, True):
        for name, calls in patterns.items():
            m = Chains(open_model(tiny, per_seq=0, ngl=ngl))
            m.set(range(16), lambda: chain(_ll.llama_sampler_init_top_k(13)))
            bad_last, bad, total, example = 0, 0, 0, None
            for rep in range(3):
                prompt = [1, 20 + rep, 30, 40]
                ref.sync_prefix(prompt)
                m.model.sync_prefix(prompt)
                for toks, par in calls:
                    want = [np.array(r) for r in ref.decode(toks, par)]
                    if replan:
                        m.set([1], lambda: chain(_ll.llama_sampler_init_top_k(13)))
                    m.model.decode(toks, par)
                    for b in range(len(toks)):
                        ids, vals, _, _ = sampled(m.model, b)
                        total += 1
                        if not row_ok(ids, vals, want[b]):
                            bad += 1
                            bad_last += b == len(toks) - 1
                            example = example or f"ids {ids[:3].tolist()}"
            m.close()
            key = f"{name}{' (re-planned)' if replan else ''}"
            out["f_wrong_rows"][key] = {"bad": bad, "rows": total, "bad_last_rows": bad_last}
            print(f"1f. {key:40s}: wrong rows {bad}/{total}" + (f" (last output of a call: {bad_last}; e.g. {example})"
                                                                  if bad else ""))
    ref.close()


# --------------------------------------------------------------------------- 2 and 3: real pair


def probe_semantics(report, target, n_prompts, threads, ngl=0):
    out = report.setdefault("2", {})
    ref = open_model(target, threads=threads, ngl=ngl)
    m = Chains(open_model(target, per_seq=0, threads=threads, ngl=ngl))
    settings = {"T0.8/k40/p0.95/minp0.05": (0.8, 40, 0.95, 0.05), "T1/no filter": (1.0, 0, 1.0, 0.0)}
    res = {name: {"rows": 0, "rows_right": 0, "max_abs_host_f64": 0.0, "max_abs_dist_f32": 0.0,
                  "support_differs": 0, "boundary_ties": 0, "returned": []} for name in settings}
    for text in PROMPTS[:n_prompts]:
        toks = ref.tokenize(text)
        ref.sync_prefix(toks)
        raw = np.array(ref.decode([toks[-1]], [-1])[0])
        for name, (t, k, p, mp) in settings.items():
            r = res[name]
            m.set(range(16), lambda: filter_chain(t, k, p, mp, dist=True))
            m.model.sync_prefix(toks)
            m.model.decode([toks[-1]], [-1])
            ids, vals, probs, _ = sampled(m.model, 0)
            r["rows"] += 1
            ok = row_ok(ids, vals, raw, 1 / t)
            r["rows_right"] += ok
            ours = sampling.probs_sparse(raw, t, k, p, mp)
            d, same = compare(ours, host_probs(ids, vals))
            r["max_abs_host_f64"] = max(r["max_abs_host_f64"], d)
            r["support_differs"] += not same
            keep = np.flatnonzero(probs > 0) if probs is not None else np.zeros(0, np.int64)
            if probs is not None:
                r["max_abs_dist_f32"] = max(r["max_abs_dist_f32"], compare(ours, (ids[keep], probs[keep]))[0])
            r["returned"].append(int(vals.size))
            if k:
                srt = np.sort(raw)[::-1]
                r["boundary_ties"] += bool(srt[k - 1] == srt[k])
    m.close()
    ref.close()
    for name, r in res.items():
        ret = r.pop("returned")
        r["logits_returned_per_row"] = [min(ret), max(ret)]
        out[name] = r
        print(f"2. {name:24s}: {r['rows']} next-token rows, filtered logits equal to the model's/T: {r['rows_right']}; "
              f"max |p_llama.cpp - p_ours| = {r['max_abs_host_f64']:.2e} (host f64 softmax of its logits), "
              f"{r['max_abs_dist_f32']:.2e} (dist's f32 probs); support differs in {r['support_differs']} rows; "
              f"ties at the top-k boundary {r['boundary_ties']}; logits returned per row {r['logits_returned_per_row']}")


def probe_cost(report, target, threads, repeats, ngl=0):
    """Part 3 on ``target`` with ``ngl`` layers offloaded.  The decode's time includes the
    wait for its device (``llama_synchronize``): on a GPU llama_decode returns before the
    rows exist."""
    ref = open_model(target, threads=threads, ngl=ngl)
    m = Chains(open_model(target, per_seq=0, threads=threads, ngl=ngl))
    m.set(range(16), lambda: filter_chain(0.8, 40, 0.95, 0.05))
    prompt = ref.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n")
    for mm in (ref, m.model):
        mm.sync_prefix(prompt)
    toks, par = [prompt[-1]] + prompt[:7], [-1, 0, 0, 1, 1, 2, 2, 3]
    n = len(toks)
    t = {"plain decode": [], "plain host": [], "backend decode": [], "backend host": [],
         "backend+re-plan decode": [], "backend+re-plan host": []}
    for it in range(repeats + 1):
        for name in ("plain", "backend", "backend+re-plan"):
            mm = ref if name == "plain" else m.model
            mm.drop_uncommitted()
            if name == "backend+re-plan":
                m.set([1], lambda: filter_chain(0.8, 40, 0.95, 0.05))
            t0 = time.perf_counter()
            rows = mm.decode(toks, par)
            _ll.llama_synchronize(mm._ctx)
            t1 = time.perf_counter()
            if name == "plain":
                for i in range(n):
                    sampling.probs_sparse(rows[i], 0.8, 40, 0.95, 0.05)
            else:
                for i in range(n):
                    host_probs(*sampled(mm, i)[:2])
            t2 = time.perf_counter()
            if it:  # the first round warms up
                t[f"{name} decode"].append((t1 - t0) * 1e3 / n)
                t[f"{name} host"].append((t2 - t1) * 1e3 / n)
    m.close()
    ref.close()
    med = {k: float(np.median(v)) for k, v in t.items()}
    out = report.setdefault("3", {})
    out.update({k: round(v, 3) for k, v in med.items()})
    plain = med["plain decode"] + med["plain host"]
    for name in ("plain", "backend", "backend+re-plan"):
        tot = med[f"{name} decode"] + med[f"{name} host"]
        out[f"{name} total"] = round(tot, 3)
        print(f"3. {name:16s}: decode {med[f'{name} decode']:7.2f} ms/row, host {med[f'{name} host']:.3f} ms/row, "
              f"total {tot:7.2f} ms/row, ratio to plain {tot / plain:.3f}  ({n}-node tree, {repeats} rounds, "
              f"{threads} thread(s), median)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="default", help="target model for 2 and 3 (path, hf: spec or preset)")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="layers offloaded (0: CPU only)")
    ap.add_argument("--skip-real", action="store_true", help="only 1 (tiny models)")
    ap.add_argument("--json", help="write the findings here")
    args = ap.parse_args(argv)
    import tiny_gguf

    report = {"llama_cpp_python": _ll.__version__}
    with tempfile.TemporaryDirectory() as d:
        tiny, _ = tiny_gguf.write_tiny_pair(d)
        probe_build(report, tiny, args.n_gpu_layers)
    if not args.skip_real and report["1"].get("a_api_bound"):
        from resispec_gguf.llama import models

        try:
            target = models.resolve_model(args.target, role="target", progress=False)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        probe_semantics(report, target, min(args.prompts, len(PROMPTS)), args.threads, args.n_gpu_layers)
        probe_cost(report, target, args.threads, args.repeats, args.n_gpu_layers)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
