"""Copy runs replayed on recorded replies: how many target calls greedy chains of the request's
context candidates would take, with and without the copy anchor (a development tool).

Each agent item of ``bench --workload agent`` is answered once by the target alone (plain
decoding under its schema, T 0 unless ``--temperature``); the reply's tokens are then
replayed: at each step a chain of up to ``--depth`` candidates follows the context source's
leading candidate (the request's own index over the prompt, its views and the output so far,
as ``auto``'s lookup arm reads it) and keeps the part the reply agrees with, plus one token,
as a verified chain at T 0 would.  Printed per item: the reply's tokens, and tokens per call
(tau) and calls whose first candidate was wrong, without the anchor, with it following
tokens, and with it following bytes (the target's tokenizer).  No timing: what a call costs is the
machine's (``bench`` prints that).

Then what those chains could be worth on a machine, under a cost curve (this machine's, as
``auto`` measured it for the target, or ``--curve`` with another machine's figures, one decode of
n rows in units of one row): decode speed-ups over plain decoding, with no host time, of

* ``by run``: where the anchor holds, a chain of as many candidates as ``auto`` asks of a copy
  (``arms.copy_depth``: twice the anchor's run, at least 4, at most ``--depth``, or more where
  that costs no more), one row where it does not (``auto`` also weighs the chain's learnt
  chances, so this is a guide, not its figure);
* ``knowing``: each step's chain exactly as long as the reply agrees with it, at most 32 rows
  (the least time any choice of depths over these candidates takes: what is left between it
  and ``by run`` is not knowing where a copy breaks).

    python scripts/copy_replay.py --n-items 6 --save replies.json
    python scripts/copy_replay.py --load replies.json --depth 32
    python scripts/copy_replay.py --load replies.json --curve 1:1,4:1.56,8:2.74,16:3.75,32:6.45
    python scripts/copy_replay.py --n-items 4 --temperature 0.8 --seed 1000 --repeat 4
"""

from __future__ import annotations

import argparse
import json

from resispec_gguf.bench.workloads.agent import agent_items
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding.arms import copy_depth
from resispec_gguf.decoding.candidates.context import ContextSource
from resispec_gguf.decoding.costs import CostCurve

KNOWING_ROWS = 32  # the longest decode the knowing policy may choose (the curves' range)


def agreed(src: ContextSource, reply, i: int, most: int) -> int:
    """How many of ``src``'s leading candidates, chained from position ``i`` of ``reply``
    (the tokens before it committed), the reply agrees with, at most ``most``."""
    path: list[int] = []
    while len(path) < most and i + len(path) < len(reply):
        got = src.propose(tuple(path), 0)
        if not got or got[0].token != reply[i + len(path)]:
            break
        path.append(got[0].token)
    return len(path)


def replay(prompt, views, reply, depth: int, anchored: bool, codec=None) -> tuple[int, int]:
    """``(calls, calls whose first candidate missed)`` for ``reply`` after ``prompt``;
    ``codec``: the target's tokenizer (the anchor follows bytes; None: tokens)."""
    src = ContextSource(prompt, None, 3, views, anchored=anchored, codec=codec)
    i = calls = missed = 0
    while i < len(reply):
        took = agreed(src, reply, i, depth)
        missed += not took
        n = min(took + 1, len(reply) - i)
        src.commit(reply[i:i + n])
        i, calls = i + n, calls + 1
    return calls, missed


def agreements(prompt, views, reply, codec=None, depth: int = KNOWING_ROWS) -> tuple[list[int], list[int]]:
    """For each position of ``reply``: how many of the leading candidates chained from there
    (at most ``depth - 1``) the reply agrees with, and the anchor's run there (-1: none)."""
    src = ContextSource(prompt, None, 3, views, codec=codec)
    agree, runs = [], []
    for i in range(len(reply)):
        got = src.anchor.next_token(())
        runs.append(-1 if got is None else got[1])
        agree.append(agreed(src, reply, i, depth - 1))
        src.commit(reply[i:i + 1])
    return agree, runs


def speedups(agree: list[int], runs: list[int], curve: CostCurve, depth: int) -> tuple[float, float]:
    """``(by run, knowing)`` (module docstring): plain decoding's time for the reply over each
    policy's, a decode of n rows costing ``curve(n)``; a step of d candidates (d + 1 rows)
    takes the agreed ones and one token more; ``depth``: the most candidates by run."""
    n = len(agree)
    if n == 0:
        return 1.0, 1.0
    by_run, i = 0.0, 0
    while i < n:
        d = copy_depth(curve, runs[i], depth) if runs[i] >= 0 else 0
        by_run += curve(d + 1)
        i += min(agree[i], d) + 1
    least = [0.0] * (n + 1)  # the least time from each position to the end
    for i in range(n - 1, -1, -1):
        least[i] = min(curve(d + 1) + least[min(n, i + d + 1)] for d in range(agree[i] + 1))
    plain = n * curve(1)
    return plain / by_run, plain / least[0]


def parse_curve(text: str) -> CostCurve:
    """``"1:1,4:1.56,..."`` (rows:cost pairs, rising rows) as a curve."""
    try:
        pairs = sorted((int(r), float(c)) for r, c in (part.split(":") for part in text.split(",")))
    except ValueError:
        raise SystemExit(f"--curve: expected rows:cost pairs such as 1:1,16:3.75, got {text!r}") from None
    if not pairs or pairs[0][0] != 1:
        raise SystemExit("--curve: the first pair must be one row's cost (1:...)")
    return CostCurve(tuple(r for r, _ in pairs), tuple(c for _, c in pairs))


def record(engine, n_items: int, temperature: float = 0.0, seed: int = 0, repeat: int = 1) -> list[dict]:
    """The first ``n_items`` agent items answered by ``engine``'s target, plain, at
    ``temperature``, ``repeat`` times over (round r, item k: seed ``seed + 100 r + k``)."""
    out = []
    for r in range(repeat):
        for k, item in enumerate(agent_items()[:n_items]):
            prompt = engine.chat_tokens(item["messages"])
            schema = item["response_format"]["json_schema"]["schema"]
            sp = SamplingParams(temperature=temperature, max_tokens=item["max_tokens"], seed=seed + 100 * r + k)
            res = engine.generate(prompt, sp, DraftParams(method="none"), json_schema=schema)
            out.append({"prompt": prompt, "views": engine.prompt_views(prompt), "reply": list(res.tokens)})
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-items", type=int, default=6)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.0, help="the recorded replies' (seeded)")
    ap.add_argument("--seed", type=int, default=0, help="the first item's seed (round r, item k: seed + 100 r + k)")
    ap.add_argument("--repeat", type=int, default=1, help="answer the items this many times (other seeds)")
    ap.add_argument("--save", help="write the recorded replies here")
    ap.add_argument("--load", help="replay replies recorded earlier instead of recording")
    ap.add_argument("--curve", help="rows:cost pairs of another machine (default: this one's, as auto measured it)")
    args = ap.parse_args(argv)
    curve = parse_curve(args.curve) if args.curve else None
    from resispec_gguf.engine import Engine

    engine = Engine.load(draft="", progress=False)  # the default target: its tokenizer, and the replies
    if args.load:
        with open(args.load, encoding="utf-8") as f:
            items = json.load(f)
    else:
        items = record(engine, args.n_items, args.temperature, args.seed, args.repeat)
        if args.save:
            with open(args.save, "w", encoding="utf-8") as f:
                json.dump(items, f)
    curve = curve or engine._auto_curves()[0]
    print(f"{'item':>4} {'tokens':>6} | {'tau':>5} {'missed':>6} | {'tau, anchor':>11} {'missed':>6} | "
          f"{'tau, by bytes':>13} {'missed':>6} | {'by run':>6} {'knowing':>7}")
    for k, it in enumerate(items):
        row = [replay(it["prompt"], it["views"], it["reply"], args.depth, a, c)
               for a, c in ((False, None), (True, None), (True, engine))]
        fast = speedups(*agreements(it["prompt"], it["views"], it["reply"], engine), curve, args.depth)
        n = len(it["reply"])
        print(f"{k:>4} {n:>6} | {n / row[0][0]:>5.2f} {row[0][1]:>6} | {n / row[1][0]:>11.2f} {row[1][1]:>6} | "
              f"{n / row[2][0]:>13.2f} {row[2][1]:>6} | {fast[0]:>5.2f}x {fast[1]:>6.2f}x")
    shape = " ".join(f"{r}:{c / curve(1):.2f}" for r, c in zip(curve.rows, curve.seconds))
    print(f"speed-ups with a decode of n rows costing (n:times one row) {shape}")
    engine.close()


if __name__ == "__main__":
    main()
