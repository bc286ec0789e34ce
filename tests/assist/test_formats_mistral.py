"""The Mistral / Mistral-Nemo format (``formats.mistral``) on a tiny GGUF with a Nemo-style
template (``[AVAILABLE_TOOLS]``, ``[TOOL_CALLS]``, ``[TOOL_RESULTS]``, nine-character ids):
detection, rendering (with any client id mapped to nine letters or digits), a forced call, a
lazy call, a parallel call, parsing and streaming."""

from __future__ import annotations

import json

import pytest
from tool_formats import (CALLS, EXPECTED, HISTORY, MSGS, TOOLS, as_pairs, check_parallel_grammar, family_engine,
                          follows, forced_calls,
                          prompt_text, streamed, tokens, valid_call)

from resispec_gguf.assist.formats import MistralFormat
from resispec_gguf.assist.formats.mistral import mistral_id
from resispec_gguf.assist.plan import plan_chat

pytest.importorskip("jsonschema")

CALL = '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}, "id": "abcDEF123"}]'
BAD = '[TOOL_CALLS][{"name": "add", "arguments": {"a": "two"'


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with family_engine(tmp_path_factory, "mistral") as e:
        yield e


def test_the_template_names_the_format(engine):
    fmt = engine.tool_format()
    assert type(fmt) is MistralFormat and fmt.native and "[TOOL_CALLS]" in fmt.special


def test_ids_are_nine_letters_or_digits_the_same_for_a_call_and_its_result():
    assert mistral_id("abcDEF123") == "abcDEF123" and len(mistral_id()) == 9 and mistral_id().isalnum()
    assert mistral_id("call_1") == mistral_id("call_1") != mistral_id("call_2")
    assert len(mistral_id("call_1")) == 9 and mistral_id("call_1").isalnum()


def test_the_template_renders_tools_calls_and_results(engine):
    text = prompt_text(engine, plan_chat(engine, HISTORY, tools=TOOLS))  # ids "call_1": the template needs 9
    cid = mistral_id("call_1")
    shown = prompt_text(engine, plan_chat(engine, MSGS, tools=TOOLS))
    # the tools' JSON in the given key order, as Hugging Face's tojson writes it
    assert '[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", ' in shown
    assert '"description": "Weather for a city"' in shown and '"name": "add"' in shown
    call = '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}, "id": "%s"}' % cid
    assert f"[TOOL_CALLS][{call}]" in text
    assert f'[TOOL_RESULTS]{{"content": "12 C, clear", "call_id": "{cid}"}}[/TOOL_RESULTS]' in text


def test_a_forced_call_names_an_offered_function_with_valid_arguments(engine):
    replies = forced_calls(engine)
    assert replies and all(calls and len(calls) == 1 and valid_call(calls[0]) for calls in replies)
    assert all(len(calls[0].id) == 9 and calls[0].id.isalnum() for calls in replies)


def test_a_lazy_call_is_free_text_until_the_marker_then_constrained(engine):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto")
    assert follows(plan.constraint, tokens(engine, 'Any text, {"name": "x"} too. ' + CALL))
    assert not follows(plan.constraint, tokens(engine, "Adding. " + BAD))
    content, calls = plan.tool_calls("Adding. " + CALL)
    assert content == "Adding." and calls[0].id == "abcDEF123" and as_pairs(calls) == [("add", {"a": 2, "b": 3})]


def test_parallel_calls(engine):
    check_parallel_grammar(engine)


def test_parsing_reads_back_what_the_format_writes():
    fmt = MistralFormat()
    content, calls = fmt.parse("Both. " + fmt.write_calls(CALLS), ["get_weather", "add"])
    assert content == "Both." and as_pairs(calls) == EXPECTED
    assert [c.id for c in calls] == [mistral_id("call_1"), mistral_id("call_2")]
    assert fmt.parse('[TOOL_CALLS] [{"name": "add", "arguments": "{\\"a\\": 1}"}]', ["add"])[1][0].arguments == \
        json.dumps({"a": 1})
    assert fmt.parse(CALL, ["get_weather"]) is None and fmt.parse('[TOOL_CALLS][{"name": "add"', ["add"]) is None


@pytest.mark.parametrize("size", [1, 4, 9])
def test_streamed_deltas_read_as_the_unstreamed_reply(engine, size):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    for text in ["Both. " + engine.tool_format().write_calls(CALLS), "No [TOOL] call here.", "[TOOL_CALLS][oops"]:
        content, calls = streamed(plan, text, size)
        whole = plan.tool_calls(text)
        assert (content.strip(), calls and as_pairs(calls)) == ((whole[0], as_pairs(whole[1])) if whole
                                                                 else (text.strip(), None))


def test_served_calls_have_mistral_ids_and_the_round_trip_renders(engine):
    """Through the server and the official client: the call (its marker a special token that
    the reply's text shows) comes back with a nine-character id, streamed alike, and sending
    the result back with that id renders and answers."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from servers import serving

    from resispec_gguf.config import DraftParams, SamplingParams
    from resispec_gguf.surfaces.server import create_app

    app = create_app(engine, model_name="tiny", draft_params=DraftParams(method="resispec"),
                     sampling_defaults=SamplingParams(max_tokens=320))
    with serving(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as client:
        add = {"type": "function", "function": {"name": "add"}}
        kw = dict(model="tiny", messages=MSGS, tools=TOOLS, tool_choice=add, temperature=1.0)
        for seed in range(6):
            ch = client.chat.completions.create(seed=seed, **kw).choices[0]
            if ch.finish_reason == "tool_calls":
                break
        assert ch.finish_reason == "tool_calls", ch  # the tiny random model may ramble until max_tokens
        (call,) = ch.message.tool_calls
        assert call.function.name == "add" and len(call.id) == 9 and call.id.isalnum()
        chunks = [c for c in client.chat.completions.create(stream=True, seed=seed, **kw) if c.choices]
        streamed_call = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
        assert "".join(d.function.arguments or "" for d in streamed_call) == call.function.arguments
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        back = MSGS + [ch.message, {"role": "tool", "tool_call_id": call.id, "content": "5"}]
        r = client.chat.completions.create(model="tiny", messages=back, tools=TOOLS, tool_choice="none", max_tokens=8)
        assert r.choices[0].finish_reason in ("stop", "length")
