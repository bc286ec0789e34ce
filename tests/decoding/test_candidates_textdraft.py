"""candidates/textdraft.py: a draft of another vocabulary, read through text, keeps the law.

On a cross-vocabulary Markov fake pair (``law_harness.text_pair``: the harness's target, a
draft over other pieces of the same letters, a longest-match tokenizer on each side), the
joint law of the first tokens through the engine is plain sampling's (chi-square and the
conditionals, ``check_law``) at T 1 and T 0.6 with top-k/top-p/min-p, without and with a
constraint (``fake_models.PathConstraint``), under ``auto`` and ``chain``; the chains are
offered at verified nodes and some are accepted; greedy output is plain greedy's; the chain's
candidates follow the path and are a function of the committed text."""

from __future__ import annotations

import pytest

from fake_models import PathConstraint
from law_harness import (EOG, FLAT, LOOKUP_PROMPT, N_TOKENS, RUNS, TEMPERATURES, TEXT_CHEAP, TEXT_DEAR, V, check_law,
                         constrained_law, exact_law, text_pair)
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding.candidates import Request, Sources, layout
from resispec_gguf.decoding.costs import CostCurve
from resispec_gguf.decoding.candidates.textdraft import TextDraftSource, confidence_bin
from resispec_gguf.engine import Engine

DPS = {"auto": DraftParams(method="auto", depth=4, budget=8),
       "chain": DraftParams(method="chain", depth=4, budget=8)}
CONSTRAINT = PathConstraint(V, EOG)


def _engine(faithful=False):
    target, text = text_pair(faithful=faithful)
    return Engine(target, text, cost_curves=(FLAT, TEXT_CHEAP), memory=None), target


def _sample(engine, sp, dp, constraint=None):
    counts, offered = {}, [0, 0]
    for seed in range(RUNS):
        res = engine.generate(LOOKUP_PROMPT, sp.replace(seed=seed, max_tokens=N_TOKENS), dp, constraint=constraint)
        seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
        counts[seq] = counts.get(seq, 0) + 1
        got = res.stats.candidates.get("text draft", [0, 0])
        offered = [offered[0] + got[0], offered[1] + got[1]]
    return counts, offered


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("method", ["auto", "chain"])
def test_the_law_is_exact_with_a_draft_of_another_vocabulary(method, temp):
    engine, target = _engine()
    sp = TEMPERATURES[temp]
    counts, offered = _sample(engine, sp, DPS[method])
    assert offered[0] > RUNS // 4 and 0 < offered[1] < offered[0], offered
    check_law(counts, exact_law(target, LOOKUP_PROMPT, sp, N_TOKENS), f"text draft/{method}/{temp}")


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
def test_the_law_is_exact_under_a_constraint(temp):
    engine, target = _engine()
    sp = TEMPERATURES[temp]
    counts, offered = _sample(engine, sp, DPS["auto"], CONSTRAINT)
    assert offered[0] > 0, offered
    check_law(counts, constrained_law(target, LOOKUP_PROMPT, sp, N_TOKENS, CONSTRAINT), f"text draft/constrained/{temp}")


@pytest.mark.parametrize("method", ["auto", "chain"])
def test_greedy_output_is_plain_greedy(method):
    engine, _ = _engine(faithful=True)
    sp = SamplingParams(temperature=0.0, max_tokens=40)
    plain = engine.generate(LOOKUP_PROMPT, sp, DraftParams(method="none")).tokens
    res = engine.generate(LOOKUP_PROMPT, sp, DPS[method])
    assert res.tokens == plain
    assert res.stats.candidates["text draft"][1] > 0  # the draft's chains did some of the work


def test_the_chain_follows_the_path_and_the_committed_text():
    _, text = text_pair()
    request = Request(LOOKUP_PROMPT, DraftParams(method="auto"), stores={"text_draft": text})
    sources = Sources.build(request)
    source = sources.source("text draft")
    assert isinstance(source, TextDraftSource)
    chain = source._draft()
    assert chain and all(0 <= b < 3 for _, b in chain)
    base = layout().offset["text draft"]
    path = ()
    for tok, b in chain:  # each node on the chain proposes the chain's next token, in its bin
        assert (tok, base + b) in sources.propose(path, 0, None)
        path += (tok,)
    assert source.propose(path, 0) == []  # past the chain
    assert source.propose((99,), 0) == []  # off the chain
    again = Sources.build(request).source("text draft")._draft()
    assert again == chain  # a function of the committed text
    source.commit([chain[0][0]])
    source.new_step()
    moved = source._draft()
    follow = Sources.build(Request(LOOKUP_PROMPT + [chain[0][0]], DraftParams(method="auto"),
                                   stores={"text_draft": text})).source("text draft")._draft()
    assert moved == follow  # following commits is reading the longer prompt


def test_no_source_without_the_store_or_with_the_draft_off():
    _, text = text_pair()
    assert Sources.build(Request(LOOKUP_PROMPT, DraftParams(method="auto"))).source("text draft") is None
    for dp in (DraftParams(method="none"), DraftParams(method="chain", use_draft=False, lookup=True)):
        assert Sources.build(Request(LOOKUP_PROMPT, dp, stores={"text_draft": text})).source("text draft") is None


def test_confidence_bins():
    assert [confidence_bin(p) for p in (0.95, 0.8, 0.6, 0.5, 0.3)] == [0, 0, 1, 1, 2]
    assert layout().source_of(layout().offset["text draft"] + 2) == "text draft"


def _draft_calls(curve, faithful, temperature=0.0):
    """``(draft decode calls, steps, tokens)`` of one auto reply with the text draft priced by ``curve``."""
    target, text = text_pair(faithful=faithful)
    engine = Engine(target, text, cost_curves=(FLAT, curve), memory=None)
    res = engine.generate(LOOKUP_PROMPT, SamplingParams(temperature=temperature, max_tokens=48, seed=1), DPS["auto"])
    return text.model.calls, res.stats.steps, len(res.tokens)


def test_auto_calls_the_draft_where_it_pays_and_stops_where_it_does_not():
    calls, steps, tokens = _draft_calls(TEXT_DEAR, faithful=True)
    assert calls == 0 and tokens == 48  # dearer than a target decode per token: never called
    calls, steps, tokens = _draft_calls(TEXT_CHEAP, faithful=True)
    assert calls >= steps and steps < tokens // 2  # cheap and right: called at every step, long chains taken
    mid = CostCurve(TEXT_CHEAP.rows, (0.2,) * len(TEXT_CHEAP.rows))
    calls, steps, tokens = _draft_calls(mid, faithful=False)
    assert 0 < calls and calls * 4 < steps  # a poor draft at a fifth of a decode: pays at its prior, probed, then left
    dear = CostCurve(TEXT_CHEAP.rows, (0.3,) * len(TEXT_CHEAP.rows))
    calls, steps, tokens = _draft_calls(dear, faithful=False)
    assert calls == 0  # at a third, its prior acceptance would not pay: never probed (a probe reads the whole text)
