"""Greedy outputs of every method on the real pair, saved and compared (a development tool).

Runs 6 prompts (code, edits, chat) through 7 settings (plain, the four tree methods, lookup
trees and ``auto``) at temperature 0 and writes every output's tokens to a JSON file.  With
``--compare OLD.json`` it reports the outputs that differ from an earlier run's: a refactor
must leave all of them identical.  It also counts the speculative outputs that part from
plain greedy decoding (see docs/verification.md on flash attention: with it on, a
multi-row decode may score a near-tie differently from a one-row decode).

    python scripts/greedy_check.py --out before.json
    python scripts/greedy_check.py --out after.json --compare before.json
"""

import argparse
import json
import sys

from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine

PROMPTS = [
    "Write a Python function that reverses a linked list.",
    "Write a C function that counts the set bits of a 64-bit integer.",
    "Rename the variable x to count in this code:\n\ndef f(x):\n    x = x + 1\n    return x * x\n",
    "Add type hints to this function:\n\ndef area(w, h):\n    return w * h\n",
    "Explain in two sentences what a hash map is.",
    "Give three tips for writing clear commit messages.",
]

SETTINGS = {
    "none": DraftParams(method="none"),
    "chain": DraftParams(method="chain", depth=4),
    "specinfer": DraftParams(method="specinfer", draws=3, depth=4, budget=8),
    "rrs": DraftParams(method="rrs", draws=3, depth=4, budget=8),
    "resispec": DraftParams(method="resispec", draws=3, depth=4, budget=8),
    "lookup": DraftParams(method="resispec", lookup=True, draws=2, depth=4, budget=8),
    "auto": DraftParams(method="auto"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-flash-attn", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", default=None)
    a = ap.parse_args(argv)
    sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens)
    out: dict[str, dict[str, list[int]]] = {}
    kw = {"flash_attn": False} if a.no_flash_attn else {}
    with Engine.load(a.target, a.draft, n_ctx=2048, n_threads=a.threads, progress=False, **kw) as e:
        for i, text in enumerate(PROMPTS):
            prompt = e.chat_tokens([{"role": "user", "content": text}])
            out[str(i)] = {name: e.generate(prompt, sp, dp).tokens for name, dp in SETTINGS.items()}
            parted = [n for n, t in out[str(i)].items() if t != out[str(i)]["none"]]
            print(f"prompt {i}: {len(out[str(i)]['none'])} tokens; parted from plain: {', '.join(parted) or '-'}",
                  flush=True)
    with open(a.out, "w") as f:
        json.dump(out, f)
    n = sum(len(v) for v in out.values())
    parted = sum(t != v["none"] for v in out.values() for k, t in v.items() if k != "none")
    print(f"{n} outputs; {parted} of {n - len(out)} speculative outputs part from plain greedy")
    if a.compare:
        with open(a.compare) as f:
            old = json.load(f)
        diff = [(i, k) for i, v in out.items() for k, t in v.items() if old.get(i, {}).get(k) != t]
        print(f"against {a.compare}: {n - len(diff)} of {n} identical" + (f"; differ: {diff}" if diff else ""))
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
