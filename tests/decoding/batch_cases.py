"""The requests and engines the batch tests share (test_batch, test_batch_slots): a helper
module, not a test file.  ``MIXES``: per mix, the cost curves and 2-4 requests (prompt,
sampling, draft params, constraint) with different methods, temperatures, constraints and
lookup; ``_engine(mix)``, an engine on a slotted Markov pair with the mix's curves; ``_run``
steps a batch until it is idle."""

from __future__ import annotations

from fake_models import PathConstraint
from law_harness import CPU_D, CPU_T, EOG, FLAT, LOOKUP_PROMPT, PROMPT, TEMPERATURES, V, slotted_pair
from resispec_gguf.config import DraftParams
from resispec_gguf.engine import Engine

CONSTRAINT = PathConstraint(V, EOG)
T1, FILTERS, COLD = TEMPERATURES["T1"], TEMPERATURES["T0.6-filters"], TEMPERATURES["T0.01"]


def _dp(method, **kw):
    return DraftParams(method=method, draws=3, depth=3 if method != "auto" else 4,
                       budget=6 if method != "auto" else 8, draft_support=4, **kw)


# (prompt, sampling, draft params, constraint) per request
MIXES = {
    # GPU-like costs: auto beside fixed shapes, a constraint, lookup on and off
    "gpu": ((FLAT, FLAT), [
        (LOOKUP_PROMPT, T1, _dp("auto"), None),
        (PROMPT, FILTERS, _dp("resispec"), CONSTRAINT),
        (LOOKUP_PROMPT, T1, _dp("chain", lookup=True), None),
    ]),
    # CPU-like costs: two auto requests compete for rows; plain decoding beside them
    "cpu": ((CPU_T, CPU_D), [
        (LOOKUP_PROMPT, FILTERS, _dp("auto"), CONSTRAINT),
        (PROMPT, T1, _dp("specinfer"), None),
        (LOOKUP_PROMPT, T1, _dp("auto"), None),
        (PROMPT, COLD, _dp("none"), None),
    ]),
    # two requests: rrs with lookup beside auto drafting from the context only (no draft)
    "two": ((FLAT, FLAT), [
        (LOOKUP_PROMPT, FILTERS, _dp("rrs", lookup=True), None),
        (LOOKUP_PROMPT, T1, _dp("auto"), CONSTRAINT),
    ]),
}


def _engine(mix, n_slots=4, **room):
    curves, _ = MIXES[mix]
    target, draft = slotted_pair(n_slots, **room)
    # no memory of past answers: these tests compare outputs of runs made one after another
    return Engine(target, draft, cost_curves=curves, memory=None), target


def _run(batch):
    while batch.busy:
        batch.step()
