"""Host work per speculative step on the real llama.cpp backend, split by where it goes.

``bench_kernels.py --steps`` times the engine on fake models; this times it on llama.cpp:
random-weight GGUF models (``random_gguf``) with one thin layer under a full-size vocabulary
(the default target's 151,936 tokens; 32k and 256k to see what grows with it), so that
``llama_decode`` costs little while every host path is the real one: ctypes, the batch, KV
sequence operations, logits rows.  The draft shares the target's embedding but not its
layer, so it agrees with the target only in part.

For each tree shape it runs whole generations through ``Engine`` (``decoding.loop`` with
``backend.LlamaModel`` for both models) and prints host ms per step: the generation's time
minus the time inside ``llama_decode`` (what ``bench`` calls overhead_ms_per_step, plus the
backend's own work around each decode), split into

  batch    building the llama batch and the forest's layout (``LlamaModel.decode``)
  kv       KV sequence operations (``llama_memory_seq_*``)
  rows+p   logits row reads and the target's / draft's distributions
  draws    the draft's candidates, lookup proposals and bonus tokens
  tree     growing and pruning the draft tree
  verify   the verification walk and kernels
  commit   what each model keeps after a step
  auto     ``auto``'s choices and learning
  rest     everything else: the loop, emitting text, the wrappers' own cost

Sections are timed by wrapping those functions for the duration of the run (exclusive
times: a section nested in another counts once, in the inner one), so the engine carries no
timing code and pays nothing when this does not run.  The wrappers cost about a
microsecond a call, which lands in the sections and in ``rest``; the unprofiled column is
the same step timed with only ``llama_decode`` wrapped.  Times are the process's CPU time unless ``--wall``: on a machine shared with
other work, wall time counts their slices too.  Nothing is asserted.

    python scripts/host_bench.py                           # V = 32000, 151936, 262144
    python scripts/host_bench.py --vocab 151936 --tokens 64 --json host.json
    python scripts/host_bench.py --target default --tokens 32 --reps 1   # the real default pair

``--target`` runs the same on real models (a code prompt): slower, since their decodes are
real, but the same split.  On a CPU a real decode streams the weights through the caches, so
the host work after it runs cold (2-5x the thin models' here); ``--cold 64`` reproduces that
on the thin models.  A GPU decode leaves the CPU caches alone: there the thin models' warm
numbers are the ones that count.  ``-ngl N`` offloads N layers of each model (every decode
waits for its device: ``backend.LlamaModel`` synchronizes, so the device's time is the
decode's, not the host work's; ``scripts/gpu_check.py`` runs this harness offloaded).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
if "--package" in sys.argv:  # another checkout's package, measured with this harness
    sys.path.insert(0, sys.argv[sys.argv.index("--package") + 1])
else:
    sys.path.insert(0, str(HERE.parent))  # this checkout's package
sys.path.insert(0, str(HERE))  # random_gguf

from random_gguf import write_model  # noqa: E402

VOCABS = (32_000, 151_936, 262_144)
SHAPES = (
    ("plain", dict(method="none")),
    ("chain d5", dict(method="chain", depth=5, budget=5)),
    ("resispec K4 d5 b12", dict(method="resispec", draws=4, depth=5, budget=12)),
    ("resispec K4 d6 b64", dict(method="resispec", draws=4, depth=6, budget=64)),
    ("auto", dict(method="auto")),  # on GPU-like cost curves, so that it speculates
)
PARTS = ("batch", "kv", "rows+p", "draws", "tree", "verify", "commit", "auto", "rest")
# one thin layer: llama_decode is mostly the output matrix, V x n_embd
THIN = dict(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=1)
EMBD_STD = 2.5  # the logits' std, about
OUT_SCALE = 0.7  # the layer's share of the logits: at 0.7 the draft agrees often enough for tau ~2.4 at K4 b12


# --------------------------------------------------------------------------- the profiler


class Sections:
    """Exclusive time per named section, from wrapped functions: a wrapped call nested in
    another is subtracted from the outer one, so the sections never overlap.  A generator
    function's time is its body's, resume by resume.  A section named None resets the
    times (wrapped around the call that starts a generation's clock)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []  # per open call: time spent in wrapped calls below it

    def _enter(self) -> float:
        self._inner.append(0.0)
        return time.perf_counter()

    def _leave(self, name: str, t0: float) -> None:
        spent = time.perf_counter() - t0
        inner = self._inner.pop()
        self.seconds[name] = self.seconds.get(name, 0.0) + spent - inner
        if self._inner:
            self._inner[-1] += spent

    def timed(self, fn, name: str | None):
        if name is None:
            def reset(*args, **kwargs):
                self.seconds.clear()
                return fn(*args, **kwargs)

            return functools.wraps(fn)(reset)
        if inspect.isgeneratorfunction(fn):
            def resumed(*args, **kwargs):
                gen, sent = fn(*args, **kwargs), None
                while True:
                    t0 = self._enter()
                    try:
                        item = gen.send(sent)
                    except StopIteration as done:
                        return done.value
                    finally:
                        self._leave(name, t0)
                    try:
                        sent = yield item
                    except GeneratorExit:
                        gen.close()
                        raise

            return functools.wraps(fn)(resumed)

        def wrapper(*args, **kwargs):
            t0 = self._enter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._leave(name, t0)

        return functools.wraps(fn)(wrapper)

    @contextmanager
    def wrapping(self, targets):
        """Wrap each ``(owner, attribute, section)`` (a class or a module) for the duration
        of the block."""
        saved = []
        try:
            for owner, attr, name in targets:
                raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
                if raw is None:  # not in this version of the package: its time stays in its caller's
                    continue
                fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
                wrapped = self.timed(fn, name)
                setattr(owner, attr, type(raw)(wrapped) if isinstance(raw, (staticmethod, classmethod)) else wrapped)
                saved.append((owner, attr, raw))
            yield self
        finally:
            for owner, attr, raw in reversed(saved):
                setattr(owner, attr, raw)


def _defining(cls: type, attr: str) -> type:
    """The class in ``cls``'s method resolution order that defines ``attr`` (``cls`` when none
    does): wrapped there, it is what ``cls`` calls (``LlamaModel``'s methods are its mixins')."""
    return next((c for c in cls.__mro__ if attr in c.__dict__), cls)


def _targets():
    """What is wrapped, and the section each one's exclusive time goes to."""
    import llama_cpp

    from resispec_gguf.llama import backend
    from resispec_gguf.decoding import autorequest, drafting, generation, tree

    g, a = generation.Generation, autorequest.Auto
    d = drafting.DraftPhase  # the draft phase's methods, which Generation inherits

    def m(attr):
        return _defining(backend.LlamaModel, attr), attr

    out = [(*m("_decode_batch"), "decode"), (g, "started", None)]  # these two first: the unprofiled run's
    out += [(llama_cpp, f, "kv") for f in ("llama_memory_seq_cp", "llama_memory_seq_rm", "llama_memory_seq_keep",
                                           "llama_memory_clear")]
    out += [(*m(f), "batch") for f in ("decode", "decode_slots", "_append_seq0", "_append_seq")]
    out += [(*m("_row"), "rows+p"), (backend.LogitsRows, "__getitem__", "rows+p")]
    out += [(g, f, "rows+p") for f in ("_p", "_q", "_target_dist", "_masked")]
    out += [(d, "_draw", "draws"), (g, "_sample", "draws"), (d, "_propose", "draws")]
    out += [(drafting, "grow", "tree"), (drafting, "growing", "tree"), (tree, "growing", "tree"),
            (d, "_grow_tree", "tree")]
    out += [(tree.DraftTree, f, "tree") for f in ("with_root", "_add", "set_draws", "path_tokens", "candidates",
                                                  "add_children", "expanded", "prune_leaves")]
    out += [(g, "_verify_tree", "verify"), (generation, "verify", "verify"), (generation, "verify_greedy", "verify")]
    out += [(g, "_commit", "commit")] + [(*m(f), "commit") for f in ("commit", "commit_slots", "drop_uncommitted")]
    out += [(a, f, "auto") for f in ("choose", "record_time", "weights", "lookup_worth", "observe_lookup",
                                     "step_observed", "observe_node")]
    return out


# --------------------------------------------------------------------------- the run


def _gpu_like_curves():
    """``auto``'s cost curves of a GPU pair (as ``bench_kernels``): it then speculates."""
    from resispec_gguf.decoding import costs

    rows = costs.ROW_COUNTS
    return (costs.CostCurve(rows, tuple(0.020 + 0.0002 * n for n in rows)),
            costs.CostCurve(rows, tuple(0.002 + 0.0001 * n for n in rows)))


def write_pair(folder: Path, n_vocab: int, shape: dict = THIN, out_scale: float = OUT_SCALE) -> tuple[Path, Path]:
    """A thin target and draft of ``n_vocab`` tokens in ``folder``: same embedding, another layer."""
    common = dict(**shape, n_vocab=n_vocab, seed=0, embd_std=EMBD_STD / shape["n_embd"] ** 0.5, out_scale=out_scale)
    target = write_model(folder / f"target-{n_vocab}.gguf", **common)
    draft = write_model(folder / f"draft-{n_vocab}.gguf", **common, layer_seed=1)
    return target, draft


def _generate(engine, prompt, sp, dp):
    return engine.generate(prompt, sp, dp).stats


def measure(engine, prompt, sp, dp, reps: int) -> dict:
    """One shape, per step: the split of the quietest of ``reps`` profiled generations, and
    the host time of the quietest of ``reps`` unprofiled ones (only llama_decode timed)."""
    _generate(engine, prompt, sp.replace(max_tokens=8), dp)  # warm-up
    runs = {}
    for how, targets in (("unprofiled", _targets()[:2]), ("profiled", _targets())):
        prof = Sections()
        with prof.wrapping(targets):
            for _ in range(reps):
                split = split_of(prof.seconds, _generate(engine, prompt, sp, dp))  # one trajectory
                if how not in runs or split["host"] < runs[how]["host"]:
                    runs[how] = split
    best = runs["profiled"]
    best["unprofiled"] = runs["unprofiled"]["host"]
    best["bench_unprofiled"] = runs["unprofiled"]["bench_overhead"]
    return best


def split_of(seconds: dict, st) -> dict:
    """ms per step of each part of the generation's host time (its total time minus the
    time inside llama_decode); ``rest`` is what no section claims, so the parts sum to
    ``host``.  ``seconds`` is reset when the generation starts (``Generation.started``)."""
    steps = st.steps
    host = st.total_time - seconds.get("decode", 0.0)
    parts = {p: 1000 * seconds.get(p, 0.0) / steps for p in PARTS if p != "rest"}
    parts["rest"] = 1000 * host / steps - sum(parts.values())
    return {"host": 1000 * host / steps, "bench_overhead": 1000 * st.overhead_time / steps,
            "decode": 1000 * seconds.get("decode", 0.0) / steps, "parts": parts,
            "steps": steps, "tau": st.tau, "nodes_per_step": st.nodes_per_step}


def _shapes_on(engine, label, prompt, tokens: int, reps: int, seed: int, shapes) -> list[dict]:
    from resispec_gguf.config import DraftParams, SamplingParams

    engine.prepare()
    out = []
    for name, dkw in shapes:
        sp, dp = SamplingParams(max_tokens=tokens, seed=seed), DraftParams(**dkw)
        out.append({"vocab": label, "shape": name, **measure(engine, prompt, sp, dp, reps)})
    return out


@contextmanager
def cold_caches(megabytes: int):
    """Make every llama_decode also stream ``megabytes`` of memory through the CPU caches, as
    a real model's decode on the CPU does with its weights (0: nothing).  The time counts as
    the decode's, so the host work that follows starts as cold as it does after a real one."""
    from resispec_gguf.llama import backend

    if megabytes <= 0:
        yield
        return
    import numpy as np

    block = np.ones(megabytes << 20, np.uint8)
    owner = _defining(backend.LlamaModel, "_decode_batch")
    decode = owner.__dict__["_decode_batch"]

    def decode_then_flush(self, n):
        decode(self, n)
        block.sum()

    owner._decode_batch = decode_then_flush
    try:
        yield
    finally:
        owner._decode_batch = decode


def run(vocabs, tokens: int, reps: int, threads: int, seed: int, shapes=SHAPES, folder: Path | None = None,
        prompt_len: int = 160, n_gpu_layers: int = 0) -> list[dict]:
    """``[{"vocab", "shape", "host", "decode", "parts", "unprofiled", ...}]``: ms per step."""
    folder = Path(folder or tempfile.mkdtemp())
    out = []
    for v in vocabs:
        tpath, dpath = write_pair(folder, v)
        try:
            out += run_pair(tpath, dpath, v, tokens, reps, threads, seed, shapes, prompt_len, n_gpu_layers)
        finally:
            for p in (tpath, dpath):
                os.unlink(p)
    return out


def run_pair(target: Path, draft: Path, label, tokens: int, reps: int, threads: int | None, seed: int,
             shapes=SHAPES, prompt_len: int = 160, n_gpu_layers: int = 0) -> list[dict]:
    """``run``'s rows for one pair of model files (``label`` in their ``vocab`` column), both
    models with ``n_gpu_layers`` layers offloaded, prompted with random token ids."""
    import numpy as np

    from resispec_gguf.config import MAX_TREE_NODES
    from resispec_gguf.engine import Engine
    from resispec_gguf.llama.backend import LlamaModel

    opts = dict(n_ctx=2048, n_batch=512, n_threads=threads, n_seq_max=MAX_TREE_NODES + 2, n_gpu_layers=n_gpu_layers)
    t = LlamaModel(target, **opts)
    engine = Engine(t, LlamaModel(draft, **opts), cost_curves=_gpu_like_curves())
    try:
        prompt = np.random.default_rng(seed).integers(3, t.n_vocab, prompt_len).tolist()
        return _shapes_on(engine, label, prompt, tokens, reps, seed, shapes)
    finally:
        engine.close()


def growth(rows: list[dict], low, high) -> dict[str, float]:
    """``{shape: host ms per step at vocabulary high / at low - 1}`` (unprofiled), for the
    shapes measured at both."""
    at = {(r["vocab"], r["shape"]): r["unprofiled"] for r in rows}
    return {s: at[high, s] / at[low, s] - 1 for v, s in at if v == low and (high, s) in at and at[low, s] > 0}


# a code prompt for real models (about 160 tokens, as bench's)
CODE_PROMPT = ("Write a Python function `merge_intervals(intervals)` that takes a list of (start, end) pairs, "
               "merges every pair that overlaps or touches, and returns the merged list sorted by start. "
               "Handle an empty list, unsorted input and intervals given as lists instead of tuples. "
               "Then write three pytest tests for it: one with overlapping intervals, one with touching "
               "intervals and one with nested intervals. Explain the time complexity in one sentence "
               "and keep the code under forty lines.\n\n```python\n")


def run_real(target: str, draft: str | None, tokens: int, reps: int, threads: int, seed: int,
             shapes=SHAPES, n_gpu_layers: int = 0) -> list[dict]:
    """``run`` on real models (a path or preset, as ``--target``/``--draft`` take them),
    prompted with ``CODE_PROMPT``."""
    from resispec_gguf.config import ModelParams
    from resispec_gguf.engine import Engine
    from resispec_gguf.llama import loading

    named = {"target": target, "draft": draft}
    t, d = loading.open_pair(ModelParams(**{k: v for k, v in named.items() if v is not None}, n_threads=threads,
                                         n_gpu_layers=n_gpu_layers), progress=False)
    engine = Engine(t, d, cost_curves=_gpu_like_curves())
    try:
        return _shapes_on(engine, Path(t.path).stem[:24], t.tokenize(CODE_PROMPT), tokens, reps, seed, shapes)
    finally:
        engine.close()


def print_table(rows: list[dict], title: str = "") -> None:
    if title:
        print(title)
    print("host: the profiled run's, split into the parts; unprof: host without the wrappers; bench: bench's "
          "overhead_ms_per_step (unprofiled); decode: ms in llama_decode")
    w = max(7, *(len(str(r["vocab"])) for r in rows))
    print(f"{'V':>{w}} {'shape':<19} {'unprof':>6} {'bench':>6} {'host':>6} " + " ".join(f"{p:>6}" for p in PARTS)
          + f" {'decode':>7} {'nodes':>5} {'tau':>4}")
    for r in rows:
        print(f"{r['vocab']:>{w}} {r['shape']:<19} {r['unprofiled']:6.3f} {r['bench_unprofiled']:6.3f} {r['host']:6.3f} "
              + " ".join(f"{r['parts'][p]:6.3f}" for p in PARTS)
              + f" {r['decode']:7.2f} {r['nodes_per_step']:5.1f} {r['tau']:4.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default=",".join(map(str, VOCABS)), help="comma-separated vocabulary sizes")
    ap.add_argument("--tokens", type=int, default=48, help="tokens per generation")
    ap.add_argument("--reps", type=int, default=2, help="generations per shape (the quietest is kept)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shapes", help="comma-separated subset of: " + ", ".join(n for n, _ in SHAPES))
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--cold", type=int, default=0, metavar="MB",
                    help="after each llama_decode, stream MB of memory through the caches (64: about what a CPU "
                         "decode of the default pair does to the host work that follows)")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="layers of each model offloaded (0: CPU only)")
    ap.add_argument("--target", help="measure these real models instead (a path or preset, e.g. default: its "
                                     "draft comes with it) on a code prompt; --vocab is then ignored")
    ap.add_argument("--draft", help="with --target: the draft model (a path or preset)")
    ap.add_argument("--package", metavar="DIR", help="measure the resispec_gguf of the checkout DIR instead of this one")
    ap.add_argument("--before", metavar="DIR", help="first run the same measurement on the checkout DIR (in a child "
                                                    "process), then on this one: a before/after table in one run")
    ap.add_argument("--wall", action="store_true", help="time with the wall clock instead of the process's CPU "
                                                        "time (which other processes on the cores do not inflate)")
    args = ap.parse_args(argv)
    if not args.wall:  # the engine's clock and the sections' become this process's CPU time
        time.perf_counter = time.process_time
    if args.before:
        child = [a for a in (argv if argv is not None else sys.argv[1:])]
        i = child.index("--before")
        del child[i:i + 2]
        if "--json" in child:
            j = child.index("--json") + 1
            child[j] = str(Path(child[j]).with_suffix(".before.json"))
        subprocess.run([sys.executable, __file__, *child, "--package", args.before], check=True)
    os.environ["RESISPEC_COSTS"] = os.path.join(tempfile.mkdtemp(), "costs.json")  # keep the user's cache clean
    shapes = SHAPES
    if args.shapes:
        wanted = [s.strip() for s in args.shapes.split(",")]
        shapes = tuple(s for s in SHAPES if s[0] in wanted)
    vocabs = [int(x) for x in args.vocab.split(",")]
    with cold_caches(args.cold):
        if args.target:
            rows = run_real(args.target, args.draft, args.tokens, args.reps, args.threads, args.seed, shapes,
                            args.n_gpu_layers)
        else:
            rows = run(vocabs, args.tokens, args.reps, args.threads, args.seed, shapes,
                       n_gpu_layers=args.n_gpu_layers)
    import resispec_gguf

    models = f"--target {args.target}" if args.target else "thin random models"
    models += f", --cold {args.cold}" if args.cold else ""
    models += f", -ngl {args.n_gpu_layers}" if args.n_gpu_layers else ""
    print_table(rows, f"host ms per step on llama.cpp ({models}, {'wall' if args.wall else 'CPU'} time), "
                      f"T 0.8, {args.tokens} tokens, best of {args.reps}, {args.threads} thread(s); "
                      f"package {Path(resispec_gguf.__file__).parent}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
