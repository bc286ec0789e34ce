"""Seeded outputs of a grid of configurations on the Markov fakes: a helper module, not a test
file.  ``outputs()`` runs the grid (fixed methods with lookup, ``auto`` with and without a
draft, free and under ``fake_models.PathConstraint``, without a memory and with the harness's
``filled_memory``, views off and on, two temperatures; plus the memory-filled batches of
``batch_cases.MIXES``) and returns every request's tokens by configuration.

``data/seeded_outputs.json`` holds them as the engine gave them before the candidate sources
shared one interface (``decoding.candidates``); ``test_seeded_outputs.py`` checks that the
engine still gives exactly these tokens, i.e. that every request still uses its uniforms in
the same order.  Regenerate (only for a change meant to reorder the draws) with
``python tests/decoding/seeded_grid.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the shared helpers
sys.path.insert(0, str(HERE))

from fake_models import PathConstraint  # noqa: E402
from law_harness import (CPU_D, CPU_T, EOG, LOOKUP_PROMPT, TEMPERATURES, V, _pair, filled_memory,  # noqa: E402
                         slotted_pair)
from resispec_gguf.config import DraftParams  # noqa: E402
from resispec_gguf.decoding.candidates import views as views_source  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402

DATA = HERE / "data" / "seeded_outputs.json"
SEEDS = (0, 1, 2, 3, 0, 1)  # repeats: the ledger's keys
MAX_TOKENS = 20
VIEW = [4, 1, 3, 2, 0, 4, 1, 3, 2, 1, 4, 0]  # stands in for a tokenized view (the fakes cannot make one)


def _dp(method: str, **kw) -> DraftParams:
    auto = method == "auto"
    return DraftParams(method=method, draws=3, depth=4 if auto else 3, budget=8 if auto else 6, draft_support=4,
                       lookup_k=3, lookup=not auto, **kw)


METHODS = {
    "chain": (True, _dp("chain")),
    "specinfer": (True, _dp("specinfer")),
    "rrs": (True, _dp("rrs")),
    "resispec": (True, _dp("resispec")),
    "lookup only": (False, _dp("chain", use_draft=False)),
    "auto": (True, _dp("auto")),
    "auto, no draft": (False, _dp("auto")),
}


def _engine(draft: bool, memory: bool, views: bool, n_slots: int = 1) -> Engine:
    target, model = _pair() if n_slots == 1 else slotted_pair(n_slots)
    engine = Engine(target, model if draft else None, cost_curves=(CPU_T, CPU_D if draft else None),
                    memory=filled_memory() if memory else None)
    # the views the requests read (``views.prompt_views``, module-wide: one engine runs at a time)
    views_source.prompt_views = (lambda text, tokens: [VIEW, list(reversed(VIEW))]) if views else _NO_VIEWS
    return engine


_NO_VIEWS = views_source.prompt_views  # the fakes have no tokenizer: no views


def _single() -> dict[str, list[list[int]]]:
    out = {}
    for name, (draft, dp) in METHODS.items():
        for constrained in (False, True):
            for memory in (False, True):
                for views in (False, True):
                    for temp in ("T1", "T0.6-filters"):
                        engine = _engine(draft, memory, views)
                        constraint = PathConstraint(V, EOG) if constrained else None
                        sp = TEMPERATURES[temp]
                        label = f"{name}|{'constrained' if constrained else 'free'}|" \
                                f"{'memory' if memory else 'no memory'}|{'views' if views else 'no views'}|{temp}"
                        out[label] = [engine.generate(LOOKUP_PROMPT, sp.replace(seed=s, max_tokens=MAX_TOKENS), dp,
                                                      constraint=constraint).tokens for s in SEEDS]
    return out


def _batches() -> dict[str, list[list[int]]]:
    """Two requests per pass on a two-slot engine with a filled memory, three passes."""
    t1, filters = TEMPERATURES["T1"], TEMPERATURES["T0.6-filters"]
    mixes = {
        "auto + chain": [(t1, _dp("auto"), True), (filters, _dp("chain"), False)],
        "auto + auto": [(filters, _dp("auto"), False), (t1, _dp("auto"), True)],
    }
    out = {}
    for name, requests in mixes.items():
        engine = _engine(True, True, True, n_slots=2)
        got = []
        for run in range(3):
            batch = engine.batch()
            reqs = [batch.admit(engine.generation(LOOKUP_PROMPT, sp.replace(seed=run + 7 * i, max_tokens=MAX_TOKENS),
                                                  dp, constraint=PathConstraint(V, EOG) if c else None))
                    for i, (sp, dp, c) in enumerate(requests)]
            while batch.busy:
                batch.step()
            got += [r.gen.result().tokens for r in reqs]
        out[f"batch|{name}"] = got
    return out


def outputs() -> dict[str, list[list[int]]]:
    """Every configuration's tokens, by label (module docstring)."""
    try:
        return {**_single(), **_batches()}
    finally:
        views_source.prompt_views = _NO_VIEWS


def main() -> None:
    os.environ.update(RESISPEC_BUSY_LOAD="inf", RESISPEC_COST_CHECK="0")
    DATA.parent.mkdir(exist_ok=True)
    got = outputs()
    lines = [f"{json.dumps(k)}: {json.dumps(got[k])}" for k in sorted(got)]
    DATA.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {DATA}")


if __name__ == "__main__":
    main()
