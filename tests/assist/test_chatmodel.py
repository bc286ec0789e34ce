"""The narrow protocol chat planning is handed (assist/chatmodel.py): a request planned
through an object that has only ``ChatModel``'s members (nothing of an engine), the engine's
own parts giving the engine's plan, and ``ChatFormats`` finding a model's formats once."""

from __future__ import annotations

import pytest

from resispec_gguf.assist import formats, lazy
from resispec_gguf.assist.chatmodel import ChatFormats, ChatModel
from resispec_gguf.assist.plan import chat_text, check_chat_options, plan_chat
from resispec_gguf.assist.reasoning import ReasoningFormat

MSGS = [{"role": "user", "content": "What is 2+3?"}]
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
THINK, END_THINK = 90, 91


class _Only:
    """An object with exactly ``ChatModel``'s members: any other attribute is an error."""

    __slots__ = ("prompts", "grammars", "chat_formats")

    def __init__(self, prompts, grammars, chat_formats):
        self.prompts, self.grammars, self.chat_formats = prompts, grammars, chat_formats


class _Prompts:
    __slots__ = ("calls",)

    def __init__(self):
        self.calls = []

    def render_chat(self, messages, add_generation_prompt=True, tools=None, template_kwargs=None):
        self.calls.append(("render", tools, template_kwargs))
        return "|".join(m["content"] or "" for m in messages)

    def chat_tokens(self, messages, add_generation_prompt=True, tools=None, template_kwargs=None):
        self.calls.append(("tokens", tools, template_kwargs))
        return [1, 2, THINK] if template_kwargs is None else [1, 2, THINK, END_THINK]


class _Grammars:
    __slots__ = ("checked", "compiled")

    def __init__(self):
        self.checked, self.compiled = [], []

    def check(self, json_schema):
        self.checked.append(json_schema)

    def compile(self, *, json_schema=None, grammar=None):
        self.compiled.append((json_schema, grammar))
        return ("compiled", len(self.compiled))


class _Formats:
    __slots__ = ("n_vocab", "thinks")

    def __init__(self, thinks=None):
        self.n_vocab, self.thinks = 100, thinks

    def tool_format(self):
        return formats.FORMATS["hermes"](native=True)

    def reasoning_format(self):
        return self.thinks

    def token_piece(self, token):
        return {THINK: b"<think>", END_THINK: b"</think>"}.get(int(token), b"x")


def test_a_model_with_only_the_protocols_members_plans_a_chat():
    model = _Only(_Prompts(), _Grammars(), _Formats())
    assert isinstance(model, ChatModel)
    plan = plan_chat(model, MSGS, tools=[ADD], tool_choice="required")
    assert plan.prompt == [1, 2, THINK] and plan.tools_active
    assert isinstance(plan.format, formats.HermesFormat)
    assert model.grammars.checked == [ADD["function"]["parameters"]]  # each tool's parameters first
    assert plan.constraint == ("compiled", 1) and model.grammars.compiled[0][1] is not None
    assert model.prompts.calls[-1][0] == "tokens" and model.prompts.calls[-1][1][0]["function"]["name"] == "add"
    # a response format alone compiles its schema; free text compiles nothing
    assert plan_chat(model, MSGS, response_format={"type": "json_object"}).constraint == ("compiled", 2)
    assert model.grammars.compiled[-1] == (True, None)
    assert plan_chat(model, MSGS).constraint is None and plan_chat(model, MSGS).format is None
    assert chat_text(model, MSGS, check_chat_options()) == MSGS[0]["content"]


def test_the_thinking_markers_token_pieces_and_vocabulary_come_from_chat_formats():
    thinks = ReasoningFormat("<think>", "</think>", THINK, END_THINK)
    model = _Only(_Prompts(), _Grammars(), _Formats(thinks))
    plan = plan_chat(model, MSGS, reasoning_budget=3)
    assert plan.phase == lazy.FREE and plan.thinking is thinks and plan.n_vocab == 100 and plan.budget == 3
    assert isinstance(plan.constraint, lazy.After)  # the budget bounds the block the prompt opened
    closed = plan_chat(model, MSGS, chat_template_kwargs={"enable_thinking": False})
    assert closed.phase == lazy.AFTER and closed.constraint is None


def test_a_model_missing_a_member_is_no_chat_model():
    class _Two:
        __slots__ = ("prompts", "grammars")

    assert not isinstance(_Two(), ChatModel)
    with pytest.raises(AttributeError):
        plan_chat(_Two(), MSGS)


def test_the_engines_parts_plan_as_the_engine_does(engine):
    parts = _Only(engine.prompts, engine.grammars, engine.chat_formats)
    for kw in ({}, {"tools": [ADD]}, {"response_format": {"type": "json_object"}}):
        ours, its = plan_chat(parts, MSGS, **kw), plan_chat(engine, MSGS, **kw)
        assert ours.prompt == its.prompt and ours.constraint is its.constraint and ours.format is its.format


def test_chat_formats_find_the_formats_once(engine):
    found = ChatFormats(engine.target, engine.chat_template, engine.grammars.tokenizer)
    fmt = found.tool_format()
    assert isinstance(fmt, formats.GenericFormat) and found.tool_format() is fmt
    assert found.reasoning_format() is None and found.reasoning_format() is None
    assert found.n_vocab == engine.n_vocab and found.token_piece(5) == engine.token_piece(5)
    assert engine.tool_format() is engine.chat_formats.tool_format()
    shown = engine.target.shown_specials
    try:  # a format named at load overrides the template's family
        named = ChatFormats(engine.target, engine.chat_template, engine.grammars.tokenizer, "hermes")
        assert isinstance(named.tool_format(), formats.HermesFormat)
    finally:
        engine.target.shown_specials = shown
