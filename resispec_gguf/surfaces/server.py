"""An OpenAI-compatible HTTP API for one loaded ``Engine`` (Starlette app, served by uvicorn).

Routes: ``GET /health``, ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /infill``,
``POST /v1/chat/completions`` and ``POST /v1/completions`` (both streaming as server-sent events
and non-streaming).  Besides the OpenAI fields (``temperature``, ``top_p``, ``max_tokens``,
``max_completion_tokens``, ``stop``, ``seed``, ``n`` = 1, ``stream_options.include_usage``) a
request may set ``top_k`` and ``min_p`` and override the draft parameters with ``method``,
``draws``, ``depth`` and ``budget``.  Responses (and the last chunk of a stream) carry an extra
``"speculative"`` object: the generation's ``Stats.as_dict()``.  The ``model`` field is
ignored (one model is served); penalties, ``logit_bias`` and ``user`` are accepted and ignored;
features that cannot be honoured (``n`` > 1, echo) are refused.  Chat requests may carry
``tools``/``tool_choice``/``parallel_tool_calls`` and ``response_format`` (``json_object``,
``json_schema``): ``api.plan_chat`` turns them into a prompt and a constraint, and calls in
the reply come back as ``tool_calls`` (streamed as ``delta.tool_calls``).

Input: POST bodies must be ``application/json`` (else 415), at most ``MAX_BODY_BYTES``.  A
prompt that cannot fit the context whatever its text (more UTF-8 bytes than
``engine.max_prompt_bytes``) is refused with 400 ``context_length_exceeded`` before it is
tokenized.  Message contents are tokenized as text: only the chat template's own text can
become control tokens (``Engine.chat_tokens``).  Cross-origin browser requests are refused
unless ``cors_origins`` allows the origin.

Code infill: ``/v1/completions`` with a non-empty ``suffix`` and llama.cpp's ``POST /infill``
(``_parse_infill``; answered in llama.cpp's shape, ``api.infill_object``) fill in between a
prefix and a suffix with the model's FIM tokens (``Engine.infill_tokens``, ``fim.py``); a model
without them gets a 400.

Logprobs: chat's ``logprobs``/``top_logprobs`` and completions' ``logprobs`` (0 to
``MAX_TOP_LOGPROBS`` alternatives) add the target's log-probabilities at T = 1 before filters,
shaped by ``api.LogprobsFormatter``; streamed, each chunk carries its tokens' and the finish
chunk the rest.

Concurrency: the engine is not thread-safe, so every generation runs on one dedicated worker
thread, one request at a time, in the order their prompts are ready.  Rendering and
tokenizing a prompt (which only reads the vocabulary) happen before, on a small pool of
tokenizer threads, so a large prompt never holds up the engine.  At most ``max_queue``
requests wait (being tokenized or queued) behind the running one; more get 503 with
``Retry-After``.  A client that disconnects cancels its request at once: a waiting request
leaves the queue (its tokenization result is dropped), a running one stops at the next text
piece (the worker closes the engine's generator).

Errors never kill the server: bad input gets a 4xx and anything unexpected a logged 500 with a
generic message, both as ``{"error": {"message", "type", "param", "code"}}``.

What this module may not do: import llama_cpp or touch the backend; it uses only the engine's
public API (``stream``, ``stream_logprobs``, ``token_piece``, ``last_result``, ``chat_tokens``, ``text_tokens``,
``max_prompt_bytes``, ``n_ctx``, ``check_draft_params``, ``fim_tokens``, ``infill_tokens``) and the settings dataclasses, which do
all range validation and name the field of a bad value (``ConfigError.field``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import errno
import hmac
import json
import logging
import math
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import api
from ..assist.chat_format import MessageError, check_messages
from ..config import ConfigError, DraftParams, SamplingParams, ServerParams
from ..errors import ContextFullError, UserError
from ..assist.grammar import GrammarError
from ..assist.tools import ToolError

__all__ = ["create_app", "serve", "listen"]

log = logging.getLogger("resispec_gguf.surfaces.server")

MAX_BODY_BYTES = 16 << 20
MAX_TOKENS_LIMIT = 1_000_000
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1000
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on chat's top_logprobs; the same for completions' logprobs
TOKENIZER_THREADS = 4
# JSON integers are unbounded; these keep them within what NumPy and the kernels take.  The
# settings' own bounds are the dataclasses' (config.py), checked after these.
_INT32 = 2**31 - 1
_SEED_LIMIT = 2**64 - 1


# ---------------------------------------------------------------------------------- errors


class _ApiError(Exception):
    """Becomes an OpenAI-shaped JSON error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _bad(message: str, param: str | None = None, code: str | None = None) -> _ApiError:
    return _ApiError(400, message, param=param, code=code)


def _internal(exc: BaseException) -> _ApiError:
    """The details go to the log, never to the client."""
    return _ApiError(500, "internal server error (see the server's log)", code="internal_error")


def _cancelled() -> _ApiError:
    return _ApiError(503, "the request was cancelled (the server is shutting down)", code="cancelled",
                     headers={"Retry-After": "1"})


def _user_error(exc: UserError, prompt_param: str) -> _ApiError:
    if isinstance(exc, ContextFullError):
        return _bad(str(exc), prompt_param, "context_length_exceeded")
    if isinstance(exc, MessageError):
        return _bad(str(exc), exc.param, "invalid_value")
    return _bad(str(exc))


def _too_long(size: int, limit: int, n_ctx: int, param: str) -> _ApiError:
    return _bad(f"the prompt ({size} bytes or more) cannot fit the context ({n_ctx} tokens): the limit is "
                f"{limit} bytes", param, "context_length_exceeded")


def _utf8_size(text: str, param: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise _bad(f"{param} is not valid Unicode (a lone surrogate at character {e.start})", param,
                   "invalid_value") from None


# ---------------------------------------------------------------------------------- request fields


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _bad(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", code="invalid_json")
    return body


def _number(body: dict, name: str) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(f"{name} must be a number, got {json.dumps(v)[:80]}", name, "invalid_type")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise _bad(f"{name} must be a finite number", name, "invalid_value")
    return f


def _integer(body: dict, name: str, limit: int = _INT32) -> int | None:
    """An integer field of at most ``limit`` in size; its range is the setting's to check."""
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"{name} must be an integer, got {json.dumps(v)[:80]}", name, "invalid_type")
    if abs(v) > limit:
        raise _bad(f"{name} is out of range: at most {limit} in size, got {v}", name, "invalid_value")
    return v


def _typed(body: dict, name: str, kind: type, label: str):
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, kind):
        raise _bad(f"{name} must be {label}, got {json.dumps(v)[:80]}", name, "invalid_type")
    return v


def _boolean(body: dict, name: str) -> bool | None:
    return _typed(body, name, bool, "a boolean")


def _string(body: dict, name: str) -> str | None:
    return _typed(body, name, str, "a string")


def _stop(body: dict) -> tuple[str, ...] | None:
    v = body.get("stop")
    if v is None:
        return None
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise _bad("stop must be a string or a list of strings", "stop", "invalid_type")
    if len(v) > MAX_STOP_STRINGS:
        raise _bad(f"stop may hold at most {MAX_STOP_STRINGS} strings", "stop", "invalid_value")
    for s in v:
        if len(s) > MAX_STOP_CHARS:  # the stop-string check costs up to its length squared per token
            raise _bad(f"a stop string may have at most {MAX_STOP_CHARS} characters", "stop", "invalid_value")
        _utf8_size(s, "stop")
    return tuple(v)


def _refuse_unsupported(body: dict, chat: bool) -> None:
    n = _integer(body, "n")
    if n is not None and n != 1:
        raise _bad("only n=1 is supported", "n", "unsupported_value")
    if not chat:
        if body.get("echo"):
            raise _bad("echo is not supported", "echo", "unsupported_value")
        best_of = body.get("best_of")
        if best_of is not None and best_of != 1:
            raise _bad("only best_of=1 is supported", "best_of", "unsupported_value")


def _logprobs_option(body: dict, chat: bool) -> int | None:
    """The number of alternatives per token the request wants logprobs with, None for none.
    Chat: ``logprobs`` (a boolean) and ``top_logprobs`` (0-20, only with ``logprobs``);
    completions: ``logprobs`` (an integer 0-20; false or null for none)."""
    if chat:
        on = bool(_boolean(body, "logprobs"))
        top = _integer(body, "top_logprobs")
        if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
            raise _bad(f"top_logprobs must be from 0 to {MAX_TOP_LOGPROBS}, got {top}", "top_logprobs", "invalid_value")
        if top is not None and not on:
            raise _bad("top_logprobs needs logprobs set to true", "top_logprobs", "invalid_value")
        return (top or 0) if on else None
    if body.get("logprobs") is False:
        return None
    n = _integer(body, "logprobs")
    if n is not None and not 0 <= n <= MAX_TOP_LOGPROBS:
        raise _bad(f"logprobs must be from 0 to {MAX_TOP_LOGPROBS}, got {n}", "logprobs", "invalid_value")
    return n


def _text_field(body: dict, name: str, limit: int, n_ctx: int, *, required: bool) -> str | None:
    """A string field holding prompt text: present if ``required``, at most ``limit`` bytes."""
    if body.get(name) is None:
        if required:
            raise _bad(f"{name} is required", name, "missing_field")
        return None
    text = _string(body, name)
    if len(text) > limit or _utf8_size(text, name) > limit:
        raise _too_long(len(text), limit, n_ctx, name)
    return text


def _with_suffix(body: dict, prompt, limit: int, n_ctx: int):
    """A completion's prompt, or with a non-empty ``suffix`` the fill-in-the-middle prompt
    between them."""
    suffix = _text_field(body, "suffix", limit, n_ctx, required=False)
    if not suffix:
        return prompt
    if not isinstance(prompt, str):
        raise _bad("with a suffix, prompt must be text", "prompt", "invalid_type")
    return _Infill(prompt, suffix)


def _input_extra(body: dict, limit: int, n_ctx: int) -> tuple:
    """``/infill``'s ``input_extra``: ``[{filename, text}]`` as ``(filename, text)`` pairs; every
    chunk costs a token or more, and all their text together must fit ``limit`` bytes."""
    chunks = body.get("input_extra")
    if chunks is None:
        return ()
    if not isinstance(chunks, list):
        raise _bad("input_extra must be a list of {filename, text} objects", "input_extra", "invalid_type")
    if len(chunks) >= n_ctx:
        raise _bad(f"input_extra has {len(chunks)} chunks; the context holds {n_ctx} tokens", "input_extra",
                   "context_length_exceeded")
    out, size = [], 0
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, dict):
            raise _bad("input_extra items must be {filename, text} objects", f"input_extra[{i}]", "invalid_type")
        try:
            text = _typed(chunk, "text", str, "a string") or ""
            filename = _typed(chunk, "filename", str, "a string") or "tmp"  # llama.cpp's default name
        except _ApiError as e:
            raise _bad(e.message.replace(e.param, f"input_extra[{i}].{e.param}", 1), f"input_extra[{i}].{e.param}",
                       e.code) from None
        size += len(text) + len(filename)  # characters first: a lower bound on the bytes, free to get
        if size <= limit:
            size += (_utf8_size(text, f"input_extra[{i}].text") - len(text)
                     + _utf8_size(filename, f"input_extra[{i}].filename") - len(filename))
        if size > limit:
            raise _bad(f"input_extra is too large: more than {limit} bytes of text cannot fit the context "
                       f"({n_ctx} tokens)", "input_extra", "context_length_exceeded")
        out.append((filename, text))
    return tuple(out)


def _parse_infill(body: dict, sp0: SamplingParams, dp0: DraftParams, limit: int, n_ctx: int) -> _Request:
    """llama.cpp's ``/infill`` fields: ``input_prefix``, ``input_suffix`` (required),
    ``input_extra``, ``prompt`` (text after the prefix), ``n_predict`` (-1: until the context
    is full), ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed`` (-1: random), ``stop``,
    ``stream``, ``response_fields``, and this server's draft parameters.  Other llama.cpp
    fields (``n_indent``, ``samplers``, ``cache_prompt``, ``t_max_*_ms``, ...) are ignored."""
    prefix = _text_field(body, "input_prefix", limit, n_ctx, required=True)
    suffix = _text_field(body, "input_suffix", limit, n_ctx, required=True)
    middle = _text_field(body, "prompt", limit, n_ctx, required=False) or ""
    extra = _input_extra(body, limit, n_ctx)
    if body.get("seed") == -1:
        body = {k: v for k, v in body.items() if k != "seed"}
    n_predict = _integer(body, "n_predict", MAX_TOKENS_LIMIT)
    fields = body.get("response_fields")
    if fields is not None and not (isinstance(fields, list) and all(isinstance(f, str) for f in fields)):
        raise _bad("response_fields must be a list of strings", "response_fields", "invalid_type")
    sampling = {**_sampling_fields(body), "max_tokens": n_ctx if n_predict == -1 else n_predict}
    draft = _draft_fields(body)
    try:
        sp = sp0.replace(**{k: v for k, v in sampling.items() if v is not None})
        dp = dp0.replace(**{k: v for k, v in draft.items() if v is not None})
    except ConfigError as e:
        raise _settings_error(e, {"max_tokens": "n_predict"}) from None
    prompt = _Infill(prefix, suffix, middle, extra, repo_level=True)
    return _Request("infill", prompt, sp, dp, bool(_boolean(body, "stream")), False,
                    response_fields=None if fields is None else tuple(fields))


def _sampling_fields(body: dict) -> dict:
    """The sampling settings a request may set (None: not given), type-checked; their ranges
    are the settings' own."""
    return {
        "temperature": _number(body, "temperature"),
        "top_p": _number(body, "top_p"),
        "min_p": _number(body, "min_p"),
        "top_k": _integer(body, "top_k"),
        "seed": _integer(body, "seed", _SEED_LIMIT),
        "stop": _stop(body),
    }


def _draft_fields(body: dict) -> dict:
    """The speculation settings a request may override (None: not given)."""
    return {"method": _string(body, "method"), "draws": _integer(body, "draws"), "depth": _integer(body, "depth"),
            "budget": _integer(body, "budget")}


def _settings_error(e: ConfigError, fields: dict) -> _ApiError:
    """``fields``: the request field behind a setting, where it is not named as the setting."""
    return _bad(str(e), fields.get(e.field, e.field), "invalid_value")


@dataclass
class _Infill:
    """A fill-in-the-middle prompt (``Engine.infill_tokens``'s arguments); ``truncated`` is set
    when it is tokenized."""

    prefix: str
    suffix: str
    middle: str = ""
    extra: tuple = ()  # (filename, text) pairs
    repo_level: bool = False
    truncated: bool = False


@dataclass
class _Request:
    kind: str  # "chat" | "completion"
    prompt: Any  # chat: checked messages; completion: a string or a list of token ids
    sampling: SamplingParams
    draft: DraftParams
    stream: bool
    include_usage: bool
    options: tuple | None = None  # chat: api.check_chat_options' (ToolRequest, schema)
    logprobs: int | None = None  # alternatives per token when logprobs are asked for
    response_fields: tuple | None = None  # /infill: only these (nested "a/b") fields, flattened

    @property
    def prompt_param(self) -> str:
        return "messages" if self.kind == "chat" else "prompt"


def _parse_request(body: dict, kind: str, sp0: SamplingParams, dp0: DraftParams, limit: int, n_ctx: int) -> _Request:
    """Check every field; ``limit``: prompts of more UTF-8 bytes cannot fit (checked here, on
    the characters first, so that no huge prompt is ever tokenized)."""
    chat = kind == "chat"
    _refuse_unsupported(body, chat)
    if chat:
        if "messages" not in body:
            raise _bad("messages is required", "messages", "missing_field")
        messages = body["messages"]
        if isinstance(messages, list) and len(messages) >= n_ctx:  # every turn costs tokens in any template
            raise _bad(f"{len(messages)} messages cannot fit the context ({n_ctx} tokens)", "messages",
                       "context_length_exceeded")
        try:
            prompt = check_messages(messages)
        except MessageError as e:
            raise _bad(str(e), e.param, "invalid_value") from None
        size = sum(len(m["content"]) for m in prompt)
        if size > limit or sum(len(m["content"].encode("utf-8")) for m in prompt) > limit:
            raise _too_long(size, limit, n_ctx, "messages")
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, list):
            if len(prompt) >= n_ctx:
                raise _bad(f"the prompt ({len(prompt)} tokens) does not fit the context ({n_ctx} tokens)",
                           "prompt", "context_length_exceeded")
            if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
                raise _bad("prompt must be a string, a list with one string, or a list of token ids",
                           "prompt", "invalid_type")
        elif not isinstance(prompt, str):
            if prompt is None:
                raise _bad("prompt is required", "prompt", "missing_field")
            raise _bad("prompt must be a string, a list with one string, or a list of token ids",
                       "prompt", "invalid_type")
        if isinstance(prompt, str) and (len(prompt) > limit or _utf8_size(prompt, "prompt") > limit):
            raise _too_long(len(prompt), limit, n_ctx, "prompt")
        prompt = _with_suffix(body, prompt, limit, n_ctx)

    sampling: dict[str, Any] = _sampling_fields(body)
    max_tokens = _integer(body, "max_tokens", MAX_TOKENS_LIMIT)
    renamed: dict[str, str] = {}
    if chat:
        mct = _integer(body, "max_completion_tokens", MAX_TOKENS_LIMIT)
        if mct is not None:
            max_tokens = mct
            renamed["max_tokens"] = "max_completion_tokens"
    sampling["max_tokens"] = max_tokens
    draft: dict[str, Any] = _draft_fields(body)
    sampling = {k: v for k, v in sampling.items() if v is not None}
    draft = {k: v for k, v in draft.items() if v is not None}
    try:
        sp = sp0.replace(**sampling)
        dp = dp0.replace(**draft)
    except ConfigError as e:
        raise _settings_error(e, renamed) from None

    stream = bool(_boolean(body, "stream"))
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise _bad("stream_options must be an object", "stream_options", "invalid_type")
    include_usage = bool(_boolean(opts or {}, "include_usage"))
    options = None
    if chat:
        try:
            options = api.check_chat_options(body.get("tools"), body.get("tool_choice"),
                                              body.get("parallel_tool_calls"), body.get("response_format"),
                                              body.get("functions"), body.get("function_call"))
        except (api.RequestError, ToolError) as e:
            raise _bad(str(e), e.param, "invalid_value") from None
    return _Request(kind, prompt, sp, dp, stream, include_usage, options, logprobs=_logprobs_option(body, chat))


# ---------------------------------------------------------------------------------- the worker


class _Job:
    """One request's generation, run on the engine thread; events go back to the event loop.

    ``prompt`` (token ids) is set before the job is queued.  Events: ("piece", str) when
    streaming, then exactly one of ("done", Result), ("user_error", UserError),
    ("error", Exception) or ("cancelled", None | Result).
    """

    def __init__(self, engine, req: _Request, loop: asyncio.AbstractEventLoop):
        self.engine = engine
        self.req = req
        self.loop = loop
        self.plan: api.ChatPlan | None = None  # the prompt's tokens and constraint
        self.events: asyncio.Queue = asyncio.Queue()
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _put(self, kind: str, value) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self._cancel.set()

    def run(self) -> None:
        if self.cancelled:
            self._put("cancelled", None)
            return
        try:
            if self.req.logprobs is None:
                pieces = self.engine.stream(self.plan.prompt, self.req.sampling, self.req.draft,
                                            constraint=self.plan.constraint)
            else:  # pieces are (text, logprobs entries)
                pieces = self.engine.stream_logprobs(self.plan.prompt, self.req.sampling, self.req.draft,
                                                     self.req.logprobs, constraint=self.plan.constraint)
            try:
                for piece in pieces:
                    if self.req.stream:
                        self._put("piece", piece)
                    if self.cancelled:
                        break
            finally:
                pieces.close()
            self._put("cancelled" if self.cancelled else "done", self.engine.last_result)
        except UserError as exc:
            self._put("user_error", exc)
        except Exception as exc:
            log.exception("generation failed")
            self._put("error", exc)


def _constraint_param(req: _Request) -> str:
    """The request field a constraint came from."""
    return "tools" if req.options and req.options[0].active else "response_format"


def _plan(engine, req: _Request) -> api.ChatPlan:
    """Render and tokenize a request's prompt and compile its constraint (on a tokenizer
    thread: this only reads the vocabulary, so it may run while the engine thread decodes)."""
    if isinstance(req.prompt, _Infill):
        p = req.prompt
        tokens, p.truncated = engine.infill_tokens(p.prefix, p.suffix, middle=p.middle, extra=p.extra,
                                                   repo_level=p.repo_level,
                                                   reserve=min(req.sampling.max_tokens, int(engine.n_ctx) // 2))
        return api.ChatPlan(tokens)
    if req.kind == "chat":
        try:
            return api.plan_chat(engine, req.prompt, checked=req.options)
        except UserError:
            raise
        except Exception as exc:  # a template tripping over the request's data is bad input
            raise UserError(f"the chat template failed on these messages ({type(exc).__name__})") from None
    if isinstance(req.prompt, str):
        return api.ChatPlan(engine.text_tokens(req.prompt))
    return api.ChatPlan(list(req.prompt))


class _Worker:
    """The one thread that calls the engine, with a FIFO of queued jobs.

    A request is *admitted* (counted against the limit) when it arrives, *queued* once its
    prompt is tokenized, and leaves with ``withdraw`` as soon as its client is gone."""

    def __init__(self):
        self._cv = threading.Condition()
        self._admitted: set[_Job] = set()  # admitted, prompt not ready yet
        self._jobs: collections.deque[_Job] = collections.deque()
        self._current: _Job | None = None
        self._running = False  # a worker thread exists and will look at the queue again
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def inflight(self) -> int:
        """Admitted requests not finished yet (the running one plus the waiting ones)."""
        with self._cv:
            return len(self._admitted) + len(self._jobs) + (self._current is not None)

    def admit(self, job: _Job, limit: int) -> bool:
        """Count ``job`` in unless ``limit`` requests are already in flight."""
        with self._cv:
            if len(self._admitted) + len(self._jobs) + (self._current is not None) >= limit:
                return False
            self._admitted.add(job)
            return True

    def enqueue(self, job: _Job) -> bool:
        """Queue an admitted job whose prompt is ready; False if it was withdrawn meanwhile."""
        with self._cv:
            if job not in self._admitted:
                return False
            self._admitted.discard(job)
            self._closing = False
            self._jobs.append(job)
            if not self._running:
                self._running = True
                self._thread = threading.Thread(target=self._loop, name="resispec-engine", daemon=True)
                self._thread.start()
            self._cv.notify()
            return True

    def withdraw(self, job: _Job) -> None:
        """Cancel ``job``; if it is not running yet it leaves at once, freeing its place."""
        with self._cv:
            job.cancel()
            self._admitted.discard(job)
            with contextlib.suppress(ValueError):
                self._jobs.remove(job)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._closing:
                    self._cv.wait()
                if not self._jobs:
                    self._running = False
                    return
                job = self._current = self._jobs.popleft()
            try:
                job.run()
            except BaseException:  # pragma: no cover - run() catches everything it expects
                log.exception("engine worker job crashed")
            finally:
                with self._cv:
                    self._current = None

    def shutdown(self, timeout: float = 30.0) -> None:
        """Cancel every job and wait for the thread to leave the engine (so it can be closed)."""
        with self._cv:
            self._closing = True
            for job in list(self._admitted) + list(self._jobs) + ([self._current] if self._current else []):
                job.cancel()
            self._admitted.clear()
            thread = self._thread
            self._cv.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


# ---------------------------------------------------------------------------------- responses


def _sse(obj) -> bytes:
    if isinstance(obj, str):
        return f"data: {obj}\n\n".encode()
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class _SSEResponse(StreamingResponse):
    """A streaming response that cancels its job however the response ends."""

    def __init__(self, content, job: _Job):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._job = job

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._job.cancel()


async def _wait_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _Server:
    def __init__(self, engine, params: ServerParams, draft_params: DraftParams, sampling_defaults: SamplingParams):
        self.engine = engine
        self.model_name = params.model_name or "resispec-gguf"
        self.draft_params = draft_params
        self.sampling_defaults = sampling_defaults
        self.api_key = params.api_key
        self.max_queue = params.max_queue
        self.worker = _Worker()
        self.tokenizer = concurrent.futures.ThreadPoolExecutor(TOKENIZER_THREADS, thread_name_prefix="resispec-tokenize")
        self.n_ctx = int(engine.n_ctx)
        self.max_prompt_bytes = int(engine.max_prompt_bytes)  # scans the vocabulary once, now
        self.has_fim = engine.fim_tokens is not None
        self.created = int(time.time())

    # ------------------------------------------------------------------ plumbing

    def _check_auth(self, request: Request) -> None:
        if not self.api_key:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            raise _ApiError(401, "invalid or missing API key (send 'Authorization: Bearer <key>')",
                            code="invalid_api_key")

    @staticmethod
    def _check_json(request: Request) -> None:
        """A browser sends a cross-site POST without asking first only as text/plain, a form or
        multipart; requiring JSON makes it ask (a CORS preflight), which only allowed origins
        pass."""
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            raise _ApiError(415, f"the Content-Type must be application/json, got {media_type[:60] or 'none'!r}",
                            code="unsupported_media_type")

    def endpoint(self, fn: Callable, auth: bool = True) -> Callable:
        async def handler(request: Request) -> Response:
            try:
                if auth:
                    self._check_auth(request)
                if request.method == "POST":
                    self._check_json(request)
                return await fn(request)
            except _ApiError as e:
                return e.response()
            except ClientDisconnect:  # gone while sending the body; nobody reads an answer
                return Response(status_code=499)
            except Exception as e:
                log.exception("unexpected error in %s %s", request.method, request.url.path)
                return _internal(e).response()

        return handler

    @staticmethod
    async def _read_body(request: Request) -> dict:
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise _ApiError(413, f"the request body exceeds {MAX_BODY_BYTES} bytes", code="request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _ApiError(413, f"the request body exceeds {MAX_BODY_BYTES} bytes", code="request_too_large")
            chunks.append(chunk)
        return _parse_json(b"".join(chunks))

    @staticmethod
    async def _unless_disconnect(awaitable, request: Request):
        """``(True, result)`` of ``awaitable``, or ``(False, None)`` when the client went away first
        (the awaitable is then cancelled)."""
        get = asyncio.ensure_future(awaitable)
        watch = asyncio.ensure_future(_wait_disconnect(request.receive))
        try:
            await asyncio.wait({get, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (get, watch):
                if not task.done():
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch
        if get.done() and not get.cancelled():
            return True, get.result()  # re-raises the awaitable's exception
        return False, None

    def _raise_for(self, event, req: _Request) -> None:
        kind, value = event
        if kind == "user_error" and isinstance(value, GrammarError):  # e.g. no token allowed first
            raise _bad(str(value), _constraint_param(req), "invalid_value")
        if kind == "user_error":
            raise _user_error(value, req.prompt_param)
        if kind == "error":
            raise _internal(value)
        if kind == "cancelled":
            raise _cancelled()

    # ------------------------------------------------------------------ routes

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def _model_card(self) -> dict:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "resispec-gguf"}

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: Request) -> Response:
        if request.path_params["model"] != self.model_name:
            raise _ApiError(404, f"the model {request.path_params['model']!r} does not exist; this server serves "
                                 f"{self.model_name!r}", param="model", code="model_not_found")
        return JSONResponse(self._model_card())

    async def chat(self, request: Request) -> Response:
        return await self._complete(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, "completion")

    async def infill(self, request: Request) -> Response:
        return await self._complete(request, "infill")

    def _check_fim(self, req: _Request) -> None:
        if isinstance(req.prompt, _Infill) and not self.has_fim:
            raise _bad("this model has no fill-in-the-middle tokens (such as <|fim_prefix|>, <|fim_suffix|>, "
                       "<|fim_middle|>), so it cannot fill in code between a prefix and a suffix",
                       "suffix" if req.kind == "completion" else None, "unsupported_value")

    async def _complete(self, request: Request, kind: str) -> Response:
        body = await self._read_body(request)
        if kind == "infill":
            req = _parse_infill(body, self.sampling_defaults, self.draft_params, self.max_prompt_bytes, self.n_ctx)
        else:
            req = _parse_request(body, kind, self.sampling_defaults, self.draft_params, self.max_prompt_bytes,
                                 self.n_ctx)
        self._check_fim(req)
        job = _Job(self.engine, req, asyncio.get_running_loop())
        if not self.worker.admit(job, self.max_queue + 1):
            raise _ApiError(503, "the server is busy: too many requests are waiting; retry shortly",
                            code="queue_full", headers={"Retry-After": "1"})
        handed_over = False
        try:
            try:
                tokenized = asyncio.wrap_future(self.tokenizer.submit(_plan, self.engine, req))
            except RuntimeError:  # the pool is shut down: the server is stopping
                raise _cancelled() from None
            try:
                present, job.plan = await self._unless_disconnect(tokenized, request)
            except (api.RequestError, ToolError, MessageError) as e:
                raise _bad(str(e), e.param, "invalid_value") from None
            except GrammarError as e:
                raise _bad(str(e), _constraint_param(req), "invalid_value") from None
            except UserError as e:
                raise _user_error(e, req.prompt_param) from None
            if not present:  # the client left; nobody reads this
                return Response(status_code=499)
            if not self.worker.enqueue(job):
                raise _cancelled()
            present, event = await self._unless_disconnect(job.events.get(), request)
            if not present:
                return Response(status_code=499)
            self._raise_for(event, req)
            meta = api.new_meta(self.model_name, chat=kind == "chat")
            if not req.stream and req.kind == "infill":
                return JSONResponse(self._infill_object(req, event[1]))
            if not req.stream:
                lp = self._logprobs_formatter(req)
                return JSONResponse(api.completion_object(req.kind == "chat", meta, event[1], job.plan,
                                                          logprobs=lp and lp.format(event[1].logprobs)))
            events = self._infill_events if req.kind == "infill" else self._events
            response = _SSEResponse(events(job, req, meta, event), job)
            handed_over = True
            return response
        finally:
            if not handed_over:
                self.worker.withdraw(job)  # a waiting request leaves the queue at once

    def _infill_object(self, req: _Request, result, *, final_chunk: bool = False) -> dict:
        sp = req.sampling
        settings = {"n_predict": sp.max_tokens, "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
                    "min_p": sp.min_p, "seed": result.seed, "stop": list(sp.stop), "stream": req.stream,
                    "method": req.draft.method}
        out = api.infill_object(result, self.model_name, truncated=req.prompt.truncated, settings=settings)
        if final_chunk:
            out["content"] = ""  # the pieces went before
        elif req.response_fields is not None:
            out = api.nested_fields(out, req.response_fields)
        return out

    async def _infill_events(self, job: _Job, req: _Request, meta: dict, event):
        """llama.cpp's ``/infill`` stream: ``data: {"content", "stop": false, ...}`` per piece, then
        the final object with ``"stop": true`` (no ``[DONE]``)."""
        try:
            while True:
                kind, value = event
                if kind == "piece":
                    yield _sse(api.infill_chunk(value))
                elif kind == "done":
                    yield _sse(self._infill_object(req, value, final_chunk=True))
                    return
                else:
                    err = (_user_error(value, req.prompt_param) if kind == "user_error"
                           else _internal(value) if kind == "error" else _cancelled())
                    yield _sse(err.body())
                    return
                event = await job.events.get()
        finally:
            job.cancel()

    def _logprobs_formatter(self, req: _Request) -> api.LogprobsFormatter | None:
        if req.logprobs is None:
            return None
        return api.LogprobsFormatter(req.kind == "chat", self.engine.token_piece)

    async def _events(self, job: _Job, req: _Request, meta: dict, event):
        chat = req.kind == "chat"
        lp = self._logprobs_formatter(req)
        lp_sent, lp_pending = 0, []  # logprobs entries sent; entries of text not sent yet (the finish
        # chunk carries what is left)

        def chunk(content: str | None, finish: str | None, **kw) -> dict:
            out = api.chunk_object(chat, meta, content, finish, **kw)
            if req.include_usage:
                out["usage"] = None
            return out

        held = api.ToolStream(job.plan)  # holds back what may be a tool call (chat only)
        try:
            if chat:
                yield _sse(chunk("", None, role=True))
            while True:
                kind, value = event
                if kind == "piece":
                    if lp is not None:  # (text, the logprobs of the tokens since the last piece)
                        value, entries = value
                        lp_pending += entries
                    out = held.push(value)
                    if out and lp is None:
                        yield _sse(chunk(out, None))
                    elif out:
                        lp_sent += len(lp_pending)
                        yield _sse(chunk(out, None, logprobs=lp.format(lp_pending)))
                        lp_pending = []
                elif kind == "done":
                    left = value.logprobs[lp_sent:] if lp is not None else None
                    rest = lp.format(left) if left else None
                    for c in api.final_chunks(meta, held, value, usage_chunk=req.include_usage, with_usage=False,
                                              chunk=chunk, logprobs=rest, chat=chat):
                        yield _sse(c)
                    yield _sse("[DONE]")
                    return
                else:
                    err = (_user_error(value, req.prompt_param) if kind == "user_error"
                           else _internal(value) if kind == "error" else _cancelled())
                    yield _sse(err.body())
                    yield _sse("[DONE]")
                    return
                event = await job.events.get()
        finally:
            job.cancel()


# ---------------------------------------------------------------------------------- public API


def _server_params(params: ServerParams | None, settings: dict) -> ServerParams:
    if params is not None and settings:
        raise TypeError("give a ServerParams or its fields as arguments, not both")
    return params if params is not None else ServerParams(**settings)


def create_app(
    engine,
    params: ServerParams | None = None,
    *,
    draft_params: DraftParams | None = None,
    sampling_defaults: SamplingParams | None = None,
    **settings,
) -> Starlette:
    """The Starlette app serving ``engine`` as ``params`` (a ``config.ServerParams``, or its
    fields as arguments: ``model_name``, ``api_key``, ``max_queue``, ``cors_origins``) say.

    ``draft_params``/``sampling_defaults`` apply to every request unless it overrides them;
    ``api_key`` (if set) is required as a bearer token on ``/v1/*``; ``max_queue`` requests may
    wait behind the running one before the server answers 503; ``cors_origins``: the web origins
    (``https://host:port``, or ``*``) whose pages may call the API (no CORS headers at all by
    default, so browsers refuse to let other sites read or preflight it).  Serve one engine
    with one app.  ``app.state.resispec`` is the server object (its ``worker.inflight`` counts
    admitted requests).  On shutdown the app cancels its requests and waits until the engine
    is idle.
    """
    params = _server_params(params, settings)
    draft_params = draft_params if draft_params is not None else DraftParams()
    sampling_defaults = sampling_defaults if sampling_defaults is not None else SamplingParams()
    engine.check_draft_params(draft_params)
    srv = _Server(engine, params, draft_params, sampling_defaults)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            srv.tokenizer.shutdown(wait=False, cancel_futures=True)
            await asyncio.get_running_loop().run_in_executor(None, srv.worker.shutdown)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return _ApiError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}", code=code,
                         headers=exc.headers).response()

    routes = [
        Route("/health", srv.endpoint(srv.health, auth=False), methods=["GET"]),
        Route("/v1/models", srv.endpoint(srv.models), methods=["GET"]),
        Route("/v1/models/{model:path}", srv.endpoint(srv.model), methods=["GET"]),
        Route("/v1/chat/completions", srv.endpoint(srv.chat), methods=["POST"]),
        Route("/v1/completions", srv.endpoint(srv.completions), methods=["POST"]),
        Route("/infill", srv.endpoint(srv.infill), methods=["POST"]),
    ]
    middleware = []
    if params.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(params.cors_origins),
                                     allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"],
                                     max_age=600))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={HTTPException: http_error})
    app.state.resispec = srv
    return app


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` and listening, or ``UserError`` naming the port (in
    use, not allowed, unknown host): bind first, then load models and announce the address."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(f"cannot listen on {host}:{port}: unknown host ({getattr(e, 'strerror', None) or e})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restarts need no wait
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        reason = "the port is already in use" if e.errno == errno.EADDRINUSE else e.strerror or str(e)
        raise UserError(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


def serve(engine, params: ServerParams | None = None, *, sock: socket.socket | None = None,
          draft_params: DraftParams | None = None, sampling_defaults: SamplingParams | None = None,
          **settings) -> None:
    """Serve ``engine`` with uvicorn until interrupted, on ``params``' host and port (or
    ``sock``, a socket from ``listen``); the rest as ``create_app``.  When this returns no
    request uses the engine any more, so the caller may close it."""
    import uvicorn

    params = _server_params(params, settings)
    app = create_app(engine, params, draft_params=draft_params, sampling_defaults=sampling_defaults)
    sock = sock if sock is not None else listen(params.host, params.port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        app.state.resispec.worker.shutdown()
