"""Chat planning: a chat request's messages, ``tools``/``tool_choice``/``parallel_tool_calls``,
``response_format`` and reasoning fields made into what the engine runs (``plan_chat``: the
prompt's tokens and a constraint), and how to read the reply's reasoning and tool calls back
out of it (``ChatPlan``).  Tools
under "auto" together with a JSON ``response_format`` make a reply that is calls or the final
answer in that JSON (``CallsOrAnswer`` reads which); under "auto" with a text answer, right
after tool results, a reply that only makes the answered calls again is text (``FreshCalls``).

``check_chat_options`` checks the option fields without a model, so that a server can refuse
a bad request before tokenizing anything; ``plan_chat`` takes its result.  The model comes
in as a ``chatmodel.ChatModel`` (the engine is one): its ``prompts``, ``grammars`` and
``chat_formats``, assist's own objects, are all that planning uses; it never calls a method
of the object it is handed.  What a tool format is, is ``formats``', and what a thinking
block is, ``reasoning``'.

May import ``errors`` and its ``assist`` neighbours; never the engine, ``llama`` or a surface.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import FieldError
from . import reasoning as _reasoning
from . import tools as _tools
from .chatmodel import ChatModel
from .formats import ToolFormat
from .chat_format import check_messages
from .grammar import GrammarError

__all__ = ["RequestError", "ChatOptions", "ChatPlan", "CallsOrAnswer", "FreshCalls", "answered_calls",
           "response_schema", "check_chat_options", "plan_chat", "chat_text"]


class RequestError(FieldError):
    """A chat request's ``response_format`` or tool options that cannot be honoured."""


@dataclass
class ChatOptions:
    """A chat request's checked tool and format fields: what tools may be called, the JSON
    schema the reply must follow (None: text; True: any JSON object), and what becomes of a
    reasoning model's thinking (``reasoning.ReasoningRequest``)."""

    tools: _tools.ToolRequest
    schema: object = None
    reasoning: _reasoning.ReasoningRequest = _reasoning.ReasoningRequest()

    @property
    def final(self):
        """The schema a reply may follow instead of calling (tools under "auto" together with a
        JSON ``response_format``, as agent frameworks send for a typed output); None when the
        reply is calls only ("required", a named function) or no tools may be called."""
        return self.schema if self.tools.active and self.tools.choice == "auto" else None

    @property
    def schema_param(self) -> str:
        """The request field the reply's schema comes from."""
        return "response_format.json_schema.schema" if isinstance(self.schema, dict) else "response_format"

    @property
    def constraint_param(self) -> str:
        """The request field a constraint comes from (named by a 400 when it cannot compile)."""
        return "tools" if self.tools.active else self.schema_param


@dataclass
class ChatPlan:
    """A request made ready for the engine: its prompt, its constraint (None: free text),
    when tools may be called, how to read calls back out of the reply, and, on a reasoning
    model whose thinking is returned apart, its markers and where the reply starts
    (``reasoning.ReasoningFormat.phase``)."""

    prompt: list[int]
    constraint: object = None
    tools: _tools.ToolRequest | None = None
    format: ToolFormat | None = None
    final: object = None  # ``ChatOptions.final``: the reply is calls or JSON under it
    # under ``final``: whether a call object alone may stand in the answer's place (not right
    # after a tool result, where small models repeat the call instead of answering)
    bare_calls: bool = True
    reasoning: _reasoning.ReasoningFormat | None = None
    phase: str = "after"
    # the model's thinking markers (returned apart or not), the request's budget and the
    # vocabulary's size: what ``constrain`` wraps another constraint with
    thinking: _reasoning.ReasoningFormat | None = None
    budget: int = -1
    n_vocab: int = 0
    # under "auto" with a text answer, right after tool results: the calls they answer, as
    # ``(name, arguments)``; a reply that only makes them again is text (``FreshCalls``)
    answered: tuple = ()

    @property
    def tools_active(self) -> bool:
        return self.tools is not None and self.tools.active

    def split(self, text: str) -> tuple[str | None, str]:
        """``(reasoning, content)`` of a finished reply (``reasoning.split_reasoning``):
        reasoning None when the reply had no thinking block or it is not returned apart."""
        return _reasoning.split_reasoning(self.reasoning, self.phase, text)

    def constrain(self, inner):
        """``inner`` (a constraint, or None) as this request runs it: on a reasoning model,
        after the thinking, with the request's budget (``reasoning.constrain``)."""
        if self.thinking is None:
            return inner
        return _reasoning.constrain(self.thinking, inner, self.phase, self.budget, self.n_vocab)

    def reasoning_stream(self) -> _reasoning.ReasoningStream | None:
        """The streamed form of ``split``; None when the text is not split."""
        return None if self.reasoning is None else _reasoning.ReasoningStream(self.reasoning, self.phase)

    def _reader(self):
        """What reads calls out of the reply: the format, or, when the reply may instead be
        the final JSON, ``CallsOrAnswer`` (which never reads that JSON as a call)."""
        if self.final is not None:
            return CallsOrAnswer(self.format, self.bare_calls)
        return FreshCalls(self.format, self.answered) if self.answered else self.format

    def tool_calls(self, text: str):
        """``(content, calls)`` read from a finished reply, or None when it made no call."""
        if not self.tools_active:
            return None
        return self._reader().parse(text, self.tools.allowed, self.tools.parallel)

    def tool_stream(self) -> _tools.ToolStream:
        """A ``tools.ToolStream`` for the streamed reply (holding back calls, if any)."""
        if not self.tools_active:
            return _tools.ToolStream()
        return _tools.ToolStream(self._reader(), self.tools.allowed, self.tools.parallel)


class CallsOrAnswer:
    """How a reply is read when it is either tool calls or the final answer as JSON (tools
    together with a ``response_format``).  The grammar lets the first token choose: a reply
    that opens with the call marker is calls; in a family whose models also write a call as a
    JSON object alone (``ToolFormat.answer_calls``: Hermes/Qwen2.5), a reply that is exactly
    one such object naming an offered function is a call too; any other is the answer, and
    stays content even when it has a marker in a string.  Streamed, only a reply that is (or
    may still become) a call opening is held back, so the answer's JSON streams as text once
    its first key rules a call out.  Stands in for the format in ``ToolStream``."""

    def __init__(self, fmt: ToolFormat, bare: bool = True):
        self.fmt, self.open = fmt, fmt.open
        self.bare = bare and bool(fmt.answer_calls())

    def _may_call(self, text: str, allowed) -> bool:
        """Whether ``text`` opens with the call marker or a call object, or is too short yet
        to say."""
        head = text.lstrip()
        if self.open.startswith(head[:len(self.open)]):
            return True
        return self.bare and head.startswith("{") and self._bare_call(text, allowed, partial=True)

    def _bare_call(self, text: str, allowed, partial: bool) -> bool:
        """Whether ``text`` is (``partial``: may still become) one call object from its start."""
        head = text.lstrip()
        if partial:
            return self.fmt.unmarked_pending(head, allowed, 0) == 0
        found = self.fmt.unmarked_calls(head, allowed)
        return found is not None and found[0] == 0 and len(found[1]) == 1

    def parse(self, text: str, allowed=None, parallel: bool = True):
        """The format's ``parse`` for a reply that opened a call; None for the answer."""
        head = text.lstrip()
        if head.startswith(self.open):
            return self.fmt.parse(text, allowed, parallel)
        if self.bare and head.startswith("{") and self._bare_call(text, allowed, partial=False):
            return "", self.fmt.unmarked_calls(head, allowed)[1]
        return None

    def calls_start(self, text: str, allowed=None) -> int:
        """Where the calls begin in a reply ``parse`` read calls from: at its marker, or at
        the call object."""
        if not text.lstrip().startswith(self.open):
            return len(text) - len(text.lstrip())
        return self.fmt.calls_start(text, allowed)

    def pending(self, text: str, allowed=None, start: int = 0) -> int:
        """All of ``text`` is held while it may be a call; nothing once it cannot (for good:
        what follows the first characters never changes what the reply opened with)."""
        return 0 if self._may_call(text, allowed) else len(text)


class FreshCalls:
    """How a reply is read right after tool results, under "auto" with a text answer: as the
    format reads it, except that a reply whose calls all repeat the calls just answered (the
    same function with equal arguments, a member that is null counting as one left out, as
    clients write optional fields) is text.  Small models (the default Qwen2.5-Coder
    1.5B among them) often answer a tool result by writing the same call again; read as a
    call, an agent framework runs the tool again, side effects and all, and the model repeats
    it again, until the framework's turn limit.  A call of another function, or with other
    arguments, is a call.  The grammar is the format's: this changes only how the finished
    reply is read.  Stands in for the format in ``ToolStream``."""

    def __init__(self, fmt: ToolFormat, answered: tuple):
        self.fmt, self.answered = fmt, [(name, _without_nulls(args)) for name, args in answered]

    def _repeat(self, call) -> bool:
        try:
            return (call.name, _without_nulls(json.loads(call.arguments))) in self.answered
        except json.JSONDecodeError:
            return False

    def parse(self, text: str, allowed=None, parallel: bool = True):
        """The format's ``parse``; None (text) when every call is a repeat."""
        parsed = self.fmt.parse(text, allowed, parallel)
        return None if parsed is not None and all(self._repeat(c) for c in parsed[1]) else parsed

    def calls_start(self, text: str, allowed=None) -> int:
        return self.fmt.calls_start(text, allowed)

    def pending(self, text: str, allowed=None, start: int = 0) -> int:
        return self.fmt.pending(text, allowed, start)


def _without_nulls(value):
    """``value`` with every object member whose value is null left out, at any depth."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def answered_calls(messages) -> tuple:
    """``(name, arguments)`` of the calls whose results end ``messages`` (checked tool
    messages: ``tools.check_tool_messages``), the assistant turn's that the trailing tool
    messages answer; empty when the conversation does not end with tool results."""
    i = len(messages)
    while i > 0 and messages[i - 1].get("role") == "tool":
        i -= 1
    if i == len(messages) or i == 0 or not messages[i - 1].get("tool_calls"):
        return ()
    return tuple((c["function"]["name"], c["function"]["arguments"]) for c in messages[i - 1]["tool_calls"])


def response_schema(response_format):
    """The JSON schema a ``response_format`` asks for: None (text), True (any JSON object,
    ``json_object``) or the schema of ``json_schema``; ``RequestError`` naming the field."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise RequestError("response_format must be an object", "response_format")
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return True
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise RequestError("response_format.json_schema must be an object with a schema",
                               "response_format.json_schema")
        schema = spec.get("schema", True)
        if not isinstance(schema, (dict, bool)):
            raise RequestError("response_format.json_schema.schema must be a JSON schema object",
                               "response_format.json_schema.schema")
        return True if schema is True or schema == {} else schema
    raise RequestError(f"response_format.type must be text, json_object or json_schema, got {str(kind)[:40]!r}",
                       "response_format.type")


def check_chat_options(tools=None, tool_choice=None, parallel_tool_calls=None, response_format=None,
                       functions=None, function_call=None, *, reasoning=None, reasoning_format=None,
                       reasoning_budget=None, chat_template_kwargs=None) -> ChatOptions:
    """A chat request's tool, format and reasoning fields, checked without a model
    (``RequestError``/``ToolError``/``FieldError`` naming the field); ``reasoning``: the
    ``config.ReasoningParams`` the request's own reasoning fields override."""
    if tool_choice is None and function_call is not None:  # the legacy spelling
        tool_choice = ({"type": "function", "function": function_call} if isinstance(function_call, dict)
                       else function_call)
    functions_ = _tools.check_tools(tools, functions)
    req = _tools.check_tool_choice(tool_choice, functions_, parallel_tool_calls)
    schema = response_schema(response_format)
    thinking = _reasoning.check_reasoning(reasoning, reasoning_format=reasoning_format,
                                          reasoning_budget=reasoning_budget, chat_template_kwargs=chat_template_kwargs)
    return ChatOptions(req, schema, thinking)


def plan_chat(model: ChatModel, messages, *, tools=None, tool_choice=None, parallel_tool_calls=None,
              response_format=None, functions=None, function_call=None, checked: ChatOptions | None = None,
              constraint=None, **reasoning) -> ChatPlan:
    """The prompt and constraint for a chat request on ``model`` (``chatmodel.ChatModel``, such
    as the engine).  ``checked``: ``check_chat_options``' result when the caller has it
    already; ``messages`` may come
    checked (``chat_format.Messages``): they are checked once per request.  ``constraint``: one
    the caller compiled (a command line's ``--json-schema`` or ``--grammar``), in place of the
    request's tools and ``response_format``.  ``reasoning``: ``check_chat_options``' reasoning
    keywords.  On a reasoning model the constraint starts when the thinking ends
    (``reasoning.constrain``)."""
    options = checked or check_chat_options(tools, tool_choice, parallel_tool_calls, response_format,
                                            functions, function_call, **reasoning)
    req = options.tools
    msgs = checked_msgs = check_messages(messages)
    fmt = _format(model, msgs, req)
    # a call object alone answers the user, not a tool result: after one, JSON is the answer
    bare = not msgs or msgs[-1]["role"] != "tool"
    if constraint is None:  # first: a constraint that cannot work names its field
        constraint = _constraint(model.grammars, options, fmt, bare)
    msgs, kw = _rendering(fmt, msgs, options)
    prompt = model.prompts.chat_tokens(msgs, **kw)
    plan = ChatPlan(prompt, constraint, req if req.active else None, fmt, options.final, bare_calls=bare)
    if req.active and req.choice == "auto" and not bare:
        plan.answered = answered_calls(_tools.check_tool_messages(checked_msgs))
    marks = model.chat_formats
    thinks = marks.reasoning_format()
    if thinks is not None:
        plan.phase = thinks.phase(prompt, marks.token_piece)
        plan.thinking, plan.budget, plan.n_vocab = thinks, options.reasoning.budget, marks.n_vocab
        plan.constraint = plan.constrain(constraint)
        plan.reasoning = thinks if options.reasoning.split else None
    return plan


def chat_text(model: ChatModel, messages, options: ChatOptions) -> str:
    """The prompt ``plan_chat`` would tokenize for these (checked) ``options``, as text: the
    chat template applied as it is for generation (tools, earlier calls and template
    variables included)."""
    msgs = check_messages(messages)
    msgs, kw = _rendering(_format(model, msgs, options.tools), msgs, options)
    return model.prompts.render_chat(msgs, **kw)


def _format(model: ChatModel, msgs, req):
    """The model's tool format when tools may be called or the messages hold calls or results."""
    calls = any(m.get("tool_calls") or m["role"] == "tool" for m in msgs)
    return model.chat_formats.tool_format() if req.active or calls else None


def _rendering(fmt, msgs, options: ChatOptions) -> tuple[list, dict]:
    """The messages and the keywords (``tools``, ``template_kwargs``, only where set) the
    template is applied with: the format (if any) renders tools, earlier calls and their
    results; the tools it shows the template are the client's tool objects as sent
    (``tools.as_sent``), as Hugging Face's ``apply_chat_template`` renders a request's tools."""
    kw = {}
    if fmt is not None:
        msgs, shown = fmt.prepare_messages(msgs, options.tools)
        kw["tools"] = _tools.as_sent(shown)
    variables = options.reasoning.template_variables()
    if variables:
        kw["template_kwargs"] = variables
    return msgs, kw


def _constraint(grammars, options: ChatOptions, fmt, bare: bool = True):
    """The request's constraint compiled by ``grammars`` (``chatmodel.ChatConstraints``; None:
    free text); a ``GrammarError`` names the field."""
    req = options.tools
    if req.active:
        for i, f in enumerate(req.functions):  # each on its own: a call starts later in the reply
            if f["name"] in req.allowed:
                try:
                    grammars.check(f["parameters"])
                except GrammarError as e:
                    raise e.naming(f"tools[{i}].function.parameters") from None
        if options.final is not None:  # the answer's schema on its own first, named as when alone
            _compile_schema(options, grammars.check)
        try:
            return grammars.compile(grammar=fmt.grammar(req, options.final, bare))
        except GrammarError as e:
            raise e.naming("tools") from None
    if options.schema is not None:
        return _compile_schema(options, lambda schema: grammars.compile(json_schema=schema))
    return None


def _compile_schema(options: ChatOptions, compile_):
    """``compile_(options.schema)``, a ``GrammarError`` naming the response_format field."""
    try:
        return compile_(options.schema)
    except GrammarError as e:
        raise e.naming(options.schema_param) from None
