"""Reasoning models through the server and the Python API, end to end on tiny GGUFs whose
vocabulary holds ``<think>``/``</think>``: ``message.reasoning_content`` and
``delta.reasoning_content`` (the streamed parts reassemble to the non-streamed ones),
``reasoning_format``, ``reasoning_budget`` and ``chat_template_kwargs`` per request and as
the server's settings, bad values as 400s naming the field, and a model without markers
answering exactly as before.  Servers and helpers as in servers.py."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from resispec_gguf import create_chat_completion  # noqa: E402
from resispec_gguf.config import DraftParams, ReasoningParams, SamplingParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from servers import MESSAGES, api_error, serving  # noqa: E402


def _load(pair) -> Engine:
    # no memory of past answers: these tests compare seeded replies made one after another
    return Engine.load(str(pair[0]), str(pair[1]), n_ctx=512, n_threads=1, flash_attn=False, progress=False,
                       memory_size=0)


@pytest.fixture(scope="module")
def open_engine(open_think_pair):
    e = _load(open_think_pair)
    yield e
    e.close()


@pytest.fixture(scope="module")
def open_server(open_engine):
    app = create_app(open_engine, model_name="think", draft_params=DraftParams(),
                     sampling_defaults=SamplingParams(max_tokens=16), reasoning=ReasoningParams(reasoning_budget=5))
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def think_engine(think_pair):
    e = _load(think_pair)
    yield e
    e.close()


def _chat(url, **body):
    return httpx.post(f"{url}/v1/chat/completions", json={"messages": MESSAGES, **body}, timeout=60)


def _streamed(url, **body) -> tuple[list[dict], list[dict]]:
    """``(deltas, chunks)`` of a streamed chat."""
    chunks = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={"messages": MESSAGES, "stream": True, **body},
                      timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]], chunks


def _joined(deltas, key):
    return "".join(d.get(key) or "" for d in deltas)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reasoning_content_streamed_and_not(open_server, open_engine, seed):
    """The server's budget (5) closes the block the template opened; the thinking comes back
    apart from the answer, and the streamed deltas reassemble to exactly the same parts."""
    r = _chat(open_server, seed=seed)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert "reasoning_content" in msg and "</think>" not in msg["content"] and "</think>" not in msg["reasoning_content"]
    deltas, chunks = _streamed(open_server, seed=seed)
    assert _joined(deltas, "reasoning_content") == msg["reasoning_content"]
    assert _joined(deltas, "content") == msg["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == r.json()["choices"][0]["finish_reason"]
    # the same reply with the thinking left in the text
    raw = _chat(open_server, seed=seed, reasoning_format="none").json()["choices"][0]["message"]
    assert "reasoning_content" not in raw and "</think>" in raw["content"]
    assert raw["content"].split("</think>")[0].strip() == msg["reasoning_content"]
    deltas, _ = _streamed(open_server, seed=seed, reasoning_format="none")
    assert _joined(deltas, "reasoning_content") == "" and _joined(deltas, "content") == raw["content"]


def test_a_request_sets_its_own_budget(open_server, open_engine):
    r = _chat(open_server, seed=4, reasoning_budget=2, max_tokens=12, logprobs=True)
    assert r.status_code == 200, r.text
    tokens = [e["token"] for e in r.json()["choices"][0]["logprobs"]["content"]]
    assert "</think>" in tokens[:3]


@pytest.mark.parametrize("body,param", [
    ({"chat_template_kwargs": "enable_thinking=false"}, "chat_template_kwargs"),
    ({"chat_template_kwargs": [{"enable_thinking": False}]}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs.add_generation_prompt"),
    ({"reasoning_budget": -2}, "reasoning_budget"),
    ({"reasoning_budget": 10**9}, "reasoning_budget"),
    ({"reasoning_budget": "5"}, "reasoning_budget"),
    ({"reasoning_format": "deepseek"}, "reasoning_format"),
    ({"reasoning_format": 1}, "reasoning_format"),
])
def test_bad_reasoning_fields_are_400s_naming_the_field(open_server, body, param):
    api_error(_chat(open_server, **body), 400, param)


def test_chat_template_kwargs_reach_the_template(think_engine):
    """Qwen3-style: ``enable_thinking`` false closes an empty block in the prompt, so the
    reply has no thinking (and the prompt is longer by that block)."""
    app = create_app(think_engine, model_name="qwen3ish", sampling_defaults=SamplingParams(max_tokens=8))
    with serving(app) as url:
        on = _chat(url, seed=1).json()
        off = _chat(url, seed=1, chat_template_kwargs={"enable_thinking": False}).json()
        budget0 = _chat(url, seed=1, reasoning_budget=0).json()
    assert off["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"]
    assert budget0["usage"]["prompt_tokens"] == off["usage"]["prompt_tokens"]
    assert "reasoning_content" not in off["choices"][0]["message"]


def test_a_model_without_markers_answers_as_before(tiny_pair):
    """No thinking markers: no reasoning_content anywhere, and the reasoning fields change
    nothing (the same seed gives the same text)."""
    e = _load(tiny_pair)
    try:
        app = create_app(e, model_name="tiny", sampling_defaults=SamplingParams(max_tokens=10))
        with serving(app) as url:
            plain = _chat(url, seed=3).json()
            fields = _chat(url, seed=3, reasoning_budget=1, reasoning_format="auto").json()
            deltas, _ = _streamed(url, seed=3)
    finally:
        e.close()
    assert plain["choices"][0]["message"] == fields["choices"][0]["message"]
    assert "reasoning_content" not in plain["choices"][0]["message"]
    assert all("reasoning_content" not in d for d in deltas)
    assert _joined(deltas, "content") == plain["choices"][0]["message"]["content"]


def test_the_python_api_splits_alike(open_engine):
    kw = dict(seed=7, max_tokens=14, reasoning_budget=4)
    whole = create_chat_completion(open_engine, MESSAGES, **kw)["choices"][0]["message"]
    chunks = list(create_chat_completion(open_engine, MESSAGES, stream=True, **kw))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert whole["reasoning_content"] == _joined(deltas, "reasoning_content")
    assert whole["content"] == _joined(deltas, "content")
    with pytest.raises(Exception, match="chat_template_kwargs must be an object"):
        create_chat_completion(open_engine, MESSAGES, chat_template_kwargs="x")


def test_a_forced_call_opens_right_after_the_thinking(open_engine):
    """tool_choice "required" on a reasoning model, streamed and not (same seed): the same
    thinking, then the call the grammar opens (the tiny model never finishes one in 60
    tokens: the reply is cut, and the partial call is its content, streamed or not)."""
    add = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
    kw = dict(seed=2, max_tokens=60, reasoning_budget=3, tools=[add], tool_choice="required")
    whole = create_chat_completion(open_engine, MESSAGES, **kw)["choices"][0]
    chunks = list(create_chat_completion(open_engine, MESSAGES, stream=True, **kw))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert whole["message"]["reasoning_content"] == _joined(deltas, "reasoning_content")
    assert whole["message"]["content"].startswith("<tool_call>")  # the call opened right after the thinking
    assert _joined(deltas, "content") == whole["message"]["content"]  # a call cut short stays text
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["finish_reason"] == "length"


class _Scripted:
    """The real engine with a scripted reply (the tiny model never finishes a call): its
    template, vocabulary, formats and constraints are the real ones."""

    def __init__(self, real, pieces):
        self.real, self.pieces, self.last_result = real, pieces, None

    def __getattr__(self, name):
        return getattr(self.real, name)

    def stream(self, prompt, sampling=None, draft=None, constraint=None, cancel=None):
        from resispec_gguf.engine import Result, Stats

        try:
            yield from self.pieces
        finally:
            self.last_result = Result(tokens=[7] * len(self.pieces), text="".join(self.pieces), finish_reason="eos",
                                      stats=Stats(method="none", prompt_tokens=len(prompt)), seed=0)

    def generate(self, prompt, sampling=None, draft=None, constraint=None, logprobs=None):
        for _ in self.stream(prompt, sampling, draft, constraint):
            pass
        return self.last_result


REPLY = ["Add", " one.\n</th", "ink>\n\n<tool", '_call>\n{"name": "add", "arguments": {"a"', ": 1}}\n</tool_call>"]


def test_a_finished_call_after_the_thinking_reads_alike_streamed_or_not(open_engine):
    add = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
    engine = _Scripted(open_engine, REPLY)
    whole = create_chat_completion(engine, MESSAGES, tools=[add], reasoning_budget=9)["choices"][0]
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["reasoning_content"] == "Add one."
    (call,) = whole["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("add", {"a": 1})
    chunks = list(create_chat_completion(engine, MESSAGES, tools=[add], reasoning_budget=9, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert _joined(deltas, "reasoning_content") == "Add one." and _joined(deltas, "content") == ""
    calls = [t for d in deltas for t in d.get("tool_calls") or []]
    assert "".join(t["function"]["arguments"] for t in calls) == call["function"]["arguments"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


# --------------------------------------------------------------------------- Qwen3, not thinking, under a typed output or tools


@pytest.fixture(scope="module")
def qwen3_server(tmp_path_factory):
    """The tiny Qwen3-style pair (tool_formats.py: Hermes calls, ``<think>`` markers in the
    vocabulary, ``enable_thinking`` false closing the block in the prompt) behind the server."""
    import tool_formats

    with tool_formats.family_engine(tmp_path_factory, "qwen3") as e:
        app = create_app(e, model_name="qwen3ish", draft_params=DraftParams(method="resispec"),
                         sampling_defaults=SamplingParams(max_tokens=400))
        with serving(app) as url:
            yield url, e


NOT_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def _client(url):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)


def _streamed_reply(client, **kw) -> tuple[str, dict, str | None, str]:
    """``(content, {index: [name, arguments]}, finish_reason, reasoning)`` of a streamed reply."""
    content, calls, finish, thinking = "", {}, None, ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        thinking += getattr(choice.delta, "reasoning_content", None) or ""
        for d in choice.delta.tool_calls or ():
            entry = calls.setdefault(d.index, ["", ""])
            entry[0] += (d.function.name or "") if d.function else ""
            entry[1] += (d.function.arguments or "") if d.function else ""
        finish = choice.finish_reason or finish
    return content, calls, finish, thinking


def test_qwen3_not_thinking_prompt_closes_the_block(qwen3_server):
    """``enable_thinking`` false: the prompt ends with the closed block, so a reply starts past
    it and a constraint applies from its first token."""
    from resispec_gguf.assist.lazy import AFTER
    from resispec_gguf.assist.plan import plan_chat
    import tool_formats

    _, e = qwen3_server
    plan = plan_chat(e, tool_formats.MSGS, tools=tool_formats.TOOLS, tool_choice="required", **NOT_THINKING)
    assert tool_formats.prompt_text(e, plan).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert plan.phase == AFTER and plan.constraint is not None and type(plan.constraint).__name__ != "After"


@pytest.mark.parametrize("choice", ["required", "auto-typed"])
def test_qwen3_not_thinking_calls_through_the_openai_client(qwen3_server, choice):
    """Tools under ``enable_thinking`` false, through the openai client, streamed and not
    (same seed, same reply): calls valid under their schemas (a forced call, or calls-or-JSON
    under a typed output), no reasoning_content."""
    import tool_formats

    url, _ = qwen3_server
    extra = {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
        "additionalProperties": False}}}} if choice == "auto-typed" else {}
    done = 0
    with _client(url) as client:
        for seed in range(4):
            kw = dict(model="qwen3ish", messages=tool_formats.MSGS, tools=tool_formats.TOOLS, seed=seed,
                      tool_choice="required" if choice == "required" else "auto", extra_body=NOT_THINKING, **extra)
            r = client.chat.completions.create(**kw)
            msg, finish = r.choices[0].message, r.choices[0].finish_reason
            assert getattr(msg, "reasoning_content", None) is None
            content, calls, s_finish, thinking = _streamed_reply(client, **kw)
            assert (s_finish, thinking) == (finish, "")
            got = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or ()]
            assert [(n, json.loads(a)) for n, a in (calls[i] for i in sorted(calls))] == got
            assert content == (msg.content or "")
            if finish == "tool_calls":
                done += 1
                assert got and all(tool_formats.valid_call(c.function) for c in msg.tool_calls)
            elif finish == "stop":  # the typed answer instead of a call
                assert choice == "auto-typed" and set(json.loads(msg.content)) == {"city"}
                done += 1
    assert done >= 2


def test_qwen3_not_thinking_typed_output_through_the_openai_client(qwen3_server):
    """A JSON schema under ``enable_thinking`` false (``chat.completions.parse``), streamed
    and not: the content is JSON under the schema from its first character."""
    url, _ = qwen3_server
    schema = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "n": {"type": "integer", "minimum": 0,
                                                                                  "maximum": 9}},
              "required": ["unit", "n"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "reading", "schema": schema, "strict": True}}
    with _client(url) as client:
        for seed in range(3):
            kw = dict(model="qwen3ish", messages=MESSAGES, seed=seed, response_format=rf, extra_body=NOT_THINKING)
            r = client.chat.completions.create(**kw)
            msg = r.choices[0].message
            assert getattr(msg, "reasoning_content", None) is None
            content, _, finish, thinking = _streamed_reply(client, **kw)
            assert (content, finish, thinking) == (msg.content, r.choices[0].finish_reason, "")
            if finish == "stop":
                value = json.loads(msg.content)
                assert set(value) == {"unit", "n"} and value["unit"] in ("c", "f") and 0 <= value["n"] <= 9


def test_control_token_markers_come_back_apart(tmp_path_factory):
    """Markers stored as control tokens (their text is not in a reply unless shown): the
    thinking still comes back apart, streamed and not alike, and ``reasoning_format`` none
    shows the closing marker in the text."""
    import tiny_gguf

    folder = tmp_path_factory.mktemp("control-markers")
    common = dict(base_seed=0, chat_template=tiny_gguf.OPEN_THINK_TEMPLATE, extra_tokens=tiny_gguf.THINK_TOKENS)
    pair = (tiny_gguf.write_tiny_llama(folder / "t.gguf", seed=0, **common),
            tiny_gguf.write_tiny_llama(folder / "d.gguf", seed=1, noise=tiny_gguf.DEFAULT_DRAFT_NOISE, **common))
    e = _load(pair)
    try:
        app = create_app(e, model_name="control", sampling_defaults=SamplingParams(max_tokens=10),
                         reasoning=ReasoningParams(reasoning_budget=3))
        with serving(app) as url:
            for seed in (1, 2):
                msg = _chat(url, seed=seed).json()["choices"][0]["message"]
                assert msg["reasoning_content"] and "</think>" not in msg["content"]
                deltas, _ = _streamed(url, seed=seed)
                assert (_joined(deltas, "reasoning_content"), _joined(deltas, "content")) == \
                    (msg["reasoning_content"], msg["content"])
                raw = _chat(url, seed=seed, reasoning_format="none").json()["choices"][0]["message"]["content"]
                assert "</think>" in raw and raw.split("</think>")[0].strip() == msg["reasoning_content"]
                assert msg["content"] == raw.split("</think>", 1)[1].lstrip()
    finally:
        e.close()
