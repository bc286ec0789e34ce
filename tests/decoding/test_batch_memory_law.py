"""``--parallel`` with the memory of past answers on: two requests in the same steps keep
their own laws and are independent of each other.

test_batch.py checks each request's law and the pair's joint law against the product of the
laws with ``memory=None``; test_memory_law.py checks each request's law (not the pair's)
with the memory on.  Here both at once: a 2-slot engine whose memory is pre-filled
(``law_harness.filled_memory``) and grows by both answers of every run, two requests per
run that read it (``auto``, and fixed-shape lookup with the memory), each request's law and
the pair's joint law = the product of the two laws.

Each test asserts the mechanism ran: the memory grew by the runs' answers, and in each
request the memory proposed candidates (memory bins, counted where the generation asks for
its candidates) and deterministic candidates were accepted (counted at the verifier,
per generation).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from law_harness import (COST_REGIMES, LOOKUP_PROMPT, N_TOKENS, RUNS, TEMPERATURES, check_law, exact_law,
                         filled_memory, sample_batch, slotted_pair)
from resispec_gguf.config import DraftParams
from resispec_gguf.decoding import drafting, generation
from resispec_gguf.decoding.calibration import is_memory_bin
from resispec_gguf.engine import Engine

T1, FILTERS = TEMPERATURES["T1"], TEMPERATURES["T0.6-filters"]
AUTO = DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4, lookup_k=3)
RESISPEC_MEMORY = DraftParams(method="resispec", draws=3, depth=3, budget=8, draft_support=4, lookup=True,
                              lookup_k=3)
MEMORY_ALONE = DraftParams(method="chain", lookup=True, use_draft=False, depth=3, budget=6, lookup_k=3)

# (with a draft model, cost curves, the two requests (prompt, sampling, draft params, constraint))
MIXES = {
    # beside the drafting request, auto's steps come out lookup trees here (on these curves and memory)
    "auto beside resispec + memory": (True, COST_REGIMES["gpu"], [
        (LOOKUP_PROMPT, T1, AUTO, None),
        (LOOKUP_PROMPT, FILTERS, RESISPEC_MEMORY, None),
    ]),
    # no draft model: auto's steps are all lookup (grown and cut whole), the other's chains
    "auto beside memory alone, no draft": (False, COST_REGIMES["gpu no draft"], [
        (LOOKUP_PROMPT, FILTERS, AUTO, None),
        (LOOKUP_PROMPT, T1, MEMORY_ALONE, None),
    ]),
}


@pytest.fixture
def reads(monkeypatch):
    """Per generation: the memory's candidates proposed at its nodes (``memory candidates``)
    and the verifications that accepted a deterministic candidate (``candidates accepted``),
    kept in a dict keyed by the generation's id."""
    seen: dict[int, Counter] = {}
    current = [None]
    propose, verify_tree, verify = drafting.DraftPhase._propose, generation.Generation._verify_tree, generation.verify

    def counted_propose(self, tree, node):
        out = propose(self, tree, node)
        seen.setdefault(id(self), Counter())["memory candidates"] += sum(1 for _, b in out if is_memory_bin(b))
        return out

    def counted_verify_tree(self, tree, rows):
        current[0] = self
        try:
            return verify_tree(self, tree, rows)
        finally:
            current[0] = None

    def counted_verify(method, p, q, draws, u, x0=-1):
        tok, idx = verify(method, p, q, draws, u, x0)
        m = (0 if x0 < 0 else 1) if isinstance(x0, (int, np.integer)) else len(x0)
        if current[0] is not None and 0 <= idx < m:
            seen.setdefault(id(current[0]), Counter())["candidates accepted"] += 1
        return tok, idx

    monkeypatch.setattr(drafting.DraftPhase, "_propose", counted_propose)
    monkeypatch.setattr(generation.Generation, "_verify_tree", counted_verify_tree)
    monkeypatch.setattr(generation, "verify", counted_verify)
    return seen


@pytest.mark.parametrize("mix", list(MIXES))
def test_two_requests_reading_a_growing_memory_keep_their_laws_and_are_independent(mix, reads):
    with_draft, curves, requests = MIXES[mix]
    target, draft = slotted_pair(2)
    engine = Engine(target, draft if with_draft else None, cost_curves=curves, memory=filled_memory())
    assert engine.n_slots == 2
    before = engine.memory.stats()["answers"]
    per_request = [Counter(), Counter()]

    def observe(gens):
        for i, g in enumerate(gens):
            got = reads.pop(id(g), Counter())
            per_request[i]["runs reading the memory"] += got["memory candidates"] > 0
            per_request[i]["runs accepting a candidate"] += got["candidates accepted"] > 0
            per_request[i].update(got)

    runs = sample_batch(engine, requests, RUNS, observe=observe)
    # the mechanism: both requests read the memory and had its (or the context's) candidates
    # accepted, run after run, and the memory grew by the answers
    assert engine.memory.stats()["answers"] >= before + RUNS, engine.memory.stats()
    for i, c in enumerate(per_request):
        assert c["runs reading the memory"] >= RUNS // 2, (i, c)
        assert c["runs accepting a candidate"] >= RUNS // 4, (i, c)
    laws = [exact_law(target, p, sp, N_TOKENS) for p, sp, _, _ in requests]
    for i, law in enumerate(laws):
        check_law(Counter(run[i] for run in runs), law, f"{mix}: request {i}")
    pairs = Counter((run[0],) + run[1] for run in runs)
    product = {(a,) + b: pa * pb for a, pa in laws[0].items() for b, pb in laws[1].items()}
    check_law(pairs, product, f"{mix}: pair independence")
