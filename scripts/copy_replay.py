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

    python scripts/copy_replay.py --n-items 6 --save replies.json
    python scripts/copy_replay.py --load replies.json --depth 32
"""

from __future__ import annotations

import argparse
import json

from resispec_gguf.bench.workloads.agent import agent_items
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding.candidates.context import ContextSource


def replay(prompt, views, reply, depth: int, anchored: bool, codec=None) -> tuple[int, int]:
    """``(calls, calls whose first candidate missed)`` for ``reply`` after ``prompt``;
    ``codec``: the target's tokenizer (the anchor follows bytes; None: tokens)."""
    src = ContextSource(prompt, None, 3, views, anchored=anchored, codec=codec)
    i = calls = missed = 0
    while i < len(reply):
        path: list[int] = []
        while len(path) < depth and i + len(path) < len(reply):
            got = src.propose(tuple(path), 0)
            if not got or got[0].token != reply[i + len(path)]:
                break
            path.append(got[0].token)
        missed += not path
        n = min(len(path) + 1, len(reply) - i)
        src.commit(reply[i:i + n])
        i, calls = i + n, calls + 1
    return calls, missed


def record(engine, n_items: int, temperature: float = 0.0) -> list[dict]:
    """The first ``n_items`` agent items answered by ``engine``'s target, plain, at
    ``temperature`` (seed: the item's number)."""
    out = []
    for item in agent_items()[:n_items]:
        prompt = engine.chat_tokens(item["messages"])
        schema = item["response_format"]["json_schema"]["schema"]
        sp = SamplingParams(temperature=temperature, max_tokens=item["max_tokens"], seed=len(out))
        res = engine.generate(prompt, sp, DraftParams(method="none"), json_schema=schema)
        out.append({"prompt": prompt, "views": engine.prompt_views(prompt), "reply": list(res.tokens)})
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-items", type=int, default=6)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.0, help="the recorded replies' (seeded)")
    ap.add_argument("--save", help="write the recorded replies here")
    ap.add_argument("--load", help="replay replies recorded earlier instead of recording")
    args = ap.parse_args(argv)
    from resispec_gguf.engine import Engine

    engine = Engine.load(draft="", progress=False)  # the default target: its tokenizer, and the replies
    if args.load:
        with open(args.load, encoding="utf-8") as f:
            items = json.load(f)
    else:
        items = record(engine, args.n_items, args.temperature)
        if args.save:
            with open(args.save, "w", encoding="utf-8") as f:
                json.dump(items, f)
    print(f"{'item':>4} {'tokens':>6} | {'tau':>5} {'missed':>6} | {'tau, anchor':>11} {'missed':>6} | "
          f"{'tau, by bytes':>13} {'missed':>6}")
    for k, it in enumerate(items):
        row = [replay(it["prompt"], it["views"], it["reply"], args.depth, a, c)
               for a, c in ((False, None), (True, None), (True, engine))]
        n = len(it["reply"])
        print(f"{k:>4} {n:>6} | {n / row[0][0]:>5.2f} {row[0][1]:>6} | {n / row[1][0]:>11.2f} {row[1][1]:>6} | "
              f"{n / row[2][0]:>13.2f} {row[2][1]:>6}")
    engine.close()


if __name__ == "__main__":
    main()
