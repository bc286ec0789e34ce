"""Tool calls: checking OpenAI-style ``tools`` and tool messages, the grammar that constrains a
call, reading calls back out of a reply and holding back streamed text that may be one.  All
knowledge of tool-call formats lives here.

Formats (one small class each):

* ``hermes`` — Qwen2.5 / Hermes / most ChatML models: the model writes
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (several for parallel
  calls).  Used when the model's chat template mentions ``<tool_call>``; the template itself
  renders the tool list, earlier calls and tool results.  A reply with no ``<tool_call>``
  that ends in calls written as JSON alone (a fenced json block or a bare object naming an
  offered function: ``json_calls``) calls too, as Qwen2.5-Coder writes under "auto".
* ``generic`` — a template with no tool support: the same ``<tool_call>`` blocks, described
  to the model in a system message this module writes; earlier calls and tool results are
  rendered as message text.

How a call is constrained (``tool_choice``): ``"required"`` or a named function — the whole
reply is one call (or, with ``parallel_tool_calls``, several) whose ``name`` is one of the
allowed functions and whose ``arguments`` are valid under that function's JSON schema;
``"auto"`` — free text, and once the model opens a call, the call is constrained (a lazily
triggered grammar), or, with a JSON ``response_format`` (``grammar``'s ``final``), calls or
that JSON, no free text; ``"none"`` — no constraint, no tools shown.

Pure Python: no model, no engine (``detect_format`` is handed the vocabulary).  The grammars
are llguidance Lark text (``grammar.py`` compiles them).  May import ``errors`` and its
``assist`` neighbours; never the engine, ``llama`` or a surface.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from ..errors import FieldError
from .chat_format import Messages, MessageError, utf8_size
from .grammar import JSON_DEFAULTS

__all__ = ["ToolError", "ToolRequest", "ToolCall", "ToolStream", "check_tools", "check_tool_choice",
           "choose_format", "detect_format", "prepare_messages", "HermesFormat", "GenericFormat"]

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


@dataclass
class ToolRequest:
    """What a request asks of tools: the checked functions, which may be called, and how."""

    functions: list[dict]  # [{"name", "description"?, "parameters"}]
    choice: str  # "none" | "auto" | "required"
    allowed: list[str]  # names that may be called (a named tool_choice: that one)
    parallel: bool = False

    @property
    def active(self) -> bool:
        return self.choice != "none" and bool(self.functions)


def check_tools(tools, functions=None) -> list[dict]:
    """The function definitions of OpenAI ``tools`` (or legacy ``functions``), checked."""
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
        params = f.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolError(f"{where}.function.parameters must be a JSON schema object",
                            f"{where}.function.parameters")
        fn = {"name": name, "parameters": params}
        if desc:
            fn["description"] = desc
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


def _call_option(f: dict, at: str) -> dict:
    """One function's call object, placed at JSON pointer ``at`` of the call schema."""
    return {
        "type": "object",
        "properties": {"name": {"const": f["name"]}, "arguments": rebased(f["parameters"], at + "/properties/arguments")},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _call_schema(functions: list[dict], allowed: list[str]) -> dict:
    """The JSON schema of one call's object: {"name": one of allowed, "arguments": its schema}."""
    chosen = [f for f in functions if f["name"] in allowed]
    if len(chosen) == 1:
        schema = _call_option(chosen[0], "")
    else:
        schema = {"anyOf": [_call_option(f, f"/anyOf/{i}") for i, f in enumerate(chosen)]}
    return {"x-guidance": JSON_DEFAULTS, **schema}


def _new_call(name: str, args) -> ToolCall:
    """A call with a fresh id (clients match tool results to calls by it), arguments as JSON text."""
    return ToolCall("call_" + uuid.uuid4().hex[:24], name, json.dumps(args, ensure_ascii=False))


# A call written as JSON alone, as Qwen2.5-Coder writes its calls under tool_choice "auto":
# ```json\n{"name": ..., "arguments": {...}}\n``` or a bare {"name": ...} object.  Read only
# where nothing but calls and whitespace follows (an example object amid prose stays prose);
# with ``partial`` (streaming) an unfinished run is "maybe", and each "no" is final: no more
# text makes a call of it, so what streamed out as text is never read back as a call.

_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _head(text: str, i: int, allowed) -> str:
    """Whether the object at ``text[i]`` opens ``{"name": "<an offered function>"``: "call",
    "maybe" (text ends before saying) or "no".  Read from the text, not the decoded value,
    so that streaming can tell as early as the text can."""
    for token in ("{", '"name"', ":", '"'):
        i = _skip_ws(text, i)
        part = text[i:i + len(token)]
        if not token.startswith(part):
            return "no"
        if len(part) < len(token):
            return "maybe"
        i += len(token)
    end = text.find('"', i)
    if end < 0:
        return "maybe" if any(a.startswith(text[i:]) for a in allowed) else "no"
    return "call" if text[i:end] in allowed else "no"


def _as_call(obj, allowed) -> ToolCall | None:
    """A decoded ``{"name": ..., "arguments": {...}}`` (arguments maybe as JSON text) as a call."""
    if not isinstance(obj, dict) or list(obj) != ["name", "arguments"] or obj["name"] not in allowed:
        return None
    args = obj["arguments"]
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return _new_call(obj["name"], args) if isinstance(args, dict) else None


def _json_object(text: str, i: int, allowed, partial: bool):
    """``(end, state, call)`` for the object at ``text[i]``."""
    head = _head(text, i, allowed)
    if head == "no":
        return i, "no", None
    try:
        obj, end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError:  # unfinished, or malformed: only the end of the reply tells
        return i, "maybe" if partial else "no", None
    call = _as_call(obj, allowed) if head == "call" else None
    return end, "call" if call else "no", call


def _fence_open(text: str, i: int, partial: bool):
    """``(after, state)`` for the language line of a fence whose ``` ends at ``i``: json or none."""
    end = text.find("\n", i)
    lang = (text[i:] if end < 0 else text[i:end]).strip().lower()
    if end < 0:
        return i, "maybe" if partial and "json".startswith(lang) else "no"
    return end + 1, "call" if lang in ("", "json") else "no"


def _json_run(text: str, i: int, allowed, partial: bool):
    """``(state, calls)`` for ``text[i:]``: "call" when it is JSON calls (fenced or bare) and
    whitespace only, "maybe" (``partial``) when it may still become so, else "no"."""
    calls = []
    while True:
        i = _skip_ws(text, i)
        rest = text[i:i + 3]
        if i == len(text):
            return ("call" if calls else "maybe" if partial else "no"), calls
        if rest != "```" and rest == text[i:] and "```".startswith(rest):
            return ("maybe" if partial else "no"), calls
        fenced = rest == "```"
        if fenced:
            i, state = _fence_open(text, i + 3, partial)
            if state != "call":
                return state, calls
            i = _skip_ws(text, i)
        i, state, call = _json_object(text, i, allowed, partial)
        if state != "call":
            return state, calls
        calls.append(call)
        if fenced:
            i = _skip_ws(text, i)
            close = text[i:i + 3]
            if close != "```":
                return ("maybe" if partial and close == text[i:] and "```".startswith(close) else "no"), calls
            i += 3


def _json_starts(text: str, start: int = 0):
    """Where a JSON call may begin: a fence or an object at the start of the reply or of a line."""
    i = start
    while i < len(text):
        if (i == 0 or text[i - 1] == "\n") and text[i] in "`{":
            yield i
        nl = text.find("\n", i)
        if nl < 0:
            return
        i = nl + 1


def json_calls(text: str, allowed) -> tuple[int, list[ToolCall]] | None:
    """``(start, calls)``: the JSON calls that end the reply, and where they begin; None when
    the reply does not end so.  Only functions in ``allowed`` (none: no call) count."""
    if not allowed:
        return None
    for i in _json_starts(text):
        state, calls = _json_run(text, i, allowed, False)
        if state == "call":
            return i, calls
    return None


def json_pending(text: str, allowed, start: int = 0) -> int:
    """Where streamed text may be the beginning of JSON calls (from ``start`` on); ``len(text)``
    when nowhere."""
    if allowed:
        for i in _json_starts(text, start):
            if _json_run(text, i, allowed, True)[0] != "no":
                return i
    return len(text)


class HermesFormat:
    """``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` blocks."""

    name = "hermes"
    open = "<tool_call>"
    close = "</tool_call>"
    bare_calls = True  # a call written as JSON alone (fenced or bare) is read too: ``json_calls``

    def __init__(self, special_open: bool = False, special_close: bool = False):
        # whether the markers are single special tokens of the vocabulary (the grammar then
        # names the token, <tool_call>, rather than its text)
        self.special_open, self.special_close = special_open, special_close

    def _marker(self, text: str, special: bool) -> str:
        return text if special else json.dumps(text)

    def grammar(self, req: ToolRequest, final=None) -> str:
        """Lark for a reply under ``req`` (llguidance's syntax, with an inline %json).  ``final``:
        under "auto", a JSON schema (True: any object) the reply may follow instead of calling
        (tools with a typed output): the first token chooses, and free text is not allowed."""
        schema = json.dumps(_call_schema(req.functions, req.allowed), ensure_ascii=False)  # its size as sent
        op, cl = self._marker(self.open, self.special_open), self._marker(self.close, self.special_close)
        calls = 'call ("\\n" call)*' if req.parallel else "call"
        if req.choice == "required":
            start = [f"start: {calls}"]
        elif final is not None:  # a call marker or the answer's JSON, from the first token
            answer = {"x-guidance": JSON_DEFAULTS, **({"type": "object"} if final is True else final)}
            start = [f"start: {calls} | final", f"final: %json {json.dumps(answer, ensure_ascii=False)}"]
        elif self.special_open:  # free text cannot contain a special token: the call starts at it
            start = [f"start: TEXT ({calls})?"]
        else:  # a text marker: free text up to the first marker (lazy), then calls
            more = ' ("\\n" call)*' if req.parallel else ""
            start = [f"start: TEXT | first_call{more}",
                     f'first_call: call_head "\\n" call_body "\\n" {cl}',
                     f"call_head[lazy]: TEXT {op}"]
        rules = start + [f'call: {op} "\\n" call_body "\\n" {cl}', f"call_body: %json {schema}"]
        if req.choice != "required" and final is None:
            rules.append(r"TEXT: /(.|\n)*/")
        return "\n".join(rules) + "\n"

    _BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)

    def parse(self, text: str, allowed=None, parallel: bool = True) -> tuple[str, list[ToolCall]] | None:
        """``(content, calls)`` when ``text`` holds complete, well-formed calls; None when it
        holds none (or a malformed one: it is then left as text).  A reply with no
        ``<tool_call>`` marker may still call in JSON alone (``json_calls``): Qwen2.5-Coder
        and others write their calls so under ``tool_choice`` "auto".  No grammar limits
        those to one, so without ``parallel`` only the first is kept (the grammar's one)."""
        if self.open not in text:
            found = json_calls(text, allowed) if self.bare_calls else None
            if found is None:
                return None
            return text[:found[0]].strip(), found[1] if parallel else found[1][:1]
        calls = []
        for m in self._BLOCK.finditer(text):
            try:
                obj = json.loads(m.group(1))
            except json.JSONDecodeError:
                return None
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                return None
            if allowed is not None and obj["name"] not in allowed:
                return None
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):  # some models write the arguments as a JSON string
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    return None
            calls.append(_new_call(obj["name"], args))
        if not calls:
            return None
        content = self._BLOCK.sub("", text)
        cut = content.find(self.open)  # a call cut short by max_tokens is not content
        if cut >= 0:
            content = content[:cut]
        return content.strip(), calls

    def pending(self, text: str, allowed=None, start: int = 0) -> int:
        """Where streamed text must be held back: the index of a call marker (or of a tail
        that may begin one) in ``text``, or of a JSON call that may be under way
        (``json_pending``, looked for from ``start``: what went out before it was no call);
        ``len(text)`` when none."""
        i = text.find(self.open)
        if i < 0:
            i = len(text)
            for k in range(min(len(self.open) - 1, len(text)), 0, -1):
                if self.open.startswith(text[-k:]):
                    i = len(text) - k
                    break
        if self.bare_calls and allowed is not None:
            i = min(i, json_pending(text, allowed, start))
        return i


class GenericFormat(HermesFormat):
    """Hermes blocks for a template that knows no tools: the tool list and the call format
    go into a system message, earlier calls and results into message text."""

    name = "generic"

    def system_text(self, req: ToolRequest) -> str:
        lines = ["You may call functions to answer. The functions, as JSON schemas:", "<tools>"]
        for f in req.functions:
            if f["name"] in req.allowed:
                lines.append(json.dumps({"type": "function", "function": f}, ensure_ascii=False))
        lines += ["</tools>",
                  "To call a function, reply with a JSON object of its name and arguments inside "
                  "<tool_call></tool_call> tags:",
                  '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>']
        return "\n".join(lines)


def template_knows_tools(template: str | None) -> bool:
    return bool(template) and "tools" in template and "<tool_call>" in template


def choose_format(template: str | None, special_open: bool = False, special_close: bool = False) -> HermesFormat:
    """The tool-call format for a chat template."""
    if template_knows_tools(template):
        return HermesFormat(special_open, special_close)
    return GenericFormat(special_open, special_close)


def _as_text(m: dict, fmt: HermesFormat) -> dict:
    """A message for a template that knows no tools: calls as blocks, results as user text."""
    if m.get("tool_calls"):
        blocks = [f"{fmt.open}\n" + json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                                               ensure_ascii=False) + f"\n{fmt.close}"
                  for c in m["tool_calls"]]
        return {"role": "assistant", "content": "\n".join(([m["content"]] if m.get("content") else []) + blocks)}
    if m.get("role") == "tool":
        return {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"}
    return m


def prepare_messages(messages: Messages, req: ToolRequest | None, fmt: HermesFormat) -> tuple[Messages, list | None]:
    """``(messages, tools)`` to render, from checked ``messages`` (``check_messages``): with the
    hermes format the template gets the tools (OpenAI's shape) and renders calls and results
    itself; with the generic format the tools and the call format become a system message,
    and calls and results become text (whose JSON parts are checked here, as
    ``check_messages`` would check them: the result is ``Messages``)."""
    messages = check_tool_messages(messages)
    shown = req is not None and req.active
    if not isinstance(fmt, GenericFormat):
        if not shown:
            return Messages(messages), None
        return Messages(messages), [{"type": "function", "function": f} for f in req.functions if f["name"] in req.allowed]
    out = [_as_text(m, fmt) for m in messages]
    written = [b is not a for a, b in zip(messages, out)]  # rewritten here: check their text
    if shown:
        note = fmt.system_text(req)
        if out and out[0].get("role") == "system":
            out[0], written[0] = {**out[0], "content": (out[0].get("content") or "") + "\n\n" + note}, True
        else:
            out.insert(0, {"role": "system", "content": note})
            written.insert(0, True)
    for k, m in enumerate(out):
        if written[k]:
            utf8_size(m["content"], f"messages[{k}].content", MessageError)
    return Messages(out), None


def detect_format(template: str | None, vocab, tokenizer) -> HermesFormat:
    """How a model writes tool calls: from its chat template (``choose_format``), and whether
    the call markers are single special tokens of its vocabulary (``vocab.tokenize``; the
    grammar engine's ``tokenizer`` says which tokens are special)."""

    def special(text: str) -> bool:
        ids = vocab.tokenize(text, add_special=False, parse_special=True)
        return len(ids) == 1 and bool(tokenizer.is_special_token(ids[0]))

    probe = HermesFormat()
    return choose_format(template, special(probe.open), special(probe.close))


class ToolStream:
    """Streams a reply's text while holding back what may be a tool call: text before a
    call marker goes out as content; at the end, ``finish`` returns the remaining content
    and the calls (or the held-back text, when no well-formed call came).  ``fmt`` None:
    a reply that may not call tools, streamed as it comes; ``allowed``: the functions it may
    call (``ToolRequest.allowed``)."""

    def __init__(self, fmt: HermesFormat | None = None, allowed: list[str] | None = None, parallel: bool = True):
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
        start = text.find(self.fmt.open)
        if start < 0:
            start = json_calls(text, self.allowed)[0]
        return text[self.sent:start].rstrip(), parsed[1]
