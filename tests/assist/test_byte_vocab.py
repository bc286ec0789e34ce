"""Masks and commits agree on every token of a byte-fallback vocabulary (issue: a forced tool
call answered 400 on a token the grammar engine's mask allowed).

The grammar engine (llguidance) masks and commits by its token table, and tokenizes the bytes
a grammar forces with the tokenizer it is given.  llama.cpp's SentencePiece tokenizer reads
the text ``▁`` (U+2581) as a space: DeepSeek-R1's markers spelled as text
(``<｜tool▁sep｜>``) came back as tokens spelling ``<｜tool sep｜>``, which the engine refused
when the grammar was probed, and the request got a 400.  ``vocab.TableTokenizer`` holds the
tokenizer to the table.  Here: the whole vocabulary of every test model against the table,
the family formats with their markers as control tokens and as plain text, forced calls and
short schemas under every method and ``auto`` at T 0 and T 1, after a reasoning block with
and without a budget, streamed and not, and a failure of ours answered as a 500."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp")
jsonschema = pytest.importorskip("jsonschema")

import tool_formats as tf  # noqa: E402
from resispec_gguf import create_chat_completion  # noqa: E402
from resispec_gguf.config import DraftParams  # noqa: E402
from resispec_gguf.errors import ConstraintFault  # noqa: E402
from resispec_gguf.kernels.masks import mask_allows  # noqa: E402
from resispec_gguf.llama.vocab import TableTokenizer  # noqa: E402

PICK = {"type": "object", "properties": {"color": {"enum": ["red", "blue"]}, "size": {"enum": ["S", "M"]}},
        "required": ["color", "size"], "additionalProperties": False}
PICK_TOOL = {"type": "function", "function": {"name": "pick", "parameters": PICK}}
SHORT = {"type": "json_schema", "json_schema": {"name": "pick", "schema": PICK, "strict": True}}
METHODS = ("none", "chain", "specinfer", "rrs", "resispec", "auto")


@pytest.fixture(scope="module", params=[(f, s) for f in tf.FAMILIES for s in (True, False)],
                ids=lambda p: f"{p[0]}-{'special' if p[1] else 'text'}")
def family(request, tmp_path_factory):
    name, special = request.param
    from resispec_gguf.engine import Engine

    target, draft = tf.write_family_pair(tmp_path_factory.mktemp(name), name, special)
    with Engine.load(str(target), str(draft), n_ctx=1024, n_threads=1, flash_attn=False, progress=False,
                     memory_size=0) as e:  # replies are compared streamed and not: no memory of past answers
        yield name, e


def test_every_token_reads_alike_to_the_grammar_engine_and_the_engine(family):
    assert tf.table_disagreements(family[1]) == []


def test_forced_text_with_sentencepiece_spaces_is_spelled_from_the_table():
    """The model's tokenizer gives the space token for ``▁``: the rest is taken from the
    table by longest match, so the tokens spell the text."""
    tokens = [b"", b"a", b" ", b"\xe2", b"\x96", b"\x81", b"ab", b"\xffsep"]
    wrong = TableTokenizer(tokens, [7], lambda data: [1, 2, 1] if data == "a▁a".encode() else [], eos=0, bos=None)
    out = wrong("a▁a")
    assert b"".join(tokens[t] for t in out) == "a▁a".encode()
    assert out[:1] == [1]  # the model's own tokens kept while they spell the text
    assert wrong.longest_match(b"ab\x00") == [6]  # stops before a byte no piece starts with


def _valid(args: str) -> bool:
    try:
        jsonschema.validate(json.loads(args), PICK)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


@pytest.mark.parametrize("method", METHODS)
def test_forced_calls_and_short_schemas_never_fail(family, method):
    name, engine = family
    budget = {"reasoning_budget": 3} if engine.reasoning_format() is not None else {}
    for temperature in (0.0, 1.0):
        kw = dict(temperature=temperature, seed=11, max_tokens=400, draft=DraftParams(method=method), **budget)
        call = create_chat_completion(engine, tf.MSGS, tools=[PICK_TOOL], tool_choice="required", **kw)
        choice = call["choices"][0]
        assert choice["finish_reason"] == "tool_calls", (name, method, temperature, choice)
        assert all(_valid(c["function"]["arguments"]) for c in choice["message"]["tool_calls"])
        typed = create_chat_completion(engine, tf.MSGS, response_format=SHORT, **kw)["choices"][0]
        assert typed["finish_reason"] == "stop" and _valid(typed["message"]["content"]), (name, method, typed)


@pytest.mark.parametrize("budget", [2, None], ids=["budget", "no-budget"])
def test_after_reasoning_the_content_holds_a_short_schema_streamed_or_not(family, budget):
    """A reasoning family thinks, then answers under the schema (or the forced call); without
    a budget the tiny model may think to ``max_tokens``, so only finished replies are read,
    and at least one that thought must finish (a model that opens its thinking itself may
    also answer at once)."""
    name, engine = family
    if engine.reasoning_format() is None:
        pytest.skip("not a reasoning family")
    thought = 0
    for seed in range(4):
        for extra in ({"response_format": SHORT}, {"tools": [PICK_TOOL], "tool_choice": "required"}):
            kw = dict(temperature=1.0, seed=seed, max_tokens=700, reasoning_budget=budget, **extra)
            whole = create_chat_completion(engine, tf.MSGS, **kw)["choices"][0]
            chunks = list(create_chat_completion(engine, tf.MSGS, stream=True, **kw))
            assert chunks[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]
            if whole["finish_reason"] == "length":
                continue
            message = whole["message"]
            thought += message.get("reasoning_content") is not None
            if "response_format" in extra:
                streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
                assert _valid(message["content"]) and streamed == message["content"], (name, message, streamed)
            else:
                assert whole["finish_reason"] == "tool_calls"
                assert all(_valid(c["function"]["arguments"]) for c in message["tool_calls"])
    # Qwen3's model opens its thinking itself, which the tiny model rarely does (its replies
    # after a thinking block are covered by test_server_reasoning's); R1's prompt opens it
    assert thought >= 1 or name == "qwen3"


def test_a_token_the_mask_allowed_but_the_grammar_refused_is_our_fault(family):
    """A commit the grammar engine refuses is a ``ConstraintFault`` (a 500 at the server),
    not the user's ``ConstraintError``."""
    _, engine = family
    state = engine.grammars.compile(json_schema=PICK).start()
    refused = engine.target.tokenize("z", add_special=False, parse_special=False)[0]  # a reply opens with {
    assert not mask_allows(state.mask(()), refused)
    with pytest.raises(ConstraintFault, match="refused, yet it was committed"):
        state.advance([refused])


def test_a_fault_is_an_internal_error_at_the_server():
    from resispec_gguf.decoding.stats import Result, Stats
    from resispec_gguf.surfaces.server.errors import failure_body

    fault = Result(tokens=[], text="", finish_reason="error", stats=Stats(), seed=0, error="x", fault=True)
    assert failure_body(fault, None)["error"]["code"] == "internal_error"


def test_the_openai_client_gets_forced_calls_on_text_markers(tmp_path_factory):
    """The reported case: R1's markers as plain text, ``tool_choice`` "required", streamed
    and not, through the official client."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from resispec_gguf.engine import Engine
    from resispec_gguf.surfaces.server import create_app
    from servers import serving

    target, draft = tf.write_family_pair(tmp_path_factory.mktemp("r1text"), "deepseek_r1", special=False)
    with Engine.load(str(target), str(draft), n_ctx=1024, n_threads=1, progress=False, memory_size=0) as engine, \
            serving(create_app(engine)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none")
        kw = dict(model="m", messages=tf.MSGS, tools=[PICK_TOOL], tool_choice="required", max_tokens=400, seed=3,
                  extra_body={"reasoning_budget": 2})
        whole = client.chat.completions.create(**kw).choices[0]
        assert whole.finish_reason == "tool_calls" and _valid(whole.message.tool_calls[0].function.arguments)
        args = "".join(d.function.arguments or "" for c in client.chat.completions.create(stream=True, **kw)
                       for d in (c.choices[0].delta.tool_calls or []) if c.choices)
        assert _valid(args)
