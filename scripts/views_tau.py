"""Where the prompt's views belong: tau (tokens per target call) with them in the request's own
index (as built: ``candidates.views`` is an indexed source), as a candidate source of their own
(``OwnViews`` below, registered here: one class and one ``register``), and without them.

Default: Markov fakes (tests/fake_models.py), V = 48, order 2.  The target copies an "escaped
file" F (the view) with chance ``--copy`` per token; the prompt holds the "raw file", F with
every sixth token changed (the line breaks of a file against its JSON string), so the context
alone loses the copy at each break.  ``--real``: the default pair instead, ``auto`` at T 0 on
the agent workload's first JSON edits (``--items``, cut at ``--max-tokens``).  Nothing is
asserted; one JSON line per design.

    python scripts/views_tau.py [--seeds 40] [--copy 0.9]
    python scripts/views_tau.py --real [--items 2] [--max-tokens 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("RESISPEC_COST_CHECK", "0")
os.environ.setdefault("RESISPEC_BUSY_LOAD", "inf")

from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.decoding.candidates import Candidate, register, views  # noqa: E402
from resispec_gguf.decoding.candidates.base import SourceDefaults  # noqa: E402
from resispec_gguf.decoding.candidates.context import top, uses_lookup  # noqa: E402
from resispec_gguf.decoding.suffix_index import DEFAULT_DEPTH, SuffixIndex  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402

V, EOG = 48, 47


class OwnViews(SourceDefaults):
    """The views as a source of their own: an index of their sequences matched with the
    request's context, candidates checked after the context's, bins of its own (the
    context's leading and alternate bins' meanings and priors)."""

    name = "own views"
    priors = (0.3, 0.5, 0.6, 0.7, 0.15, 0.25, 0.08, 0.8, 0.85)

    def __init__(self, seqs, prompt, k):
        self.k, self.index = k, SuffixIndex(DEFAULT_DEPTH)
        for i, s in enumerate(seqs):
            self.index.add(i, list(s))
        self.tokens, self._cursors = list(prompt)[-DEFAULT_DEPTH:], {}

    @classmethod
    def build(cls, request):
        if not (uses_lookup(request.dp) and request.dp.views):
            return None
        seqs = [v for v in views.prompt_views(request.text, request.prompt) if v]
        return cls(seqs, request.prompt, request.dp.lookup_k) if seqs else None

    def commit(self, tokens):
        self.tokens = (self.tokens + list(tokens))[-DEFAULT_DEPTH:]
        self._cursors.clear()

    def _cursor(self, path):
        if path not in self._cursors:
            self._cursors[path] = (self.index.advance(self._cursor(path[:-1]), path[-1]) if path
                                   else self.index.match(self.tokens))
        return self._cursors[path]

    def propose(self, path, run):
        tokens, shares, length = top(self.index, self._cursor(tuple(path)), self.k, 1)
        lead = 4 if length < 2 else (min(run, 3) if run < 8 else 7 + (run >= 16))
        return [Candidate(t, lead if i == 0 else (5 if s >= 1 / 3 else 6))
                for i, (t, s) in enumerate(zip(tokens, shares))]


def own_views() -> None:
    """From here on the views are ``OwnViews``, not sequences of the request's index."""
    register(OwnViews)
    views.ViewsSource.sequences = classmethod(lambda cls, request: [])


def _fakes(copy: float):
    from fake_models import MarkovModel, random_rows

    rng = np.random.default_rng(5)
    escaped = rng.integers(0, EOG, 120).tolist()
    raw = [t if i % 6 != 5 else int(rng.integers(0, EOG)) for i, t in enumerate(escaped)]
    prompt = rng.integers(0, EOG, 30).tolist() + raw + rng.integers(0, EOG, 10).tolist() + escaped[:2]
    over = {}
    for i in range(2, len(escaped)):
        p = np.full(V, (1 - copy) / (V - 1))
        p[escaped[i]] = copy
        over[(escaped[i - 2], escaped[i - 1])] = p
    rows_t = random_rows(V, 2, 11, scale=2.0, overrides=over)
    noise = np.random.default_rng(12)
    rows_d = {c: (r + noise.standard_normal(V).astype(np.float32)).astype(np.float32) for c, r in rows_t.items()}

    def engine(draft: bool) -> Engine:
        from law_harness import CPU_D, CPU_T

        t = MarkovModel(rows_t, V, order=2, n_ctx=1024, n_seq_max=98, eog=(EOG,), name="t")
        d = MarkovModel(rows_d, V, order=2, n_ctx=1024, n_seq_max=98, eog=(EOG,), name="d")
        return Engine(t, d if draft else None, cost_curves=(CPU_T, CPU_D if draft else None), memory=None)

    return engine, prompt, escaped


def run_fakes(seeds: int, copy: float, design: str) -> dict:
    engine_of, prompt, escaped = _fakes(copy)
    views.prompt_views = lambda text, tokens: [escaped] if design != "none" else []
    cases = {"auto, no draft": (False, DraftParams(method="auto")), "auto": (True, DraftParams(method="auto")),
             "chain+lookup": (True, DraftParams(method="chain", lookup=True)),
             "lookup only": (False, DraftParams(method="chain", lookup=True, use_draft=False))}
    out = {}
    for name, (draft, dp) in cases.items():
        for temp in (0.0, 0.8):
            engine, toks, calls = engine_of(draft), 0, 0
            for seed in range(seeds):
                r = engine.generate(prompt, SamplingParams(temperature=temp, max_tokens=100, seed=seed), dp)
                toks += r.stats.tokens + r.stats.eos_tokens
                calls += r.stats.target_calls
            out[f"{name}|T{temp}"] = round(toks / calls, 3)
    return out


def run_real(items: int, max_tokens: int, design: str) -> list:
    from resispec_gguf.bench.workloads.agent import agent_items
    from resispec_gguf.surfaces.api import create_chat_completion

    engine = Engine.load("default", memory_size=0, progress=False)
    dp = DraftParams(method="auto", views=design != "none")
    edits = [it for it in agent_items()
             if it.get("response_format", {}).get("json_schema", {}).get("name") == "file_edit"]
    out = []
    for it in edits[:items]:
        r = create_chat_completion(engine, messages=it["messages"], tools=it["tools"], tool_choice=it["tool_choice"],
                                   response_format=it["response_format"], temperature=0.0, max_tokens=max_tokens,
                                   draft=dp)
        st = r["speculative"]
        out.append({"tokens": st["tokens"], "target_calls": st["target_calls"], "tau": round(st["tau"], 3),
                    "candidates": st["candidates"]})
    engine.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--copy", type=float, default=0.9)
    ap.add_argument("--real", action="store_true")
    ap.add_argument("--items", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args()
    for design in ("index", "none", "own"):  # "own" last: its registration stays
        if design == "own":
            own_views()
        got = run_real(args.items, args.max_tokens, design) if args.real else run_fakes(args.seeds, args.copy, design)
        print(json.dumps({"views": design, "tau": got}))


if __name__ == "__main__":
    main()
