"""Tool calls, whatever the format: checking OpenAI-style ``tools``, ``tool_choice`` and tool
messages (``ToolRequest``), the call object and its JSON schema (``call_schema``, with local
``$ref``s rebased where the parameters are placed), and streaming a reply while holding back
what may be a call (``ToolStream``).  How each model family writes its calls — markers,
grammars, parsing, rendering — is the ``formats`` package's; ``ToolStream`` asks a format
only ``pending``, ``parse`` and ``calls_start``.

What a chat template is shown: each tool as the client sent it (``Function``, ``as_sent``),
as Hugging Face's ``apply_chat_template`` shows it the request's tools: key order, keys this
server does not use (``strict``) and a function without ``parameters`` left as they are.
Checking, grammars and parsing read the same functions' checked fields (``f["name"]``,
``f["parameters"]``, which a function sent without them reads as the empty object schema).

How a call is constrained (``tool_choice``): ``"required"`` or a named function — the whole
reply is one call (or, with ``parallel_tool_calls``, several) whose ``name`` is one of the
allowed functions and whose ``arguments`` are valid under that function's JSON schema;
``"auto"`` — free text, and once the model opens a call, the call is constrained (a lazily
triggered grammar), or, with a JSON ``response_format`` (a format grammar's ``final``), calls
or that JSON, no free text; ``"none"`` — no constraint, no tools shown.

Pure Python: no model, no engine.  May import ``errors`` and its ``assist`` neighbours;
never the engine, ``llama`` or a surface.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from ..errors import FieldError
from .grammar import laid_out

__all__ = ["ToolError", "ToolRequest", "ToolCall", "ToolStream", "Function", "check_tools", "check_tool_choice",
           "as_sent", "check_tool_messages", "call_schema", "own_guidance", "new_call", "new_call_id", "rebased"]

MAX_TOOLS = 128
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")  # whole names only: fullmatch


class ToolError(FieldError):
    """A malformed ``tools``/``tool_choice``/tool message; ``param`` names the field."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def as_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class Function(dict):
    """One checked function definition.  Its items are the client's function object as sent,
    in the client's order, keys this server does not use included (``strict``, ``x-...``):
    that is what a template sees when a format shows it (``{"type": "function", "function":
    f}``, or ``json.dumps`` of it in a system message).  The checked fields are read by
    subscript, as ever: ``f["name"]``, ``f["parameters"]`` — the empty object schema when the
    client sent none, without adding it to the items (``f.get("parameters")`` stays None
    then).  ``tool``: the client's whole tool object, as sent (``as_sent``)."""

    __slots__ = ("tool",)

    def __init__(self, function: dict, tool: dict):
        super().__init__(function)
        self.tool = tool

    def __missing__(self, key):
        if key == "parameters":
            return {"type": "object", "properties": {}}  # a fresh one: callers may keep it
        raise KeyError(key)

    def __reduce__(self):  # copy/pickle keep the tool (dict's own would drop the slot)
        return Function, (dict(self), self.tool)


def as_sent(tools: list | None) -> list | None:
    """The tool objects a format shows a template (``ToolFormat.prepare_messages``: OpenAI's
    ``{"type": "function", "function": f}`` around checked ``Function``s), each replaced by the
    tool the client sent, as sent (its own top-level keys and their order too, a plain dict
    throughout); tools made some other way stay as they are."""
    if tools is None:
        return None
    return [t["function"].tool if isinstance(t, dict) and isinstance(t.get("function"), Function) else t
            for t in tools]


@dataclass
class ToolRequest:
    """What a request asks of tools: the checked functions, which may be called, and how."""

    functions: list[Function]  # checked: f["name"], f["parameters"] (``Function``)
    choice: str  # "none" | "auto" | "required"
    allowed: list[str]  # names that may be called (a named tool_choice: that one)
    parallel: bool = False

    @property
    def active(self) -> bool:
        return self.choice != "none" and bool(self.functions)


def check_tools(tools, functions=None) -> list[Function]:
    """The function definitions of OpenAI ``tools`` (or legacy ``functions``, each as
    ``{"type": "function", "function": f}``), checked, each kept as the client sent it
    (``Function``): a missing ``parameters`` reads as the empty object schema, an empty
    ``description`` is kept, other keys stay for the template."""
    if tools is None and functions is not None:
        if not isinstance(functions, list):
            raise ToolError("functions must be a list", "functions")
        tools = [{"type": "function", "function": f} for f in functions]
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ToolError("tools must be a list of tool objects", "tools")
    if len(tools) > MAX_TOOLS:
        raise ToolError(f"at most {MAX_TOOLS} tools are supported", "tools")
    out, seen = [], set()
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise ToolError(f"{where} must be an object", where)
        if t.get("type", "function") != "function":
            raise ToolError(f"{where}.type must be 'function', got {str(t.get('type'))[:40]!r}", f"{where}.type")
        f = t.get("function")
        if not isinstance(f, dict):
            raise ToolError(f"{where}.function must be an object", f"{where}.function")
        name = f.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ToolError(f"{where}.function.name must be 1-64 letters, digits, '_', '.' or '-'",
                            f"{where}.function.name")
        if name in seen:
            raise ToolError(f"{where}.function.name {name!r} is used twice", f"{where}.function.name")
        seen.add(name)
        desc = f.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ToolError(f"{where}.function.description must be a string", f"{where}.function.description")
        fn = Function(f, t)
        if not isinstance(fn["parameters"], dict):
            raise ToolError(f"{where}.function.parameters must be a JSON schema object",
                            f"{where}.function.parameters")
        out.append(fn)
    return out


def check_tool_choice(choice, functions: list[dict], parallel=None) -> ToolRequest:
    """``tool_choice`` against the checked ``functions``: ``"none"``, ``"auto"`` (default with
    tools), ``"required"``, ``{"type": "function", "function": {"name": ...}}`` or
    ``{"type": "allowed_tools", ...}`` (``_allowed_tools``)."""
    names = [f["name"] for f in functions]
    if parallel is not None and not isinstance(parallel, bool):
        raise ToolError("parallel_tool_calls must be true or false", "parallel_tool_calls")
    par = False if parallel is None else parallel  # as llama.cpp: one call unless asked for more
    if choice is None:
        return ToolRequest(functions, "auto" if functions else "none", names, par)
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise ToolError(f"tool_choice must be 'none', 'auto', 'required' or a function, got {choice[:40]!r}",
                            "tool_choice")
        if choice != "none" and not functions:
            raise ToolError(f"tool_choice {choice!r} needs tools", "tool_choice")
        return ToolRequest(functions, choice, names, par)
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return _allowed_tools(choice.get("allowed_tools"), functions, par)
    if isinstance(choice, dict):
        f = choice.get("function")
        name = f.get("name") if isinstance(f, dict) else None
        if choice.get("type", "function") != "function" or not isinstance(name, str):
            raise ToolError("tool_choice must name a function: {\"type\": \"function\", \"function\": "
                            "{\"name\": ...}}", "tool_choice")
        if name not in names:
            raise ToolError(f"tool_choice names {name[:64]!r}, which is not in tools", "tool_choice.function.name")
        return ToolRequest(functions, "required", [name], par)
    raise ToolError("tool_choice must be a string or an object", "tool_choice")


def _allowed_tools(spec, functions: list[dict], parallel: bool) -> ToolRequest:
    """OpenAI's ``{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required",
    "tools": [{"type": "function", "function": {"name": ...}}, ...]}}``: only these tools are
    shown to the model and may be called, as with a named function."""
    where = "tool_choice.allowed_tools"
    if not isinstance(spec, dict) or spec.get("mode") not in ("auto", "required") \
            or not isinstance(spec.get("tools"), list) or not spec["tools"]:
        raise ToolError(f"{where} must be {{\"mode\": \"auto\" or \"required\", \"tools\": [...]}}", where)
    offered, names = [f["name"] for f in functions], []
    for i, t in enumerate(spec["tools"]):
        f = t.get("function") if isinstance(t, dict) else None
        name = f.get("name") if isinstance(f, dict) else None
        if name not in offered:
            raise ToolError(f"{where}.tools[{i}] must name a function in tools", f"{where}.tools[{i}]")
        names.append(name)
    return ToolRequest(functions, spec["mode"], names, parallel)


def _arguments_object(args, where: str):
    """A call's arguments as an object, for templates that print them as JSON."""
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            value = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            raise ToolError(f"{where} must be a JSON object (as text)", where) from None
        if isinstance(value, dict):
            return value
    raise ToolError(f"{where} must be a JSON object (as text)", where)


def check_tool_messages(messages: list[dict]) -> list[dict]:
    """Checked copies of messages carrying tool calls and tool results: an assistant's
    ``tool_calls`` (ids, names, arguments as JSON-object text), a ``tool`` message's
    ``tool_call_id`` naming an earlier call.  Arguments are parsed into objects, which is
    what chat templates print."""
    out, ids = [], set()
    for i, m in enumerate(messages):
        m = dict(m)
        calls = m.get("tool_calls")
        if calls is not None:
            where = f"messages[{i}].tool_calls"
            if m.get("role") != "assistant" or not isinstance(calls, list):
                raise ToolError(f"{where} must be a list on an assistant message", where)
            checked = []
            for j, c in enumerate(calls):
                w = f"{where}[{j}]"
                if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
                    raise ToolError(f"{w} must be an object with a function", w)
                name = c["function"].get("name")
                if not isinstance(name, str) or not _NAME.fullmatch(name):
                    raise ToolError(f"{w}.function.name must be 1-64 letters, digits, '_', '.' or '-'",
                                    f"{w}.function.name")
                cid = c.get("id")
                if cid is not None and not isinstance(cid, str):
                    raise ToolError(f"{w}.id must be a string", f"{w}.id")
                if cid:
                    ids.add(cid)
                args = _arguments_object(c["function"].get("arguments", "{}"), f"{w}.function.arguments")
                checked.append({"id": cid or "", "type": "function", "function": {"name": name, "arguments": args}})
            m["tool_calls"] = checked
        if m.get("role") == "tool":
            cid = m.get("tool_call_id")
            where = f"messages[{i}].tool_call_id"
            if cid is not None and (not isinstance(cid, str) or cid not in ids):
                raise ToolError(f"{where} {str(cid)[:64]!r} names no earlier tool call", where)
        out.append(m)
    return out


# schema keywords whose values are data, not schemas: a "$ref" inside them is not a reference
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "example"})


def rebased(schema, pointer: str):
    """``schema`` as it reads when placed at JSON pointer ``pointer`` inside another schema:
    every local reference (``"$ref": "#/$defs/Item"``, ``"#"``) gets ``pointer`` in front, so
    nested models (Pydantic's ``$defs``, ``definitions``, recursive ``"#"``) still resolve."""
    if isinstance(schema, list):
        return [rebased(x, pointer) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[key] = "#" + pointer + value[1:]
        elif key in _DATA_KEYWORDS:
            out[key] = value
        else:
            out[key] = rebased(value, pointer)
    return out


def _call_option(f: dict, at: str, key: str) -> dict:
    """One function's call object, placed at JSON pointer ``at`` of the call schema."""
    return {
        "type": "object",
        "properties": {"name": {"const": f["name"]}, key: rebased(f["parameters"], f"{at}/properties/{key}")},
        "required": ["name", key],
        "additionalProperties": False,
    }


def call_schema(functions: list[dict], allowed: list[str], key: str = "arguments") -> dict:
    """The JSON schema of one call's object: {"name": one of allowed, ``key``: its arguments}
    (``key`` "arguments" as Hermes writes it, "parameters" as Llama 3.x does)."""
    chosen = [f for f in functions if f["name"] in allowed]
    if len(chosen) == 1:
        schema = _call_option(chosen[0], "", key)
    else:
        schema = {"anyOf": [_call_option(f, f"/anyOf/{i}", key) for i, f in enumerate(chosen)]}
    return laid_out(schema, own_guidance(chosen))


def own_guidance(functions: list[dict]):
    """The first of ``functions``' parameters' own top-level "x-guidance" (how a client asks
    for another JSON layout: a call object is laid out as its arguments ask), or None."""
    return next((f["parameters"]["x-guidance"] for f in functions
                 if isinstance(f.get("parameters"), dict) and "x-guidance" in f["parameters"]), None)


def new_call_id() -> str:
    """A fresh call id, as OpenAI's look (clients match tool results to calls by it)."""
    return "call_" + uuid.uuid4().hex[:24]


def new_call(name: str, args, call_id: str | None = None) -> ToolCall:
    """A call with ``call_id`` or a fresh id, arguments as JSON text."""
    return ToolCall(call_id or new_call_id(), name, json.dumps(args, ensure_ascii=False))


class ToolStream:
    """Streams a reply's text while holding back what may be a tool call: text before a
    call marker goes out as content; at the end, ``finish`` returns the remaining content
    and the calls (or the held-back text, when no well-formed call came).  ``fmt`` None:
    a reply that may not call tools, streamed as it comes; ``allowed``: the functions it may
    call (``ToolRequest.allowed``)."""

    def __init__(self, fmt=None, allowed: list[str] | None = None, parallel: bool = True):
        self.fmt = fmt
        self.allowed = allowed
        self.parallel = parallel  # ``ToolRequest.parallel``: whether several calls are kept
        self.text = ""
        self.sent = 0

    def push(self, piece: str) -> str:
        """The text that may go out now (possibly empty)."""
        self.text += piece
        safe = len(self.text) if self.fmt is None else self.fmt.pending(self.text, self.allowed, self.sent)
        if safe <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:safe], safe
        return out

    def finish(self, text: str):
        """``(content_left, calls)`` for the whole reply ``text``: ``calls`` None when the
        reply made no call.  Content before the calls that is still held back (an opening
        that came to nothing, before JSON calls) goes out now, so that the streamed content
        reads as the unstreamed one."""
        parsed = self.fmt.parse(text, self.allowed, self.parallel) if self.fmt is not None else None
        if parsed is None:
            return text[self.sent:], None
        start = self.fmt.calls_start(text, self.allowed)
        return text[self.sent:start].rstrip(), parsed[1]
