"""The Starlette app over one ``Engine``: ``create_app``, ``listen`` and ``serve`` (uvicorn),
and ``_Server``, the state and the machinery every route uses.

Every API dialect is a module exposing ``routes(srv)`` (``DIALECTS``: ``openai``,
``anthropic`` for Anthropic's Messages API, ``responses`` for OpenAI's Responses API, ``ops``
for ``/health`` and llama.cpp's utility routes), whose handlers are functions of ``(srv,
request)``; ``create_app`` registers them all.  What a handler has from ``srv``: ``endpoint``
(the key, JSON bodies, the 503 while loading, errors in the route's shape), ``read_body`` (at
most ``MAX_BODY_BYTES``), ``parse`` (``fields.parse`` with the server's settings), ``run`` (a
job prepared on a tokenizer thread, queued on the engine's thread (``worker``) and answered
from its first event) and ``off_loop``.  Errors never kill the server: bad input gets a 4xx
and anything unexpected a logged 500 with a generic message (``errors``).

May import the other server modules, ``assist``, ``config`` and ``errors``; it uses only the
engine's public API, never ``llama``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import socket
import threading
import time
from typing import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ...config import DraftParams, ReasoningParams, SamplingParams, ServerParams
from ...errors import UserError
from . import anthropic, auth, fields, openai, ops, responses
from .errors import ApiError, bad, cancelled, event_error, internal, user_error
from .metrics import Metrics
from .responses import ResponseStore
from .streams import SSEResponse
from .worker import Job, Worker, prepare

__all__ = ["create_app", "serve", "listen", "MAX_BODY_BYTES", "TOKENIZER_THREADS"]

log = logging.getLogger("resispec_gguf.surfaces.server")

MAX_BODY_BYTES = 16 << 20
TOKENIZER_THREADS = 4


async def _wait_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _Server:
    """The app's state: its settings from the start, its engine once ``attach`` gives it (until
    then every route but ``/health`` answers 503, ``loading``)."""

    def __init__(self, params: ServerParams, draft_params: DraftParams, sampling_defaults: SamplingParams,
                 reasoning: ReasoningParams):
        self.engine = None
        self.worker: Worker | None = None
        self.reasoning = reasoning
        self.model_name = params.model_name or "resispec-gguf"
        self.draft_params = draft_params
        self.sampling_defaults = sampling_defaults
        self.api_key = auth.api_key(params)
        self.max_queue = params.max_queue
        self.metrics = Metrics()
        self.responses = ResponseStore()
        self.tokenizer = concurrent.futures.ThreadPoolExecutor(TOKENIZER_THREADS,
                                                               thread_name_prefix="resispec-tokenize")
        self.created = int(time.time())

    def attach(self, engine) -> None:
        """Serve ``engine`` from now on (``UserError`` when the draft parameters cannot run on
        it); any thread may call this, once."""
        engine.check_draft_params(self.draft_params)
        self.worker = Worker(getattr(engine, "n_slots", 1))
        self.n_ctx = int(engine.n_ctx)
        self.n_vocab = int(engine.n_vocab)
        self.max_prompt_bytes = int(engine.max_prompt_bytes)  # scans the vocabulary once, now
        self.has_fim = engine.fim_tokens is not None
        self.meta = _meta(engine, self.n_ctx, self.worker.slots)
        self.engine = engine  # last: a request sees no engine or a ready one

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        """On shutdown: cancel the requests and wait until the engine is idle."""
        try:
            yield
        finally:
            self.tokenizer.shutdown(wait=False, cancel_futures=True)
            if self.worker is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.worker.shutdown)

    @staticmethod
    def _check_json(request: Request) -> None:
        """A browser sends a cross-site POST without asking first only as text/plain, a form or
        multipart; requiring JSON makes it ask (a CORS preflight), which only allowed origins
        pass."""
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            raise ApiError(415, f"the Content-Type must be application/json, got {media_type[:60] or 'none'!r}",
                           code="unsupported_media_type")

    def endpoint(self, fn: Callable, needs_key: bool = True, shape: Callable | None = None,
                 loading: bool = False) -> Callable:
        """``fn`` as a route: the key checked (``needs_key``), POST bodies JSON, a 503 while
        the models load (unless ``loading``: ``fn`` answers then too), and an ``ApiError`` (or
        anything unexpected, logged) answered as ``shape`` makes it (default: OpenAI's error
        object)."""
        shape = shape or ApiError.response

        async def handler(request: Request) -> Response:
            try:
                if needs_key:
                    auth.check(request.headers, self.api_key)
                if self.engine is None and not loading:
                    raise ApiError(503, "the model is loading; retry shortly (GET /health says when it is ready)",
                                   code="model_loading", headers={"Retry-After": "1"})
                if request.method == "POST":
                    self._check_json(request)
                return await fn(request)
            except ApiError as e:
                return shape(e)
            except ClientDisconnect:  # gone while sending the body; nobody reads an answer
                return Response(status_code=499)
            except Exception:
                log.exception("unexpected error in %s %s", request.method, request.url.path)
                return shape(internal())

        return handler

    @staticmethod
    async def read_body(request: Request) -> dict:
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body exceeds {MAX_BODY_BYTES} bytes", code="request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, f"the request body exceeds {MAX_BODY_BYTES} bytes", code="request_too_large")
            chunks.append(chunk)
        return fields.parse_json(b"".join(chunks))

    @staticmethod
    async def unless_disconnect(awaitable, request: Request):
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

    def parse(self, body: dict, kind: str) -> fields.Request:
        """``fields.parse`` with this server's settings."""
        return fields.parse(body, kind, self.sampling_defaults, self.draft_params, self.max_prompt_bytes, self.n_ctx,
                            self.reasoning, self.n_vocab)

    async def run(self, request: Request, req: fields.Request, answer: Callable) -> Response:
        """Queue ``req``'s job and answer with ``answer(job, first event)`` (a piece or the
        result); a failure before that is raised as an ``ApiError``."""
        job = Job(self.engine, req, asyncio.get_running_loop(), record=self.metrics.record)
        if not self.worker.admit(job, self.max_queue + self.worker.slots):
            raise ApiError(503, "the server is busy: too many requests are waiting; retry shortly",
                           code="queue_full", headers={"Retry-After": "1"})
        handed_over = False  # to a streaming response, which cancels the job when it ends
        try:
            event = await self._first_event(job, request)
            if event is None:  # the client left; nobody reads this
                return Response(status_code=499)
            if event[0] != "piece" and event[0] != "done":
                raise event_error(*event, req)
            response = answer(job, event)
            handed_over = isinstance(response, SSEResponse)
            return response
        finally:
            if not handed_over:
                self.worker.withdraw(job)  # a waiting request leaves the queue at once

    async def off_loop(self, request: Request, req: fields.Request | None, fn: Callable, *args):
        """``(True, fn(*args))`` run on a tokenizer thread (its ``UserError`` a 400 for ``req``,
        or naming no field without one), or ``(False, None)`` when the client leaves first."""
        try:
            done = asyncio.wrap_future(self.tokenizer.submit(fn, *args))
        except RuntimeError:  # the pool is shut down: the server is stopping
            raise cancelled() from None
        try:
            return await self.unless_disconnect(done, request)
        except UserError as e:
            raise (user_error(e, req) if req is not None else bad(str(e))) from None

    async def _first_event(self, job: Job, request: Request):
        """Prepare ``job``'s prompt on a tokenizer thread, queue it and wait for its first
        event; None when the client leaves first."""
        present, job.plan = await self.off_loop(request, job.req, prepare, self.engine, job.req)
        if not present:
            return None
        if not self.worker.enqueue(job):
            raise cancelled()
        present, event = await self.unless_disconnect(job.events.get(), request)
        return event if present else None

def _meta(engine, n_ctx: int, slots: int) -> dict:
    """``/v1/models``' ``meta`` (llama.cpp's server's per-model figures): the target's own
    (``n_vocab``, ``n_ctx_train``, ``n_params``, ``size``, ...), the context each request gets
    (``n_ctx``), the slots, and the draft model's figures (None without one)."""
    info = engine.info() if hasattr(engine, "info") else {}
    target, draft = info.get("target") or {}, info.get("draft")
    return {**target.get("meta", {}), "n_ctx": n_ctx, "n_slots": slots,
            "draft": draft.get("meta", {}) if draft else None}


#: the modules whose ``routes(srv)`` make the app's routes: one per API dialect
DIALECTS = (openai, anthropic, responses, ops)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return ApiError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}", code=code,
                    headers=exc.headers).response()


def _middleware(params: ServerParams) -> list:
    """CORS for ``params.cors_origins`` (none: no CORS headers at all)."""
    if not params.cors_origins:
        return []
    return [Middleware(CORSMiddleware, allow_origins=list(params.cors_origins), allow_methods=["GET", "POST"],
                       allow_headers=["Authorization", "Content-Type", "x-api-key", "anthropic-version"],
                       max_age=600)]


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
    reasoning: ReasoningParams | None = None,
    **settings,
) -> Starlette:
    """The Starlette app serving ``engine`` as ``params`` (a ``config.ServerParams``, or its
    fields as arguments: ``model_name``, ``api_key``, ``api_key_file``, ``max_queue``,
    ``cors_origins``) say.  ``engine`` None: the app answers while the models load —
    ``/health`` 503 ``{"status": "loading model"}``, every other route 503 ``model_loading`` —
    until ``app.state.resispec.attach(engine)`` (which ``serve``'s ``load`` does).

    ``draft_params``/``sampling_defaults``/``reasoning`` (a reasoning model's thinking:
    ``config.ReasoningParams``) apply to every request unless it overrides them;
    the API key (``api_key``, ``api_key_file`` or ``RESISPEC_API_KEY``: ``auth.api_key``) is
    required on every route but ``/health``; the engine's slots
    (``Engine.n_slots``) run that many requests at once, and ``max_queue`` requests may wait
    behind them before the server answers 503; ``cors_origins``: the web origins
    (``https://host:port``, or ``*``) whose pages may call the API (no CORS headers at all by
    default, so browsers refuse to let other sites read or preflight it).  Serve one engine
    with one app.  ``app.state.resispec`` is the server object (its ``worker.inflight`` counts
    admitted requests).  On shutdown the app cancels its requests and waits until the engine
    is idle.
    """
    params = _server_params(params, settings)
    draft_params = draft_params if draft_params is not None else DraftParams()
    sampling_defaults = sampling_defaults if sampling_defaults is not None else SamplingParams()
    srv = _Server(params, draft_params, sampling_defaults, reasoning or ReasoningParams())
    if engine is not None:
        srv.attach(engine)
    routes = [route for dialect in DIALECTS for route in dialect.routes(srv)]
    app = Starlette(routes=routes, lifespan=srv.lifespan, middleware=_middleware(params),
                    exception_handlers={HTTPException: _http_error})
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


def serve(engine=None, params: ServerParams | None = None, *, load: Callable | None = None,
          sock: socket.socket | None = None, draft_params: DraftParams | None = None,
          sampling_defaults: SamplingParams | None = None, reasoning: ReasoningParams | None = None,
          **settings) -> None:
    """Serve ``engine`` with uvicorn until interrupted, on ``params``' host and port (or
    ``sock``, a socket from ``listen``); the rest as ``create_app``.  Or give ``load``, a
    function returning the engine, instead: the server answers at once (``/health`` 503
    ``{"status": "loading model"}``) while ``load`` runs on a thread of its own, and serves
    the engine from when it returns; an exception it raises stops the server and is raised
    here.  Stopped while loading, this waits for ``load`` to return.  When this returns no
    request uses the engine any more, so the caller may close it (``load``'s engine too)."""
    import uvicorn

    if (engine is None) == (load is None):
        raise TypeError("give serve an engine or a load function, not both")
    params = _server_params(params, settings)
    app = create_app(engine, params, draft_params=draft_params, sampling_defaults=sampling_defaults,
                     reasoning=reasoning)
    srv = app.state.resispec
    sock = sock if sock is not None else listen(params.host, params.port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    failed: list[BaseException] = []

    def loading() -> None:
        try:
            srv.attach(load())
        except BaseException as e:  # SystemExit too: the caller's to raise, on its thread
            failed.append(e)
            server.should_exit = True

    loader = threading.Thread(target=loading, name="resispec-load", daemon=True) if load is not None else None
    try:
        if loader is not None:
            loader.start()
        server.run(sockets=[sock])
    finally:
        if loader is not None:
            loader.join()  # the model finishes loading (a second Ctrl-C leaves at once)
        sock.close()
        if srv.worker is not None:
            srv.worker.shutdown()
    if failed:
        raise failed[0]
