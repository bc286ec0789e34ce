"""Response objects (surfaces/shapes.py) built from small hand-made ``Result``/``Stats``, without
a model: the finish-reason vocabulary, ``usage`` and the ``speculative`` extra, the OpenAI
completion and chunk objects (with and without tool calls), and llama.cpp's ``/infill``
answer, chunks and ``response_fields``."""

from __future__ import annotations

import json
import math
import re
import time

import pytest

from resispec_gguf.assist.plan import ChatPlan
from resispec_gguf.assist.formats import HermesFormat
from resispec_gguf.assist.tools import ToolCall, ToolRequest
from resispec_gguf.decoding.stats import Result, Stats
from resispec_gguf.surfaces import shapes

META = {"id": "chatcmpl-abc", "created": 1700000000, "model": "m"}
ADD = {"name": "add", "parameters": {"type": "object"}}
CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


def _stats(**kw):
    base = dict(method="resispec", prompt_tokens=5, prompt_reused=2, prompt_time=0.25, tokens=4, steps=2,
                target_calls=2, draft_calls=3, tree_nodes=6, accepted_by_depth=[2, 1], reached_by_depth=[2, 2],
                draft_time=0.1, target_time=0.3, total_time=0.5)
    return Stats(**{**base, **kw})


def _result(text="hi there", n=3, finish_reason="eos", **stats):
    return Result(tokens=list(range(10, 10 + n)), text=text, finish_reason=finish_reason, stats=_stats(**stats), seed=0)


def _tool_plan(choice="auto"):
    return ChatPlan([1, 2], tools=ToolRequest([ADD], choice, ["add"]), format=HermesFormat())


# ---------------------------------------------------------------------------------- figures


def test_finish_reasons_in_openai_terms():
    assert [shapes.finish_reason(r) for r in ("eos", "stop", "length")] == ["stop", "stop", "length"]
    assert shapes.finish_reason("interrupted") == "interrupted"  # OpenAI has no word for it
    assert [shapes.with_calls(r) for r in ("stop", "length", "interrupted")] == ["tool_calls", "length", "tool_calls"]


def test_usage_counts_the_result_tokens_after_the_prompt():
    # completion_tokens is len(tokens), not the stats' count (which an end-of-generation token may not be in)
    result = _result(n=3, tokens=7, prompt_tokens=11)
    assert shapes.usage(result) == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    empty = Result(tokens=[], text="", finish_reason="length", stats=Stats(prompt_tokens=0), seed=1)
    assert shapes.usage(empty) == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert all(type(v) is int for v in shapes.usage(result).values())


def test_stats_dict_is_the_stats_with_non_finite_numbers_as_null():
    result = _result()
    assert shapes.stats_dict(result) == result.stats.as_dict()  # finite: unchanged
    assert shapes.stats_dict(result)["tau"] == 2.0 and shapes.stats_dict(result)["acceptance_rate"] == 0.75
    odd = _result(prompt_time=math.nan, target_time=math.inf, draft_time=-math.inf, total_time=0.0, target_calls=0)
    want = odd.stats.as_dict()
    got = shapes.stats_dict(odd)
    assert set(got) == set(want)
    assert got["prompt_time_s"] is None and got["target_time_s"] is None and got["draft_time_s"] is None
    assert got["tau"] is None and got["mask_ms_median"] is None  # None stays None
    for key in set(want) - {"prompt_time_s", "target_time_s", "draft_time_s"}:
        assert got[key] == want[key], key
    json.dumps(got, allow_nan=False)  # JSON has no NaN


def test_new_meta_ids_created_and_model():
    before = int(time.time())
    chat, text = shapes.new_meta("m1", True), shapes.new_meta("m2", False)
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{24}", chat["id"]) and re.fullmatch(r"cmpl-[0-9a-f]{24}", text["id"])
    assert (chat["model"], text["model"]) == ("m1", "m2") and set(chat) == {"id", "created", "model"}
    assert before <= chat["created"] <= int(time.time()) and type(chat["created"]) is int
    assert len({shapes.new_meta("m", True)["id"] for _ in range(50)}) == 50


# ---------------------------------------------------------------------------------- completions


def test_chat_completion_object():
    result = _result(text="Hello.", n=2, finish_reason="eos")
    out = shapes.completion_object(True, META, result)
    assert out == {
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "logprobs": None,
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        "timings": shapes.timings(result),
        "speculative": shapes.stats_dict(result),
    }
    lp = {"content": [{"token": "Hello", "logprob": -0.5}], "refusal": None}
    assert shapes.completion_object(True, META, result, logprobs=lp)["choices"][0]["logprobs"] is lp
    # a plan without active tools reads no call out of the text
    quiet = shapes.completion_object(True, META, _result(text=CALL_TEXT), ChatPlan([1]))
    assert quiet["choices"][0]["message"] == {"role": "assistant", "content": CALL_TEXT}
    none = shapes.completion_object(True, META, _result(text=CALL_TEXT), _tool_plan("none"))
    assert none["choices"][0]["message"]["content"] == CALL_TEXT and none["choices"][0]["finish_reason"] == "stop"


def test_text_completion_object():
    result = _result(text="abc", n=3, finish_reason="length")
    out = shapes.completion_object(False, {**META, "id": "cmpl-x"}, result, logprobs={"tokens": ["a"]})
    assert out["object"] == "text_completion" and out["id"] == "cmpl-x"
    assert out["choices"] == [{"index": 0, "text": "abc", "logprobs": {"tokens": ["a"]}, "finish_reason": "length"}]
    assert out["usage"]["completion_tokens"] == 3 and out["speculative"]["method"] == "resispec"
    # a completion never reads tool calls, plan or not
    out = shapes.completion_object(False, META, _result(text=CALL_TEXT), _tool_plan())
    assert out["choices"][0]["text"] == CALL_TEXT and out["choices"][0]["finish_reason"] == "stop"


def test_chat_completion_with_tool_calls():
    plan = _tool_plan()
    out = shapes.completion_object(True, META, _result(text="Adding. " + CALL_TEXT, finish_reason="eos"), plan)
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "Adding."
    (call,) = choice["message"]["tool_calls"]
    assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"]) and call["type"] == "function"
    assert call["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    # no content before the call: null, as OpenAI sends it; cut by max_tokens: "length" stays
    out = shapes.completion_object(True, META, _result(text=CALL_TEXT, finish_reason="length"), plan)
    assert out["choices"][0]["message"]["content"] is None and out["choices"][0]["finish_reason"] == "length"
    # text without a call is a plain reply
    out = shapes.completion_object(True, META, _result(text="No call."), plan)
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "No call."}
    assert out["choices"][0]["finish_reason"] == "stop"


# ---------------------------------------------------------------------------------- chunks


def test_chat_chunk_objects():
    def choice(*args, **kw):
        out = shapes.chunk_object(True, META, *args, **kw)
        assert {k: out[k] for k in ("id", "object", "created", "model")} == {
            "id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000, "model": "m"}
        assert set(out) == {"id", "object", "created", "model", "choices"}
        (c,) = out["choices"]
        return c

    assert choice("", None, role=True) == {"index": 0, "delta": {"role": "assistant", "content": ""},
                                           "logprobs": None, "finish_reason": None}
    assert choice("ab", None)["delta"] == {"content": "ab"}
    assert choice(None, "stop") == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert choice(None, None, role=True)["delta"] == {"role": "assistant"}
    entries = [{"index": 0, "function": {"arguments": "{}"}}]
    assert choice(None, None, tool_calls=entries)["delta"] == {"tool_calls": entries}
    assert choice("x", None, logprobs={"content": []})["logprobs"] == {"content": []}


def test_text_chunk_objects():
    out = shapes.chunk_object(False, META, "ab", None)
    assert out["object"] == "text_completion"
    assert out["choices"] == [{"index": 0, "text": "ab", "logprobs": None, "finish_reason": None}]
    out = shapes.chunk_object(False, META, None, "length", role=True, logprobs={"tokens": []})
    assert out["choices"] == [{"index": 0, "text": "", "logprobs": {"tokens": []}, "finish_reason": "length"}]


def test_tool_call_deltas_head_then_arguments_per_call():
    calls = [ToolCall("call_1", "add", '{"a": 1}'), ToolCall("call_2", "mul", '{"b": 2}')]
    assert shapes.tool_call_deltas(calls) == [
        [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"a": 1}'}}],
        [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "mul", "arguments": ""}}],
        [{"index": 1, "function": {"arguments": '{"b": 2}'}}],
    ]
    assert shapes.tool_call_deltas([]) == []


# ---------------------------------------------------------------------------------- infill


def test_infill_object_in_llama_cpps_shape():
    result = _result(text="x = 1\n", n=4, finish_reason="eos", prompt_tokens=10, prompt_reused=4, prompt_time=0.012,
                     tokens=5, total_time=0.08)
    settings = {"temperature": 0.1}
    out = shapes.infill_object(result, "m", truncated=1, settings=settings)
    timings = out.pop("timings")
    assert out["truncated"] is True
    assert out == {
        "index": 0, "content": "x = 1\n", "tokens": [], "id_slot": 0, "stop": True, "model": "m",
        "tokens_predicted": 4, "tokens_evaluated": 10, "generation_settings": settings, "has_new_line": True,
        "truncated": True, "stop_type": "eos", "stopping_word": "", "tokens_cached": 14,
        "speculative": shapes.stats_dict(result),
    }
    # the prompt's timings count the tokens not reused from the cache; generation uses stats.tokens
    assert timings == pytest.approx({
        "cache_n": 4, "prompt_n": 6, "prompt_ms": 12.0, "prompt_per_token_ms": 2.0, "prompt_per_second": 500.0,
        "predicted_n": 5, "predicted_ms": 80.0, "predicted_per_token_ms": 16.0, "predicted_per_second": 62.5,
        "draft_n": 6, "draft_n_accepted": 3,  # the tree's candidates verified, and accepted (2 + 1 by depth)
    }, rel=1e-12)
    assert type(timings["cache_n"]) is int and type(timings["prompt_n"]) is int


@pytest.mark.parametrize("reason,stop_type", [("eos", "eos"), ("stop", "word"), ("length", "limit"),
                                              ("interrupted", "none")])
def test_infill_stop_types(reason, stop_type):
    out = shapes.infill_object(_result(text="ab", finish_reason=reason), "m", truncated=False, settings={})
    assert out["stop_type"] == stop_type and out["has_new_line"] is False and out["truncated"] is False


def test_infill_timings_of_an_empty_answer_divide_by_nothing():
    result = Result(tokens=[], text="", finish_reason="length", seed=0,
                    stats=Stats(prompt_tokens=3, prompt_reused=5, prompt_time=0.0, tokens=0, total_time=0.0))
    timings = shapes.infill_object(result, "m", truncated=False, settings={})["timings"]
    assert timings == {"cache_n": 5, "prompt_n": 0, "prompt_ms": 0.0, "prompt_per_token_ms": 0.0,
                       "prompt_per_second": 0.0, "predicted_n": 0, "predicted_ms": 0.0, "predicted_per_token_ms": 0.0,
                       "predicted_per_second": 0.0, "draft_n": 0, "draft_n_accepted": 0}


def test_infill_chunk():
    assert shapes.infill_chunk("def ") == {"index": 0, "content": "def ", "tokens": [], "stop": False, "id_slot": -1}


def test_nested_fields_reads_paths_and_leaves_out_missing_ones():
    obj = {"content": "c", "timings": {"prompt_n": 3, "deep": {"x": None}}, "truncated": False, "list": [1]}
    paths = ["content", "timings/prompt_n", "timings/deep/x", "truncated", "nothing/here", "timings/none",
             "content/c", "list/0", "timings"]  # "content/c": no key of a string
    assert shapes.nested_fields(obj, paths) == {"content": "c", "timings/prompt_n": 3, "timings/deep/x": None,
                                                "truncated": False, "timings": obj["timings"]}
    assert shapes.nested_fields(obj, []) == {}
