"""The in-process API (api.py): ``create_chat_completion`` on the tiny pair and its stream chunk
by chunk (and, on a scripted engine, streamed tool calls).  The objects' shapes alone are
test_shapes.py's."""

import pytest

from resispec_gguf.assist import formats
from resispec_gguf.config import ConfigError, DraftParams, SamplingParams
from resispec_gguf.engine import Result, Stats
from resispec_gguf.surfaces.api import create_chat_completion


def test_create_chat_completion_shapes(engine):
    msgs = [{"role": "user", "content": "Hi"}]
    out = create_chat_completion(engine, msgs, temperature=0.0, max_tokens=8)
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["usage"]["completion_tokens"] == out["speculative"]["tokens"]
    chunks = list(create_chat_completion(engine, msgs, temperature=0.0, max_tokens=8, stream=True))
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == out["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_unset_sampling_arguments_take_the_settings_defaults(engine):
    msgs = [{"role": "user", "content": "Hi"}]
    default = SamplingParams(seed=5)
    out = create_chat_completion(engine, msgs, seed=5, max_tokens=6, draft=DraftParams(method="none"))
    ref = engine.generate(engine.chat_tokens(msgs), default.replace(max_tokens=6), DraftParams(method="none"))
    assert out["choices"][0]["message"]["content"] == ref.text
    with pytest.raises(ConfigError) as e:
        create_chat_completion(engine, msgs, top_p=0.0)
    assert e.value.field == "top_p"


# ---------------------------------------------------------------------------------- streaming

MSGS = [{"role": "user", "content": "Hi"}]
ADD = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


def _choice(chunk):
    (choice,) = chunk["choices"]
    return choice


def test_stream_chunk_sequence(engine):
    """The role chunk, content chunks, then the finish chunk with usage and the speculative
    extra; one id, one object type; the text and figures of the non-streamed reply."""
    kw = dict(temperature=0.0, max_tokens=12, draft=DraftParams(method="none"))
    whole = create_chat_completion(engine, MSGS, **kw)
    chunks = list(create_chat_completion(engine, MSGS, **kw, stream=True))
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "resispec-gguf" for c in chunks)
    first, *middle, last = chunks
    assert _choice(first) == {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None}
    assert middle and all(set(_choice(c)["delta"]) == {"content"} and _choice(c)["delta"]["content"]
                          and _choice(c)["finish_reason"] is None for c in middle)
    assert all("usage" not in c and "speculative" not in c for c in chunks[:-1])
    assert _choice(last) == {"index": 0, "delta": {}, "logprobs": None,
                             "finish_reason": whole["choices"][0]["finish_reason"]}
    assert "".join(_choice(c)["delta"]["content"] for c in middle) == whole["choices"][0]["message"]["content"]
    assert last["usage"] == whole["usage"]
    assert last["speculative"]["tokens"] == whole["speculative"]["tokens"] == whole["usage"]["completion_tokens"]


def test_streamed_logprobs_ride_on_their_chunks(engine):
    kw = dict(temperature=0.8, seed=4, max_tokens=12, logprobs=True, top_logprobs=2, draft=DraftParams(method="none"))
    whole = create_chat_completion(engine, MSGS, **kw)["choices"][0]["logprobs"]["content"]
    chunks = list(create_chat_completion(engine, MSGS, **kw, stream=True))
    assert _choice(chunks[0])["logprobs"] is None  # the role chunk has no token
    streamed = []
    for c in chunks[1:]:
        lp = _choice(c)["logprobs"]
        if lp is not None:
            assert lp["refusal"] is None and lp["content"]
            streamed += lp["content"]
    assert streamed == whole
    assert all(len(item["top_logprobs"]) == 2 for item in streamed)


class ScriptedEngine:
    """What ``create_chat_completion`` asks of an engine, replying with scripted pieces."""

    def __init__(self, pieces, finish_reason="eos"):
        self.pieces, self.finish_reason = pieces, finish_reason
        self.last_result = None
        self.constraint = None
        # what chat planning reads (``assist.chatmodel.ChatModel``): the engine's own parts
        self.prompts = self.grammars = self.chat_formats = self

    def compile(self, **kw):  # ``grammars``
        return self.compile_constraint(**kw)

    def check(self, json_schema):  # ``grammars``
        return self.check_constraint(json_schema)

    def tool_format(self):
        return formats.HermesFormat()

    def chat_tokens(self, messages, tools=None):
        return [1, 2, 3]

    def reasoning_format(self):  # a model without thinking markers
        return None

    def check_constraint(self, json_schema):
        return None

    def compile_constraint(self, **kw):
        return ("compiled", kw)

    def stream(self, prompt, sampling=None, draft=None, constraint=None, cancel=None):
        self.constraint = constraint
        try:
            yield from self.pieces
        finally:
            n = len(self.pieces)
            stats = Stats(method="none", prompt_tokens=len(prompt), tokens=n)
            self.last_result = Result(tokens=[7] * n, text="".join(self.pieces), finish_reason=self.finish_reason,
                                      stats=stats, seed=0)

    def generate(self, prompt, sampling=None, draft=None, constraint=None, logprobs=None):
        for _ in self.stream(prompt, sampling, draft, constraint=constraint):
            pass
        return self.last_result


CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


def test_streamed_tool_calls_follow_the_content_before_them():
    text = "Adding. " + CALL_TEXT
    engine = ScriptedEngine([text[:11], text[11:40], text[40:]])  # "Adding. <to", ...
    chunks = list(create_chat_completion(engine, MSGS, tools=[ADD], stream=True))
    assert engine.constraint[0] == "compiled" and "grammar" in engine.constraint[1]
    deltas = [_choice(c)["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "Adding. "}  # the call marker is held back from the first piece on
    (head,), (args,) = deltas[2]["tool_calls"], deltas[3]["tool_calls"]
    assert head["index"] == 0 and head["id"].startswith("call_") and head["type"] == "function"
    assert head["function"] == {"name": "add", "arguments": ""}
    assert args == {"index": 0, "function": {"arguments": '{"a": 1, "b": 2}'}}
    assert deltas[4] == {} and _choice(chunks[4])["finish_reason"] == "tool_calls" and len(chunks) == 5
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    # not streamed: the same call, the content before it
    whole = create_chat_completion(ScriptedEngine(engine.pieces), MSGS, tools=[ADD])["choices"][0]
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] == "Adding."
    assert [c["function"] for c in whole["message"]["tool_calls"]] == [{"name": "add", "arguments": '{"a": 1, "b": 2}'}]


def test_a_held_back_marker_that_is_no_call_comes_out_at_the_end():
    engine = ScriptedEngine(["a <tool", "_call> is how it starts"], finish_reason="length")
    chunks = list(create_chat_completion(engine, MSGS, tools=[ADD], stream=True))
    deltas = [_choice(c)["delta"] for c in chunks]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "a "},
                      {"content": "<tool_call> is how it starts"}, {}]
    assert _choice(chunks[-1])["finish_reason"] == "length"


def test_a_doubled_brace_call_is_a_call_unless_it_repeats_the_call_just_answered():
    """Qwen2.5's template shows calls in doubled braces and its models copy them; right after
    the result, the same call again is text (an agent would run the tool again), streamed or
    not, while the first turn's is a call."""
    doubled = '{{"name": "add", "arguments": {"a": 1, "b": 2}}}'
    result = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"b": 2, "a": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"}]
    for msgs, called in ((MSGS, True), (result, False)):
        pieces = [doubled[:9], doubled[9:30], doubled[30:]]
        whole = create_chat_completion(ScriptedEngine(pieces), msgs, tools=[ADD])["choices"][0]
        chunks = list(create_chat_completion(ScriptedEngine(pieces), msgs, tools=[ADD], stream=True))
        streamed = "".join(_choice(c)["delta"].get("content") or "" for c in chunks)
        calls = [d["function"] for c in chunks for d in _choice(c)["delta"].get("tool_calls") or []]
        if called:
            assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] is None
            assert whole["message"]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
            assert streamed == "" and calls[0]["name"] == "add"
        else:
            assert whole["finish_reason"] == "stop" and not whole["message"].get("tool_calls")
            assert whole["message"]["content"] == doubled == streamed and not calls
        assert _choice(chunks[-1])["finish_reason"] == whole["finish_reason"]
