"""candidates/base.py and frame.py: the protocol, the registry and the frame.  A new source is one
class and one ``register``: here a toy source (the token after the last one, modulo the
vocabulary) registered by the test alone gets a range of calibration bins after the built-in
sources', is built for every request that reads candidates, is checked after them, is counted
per source in the reply's stats, and keeps the output law exact (it is a function of the
path, fixed before the node draws)."""

from __future__ import annotations

import numpy as np
import pytest

from law_harness import COST_REGIMES, EOG, LOOKUP_PROMPT, N_TOKENS, RUNS, TEMPERATURES, _pair, check_law, exact_law
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding import calibration
from resispec_gguf.decoding.candidates import Candidate, Request, Sources, base, layout, register, registered
from resispec_gguf.decoding.candidates.base import SourceDefaults
from resispec_gguf.decoding.candidates.context import uses_lookup
from resispec_gguf.engine import Engine


class NextToken(SourceDefaults):
    """The toy source: after a context ending in t, the token t + 1 (EOG excluded)."""

    name = "next token"
    priors = (0.2, 0.4)  # bin 0: after an even token, 1: after an odd one
    arm = "lookup"

    def __init__(self, prompt):
        self.tokens = list(prompt)

    @classmethod
    def build(cls, request: Request):
        return cls(request.prompt) if uses_lookup(request.dp) else None

    def commit(self, tokens):
        self.tokens += list(tokens)

    def propose(self, path, run):
        last = (self.tokens + list(path))[-1]
        return [Candidate((last + 1) % EOG, last % 2)]


@pytest.fixture
def toy(monkeypatch):
    """``NextToken`` registered for one test (the registry restored after it)."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_LAYOUT", [None])
    register(NextToken)
    yield NextToken


def test_the_built_in_sources_and_their_bins():
    assert [c.name for c in registered()][:4] == ["context", "views", "forced", "text draft"]
    lay = layout()
    assert lay.offset["context"] == 0 and len(lay.priors) == 24
    assert calibration.FORCED_BIN == lay.bin("forced", 0) == 20 and lay.priors[20] == 0.9
    assert lay.leading == (0, 1, 2, 3, 4) and lay.source_of(19) == "context" and lay.source_of(20) == "forced"
    assert lay.offset["text draft"] == 21 and lay.source_of(23) == "text draft"
    assert not lay.copies[20] and all(lay.copies[:20]) and all(lay.copies[21:])
    with pytest.raises(ValueError):
        register(type("Other", (SourceDefaults,), {"name": "context", "priors": (), "arm": "lookup"}))


def test_a_registered_source_gets_its_bins_and_is_built_and_merged_last(toy):
    lay = layout()
    assert lay.offset["next token"] == 24 and lay.priors[24:] == (0.2, 0.4)
    assert calibration.Calibration().lookup(25) == pytest.approx(0.4)
    assert calibration.FORCED_BIN == lay.bin("forced", 0)  # the built-ins' bins do not move
    sources = Sources.build(Request([1, 2, 3, 1, 2], DraftParams(method="auto")))
    assert [s.name for s, _ in sources.built] == ["context", "next token"]
    # the context proposes 3 after "1 2" (bin 0); the toy's 3 is a repeat, dropped
    assert sources.propose((), 0, None) == [(3, 0)]
    assert sources.propose((3,), 0, None) == [(1, 0), (4, 25)]  # "1 2 3" was followed by 1; 3 is odd: bin 1
    assert Sources.build(Request([1, 2], DraftParams(method="none"))).built == []


@pytest.mark.parametrize("case", ["auto, no draft", "chain lookup"])
def test_the_law_stays_exact_with_the_new_source(toy, case):
    target, draft = _pair()
    if case == "auto, no draft":
        engine = Engine(target, None, cost_curves=COST_REGIMES["gpu no draft"], memory=None)
        dp = DraftParams(method="auto", depth=4, budget=8)
    else:
        engine = Engine(target, draft, memory=None)
        dp = DraftParams(method="chain", lookup=True, draws=2, depth=3, budget=6, draft_support=4)
    sp = TEMPERATURES["T1"]
    counts, offered = {}, np.zeros(2, int)
    for seed in range(RUNS):
        res = engine.generate(LOOKUP_PROMPT, sp.replace(seed=seed, max_tokens=N_TOKENS), dp)
        seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
        counts[seq] = counts.get(seq, 0) + 1
        offered += res.stats.candidates.get("next token", [0, 0])
    assert offered[0] > RUNS // 4 and 0 < offered[1] <= offered[0]  # offered at verified nodes, some accepted
    check_law(counts, exact_law(target, LOOKUP_PROMPT, sp, N_TOKENS), f"new source/{case}")


def test_the_reply_counts_candidates_per_source():
    target, _ = _pair()
    engine = Engine(target, None, cost_curves=COST_REGIMES["gpu no draft"], memory=None)
    res = engine.generate(LOOKUP_PROMPT, SamplingParams(temperature=1.0, seed=3, max_tokens=40),
                          DraftParams(method="chain", lookup=True, use_draft=False, depth=3, budget=6))
    offered, accepted = res.stats.candidates["context"]
    assert offered >= accepted > 0
    assert res.stats.as_dict()["candidates"]["context"] == {"offered": offered, "accepted": accepted}


def test_the_leading_chain_follows_the_lookup_leaders_from_a_sure_root():
    """``Sources.leading_chain``: the chances of the leaders along their own chain, at most
    ``depth``; nothing unless the root's is sure; a mask that forbids a leader ends it."""
    sources = Sources.build(Request([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], DraftParams(method="auto")))
    chance = lambda b: 0.95  # noqa: E731
    assert sources.leading_chain(0, None, 4, chance, 0.9) == [0.95] * 4  # 3 4 5 1 after "1 2"
    assert sources.leading_chain(0, None, 4, chance, 0.99) == []
    from resispec_gguf.kernels.masks import bitmask_from_ids

    mask = bitmask_from_ids([t for t in range(16) if t != 5], 16)
    no_five = lambda path: None if len(path) < 2 else mask  # noqa: E731
    assert len(sources.leading_chain(0, no_five, 4, chance, 0.9)) == 2  # 3 4, then 5 forbidden
