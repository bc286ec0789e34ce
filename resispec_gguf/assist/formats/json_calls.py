"""Calls written as JSON alone: ``{"name": ..., "arguments": {...}}`` objects, bare or in a
fenced ```json block, as Qwen2.5-Coder writes its calls under ``tool_choice`` "auto" and as
Llama 3.x writes every call (with ``"parameters"``).  Reading them back out of a reply
(``json_calls``), telling while streaming whether text may still become one
(``json_pending``), and the grammar rules that constrain such a call lazily from its opening
(``lazy_json_rules``): the opening is the object's head up to an offered function's name, so
that JSON naming no offered function stays text.

A run of calls is read only where nothing but calls and whitespace follows (an example object
amid prose stays prose); with ``partial`` (streaming) an unfinished run is "maybe", and each
"no" is final: no more text makes a call of it, so what streamed out as text is never read
back as a call.

Pure text and grammar text; may import ``tools`` (the call and its schema) and ``grammar``.
"""

from __future__ import annotations

import json
import re

from ..grammar import FLEXIBLE_LAYOUT, laid_out
from ..tools import ToolCall, ToolRequest, call_schema, new_call, rebased

__all__ = ["json_calls", "json_pending", "lazy_json_rules", "args_rules", "json_call_rule", "JSON_WS"]

_WS = " \t\r\n"
_DECODER = json.JSONDecoder()

#: Blanks between the JSON tokens of a call's envelope (``{"name": ..., "arguments": ``, which
#: the model opens on its own, lazily matched): the flexible layout's whitespace (a few blanks,
#: or one line break and an indentation), as a regex usable inside a Lark ``/.../``; the
#: arguments are laid out as every schema is (``grammar.json_options``).
JSON_WS = "(?:" + FLEXIBLE_LAYOUT["whitespace_pattern"] + ")"


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


def _as_call(obj, allowed, keys) -> ToolCall | None:
    """A decoded ``{"name": ..., KEY: {...}}`` (``KEY`` one of ``keys``; arguments maybe as
    JSON text) as a call."""
    if not isinstance(obj, dict) or len(obj) != 2 or list(obj)[1] not in keys or obj.get("name") not in allowed:
        return None
    args = obj[list(obj)[1]]
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return new_call(obj["name"], args) if isinstance(args, dict) else None


def _doubled(text: str, i: int, allowed, partial: bool, keys):
    """``_json_object`` for a call wrapped in doubled braces, ``{{"name": ..., "arguments":
    {...}}}``: the call syntax as Qwen2.5's chat template shows it (its ``{{`` and ``}}`` are
    text inside a Jinja string, so the prompt has them doubled), which its models copy."""
    end, state, call = _json_object(text, i + 1, allowed, partial, keys)
    if state != "call":
        return i, state, None
    end = _skip_ws(text, end)
    if end < len(text) and text[end] == "}":
        return end + 1, "call", call
    return i, "maybe" if partial and end == len(text) else "no", None


def _json_object(text: str, i: int, allowed, partial: bool, keys, doubled: bool = False):
    """``(end, state, call)`` for the object at ``text[i]`` (with ``doubled``, also a call in
    doubled braces: ``_doubled``)."""
    if doubled and text.startswith("{{", i):
        return _doubled(text, i, allowed, partial, keys)
    head = _head(text, i, allowed)
    if head == "no":
        return i, "no", None
    try:
        obj, end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError:  # unfinished, or malformed: only the end of the reply tells
        return i, "maybe" if partial else "no", None
    call = _as_call(obj, allowed, keys) if head == "call" else None
    return end, "call" if call else "no", call


def _fence_open(text: str, i: int, partial: bool):
    """``(after, state)`` for the language line of a fence whose ``` ends at ``i``: json or none."""
    end = text.find("\n", i)
    lang = (text[i:] if end < 0 else text[i:end]).strip().lower()
    if end < 0:
        return i, "maybe" if partial and "json".startswith(lang) else "no"
    return end + 1, "call" if lang in ("", "json") else "no"


def _json_run(text: str, i: int, allowed, partial: bool, keys, separators: str = "", doubled: bool = False):
    """``(state, calls)`` for ``text[i:]``: "call" when it is JSON calls (fenced or bare,
    ``separators`` characters also allowed between them; with ``doubled``, each maybe in
    doubled braces) and whitespace only, "maybe" (``partial``) when it may still become so,
    else "no"."""
    calls = []
    while True:
        i = _skip_ws(text, i)
        if calls and i < len(text) and text[i] in separators:
            i = _skip_ws(text, i + 1)
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
        i, state, call = _json_object(text, i, allowed, partial, keys, doubled)
        if state != "call":
            return state, calls
        calls.append(call)
        if fenced:
            i = _skip_ws(text, i)
            close = text[i:i + 3]
            if close != "```":
                return ("maybe" if partial and close == text[i:] and "```".startswith(close) else "no"), calls
            i += 3


def _json_starts(text: str, start: int = 0, anywhere: bool = True):
    """Where a JSON call may begin: a fence or an object at the start of the reply or (with
    ``anywhere``) of a line."""
    if not anywhere:
        i = _skip_ws(text, 0)
        if i >= start and (i == len(text) or text[i] in "`{"):
            yield i
        return
    i = start
    while i < len(text):
        if (i == 0 or text[i - 1] == "\n") and text[i] in "`{":
            yield i
        nl = text.find("\n", i)
        if nl < 0:
            return
        i = nl + 1


def json_calls(text: str, allowed, keys=("arguments",), anywhere: bool = True, separators: str = "",
               doubled: bool = False) -> tuple[int, list[ToolCall]] | None:
    """``(start, calls)``: the JSON calls that end the reply, and where they begin; None when
    the reply does not end so.  Only functions in ``allowed`` (none: no call) count; ``keys``:
    what the arguments may be called; ``anywhere`` False: only a reply that is calls alone;
    ``doubled``: a call may also be wrapped in doubled braces (``_doubled``)."""
    if not allowed:
        return None
    for i in _json_starts(text, 0, anywhere):
        state, calls = _json_run(text, i, allowed, False, keys, separators, doubled)
        if state == "call":
            return i, calls
    return None


def json_pending(text: str, allowed, start: int = 0, anywhere: bool = True, keys=("arguments",),
                 separators: str = "", doubled: bool = False) -> int:
    """Where streamed text may be the beginning of JSON calls (from ``start`` on); ``len(text)``
    when nowhere."""
    if allowed:
        for i in _json_starts(text, start, anywhere):
            if _json_run(text, i, allowed, True, keys, separators, doubled)[0] != "no":
                return i
    return len(text)


def _regex(text: str) -> str:
    """``text`` as a regex for inside a Lark ``/.../``."""
    return re.escape(text).replace("/", "\\/")


def lazy_json_rules(req: ToolRequest, tag: str, key: str, prefix: str, suffix: str = "",
                    args: str | None = None) -> tuple[list[str], list[str]]:
    """``(alternatives, rules)``: for each allowed function (the k-th), a rule ``{tag}_k`` that
    is free text and then the call ``{"name": "<function>", "<key>": <its arguments>}``,
    constrained from the opening on.  The opening, ``prefix`` (a regex: what may come before
    the object, including the free text) up to the function's name, is a lazy lexeme: it ends
    where the opening first appears, so text before it is free and JSON naming no offered
    function never triggers.  ``suffix``: Lark text after the object (a closing fence).
    ``args``: the name of rules ``{args}_k`` already holding each function's arguments
    (``args_rules``), shared by several openings; None: written here."""
    alternatives, rules = [], []
    ws = JSON_WS
    if args is None:
        args, rules = f"{tag}_args", args_rules(req, f"{tag}_args")
    for k, f in enumerate(fn for fn in req.functions if fn["name"] in req.allowed):
        name = _regex(json.dumps(f["name"]))
        rules += [f"{tag}_{k}: {tag}_head_{k} /{ws},{ws}\"{key}\"{ws}:{ws}/ {args}_{k} /{ws}\\}}/{suffix}",
                  f'{tag}_head_{k}[lazy]: /{prefix}\\{{{ws}"name"{ws}:{ws}{name}/']
        alternatives.append(f"{tag}_{k}")
    return alternatives, rules


def args_rules(req: ToolRequest, rule: str) -> list[str]:
    """Lark rules ``{rule}_k``: the k-th allowed function's arguments under its schema."""
    chosen = [f for f in req.functions if f["name"] in req.allowed]
    return [f"{rule}_{k}: %json " + json.dumps(laid_out(rebased(f["parameters"], "")), ensure_ascii=False)
            for k, f in enumerate(chosen)]


def json_call_rule(req: ToolRequest, rule: str, key: str = "arguments") -> str:
    """A Lark rule ``rule`` for one whole call object (``{"name": ..., key: ...}``) under ``req``."""
    schema = call_schema(req.functions, req.allowed, key)
    return f"{rule}: %json {json.dumps(schema, ensure_ascii=False)}"
