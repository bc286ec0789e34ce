"""What the translated API dialects share: Anthropic's Messages (``anthropic``) and OpenAI's
Responses (``responses``) each turn a body of their own into a chat body, which
``fields.parse`` checks.  The pieces both translations write are here, once: the text check
(``text``), the object-field check (``object_field``), a non-empty string field
(``non_empty``), the function tools (``tools``) and the tool-choice pieces
(``function_choice``, ``unforced``), the reasoning budget a dialect's thinking field sets
(``reasoning_budget``), the JSON-schema output format (``json_schema_format``), the settings
passed through as they are (``passed``, ``pass_through``), the renaming of a chat field's
error back to the dialect's own field (``rename``), the stop sequence that ended a reply
(``stop_sequence``), ids (``new_id``) and named server-sent events (``sse``).

Which settings a dialect passes through is derived from the settings' metadata
(``fields.REQUEST_SETTINGS``): every per-request setting, but those the dialect spells its own
way or does not offer (``OWN_SPELLING``).

May import ``assist.chat_format``, ``server.errors``, ``server.fields``, ``server.samplers`` and
``server.streams``; never the engine, the app or ``llama``.
"""

from __future__ import annotations

import uuid

from ...assist.chat_format import utf8_size
from . import fields, samplers
from .errors import ApiError, bad, renamed
from .streams import sse as _sse

__all__ = ["OWN_SPELLING", "text", "object_field", "non_empty", "tools", "function_choice", "unforced",
           "reasoning_budget", "json_schema_format", "passed", "pass_through", "rename", "stop_sequence", "new_id",
           "sse"]

#: the per-request settings the translated dialects spell their own way or do not offer, by
#: dialect: setting -> its field there (None: not offered; the server's setting holds)
OWN_SPELLING = {
    "anthropic": {"max_tokens": "max_tokens", "stop": "stop_sequences", "reasoning_budget": "thinking.budget_tokens",
                  "reasoning_format": None},
    "responses": {"max_tokens": "max_output_tokens", "stop": None, "reasoning_budget": "reasoning.effort",
                  "reasoning_format": None},
}


def passed(dialect: str, *extra: str) -> tuple[str, ...]:
    """The fields a ``dialect`` body passes to the chat body as they are: every per-request
    setting's field but the dialect's own spellings (``OWN_SPELLING``), ``stream``,
    ``speculative``, ``extra``, and the sampling fields ``samplers`` checks."""
    own = OWN_SPELLING[dialect]
    names = [name for name, (_, setting) in fields.REQUEST_SETTINGS.items() if setting not in own]
    return tuple(dict.fromkeys([*names, "stream", "speculative", *extra, *samplers.FIELDS]))


def pass_through(body: dict, chat: dict, names: tuple[str, ...]) -> None:
    """Copy ``names`` (``passed``) and the dotted ``speculative.*`` keys from ``body`` into
    ``chat``."""
    chat.update({k: body[k] for k in names if k in body})
    chat.update({k: v for k, v in body.items() if k.startswith("speculative.")})


def text(value, where: str) -> str:
    """``value``, a string of valid Unicode, or a 400 naming ``where``."""
    if not isinstance(value, str):
        raise bad(f"{where} must be a string", where, "invalid_type")
    utf8_size(value, where, lambda m, w: bad(m, w, "invalid_value"))
    return value


def object_field(body: dict, name: str, where: str | None = None) -> dict | None:
    """``body[name]``, an object (None: not given), or a 400 naming ``where`` (default ``name``)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        where = where or name
        raise bad(f"{where} must be an object", where, "invalid_type")
    return value


def non_empty(item: dict, name: str, where: str) -> str:
    """``item[name]``, a non-empty string, or a 400 naming ``where.name``."""
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise bad(f"{where}.{name} must be a non-empty string", f"{where}.{name}", "invalid_value")
    return value


def tools(body: dict, function) -> list | None:
    """A dialect's ``tools`` as the chat's, the tool objects the chat template is shown:
    ``{"type": "function", "function": function(tool, where)}`` for each tool object (None:
    not given)."""
    given = body.get("tools")
    if given is None:
        return None
    if not isinstance(given, list):
        raise bad("tools must be a list of tool objects", "tools", "invalid_type")
    out = []
    for i, t in enumerate(given):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise bad(f"{where} must be an object", where, "invalid_type")
        out.append({"type": "function", "function": function(t, where)})
    return out


def function_choice(name) -> dict:
    """The chat's ``tool_choice`` that forces the tool called ``name``."""
    return {"type": "function", "function": {"name": name}}


def unforced(kind, tools_: list | None) -> bool:
    """Whether a ``tool_choice`` of ``kind`` asks the chat for nothing: ``auto`` or ``none``
    without tools."""
    return kind in ("auto", "none") and not tools_


def reasoning_budget(tokens: int | None) -> dict:
    """The chat fields for a dialect's thinking setting: a budget of ``tokens`` (None: the
    server's setting)."""
    return {} if tokens is None else {"reasoning_budget": tokens}


def json_schema_format(schema, name: str = "output", **extra) -> dict:
    """The chat's ``response_format`` for a JSON schema (and ``extra`` keys: ``strict``)."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, **extra}}


def rename(err: ApiError, where: list[str], fallback: str, names) -> ApiError:
    """A chat-field error (``fields.parse``, planning) named as the dialect's body spells it:
    ``where`` maps each chat message to its location there (``fallback`` past its end);
    ``names``: the dialect's ``(pattern, replacement)`` pairs for the other fields."""
    def message(m):
        i = int(m.group(1))
        return where[i] if i < len(where) else fallback
    return renamed(err, [(r"messages\[(\d+)\]", message), *names])


def stop_sequence(result, stops, token_piece) -> str | None:
    """The stop string that ended ``result`` (its tokens run on through it), None if none did:
    the one found first in the reply's whole text, as the engine looks for them."""
    if result.finish_reason != "stop" or not stops:
        return None
    text = b"".join(token_piece(t) for t in result.tokens).decode("utf-8", "replace")
    found = [(text.find(s), i) for i, s in enumerate(stops) if s in text]
    return stops[min(found)[1]] if found else None


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def sse(event: dict) -> bytes:
    """One server-sent event, named by its type (the clients read the name)."""
    return _sse(event, event["type"])
