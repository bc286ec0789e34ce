"""Anthropic's Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``), a
dialect translated onto the chat path: a Messages body becomes a chat body (``chat_body``),
which ``fields.parse`` checks and the app runs as it runs a chat (``_Server.run``: the same
checks, queue, tools, reasoning, constraints and streaming), and its reply becomes a Message
(``message_object``) or Anthropic's stream of events (``MessageStream``, fed the chat chunks,
written through ``streams.relay`` by ``_MessageSink``).  Like every dialect module, it exposes
``routes(srv)`` over the app's server object, and its handlers (``messages``,
``count_tokens``) are functions of ``(srv, request)``.

Request: ``max_tokens`` (required), ``messages`` (``user``/``assistant``; content a string or
``text``/``tool_use``/``tool_result`` blocks; ``thinking`` blocks of earlier turns are
dropped), ``system`` (a string or text blocks), ``tools`` (``name``, ``description``,
``input_schema``), ``tool_choice`` (``auto``/``any``/``tool``/``none``,
``disable_parallel_tool_use``), ``stop_sequences``, ``temperature``, ``top_p``, ``top_k``,
``thinking`` (``enabled`` with ``budget_tokens``, ``disabled``, ``adaptive``),
``output_config.format`` (a JSON schema the text must follow), ``stream``; and this server's
own ``min_p``, ``seed``, draft fields and ``speculative.*``, and the fields ``samplers``
checks (``logit_bias`` honoured, penalties refused), as on the chat route.  ``image`` and
``document`` blocks are refused: the model serves text only.  A bad field is a 400 naming
it, in Anthropic's error shape (``error_body``), as is every error of these routes.

The helpers it shares with ``responses`` are ``dialects``'; the settings it passes as they are
come from the settings' metadata (``dialects.passed``).

May import the other server modules but the app (which hands in its server object), and the
shapes and chunks surfaces; never the engine's models or ``llama``.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..chunks import ChunkStream
from ..shapes import completion_object, new_meta, stats_dict, timings
from . import dialects, fields
from .dialects import sse, text as _text
from .errors import ApiError, bad
from .streams import SSEResponse, relay
from .worker import prepare

__all__ = ["routes", "chat_body", "rename", "error_body", "message_object", "stop_reason", "MessageStream", "sse"]

# fields passed to the chat request as they are
_PASSED = dialects.passed("anthropic")
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                503: "overloaded_error"}
_STATIC_NAMES = [
    (r"tools\[(\d+)\]\.function\.parameters", r"tools[\1].input_schema"),
    (r"tools\[(\d+)\]\.function\.(\w+)", r"tools[\1].\2"),
    (r"tool_choice\.function\.name", "tool_choice.name"),
    (r"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"),
    (r"stop$", "stop_sequences"),
    (r"response_format\.json_schema\.schema", "output_config.format.schema"),
    (r"response_format", "output_config.format"),
    (r"reasoning_budget", "thinking.budget_tokens"),
]


def error_body(err: ApiError) -> dict:
    """``err`` in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}`` (and
    the field it names, as ``param``)."""
    error = {"type": _ERROR_TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error"),
             "message": err.message}
    if err.param is not None:
        error["param"] = err.param
    return {"type": "error", "error": error}


def rename(err: ApiError, where: list[str]) -> ApiError:
    """A chat-field error (``fields.parse``, planning) named as the Messages body spells it;
    ``where``: ``chat_body``'s map from chat message to Messages location."""
    return dialects.rename(err, where, "messages", _STATIC_NAMES)


def _blocks(content, where: str) -> list[dict]:
    """A content field as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of content blocks", where, "invalid_type")
    for j, b in enumerate(content):
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise bad(f"{where}[{j}] must be a content block object with a type", f"{where}[{j}]", "invalid_type")
    return content


def _unsupported(block: dict, where: str):
    kind = block["type"][:40]
    if kind in ("image", "document", "search_result"):
        return bad(f"{where} is an {kind} block: the model serves text only (this server has no vision or "
                   "document input); send text blocks", f"{where}.type", "unsupported_value")
    return bad(f"{where}.type {kind!r} is not supported here", f"{where}.type", "unsupported_value")


def _system(body: dict) -> str | None:
    system = body.get("system")
    if system is None:
        return None
    texts = []
    for j, b in enumerate(_blocks(system, "system")):
        if b["type"] != "text":
            raise bad("system blocks must be text blocks", f"system[{j}].type", "unsupported_value")
        texts.append(_text(b.get("text"), f"system[{j}].text"))
    return "\n\n".join(texts) if isinstance(system, list) else texts[0]


def _tool_result(b: dict, where: str, ids: set) -> dict:
    cid = b.get("tool_use_id")
    if not isinstance(cid, str) or cid not in ids:
        raise bad(f"{where}.tool_use_id must name an earlier tool_use block", f"{where}.tool_use_id", "invalid_value")
    parts = []
    for k, part in enumerate(_blocks(b.get("content", ""), f"{where}.content")):
        if part["type"] != "text":
            raise _unsupported(part, f"{where}.content[{k}]")
        parts.append(_text(part.get("text"), f"{where}.content[{k}].text"))
    text = "".join(parts)
    is_error = b.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise bad(f"{where}.is_error must be a boolean", f"{where}.is_error", "invalid_type")
    return {"role": "tool", "tool_call_id": cid, "content": f"Error: {text}" if is_error else text}


def _tool_use(b: dict, where: str, ids: set) -> dict:
    cid, name, args = dialects.non_empty(b, "id", where), dialects.non_empty(b, "name", where), b.get("input", {})
    if not isinstance(args, dict):
        raise bad(f"{where}.input must be an object", f"{where}.input", "invalid_type")
    ids.add(cid)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def _user(content, where: str, ids: set) -> tuple[list[dict], list[str]]:
    """A user turn: its tool results (first, as Anthropic requires them) as tool messages, then
    its text as a user message."""
    out, locations, texts = [], [], []
    for j, b in enumerate(_blocks(content, f"{where}.content")):
        w = f"{where}.content[{j}]"
        if b["type"] == "text":
            texts.append(_text(b.get("text"), f"{w}.text"))
        elif b["type"] == "tool_result":
            out.append(_tool_result(b, w, ids))
            locations.append(w)
        else:
            raise _unsupported(b, w)
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
        locations.append(where)
    return out, locations


def _assistant(content, where: str, ids: set) -> dict:
    texts, calls = [], []
    for j, b in enumerate(_blocks(content, f"{where}.content")):
        w = f"{where}.content[{j}]"
        if b["type"] == "text":
            texts.append(_text(b.get("text"), f"{w}.text"))
        elif b["type"] == "tool_use":
            calls.append(_tool_use(b, w, ids))
        elif b["type"] not in ("thinking", "redacted_thinking"):  # earlier thinking is not shown again
            raise _unsupported(b, w)
    message = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _messages(body: dict) -> tuple[list[dict], list[str]]:
    """The chat messages of ``system`` and ``messages``, and where each came from."""
    messages = body.get("messages")
    if messages is None:
        raise bad("messages is required", "messages", "missing_field")
    if not isinstance(messages, list) or not messages:
        raise bad("messages must be a non-empty list", "messages", "invalid_type")
    out, where, ids = [], [], set()
    system = _system(body)
    if system is not None:
        out.append({"role": "system", "content": system})
        where.append("system")
    for i, m in enumerate(messages):
        w = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad(f"{w}.role must be user or assistant", f"{w}.role", "invalid_value")
        if "content" not in m:
            raise bad(f"{w}.content is required", f"{w}.content", "missing_field")
        if m["role"] == "user":
            msgs, locations = _user(m["content"], w, ids)
            out += msgs
            where += locations
        else:
            out.append(_assistant(m["content"], w, ids))
            where.append(w)
    if messages[-1].get("role") == "assistant":
        last = f"messages[{len(messages) - 1}]"
        raise bad(f"{last}.role is assistant: a prefilled assistant turn is not supported (end with the user's)",
                  f"{last}.role", "unsupported_value")
    return out, where


def _tool(t: dict, w: str) -> dict:
    """One custom tool as OpenAI's function, in OpenAI's order (name, description when given,
    parameters: the ``input_schema``): what the chat template is shown; Anthropic's other keys
    (``cache_control``...) are not shown."""
    if t.get("type", "custom") not in ("custom", None):
        raise bad(f"{w}.type {str(t['type'])[:40]!r} is one of Anthropic's server tools, which this server does not "
                  "run; give a custom tool (name, description, input_schema)", f"{w}.type", "unsupported_value")
    if "input_schema" not in t:
        raise bad(f"{w}.input_schema is required", f"{w}.input_schema", "missing_field")
    fn = {"name": t.get("name")}
    if t.get("description") is not None:
        fn["description"] = t["description"]
    fn["parameters"] = t["input_schema"]
    return fn


def _tools(body: dict) -> list | None:
    """Anthropic's custom tools as OpenAI's (``_tool``)."""
    return dialects.tools(body, _tool)


def _tool_choice(body: dict, tools: list | None) -> dict:
    """The chat's ``tool_choice`` and ``parallel_tool_calls`` (Anthropic allows several calls
    unless ``disable_parallel_tool_use``)."""
    choice = body.get("tool_choice")
    if choice is None:
        return {"parallel_tool_calls": True} if tools else {}
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        raise bad("tool_choice must be an object with a type (auto, any, tool or none)", "tool_choice", "invalid_type")
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise bad("tool_choice.disable_parallel_tool_use must be a boolean", "tool_choice.disable_parallel_tool_use",
                  "invalid_type")
    kind = choice["type"]
    out = {"parallel_tool_calls": not disable}
    if kind in ("auto", "none"):
        if not dialects.unforced(kind, tools):
            out["tool_choice"] = kind
        return out
    if kind == "any":
        out["tool_choice"] = "required"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str):
            raise bad("tool_choice.name must name a tool", "tool_choice.name", "invalid_value")
        out["tool_choice"] = dialects.function_choice(name)
    else:
        raise bad(f"tool_choice.type must be auto, any, tool or none, got {kind[:40]!r}", "tool_choice.type",
                  "invalid_value")
    return out


def _thinking(body: dict) -> dict:
    thinking = dialects.object_field(body, "thinking")
    if thinking is None:
        return {}
    kind = thinking.get("type")
    if kind == "enabled":
        budget = fields.integer(thinking, "budget_tokens")
        if budget is None:
            raise bad("thinking.budget_tokens is required when thinking is enabled", "thinking.budget_tokens",
                      "missing_field")
        return dialects.reasoning_budget(budget)
    if kind == "disabled":
        return dialects.reasoning_budget(0)
    if kind == "adaptive":
        return dialects.reasoning_budget(None)
    raise bad("thinking.type must be enabled, disabled or adaptive", "thinking.type", "invalid_value")


def _output_format(body: dict) -> dict:
    config = dialects.object_field(body, "output_config")
    if config is None:
        return {}
    fmt = config.get("format")
    if fmt is None:
        return {}
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise bad("output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}",
                  "output_config.format", "invalid_value")
    return {"response_format": dialects.json_schema_format(fmt.get("schema"))}


def chat_body(body: dict, *, count: bool = False) -> tuple[dict, list[str]]:
    """A Messages body as a chat body, and where each chat message came from (for ``rename``).
    ``count``: for ``count_tokens``, where ``max_tokens`` is not needed."""
    if not count and body.get("max_tokens") is None:
        raise bad("max_tokens is required", "max_tokens", "missing_field")
    messages, where = _messages(body)
    chat = {"messages": messages}
    if not count:
        chat["max_tokens"] = body["max_tokens"]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list):
            raise bad("stop_sequences must be a list of strings", "stop_sequences", "invalid_type")
        chat["stop"] = stops
    tools = _tools(body)
    if tools is not None:
        chat["tools"] = tools
    chat.update(_tool_choice(body, tools))
    chat.update(_thinking(body))
    chat.update(_output_format(body))
    dialects.pass_through(body, chat, _PASSED)
    return chat, where


def _input(arguments: str) -> dict:
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(result, made_calls: bool) -> str:
    """Anthropic's ``stop_reason`` of a reply."""
    if result.finish_reason == "length":
        return "max_tokens"
    if made_calls:
        return "tool_use"
    return "stop_sequence" if result.finish_reason == "stop" else "end_turn"


def new_id() -> str:
    return dialects.new_id("msg")


def message_object(chat: dict, result, *, msg_id: str, model: str, stop_sequence: str | None) -> dict:
    """The Message for a finished reply: ``chat`` is its chat completion (``completion_object``),
    ``stop_sequence`` the stop sequence that ended it (if one did)."""
    choice = chat["choices"][0]
    msg = choice["message"]
    content = []
    if msg.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    for call in msg.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": _input(call["function"]["arguments"])})
    if not content:
        content.append({"type": "text", "text": ""})
    reason = stop_reason(result, bool(msg.get("tool_calls")))
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": stop_sequence if reason == "stop_sequence" else None,
            "usage": {"input_tokens": chat["usage"]["prompt_tokens"], "output_tokens": chat["usage"]["completion_tokens"]},
            "timings": chat["timings"], "speculative": chat["speculative"]}


class MessageStream:
    """Anthropic's events for one streamed reply, made from its chat chunks: ``start()``,
    ``chunks(list)`` per batch of chat chunks, ``finish(result, stop_sequence)`` (or
    ``error(err)``); each returns the encoded events to send.  Thinking, text and each tool
    call are content blocks of their own, in the order they come."""

    def __init__(self, msg_id: str, model: str, input_tokens: int):
        self.msg_id, self.model, self.input_tokens = msg_id, model, input_tokens
        self.index = -1
        self.open: str | None = None  # the kind of the open block
        self.calls = False

    def start(self) -> list[bytes]:
        message = {"id": self.msg_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}
        return [sse({"type": "message_start", "message": message}), sse({"type": "ping"})]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [sse({"type": "content_block_stop", "index": self.index})]

    def _block(self, block: dict) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.open = block["type"]
        return out + [sse({"type": "content_block_start", "index": self.index, "content_block": block})]

    def _delta(self, kind: str, delta: dict) -> list[bytes]:
        out = []
        if self.open != kind:
            out = self._block({"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking"
                              else {"type": "text", "text": ""})
        return out + [sse({"type": "content_block_delta", "index": self.index, "delta": delta})]

    def chunks(self, chunks: list[dict]) -> list[bytes]:
        out = []
        for c in chunks:
            if not c.get("choices"):
                continue
            delta = c["choices"][0]["delta"]
            if delta.get("reasoning_content"):
                out += self._delta("thinking", {"type": "thinking_delta", "thinking": delta["reasoning_content"]})
            if delta.get("content"):
                out += self._delta("text", {"type": "text_delta", "text": delta["content"]})
            for entry in delta.get("tool_calls") or []:
                if "id" in entry:
                    self.calls = True
                    out += self._block({"type": "tool_use", "id": entry["id"], "name": entry["function"]["name"],
                                        "input": {}})
                if entry["function"].get("arguments"):
                    out.append(sse({"type": "content_block_delta", "index": self.index,
                                    "delta": {"type": "input_json_delta", "partial_json": entry["function"]["arguments"]}}))
        return out

    def finish(self, result, stop_sequence: str | None, extras: dict) -> list[bytes]:
        """The closing events; ``extras``: the chat's ``timings`` and ``speculative``, carried
        on the message_delta."""
        out = self._block({"type": "text", "text": ""}) if self.index < 0 else []
        out += self._close()
        reason = stop_reason(result, self.calls)
        delta = {"stop_reason": reason, "stop_sequence": stop_sequence if reason == "stop_sequence" else None}
        out.append(sse({"type": "message_delta", "delta": delta, "usage": {"output_tokens": len(result.tokens)},
                        **extras}))
        return out + [sse({"type": "message_stop"})]

    def error(self, err: ApiError) -> list[bytes]:
        return [sse(error_body(err))]


# ------------------------------------------------------------------------------------- routes


def routes(srv) -> list[Route]:
    """The routes, over the app's server object ``srv``; errors in Anthropic's shape."""
    def shape(err: ApiError) -> Response:
        return JSONResponse(error_body(err), status_code=err.status, headers=err.headers)

    return [
        Route("/v1/messages", srv.endpoint(lambda r: messages(srv, r), shape=shape), methods=["POST"]),
        Route("/v1/messages/count_tokens", srv.endpoint(lambda r: count_tokens(srv, r), shape=shape),
              methods=["POST"]),
    ]


async def messages(srv, request: Request) -> Response:
    chat, where = chat_body(await srv.read_body(request))
    msg_id = new_id()
    try:
        req = srv.parse(chat, "chat")
        return await srv.run(request, req, lambda job, event: _message(srv, job, event, msg_id, where))
    except ApiError as e:
        raise rename(e, where) from None


def _message(srv, job, event, msg_id: str, where: list) -> Response:
    req = job.req
    meta = new_meta(srv.model_name, chat=True)
    if req.stream:
        sink = _MessageSink(srv, req, MessageStream(msg_id, srv.model_name, len(job.plan.prompt)), where)
        return SSEResponse(relay(job, event, ChunkStream(job.plan, meta, usage="none"), sink), job)
    result = event[1]
    chat = completion_object(True, meta, result, job.plan)
    stop = dialects.stop_sequence(result, req.sampling.stop, srv.engine.token_piece)
    return JSONResponse(message_object(chat, result, msg_id=msg_id, model=srv.model_name, stop_sequence=stop))


class _MessageSink:
    """Anthropic's events for ``streams.relay``."""

    def __init__(self, srv, req, stream: MessageStream, where: list):
        self.srv, self.req, self.stream, self.where = srv, req, stream, where

    def begin(self) -> list[bytes]:
        return self.stream.start()

    def chunks(self, chunks: list) -> list[bytes]:
        return self.stream.chunks(chunks)

    def done(self, result) -> list[bytes]:
        stop = dialects.stop_sequence(result, self.req.sampling.stop, self.srv.engine.token_piece)
        return self.stream.finish(result, stop, {"timings": timings(result), "speculative": stats_dict(result)})

    def error(self, err: ApiError) -> list[bytes]:
        return self.stream.error(rename(err, self.where))

    def close(self) -> list[bytes]:
        return []


async def count_tokens(srv, request: Request) -> Response:
    """The prompt's tokens, as ``/v1/messages`` would tokenize it (tools and system included)."""
    chat, where = chat_body(await srv.read_body(request), count=True)
    try:
        req = srv.parse(chat, "chat")
        present, plan = await srv.off_loop(request, req, prepare, srv.engine, req)
    except ApiError as e:
        raise rename(e, where) from None
    if not present:
        return Response(status_code=499)
    return JSONResponse({"input_tokens": len(plan.prompt)})
