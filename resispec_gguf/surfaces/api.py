"""OpenAI-shaped requests and results, shared by the server and in-process use.

``plan_chat`` turns a chat request's messages, ``tools``/``tool_choice`` and
``response_format`` into a prompt and a constraint; ``completion_object``/``chunk_object``
shape results (tool calls included); ``create_chat_completion`` does all of it in-process,
mirroring llama-cpp-python's ``Llama.create_chat_completion`` so an assistant can switch with
little change.  Built on the engine's public API only.
"""

from __future__ import annotations

import codecs
import math
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

from ..assist import tools as _tools
from ..assist.chat_format import check_messages
from ..config import DraftParams, SamplingParams
from ..errors import FieldError


class RequestError(FieldError):
    """A chat request's ``response_format`` or tool options that cannot be honoured."""


@dataclass
class ChatPlan:
    """A chat request made ready for the engine: its prompt, its constraint (None: free
    text), and, when tools may be called, how to read calls back out of the reply."""

    prompt: list[int]
    constraint: object = None
    tools: "_tools.ToolRequest | None" = None
    format: "_tools.HermesFormat | None" = None

    @property
    def tools_active(self) -> bool:
        return self.tools is not None and self.tools.active

    def tool_calls(self, text: str):
        """``(content, calls)`` read from a finished reply, or None when it made no call."""
        if not self.tools_active:
            return None
        return self.format.parse(text, self.tools.allowed)


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
                       functions=None, function_call=None):
    """``(ToolRequest, schema)`` for a chat request's tool and format fields, checked without a
    model (``RequestError``/``ToolError`` naming the field)."""
    if tool_choice is None and function_call is not None:  # the legacy spelling
        tool_choice = ({"type": "function", "function": function_call} if isinstance(function_call, dict)
                       else function_call)
    functions_ = _tools.check_tools(tools, functions)
    req = _tools.check_tool_choice(tool_choice, functions_, parallel_tool_calls)
    schema = response_schema(response_format)
    if schema is not None and req.active:
        raise RequestError("response_format json_object/json_schema cannot be combined with tools "
                           "(use tool_choice 'none', or a tool whose parameters are the schema)", "response_format")
    return req, schema


def plan_chat(engine, messages, *, tools=None, tool_choice=None, parallel_tool_calls=None, response_format=None,
              functions=None, function_call=None, checked=None) -> ChatPlan:
    """The prompt and constraint for a chat request (see the module docstring).  ``checked``:
    ``check_chat_options``' result when the caller has it already."""
    req, schema = checked or check_chat_options(tools, tool_choice, parallel_tool_calls, response_format,
                                                functions, function_call)
    tool_messages = any(isinstance(m, dict) and (m.get("tool_calls") or m.get("role") == "tool")
                        for m in (messages if isinstance(messages, list) else []))
    fmt = None
    if req.active or tool_messages:  # the format renders tools, earlier calls and their results
        fmt = engine.tool_format()
        msgs, shown = _tools.prepare_messages(check_messages(messages), req, fmt)
        prompt = engine.chat_tokens(msgs, tools=shown)
    else:
        prompt = engine.chat_tokens(messages)
    constraint = None
    if req.active:
        constraint = engine.compile_constraint(grammar=fmt.grammar(req))
    elif schema is not None:
        constraint = engine.compile_constraint(json_schema=schema)
    return ChatPlan(prompt, constraint, req if req.active else None, fmt)


def finish_reason(engine_reason: str) -> str:
    """OpenAI's vocabulary: an end-of-generation token or a stop string are both "stop".

    An "interrupted" result (its stream was closed or failed before the end) keeps that
    name, which OpenAI's vocabulary lacks; the server never sends one, since a request is
    interrupted only when its client has gone or the server is stopping (503)."""
    return {"eos": "stop", "stop": "stop"}.get(engine_reason, engine_reason)


def stats_dict(result) -> dict:
    """``Stats.as_dict()`` with non-finite numbers as null (JSON has no NaN)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in result.stats.as_dict().items()}


def usage(result) -> dict:
    prompt = int(result.stats.prompt_tokens)
    completion = len(result.tokens)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def new_meta(model: str, chat: bool) -> dict:
    prefix = "chatcmpl-" if chat else "cmpl-"
    return {"id": prefix + uuid.uuid4().hex[:24], "created": int(time.time()), "model": model}


def _header(meta: dict, obj: str) -> dict:
    return {"id": meta["id"], "object": obj, "created": meta["created"], "model": meta["model"]}


# OpenAI's stand-in for the log-probability of an impossible token (JSON has no infinity)
MIN_LOGPROB = -9999.0


def _logprob(x: float) -> float:
    return x if x > MIN_LOGPROB else MIN_LOGPROB


def token_string(piece: bytes) -> str:
    """A token's text for ``logprobs``: its bytes as UTF-8, a byte that is not (part of a
    character split across tokens) as ``\\xNN``; the exact bytes go in ``bytes``."""
    return piece.decode("utf-8", "backslashreplace")


class LogprobsFormatter:
    """``engine.TokenLogprob`` entries -> OpenAI's ``logprobs`` object, chunk by chunk.

    Chat: ``{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}],
    "refusal": None}``.  Completions (the legacy shape): ``{tokens, token_logprobs,
    top_logprobs (a {token: logprob} dict per token), text_offset}``, offsets in characters
    from the start of the completion text.  Give ``format`` each chunk's entries in order: the
    lists of all chunks, concatenated, are those of one call with every entry.  ``piece``:
    token id -> the bytes it adds to the text (``Engine.token_piece``)."""

    def __init__(self, chat: bool, piece: Callable[[int], bytes]):
        self.chat = chat
        self.piece = piece
        self._chars = 0  # characters of completion text before the next token
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _item(self, token: int, logprob: float) -> dict:
        b = self.piece(token)
        return {"token": token_string(b), "logprob": _logprob(logprob), "bytes": list(b)}

    def format(self, entries) -> dict:
        if self.chat:
            content = [{**self._item(e.token, e.logprob), "top_logprobs": [self._item(t, lp) for t, lp in e.top]}
                       for e in entries]
            return {"content": content, "refusal": None}
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            b = self.piece(e.token)
            out["tokens"].append(token_string(b))
            out["token_logprobs"].append(_logprob(e.logprob))
            out["top_logprobs"].append({token_string(self.piece(t)): _logprob(lp) for t, lp in e.top})
            # where the token's text starts: after a character left incomplete, which the
            # text shows as U+FFFD once the next byte does not continue it
            out["text_offset"].append(self._chars + bool(self._decoder.getstate()[0]))
            self._chars += len(self._decoder.decode(b))
        return out


def completion_object(chat: bool, meta: dict, result, plan: ChatPlan | None = None, *,
                      logprobs: dict | None = None) -> dict:
    """A non-streaming ``chat.completion`` / ``text_completion`` with a ``speculative`` extra;
    with a ``plan`` whose tools may be called, calls in the reply become ``tool_calls``;
    ``logprobs``: the choice's (from ``LogprobsFormatter``), if asked for."""
    reason = finish_reason(result.finish_reason)
    if chat:
        message = {"role": "assistant", "content": result.text}
        parsed = plan.tool_calls(result.text) if plan is not None else None
        if parsed is not None:
            content, calls = parsed
            message = {"role": "assistant", "content": content or None, "tool_calls": [c.as_dict() for c in calls]}
            reason = _with_calls(reason)
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": result.text, "logprobs": logprobs, "finish_reason": reason}
    return {
        **_header(meta, "chat.completion" if chat else "text_completion"),
        "choices": [choice],
        "usage": usage(result),
        "speculative": stats_dict(result),
    }


def chunk_object(chat: bool, meta: dict, content: str | None, finish: str | None, *, role: bool = False,
                 tool_calls: list | None = None, logprobs: dict | None = None) -> dict:
    """One streaming chunk (``chat.completion.chunk`` delta, or ``text_completion`` text);
    ``tool_calls``: the delta's tool-call entries (``tool_call_deltas``); ``logprobs``: those of
    the chunk's tokens, if asked for."""
    if chat:
        delta = {} if content is None else {"content": content}
        if role:
            delta = {"role": "assistant", **delta}
        if tool_calls is not None:
            delta["tool_calls"] = tool_calls
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": content or "", "logprobs": logprobs, "finish_reason": finish}
    return {**_header(meta, "chat.completion.chunk" if chat else "text_completion"), "choices": [choice]}


def _with_calls(reason: str) -> str:
    """The finish_reason of a reply that made tool calls: "tool_calls", unless it was cut by
    max_tokens ("length")."""
    return reason if reason == "length" else "tool_calls"


def tool_call_deltas(calls) -> list[list[dict]]:
    """The streamed form of finished calls: per call, a delta entry with its index, id, type
    and name (empty arguments), then one with the arguments.  Concatenating each index's
    ``arguments`` gives exactly the non-streamed call."""
    out = []
    for i, c in enumerate(calls):
        out.append([{"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}])
        out.append([{"index": i, "function": {"arguments": c.arguments}}])
    return out


class ToolStream:
    """Streams a reply's text while holding back what may be a tool call: text before a
    call marker goes out as content; at the end, ``finish`` returns the remaining content
    and the calls (or the held-back text, when no well-formed call came)."""

    def __init__(self, plan: ChatPlan):
        self.plan = plan
        self.text = ""
        self.sent = 0

    def push(self, piece: str) -> str:
        self.text += piece
        if not self.plan.tools_active:
            out, self.sent = self.text[self.sent:], len(self.text)
            return out
        safe = self.plan.format.pending(self.text)
        if safe <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:safe], safe
        return out

    def finish(self, text: str):
        """``(content_left, calls)``: ``calls`` None when the reply made no call."""
        parsed = self.plan.tool_calls(text)
        if parsed is None:
            return text[self.sent:], None
        return "", parsed[1]


# ---------------------------------------------------------------------------------- llama.cpp's /infill


def _timings(stats) -> dict:
    """llama.cpp's ``timings``: prompt (the tokens not reused from the cache) and generation."""
    prompt_n = max(0, int(stats.prompt_tokens) - int(stats.prompt_reused))
    prompt_ms, predicted_ms = 1000.0 * stats.prompt_time, 1000.0 * stats.total_time
    n = int(stats.tokens)
    return {
        "cache_n": int(stats.prompt_reused),
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000.0 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / n if n else 0.0,
        "predicted_per_second": 1000.0 * n / predicted_ms if predicted_ms > 0 else 0.0,
    }


def infill_object(result, model: str, *, truncated: bool, settings: dict) -> dict:
    """llama.cpp server's ``/infill`` (and ``/completion``) answer, as far as it applies here,
    with the ``speculative`` extra.  ``stop_type``: "eos", "word" (a stop string) or "limit"."""
    st = result.stats
    return {
        "index": 0,
        "content": result.text,
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": model,
        "tokens_predicted": len(result.tokens),
        "tokens_evaluated": int(st.prompt_tokens),
        "generation_settings": settings,
        "has_new_line": "\n" in result.text,
        "truncated": bool(truncated),
        "stop_type": {"eos": "eos", "stop": "word", "length": "limit"}.get(result.finish_reason, "none"),
        "stopping_word": "",
        "tokens_cached": int(st.prompt_tokens) + len(result.tokens),
        "timings": _timings(st),
        "speculative": stats_dict(result),
    }


def infill_chunk(content: str) -> dict:
    """One piece of a streamed ``/infill`` answer."""
    return {"index": 0, "content": content, "tokens": [], "stop": False, "id_slot": -1}


def nested_fields(obj: dict, paths) -> dict:
    """llama.cpp's ``response_fields``: only the values at these paths (``"timings/prompt_n"``
    reads ``obj["timings"]["prompt_n"]``), under the path itself; missing paths are left out."""
    out = {}
    for path in paths:
        cur, ok = obj, True
        for key in path.split("/"):
            if isinstance(cur, dict) and key in cur:
                cur = cur[key]
            else:
                ok = False
                break
        if ok:
            out[path] = cur
    return out


def create_chat_completion(
    engine,
    messages: list[dict],
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    max_tokens: int | None = None,
    stop=None,
    seed: int | None = None,
    stream: bool = False,
    model: str = "resispec-gguf",
    draft: DraftParams | None = None,
    tools: list | None = None,
    tool_choice=None,
    parallel_tool_calls: bool | None = None,
    response_format: dict | None = None,
    logprobs: bool = False,
    top_logprobs: int | None = None,
):
    """Chat completion in OpenAI's shape: a dict, or an iterator of chunk dicts when
    ``stream=True``.  The extra ``speculative`` key carries the step statistics.  A sampling
    argument left at None takes ``SamplingParams``' default; ``draft`` None the engine's
    (``DraftParams()``).  ``tools``/``tool_choice``/``parallel_tool_calls`` and
    ``response_format`` are OpenAI's: calls come back as ``message.tool_calls`` with
    finish_reason "tool_calls", JSON formats are enforced by a grammar (exactly, under
    speculation).  ``logprobs``/``top_logprobs``: as OpenAI's (the target's own
    log-probabilities at T = 1 before filters)."""
    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, max_tokens=max_tokens,
                 stop=stop, seed=seed)
    sp = SamplingParams(**{k: v for k, v in given.items() if v is not None})
    if top_logprobs is not None and not logprobs:
        raise ValueError("top_logprobs needs logprobs=True")
    n_lp = (top_logprobs or 0) if logprobs else None
    plan = plan_chat(engine, messages, tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                     response_format=response_format)
    meta = new_meta(model, chat=True)
    if not stream:
        result = engine.generate(plan.prompt, sp, draft, constraint=plan.constraint, logprobs=n_lp)
        lp = LogprobsFormatter(True, engine.token_piece).format(result.logprobs) if n_lp is not None else None
        return completion_object(True, meta, result, plan, logprobs=lp)
    return _stream_chunks(engine, plan, sp, draft, meta, n_lp)


def _stream_chunks(engine, plan: ChatPlan, sp, draft, meta, n_lp=None) -> Iterator[dict]:
    yield chunk_object(True, meta, "", None, role=True)
    held = ToolStream(plan)
    if n_lp is None:
        for piece in engine.stream(plan.prompt, sp, draft, constraint=plan.constraint):
            out = held.push(piece)
            if out:
                yield chunk_object(True, meta, out, None)
        yield from final_chunks(meta, held, engine.last_result)
        return
    fmt = LogprobsFormatter(True, engine.token_piece)
    pending, sent = [], 0  # entries of tokens whose text is held back; entries sent
    for piece, entries in engine.stream_logprobs(plan.prompt, sp, draft, n_lp, constraint=plan.constraint):
        pending += entries
        out = held.push(piece)
        if out:
            sent += len(pending)
            yield chunk_object(True, meta, out, None, logprobs=fmt.format(pending))
            pending = []
    result = engine.last_result
    left = result.logprobs[sent:]
    yield from final_chunks(meta, held, result, logprobs=fmt.format(left) if left else None)


def final_chunks(meta, held: ToolStream, result, *, usage_chunk: bool = False, with_usage: bool = True,
                 chunk=None, logprobs: dict | None = None, chat: bool = True) -> Iterator[dict]:
    """The chunks that end a stream (a chat's, or with ``chat`` False a completion's):
    held-back content or the tool calls, then the chunk with finish_reason.  ``usage`` and ``speculative`` ride on that chunk, or with
    ``usage_chunk`` (OpenAI's ``stream_options.include_usage``) on one more chunk with no
    choices; ``with_usage`` False leaves ``usage`` out.  ``chunk``: makes each chunk (default
    ``chunk_object`` for a chat).  ``logprobs``: those of the tokens no earlier chunk carried
    (held back, or a stop string's), on the finish_reason chunk."""
    chunk = chunk or (lambda content, finish, **kw: chunk_object(chat, meta, content, finish, **kw))
    rest, calls = held.finish(result.text)
    if rest:
        yield chunk(rest, None)
    reason = finish_reason(result.finish_reason)
    if calls is not None:
        for entries in tool_call_deltas(calls):
            yield chunk(None, None, tool_calls=entries)
        reason = _with_calls(reason)
    last = chunk(None, reason, logprobs=logprobs) if logprobs is not None else chunk(None, reason)
    if usage_chunk:
        yield last
        last = {**chunk_object(chat, meta, None, None), "choices": []}
    if with_usage or usage_chunk:
        last["usage"] = usage(result)
    last["speculative"] = stats_dict(result)
    yield last
