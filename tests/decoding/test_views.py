"""The prompt's views (``decoding.candidates.views``): the texts themselves, their place in the
request's index (an indexed source: its sequences beside the prompt), and the law with views
on (a view is a fixed token sequence beside the prompt, so the engine's law tests run with one
standing in for the tokenized text the fakes cannot make)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from law_harness import COST_REGIMES, LOOKUP_PROMPT, LOOKUP_SOURCE_CASES, RUNS, _pair, lookup_source_law
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding.candidates import views
from resispec_gguf.decoding.candidates.context import ContextSource
from resispec_gguf.decoding.candidates.views import json_string_view, raw_view, views_of
from resispec_gguf.engine import Engine

FILE = 'def f(x):\n    return "a\\tb" + x\n\nprint(f(\'é\'))\n'


def test_the_json_string_view_is_the_text_as_a_json_string_quotes_it():
    view = json_string_view(FILE)
    assert json.dumps({"content": FILE}, ensure_ascii=False) == '{"content": "' + view + '"}'
    assert "\\n    return \\\"a\\\\tb\\\"" in view and "é" in view
    assert json_string_view("no escapes here") is None


def test_the_raw_view_unescapes_the_prompts_long_json_strings():
    call = json.dumps({"name": "write_file", "arguments": {"path": "f.py", "content": FILE}})
    text = "Earlier you wrote: " + call + ' and "a short\\nkey"'
    assert raw_view(text) == FILE  # the path and the short string are not worth a view
    assert raw_view("nothing quoted") is None
    assert raw_view('"' + "x" * 30 + '\\q"') is None  # not JSON
    assert views_of(text) == [json_string_view(text), FILE]


def test_a_view_feeds_the_lookup_where_the_prompt_itself_has_no_match():
    prompt = [1, 2, 3, 4, 5, 6]
    view = [7, 8, 9, 10, 11]
    plain = ContextSource(prompt, None, k=3)
    drafts = ContextSource(prompt, None, k=3, sequences=[view])
    drafts.commit([7, 8])
    plain.commit([7, 8])
    assert [c.token for c in drafts.propose()][:1] == [9]
    assert [c.token for c in drafts.propose([9])][:1] == [10]
    assert 9 not in [c.token for c in plain.propose()]


VIEW = [4, 1, 3, 2, 0, 4, 1, 3, 2, 1, 4, 0]  # a fixed sequence standing in for a tokenized view
@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("case", list(LOOKUP_SOURCE_CASES))
def test_views_keep_the_law_exact(case, temp, constrained, monkeypatch):
    calls = []
    monkeypatch.setattr(views, "prompt_views", lambda text, tokens: calls.append(1) or [VIEW, list(reversed(VIEW))])
    lookup_source_law(case, temp, constrained, "views")
    assert len(calls) == RUNS


def test_views_off_are_not_made(monkeypatch):
    target, _ = _pair()
    engine = Engine(target, None, cost_curves=COST_REGIMES["gpu no draft"], memory=None)
    monkeypatch.setattr(views, "prompt_views", lambda text, tokens: pytest.fail("views made with views off"))
    engine.generate(LOOKUP_PROMPT, SamplingParams(temperature=1.0, seed=1, max_tokens=4),
                    LOOKUP_SOURCE_CASES["auto, no draft"][1].replace(views=False))


def test_greedy_with_views_is_plain_greedy_on_the_tiny_gguf(engine):
    """On a real llama.cpp model (the tiny pair, a byte vocabulary that tokenizes), a prompt
    holding a file and a JSON answer quoting it: the views exist, and greedy output under
    auto and lookup is plain greedy's."""
    prompt = "Earlier: " + json.dumps({"content": FILE}) + "\nFile:\n" + FILE + "\nAs JSON: {\"content\": \"def"
    tokens = engine.text_tokens(prompt)
    assert len(engine.prompt_views(tokens)) == 2
    sp = SamplingParams(temperature=0.0, max_tokens=40)
    want = engine.generate(prompt, sp, DraftParams(method="none")).tokens
    for dp in (DraftParams(method="auto"), DraftParams(method="resispec", lookup=True)):
        assert engine.generate(prompt, sp, dp).tokens == want
    assert np.all(np.array(want) >= 0)
