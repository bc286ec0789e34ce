"""OpenAI's Responses API (``POST /v1/responses``, ``GET /v1/responses/{id}``), a dialect
translated onto the chat path: a Responses body becomes a chat body (``chat_body``), which
``fields.parse`` checks and the app runs as it runs a chat (``_Server.run``: the same checks,
queue, tools, reasoning and constraints), and the reply becomes a Response (``output_items``
and ``response_object``) or the Responses stream of events (``ResponseStream``, fed the chat
chunks, written through ``streams.relay`` by ``_ResponseSink``).  Like every dialect module,
it exposes ``routes(srv)`` over the app's server object, and its handlers
(``create_response``, ``get_response``) are functions of ``(srv, request)``.

Request: ``input`` (a string, or items: messages with ``input_text``/``output_text`` parts,
``function_call``, ``function_call_output``; ``reasoning`` items are dropped), ``instructions``,
``tools`` (flat ``{"type": "function", "name", "description", "parameters", "strict"}``),
``tool_choice``, ``parallel_tool_calls`` (true unless false), ``text.format`` (``text``,
``json_object``, ``json_schema`` with ``name``/``schema``/``strict``), ``max_output_tokens``,
``temperature``, ``top_p``, ``reasoning.effort`` (``none``: no thinking), ``stream``, ``store``
and ``previous_response_id``: a stored response's conversation (its input and output, not
its instructions) goes before this input.  ``ResponseStore`` keeps the last
``STORED_RESPONSES`` stored responses in memory, first in first out.  This server's own
``top_k``, ``min_p``, ``seed``, draft fields and ``speculative.*`` pass through, and so do
the fields ``samplers`` checks (``logit_bias`` honoured, penalties refused).  Hosted tools,
files, images (``input_image``, ``input_file``: the model serves text only),
``conversation``, ``prompt`` and ``background`` are refused with a 400 naming the field.

The helpers it shares with ``anthropic`` are ``dialects``'; the settings it passes as they are
come from the settings' metadata (``dialects.passed``).

May import the other server modules but the app (which hands in its server object), and the
shapes and chunks surfaces; never the engine's models or ``llama``.
"""

from __future__ import annotations

import collections
import json
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..chunks import ChunkStream
from ..shapes import completion_object, new_meta, stats_dict, timings
from . import dialects, fields
from .dialects import new_id as _new_id
from .dialects import text as _text
from .errors import ApiError, bad
from .streams import SSEResponse, relay

__all__ = ["routes", "STORED_RESPONSES", "ResponseStore", "Turn", "chat_body", "rename", "output_items",
           "response_object", "ResponseStream"]

STORED_RESPONSES = 256
_PASSED = dialects.passed("responses", "parallel_tool_calls")
_REFUSED = {"conversation": "conversations are not kept here; chain turns with previous_response_id",
            "prompt": "stored prompt templates are not supported", "background": "background responses are not supported"}
_STATIC_NAMES = [
    (r"tools\[(\d+)\]\.function\.(\w+)", r"tools[\1].\2"),
    (r"tool_choice\.function\.name", "tool_choice.name"),
    (r"response_format\.json_schema\.schema", "text.format.schema"),
    (r"response_format", "text.format"),
    (r"max_tokens", "max_output_tokens"),
    (r"reasoning_budget", "reasoning.effort"),
]


class ResponseStore:
    """The last ``limit`` stored responses, first in first out: each with the conversation it
    ends (chat messages, its instructions left out) for ``previous_response_id``."""

    def __init__(self, limit: int = STORED_RESPONSES):
        self.limit = limit
        self._items: collections.OrderedDict[str, tuple[dict, list]] = collections.OrderedDict()

    def put(self, response: dict, messages: list) -> None:
        self._items[response["id"]] = (response, messages)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def response(self, resp_id: str) -> dict | None:
        got = self._items.get(resp_id)
        return got[0] if got else None

    def messages(self, resp_id: str) -> list | None:
        got = self._items.get(resp_id)
        return list(got[1]) if got else None

    def __len__(self) -> int:
        return len(self._items)


class Turn:
    """What a request is besides its chat body: its echoed settings, the conversation so far
    (without instructions, to store), and the chat messages' origins (for ``rename``)."""

    def __init__(self, body: dict, messages: list, where: list, history: int):
        self.id = _new_id("resp")
        self.created = int(time.time())
        self.body = body
        self.messages = messages  # chat messages after the instructions
        self.where = where
        self.history = history  # of them, from previous_response_id
        self.store = body.get("store") is not False


def _parts(content, where: str) -> str:
    """A message's content (a string or text parts) as one string."""
    if isinstance(content, str):
        return _text(content, where)
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of content parts", where, "invalid_type")
    texts = []
    for j, part in enumerate(content):
        w = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            texts.append(_text(part.get("text"), f"{w}.text"))
        elif kind == "refusal":
            texts.append(_text(part.get("refusal"), f"{w}.refusal"))
        elif isinstance(kind, str):
            raise bad(f"{w}.type {kind[:40]!r} is not supported: the model serves text only (this server has no "
                      "vision, audio or file input); send input_text parts", f"{w}.type", "unsupported_value")
        else:
            raise bad(f"{w} must be a content part object with a type", w, "invalid_type")
    return "".join(texts)


def _call(item: dict, where: str, out: list, ids: set) -> None:
    """A ``function_call`` item: a call on the assistant turn before it (a new turn if none)."""
    ids.add(dialects.non_empty(item, "call_id", where))
    call = {"id": item["call_id"], "type": "function",
            "function": {"name": dialects.non_empty(item, "name", where), "arguments": item.get("arguments", "{}")}}
    if not isinstance(call["function"]["arguments"], str):
        raise bad(f"{where}.arguments must be a string of JSON", f"{where}.arguments", "invalid_type")
    if out and out[-1]["role"] == "assistant":
        out[-1].setdefault("tool_calls", []).append(call)
        return
    out.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _item(item, where: str, out: list, locations: list, ids: set) -> None:
    if not isinstance(item, dict):
        raise bad(f"{where} must be an object", where, "invalid_type")
    kind = item.get("type", "message" if "role" in item else None)
    n = len(out)
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise bad(f"{where}.role must be user, assistant, system or developer", f"{where}.role", "invalid_value")
        out.append({"role": role, "content": _parts(item.get("content", ""), f"{where}.content")})
    elif kind == "function_call":
        _call(item, where, out, ids)
    elif kind == "function_call_output":
        if dialects.non_empty(item, "call_id", where) not in ids:
            raise bad(f"{where}.call_id names no earlier function_call", f"{where}.call_id", "invalid_value")
        out.append({"role": "tool", "tool_call_id": item["call_id"], "content": _parts(item.get("output", ""),
                                                                                         f"{where}.output")})
    elif kind == "reasoning":  # earlier thinking is not shown to the model again
        return
    elif isinstance(kind, str):
        raise bad(f"{where}.type {kind[:40]!r} is not supported here (messages, function_call and "
                  "function_call_output are)", f"{where}.type", "unsupported_value")
    else:
        raise bad(f"{where} must have a type or a role", where, "invalid_value")
    locations += [where] * (len(out) - n)


def _input(body: dict, ids: set) -> tuple[list, list]:
    """The chat messages of ``input`` and where each came from; ``ids``: the calls made so far
    (a ``function_call_output`` answers one of them)."""
    value = body.get("input")
    if value is None:
        raise bad("input is required", "input", "missing_field")
    if isinstance(value, str):
        return [{"role": "user", "content": _text(value, "input")}], ["input"]
    if not isinstance(value, list):
        raise bad("input must be a string or a list of items", "input", "invalid_type")
    out, where = [], []
    for i, item in enumerate(value):
        _item(item, f"input[{i}]", out, where, ids)
    return out, where


def _tool(t: dict, where: str) -> dict:
    """One flat function tool as the chat's function: ``name``, ``description`` and
    ``parameters`` (those given, in that order, as OpenAI lists them), what the chat template
    is shown; other keys (``strict``) are not shown."""
    if t.get("type") != "function":
        raise bad(f"{where}.type {str(t.get('type'))[:40]!r} is not supported: only function tools run here",
                  f"{where}.type", "unsupported_value")
    return {k: t[k] for k in ("name", "description", "parameters") if t.get(k) is not None}


def _tools(body: dict) -> list | None:
    """The Responses API's flat function tools as the chat's (``_tool``)."""
    return dialects.tools(body, _tool)


def _tool_choice(choice, tools: list | None):
    """The chat's ``tool_choice`` (None: not set)."""
    if choice is None or dialects.unforced(choice, tools):
        return None
    if isinstance(choice, str):
        return choice
    if not isinstance(choice, dict):
        raise bad("tool_choice must be a string or an object", "tool_choice", "invalid_type")
    if choice.get("type") == "function":
        return dialects.function_choice(choice.get("name"))
    if choice.get("type") == "allowed_tools":
        named = choice.get("tools")
        if not isinstance(named, list):
            raise bad("tool_choice.tools must be a list of {type: function, name}", "tool_choice.tools", "invalid_type")
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.get("mode", "auto"), "tools": [
            dialects.function_choice(t.get("name") if isinstance(t, dict) else None) for t in named]}}
    raise bad(f"tool_choice.type {str(choice.get('type'))[:40]!r} is not supported: only function tools run here",
              "tool_choice.type", "unsupported_value")


def _format(body: dict) -> dict | None:
    """``text.format`` as the chat's ``response_format`` (None: text)."""
    text = dialects.object_field(body, "text")
    fmt = None if text is None else dialects.object_field(text, "format", "text.format")
    if fmt is None:
        return None
    if fmt.get("type") == "json_schema":
        strict = {"strict": fmt["strict"]} if "strict" in fmt else {}
        return dialects.json_schema_format(fmt.get("schema", True), fmt.get("name", "output"), **strict)
    return {"type": fmt.get("type")}


def _reasoning(body: dict) -> dict:
    reasoning = dialects.object_field(body, "reasoning")
    if reasoning is None:
        return {}
    return dialects.reasoning_budget(0 if reasoning.get("effort") == "none" else None)


# the request fields a Response repeats
_ECHOED = ("instructions", "metadata", "user", "tools", "tool_choice", "text", "reasoning", "truncation",
           "previous_response_id")


def _echoable(body: dict) -> None:
    """Refuse a repeated field that JSON can carry and UTF-8 cannot (a lone surrogate)."""
    for name in _ECHOED:
        try:
            json.dumps(body.get(name), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise bad(f"{name} is not valid Unicode (it holds a lone surrogate)", name, "invalid_value") from None


def chat_body(body: dict, store: ResponseStore) -> tuple[dict, Turn]:
    """A Responses body as a chat body, and the ``Turn`` it is."""
    for name, why in _REFUSED.items():
        if body.get(name) not in (None, False):
            raise bad(f"{name}: {why}", name, "unsupported_value")
    history = []
    prev = fields.string(body, "previous_response_id")
    if prev is not None:
        history = store.messages(prev)
        if history is None:
            raise bad(f"previous_response_id {prev[:64]!r} is not a stored response (this server keeps the last "
                      f"{store.limit}, in memory, and only those made with store on)", "previous_response_id",
                      "not_found")
    messages, where = _input(body, {c["id"] for m in history for c in m.get("tool_calls") or []})
    fields.boolean(body, "store")
    _echoable(body)
    turn = Turn(body, history + messages, ["previous_response_id"] * len(history) + where, len(history))
    instructions = fields.string(body, "instructions")
    head = [{"role": "system", "content": _text(instructions, "instructions")}] if instructions else []
    turn.where = ["instructions"] * len(head) + turn.where
    chat = {"messages": head + turn.messages}
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    tools = _tools(body)
    if tools is not None:
        chat["tools"] = tools
        chat["parallel_tool_calls"] = True
    choice = _tool_choice(body.get("tool_choice"), tools)
    if choice is not None:
        chat["tool_choice"] = choice
    fmt = _format(body)
    if fmt is not None:
        chat["response_format"] = fmt
    chat.update(_reasoning(body))
    dialects.pass_through(body, chat, _PASSED)
    return chat, turn


def rename(err: ApiError, where: list[str]) -> ApiError:
    """A chat-field error named as the Responses body spells it (``where``: ``Turn.where``)."""
    return dialects.rename(err, where, "input", _STATIC_NAMES)


def _message_item(text: str, status: str, item_id: str | None = None) -> dict:
    return {"type": "message", "id": item_id or _new_id("msg"), "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _reasoning_item(text: str, status: str, item_id: str | None = None) -> dict:
    return {"type": "reasoning", "id": item_id or _new_id("rs"), "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}]}


def _call_item(call_id: str, name: str, arguments: str, status: str, item_id: str | None = None) -> dict:
    return {"type": "function_call", "id": item_id or _new_id("fc"), "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def output_items(chat: dict) -> list[dict]:
    """A finished reply's output items from its chat completion: the thinking (a reasoning
    item), the text (a message) and each call (a function_call)."""
    choice = chat["choices"][0]
    msg = choice["message"]
    status = "incomplete" if choice["finish_reason"] == "length" else "completed"
    items = []
    if msg.get("reasoning_content"):
        items.append(_reasoning_item(msg["reasoning_content"], status))
    calls = msg.get("tool_calls") or []
    if msg.get("content") or not calls:
        items.append(_message_item(msg.get("content") or "", status))
    items += [_call_item(c["id"], c["function"]["name"], c["function"]["arguments"], status) for c in calls]
    return items


def _usage(result) -> dict:
    prompt, output = int(result.stats.prompt_tokens), len(result.tokens)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": int(result.stats.prompt_reused),
                                                             "cache_write_tokens": 0},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + output}


def response_object(turn: Turn, model: str, items: list, result=None, *, status: str | None = None,
                    extras: dict | None = None, error: dict | None = None) -> dict:
    """The Response of ``turn``: ``items`` its output; ``result`` (None: still running) its
    usage and status (``incomplete`` when cut by ``max_output_tokens``)."""
    b = turn.body
    if status is None:
        status = "in_progress" if result is None else ("incomplete" if result.finish_reason == "length" else "completed")
    text = b.get("text") if isinstance(b.get("text"), dict) else {}
    obj = {
        "id": turn.id, "object": "response", "created_at": turn.created, "status": status, "model": model,
        "output": items, "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": b.get("instructions"), "max_output_tokens": b.get("max_output_tokens"),
        "parallel_tool_calls": b.get("parallel_tool_calls") is not False,
        "previous_response_id": b.get("previous_response_id"), "temperature": b.get("temperature"),
        "top_p": b.get("top_p"), "tool_choice": b.get("tool_choice", "auto"), "tools": b.get("tools") or [],
        "text": {"format": {"type": "text"}, **text}, "store": turn.store, "metadata": b.get("metadata") or {},
        "reasoning": b.get("reasoning") or {"effort": None, "summary": None},
        "truncation": b.get("truncation", "disabled"), "user": b.get("user"), "background": False,
        "usage": _usage(result) if result is not None else None,
    }
    if result is not None:
        obj["completed_at"] = int(time.time())
    return {**obj, **(extras or {})}


def history_message(items: list) -> dict:
    """The assistant turn that ``items`` are, for the next request's history."""
    message = {"role": "assistant", "content": "".join(
        p["text"] for i in items if i["type"] == "message" for p in i["content"])}
    calls = [{"id": i["call_id"], "type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}
             for i in items if i["type"] == "function_call"]
    if calls:
        message["tool_calls"] = calls
    return message


class ResponseStream:
    """The Responses events of one streamed reply, made from its chat chunks: ``start()``,
    ``chunks(list)``, ``finish(result, extras)`` (or ``error(err)``); each returns the events
    (dicts, numbered by ``sequence_number``).  Thinking, text and each call are output items
    of their own, in the order they come; ``items`` holds the finished ones."""

    def __init__(self, turn: Turn, model: str):
        self.turn, self.model = turn, model
        self.seq = 0
        self.items: list[dict] = []
        self.open: dict | None = None  # the open item, as added
        self.text = ""  # the open item's text (or arguments)

    def _event(self, kind: str, **fields_) -> dict:
        event = {"type": kind, "sequence_number": self.seq, **fields_}
        self.seq += 1
        return event

    def start(self) -> list[dict]:
        response = response_object(self.turn, self.model, [])
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def _where(self) -> dict:
        return {"item_id": self.open["id"], "output_index": len(self.items)}

    def _add(self, item: dict) -> list[dict]:
        """Open ``item`` (its parts come with ``content_part.added``)."""
        out = self._close()
        if item["type"] in ("message", "reasoning"):
            item = {**item, "content": []}
        self.open, self.text = item, ""
        out.append(self._event("response.output_item.added", output_index=len(self.items), item=item))
        if item["type"] == "message":
            out.append(self._event("response.content_part.added", **self._where(), content_index=0,
                                   part={"type": "output_text", "text": "", "annotations": [], "logprobs": []}))
        elif item["type"] == "reasoning":
            out.append(self._event("response.content_part.added", **self._where(), content_index=0,
                                   part={"type": "reasoning_text", "text": ""}))
        return out

    def _close(self, status: str = "completed") -> list[dict]:
        item, out = self.open, []
        if item is None:
            return out
        where, text = self._where(), self.text
        if item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out += [self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                    self._event("response.content_part.done", **where, content_index=0, part=part)]
            done = _message_item(text, status, item["id"])
        elif item["type"] == "reasoning":
            out += [self._event("response.reasoning_text.done", **where, content_index=0, text=text),
                    self._event("response.content_part.done", **where, content_index=0,
                                part={"type": "reasoning_text", "text": text})]
            done = _reasoning_item(text, status, item["id"])
        else:
            out.append(self._event("response.function_call_arguments.done", **where, name=item["name"],
                                   arguments=text))
            done = _call_item(item["call_id"], item["name"], text, status, item["id"])
        out.append(self._event("response.output_item.done", output_index=len(self.items), item=done))
        self.items.append(done)
        self.open = None
        return out

    def _text_delta(self, kind: str, delta: str) -> list[dict]:
        out = []
        if self.open is None or self.open["type"] != kind:
            out = self._add(_message_item("", "in_progress") if kind == "message" else
                            _reasoning_item("", "in_progress"))
        self.text += delta
        name = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        extra = {"logprobs": []} if kind == "message" else {}
        return out + [self._event(name, **self._where(), content_index=0, delta=delta, **extra)]

    def chunks(self, chunks: list[dict]) -> list[dict]:
        out = []
        for c in chunks:
            if not c.get("choices"):
                continue
            delta = c["choices"][0]["delta"]
            if delta.get("reasoning_content"):
                out += self._text_delta("reasoning", delta["reasoning_content"])
            if delta.get("content"):
                out += self._text_delta("message", delta["content"])
            for entry in delta.get("tool_calls") or []:
                if "id" in entry:
                    out += self._add(_call_item(entry["id"], entry["function"]["name"], "", "in_progress"))
                args = entry["function"].get("arguments")
                if args:
                    self.text += args
                    out.append(self._event("response.function_call_arguments.delta", **self._where(), delta=args))
        return out

    def finish(self, result, extras: dict) -> list[dict]:
        """The closing events: the open item's, then ``response.completed`` (or
        ``response.incomplete`` when cut by ``max_output_tokens``) with the whole Response."""
        status = "incomplete" if result.finish_reason == "length" else "completed"
        out = self._add(_message_item("", "in_progress")) if not self.items and self.open is None else []
        out += self._close(status)
        response = response_object(self.turn, self.model, self.items, result, extras=extras)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return out + [self._event(kind, response=response)]

    def error(self, err: ApiError) -> list[dict]:
        error = {"code": "server_error" if err.status >= 500 else "invalid_prompt", "message": err.message}
        response = response_object(self.turn, self.model, self.items, status="failed", error=error)
        return [self._event("error", code=err.code, message=err.message, param=err.param),
                self._event("response.failed", response=response)]


# ------------------------------------------------------------------------------------- routes


def routes(srv) -> list[Route]:
    """The routes, over the app's server object ``srv``."""
    return [
        Route("/v1/responses", srv.endpoint(lambda r: create_response(srv, r)), methods=["POST"]),
        Route("/v1/responses/{response_id}", srv.endpoint(lambda r: get_response(srv, r)), methods=["GET"]),
    ]


async def create_response(srv, request: Request) -> Response:
    chat, turn = chat_body(await srv.read_body(request), srv.responses)
    try:
        req = srv.parse(chat, "chat")
        return await srv.run(request, req, lambda job, event: _response(srv, job, event, turn))
    except ApiError as e:
        raise rename(e, turn.where) from None


def _store(srv, turn: Turn, response: dict, items: list) -> None:
    if turn.store:
        srv.responses.put(response, turn.messages + [history_message(items)])


def _response(srv, job, event, turn: Turn) -> Response:
    req = job.req
    meta = new_meta(srv.model_name, chat=True)
    if req.stream:
        sink = _ResponseSink(srv, ResponseStream(turn, srv.model_name), turn)
        return SSEResponse(relay(job, event, ChunkStream(job.plan, meta, usage="none"), sink), job)
    result = event[1]
    chat = completion_object(True, meta, result, job.plan)
    items = output_items(chat)
    obj = response_object(turn, srv.model_name, items, result,
                          extras={"timings": chat["timings"], "speculative": chat["speculative"]})
    _store(srv, turn, obj, items)
    return JSONResponse(obj)


class _ResponseSink:
    """The Responses events for ``streams.relay``; a finished response is stored (``store``)."""

    def __init__(self, srv, stream: ResponseStream, turn: Turn):
        self.srv, self.stream, self.turn = srv, stream, turn

    def begin(self) -> list[bytes]:
        return [dialects.sse(e) for e in self.stream.start()]

    def chunks(self, chunks: list) -> list[bytes]:
        return [dialects.sse(e) for e in self.stream.chunks(chunks)]

    def done(self, result) -> list[bytes]:
        events = self.stream.finish(result, {"timings": timings(result), "speculative": stats_dict(result)})
        _store(self.srv, self.turn, events[-1]["response"], self.stream.items)
        return [dialects.sse(e) for e in events]

    def error(self, err: ApiError) -> list[bytes]:
        return [dialects.sse(e) for e in self.stream.error(rename(err, self.turn.where))]

    def close(self) -> list[bytes]:
        return []


async def get_response(srv, request: Request) -> Response:
    resp_id = request.path_params["response_id"]
    found = srv.responses.response(resp_id)
    if found is None:
        raise ApiError(404, f"no stored response {resp_id[:64]!r} (this server keeps the last {srv.responses.limit} "
                            "made with store on, in memory)", param="response_id", code="not_found")
    return JSONResponse(found)
