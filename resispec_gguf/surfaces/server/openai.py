"""OpenAI's routes, the server's own dialect: ``GET /v1/models``, ``GET /v1/models/{id}``,
``POST /v1/chat/completions`` and ``POST /v1/completions``, and llama.cpp's ``POST /infill``,
which runs on the same completion path.  A body is parsed as it is (``fields``), run as a job
(``_Server.run``) and answered as one JSON object (``shapes.completion_object``; llama.cpp's
``infill_object`` for ``/infill``) or a stream of chunks (``chunks.ChunkStream`` through
``streams.relay``; llama.cpp's stream for ``/infill``).

Like every dialect module (``anthropic``, ``responses``, ``ops``), it exposes ``routes(srv)`` over the app's
server object, and its handlers are functions of ``(srv, request)``.

May import the other server modules but the app (which hands in its server object), and the
shapes, chunks and logprobs surfaces; never the engine's models or ``llama``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..chunks import ChunkStream
from ..logprobs import LogprobsFormatter
from ..shapes import completion_object, infill_chunk, infill_object, nested_fields, new_meta
from . import fields
from .errors import ApiError, bad, event_error, failure_body
from .streams import OpenAISink, SSEResponse, events_from, relay, sse
from .worker import Job

__all__ = ["routes"]


def routes(srv) -> list[Route]:
    """The routes, over the app's server object ``srv``."""
    def route(path, fn, method):
        return Route(path, srv.endpoint(lambda r: fn(srv, r)), methods=[method])

    return [route("/v1/models", models, "GET"), route("/v1/models/{model:path}", model, "GET"),
            route("/v1/chat/completions", chat, "POST"), route("/v1/completions", completions, "POST"),
            route("/infill", infill, "POST")]


def _model_card(srv) -> dict:
    return {"id": srv.model_name, "object": "model", "created": srv.created, "owned_by": "resispec-gguf",
            "meta": srv.meta}


async def models(srv, request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_model_card(srv)]})


async def model(srv, request: Request) -> Response:
    if request.path_params["model"] != srv.model_name:
        raise ApiError(404, f"the model {request.path_params['model']!r} does not exist; this server serves "
                            f"{srv.model_name!r}", param="model", code="model_not_found")
    return JSONResponse(_model_card(srv))


async def chat(srv, request: Request) -> Response:
    return await _complete(srv, request, "chat")


async def completions(srv, request: Request) -> Response:
    return await _complete(srv, request, "completion")


async def infill(srv, request: Request) -> Response:
    return await _complete(srv, request, "infill")


def _check_fim(srv, req: fields.Request) -> None:
    if isinstance(req.prompt, fields.Infill) and not srv.has_fim:
        raise bad("this model has no fill-in-the-middle tokens (such as <|fim_prefix|>, <|fim_suffix|>, "
                  "<|fim_middle|>), so it cannot fill in code between a prefix and a suffix",
                  "suffix" if req.kind == "completion" else None, "unsupported_value")


async def _complete(srv, request: Request, kind: str) -> Response:
    req = srv.parse(await srv.read_body(request), kind)
    _check_fim(srv, req)
    return await srv.run(request, req, lambda job, event: _answer(srv, job, event))


def _answer(srv, job: Job, event) -> Response:
    """The response to a job whose first event is a piece or its result."""
    req = job.req
    meta = new_meta(srv.model_name, chat=req.kind == "chat")
    if req.stream:
        events = _infill_events(srv, job, event) if req.kind == "infill" else _events(srv, job, meta, event)
        return SSEResponse(events, job)
    if req.kind == "infill":
        return JSONResponse(_infill_object(srv, req, event[1]))
    lp = _logprobs_formatter(srv, req)
    return JSONResponse(completion_object(req.kind == "chat", meta, event[1], job.plan,
                                          logprobs=lp and lp.format(event[1].logprobs)))


def _infill_object(srv, req: fields.Request, result, *, final_chunk: bool = False) -> dict:
    sp = req.sampling
    settings = {"n_predict": sp.max_tokens, "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
                "min_p": sp.min_p, "seed": result.seed, "stop": list(sp.stop), "stream": req.stream,
                "method": req.draft.method}
    out = infill_object(result, srv.model_name, truncated=req.prompt.truncated, settings=settings)
    if final_chunk:
        out["content"] = ""  # the pieces went before
    elif req.response_fields is not None:
        out = nested_fields(out, req.response_fields)
    return out


async def _infill_events(srv, job: Job, event):
    """llama.cpp's ``/infill`` stream: ``data: {"content", "stop": false, ...}`` per piece, then
    the final object with ``"stop": true`` (no ``[DONE]``)."""
    try:
        async for kind, value in events_from(job, event):
            if kind == "piece":
                yield sse(infill_chunk(value))
            elif kind == "done":
                yield sse(_infill_object(srv, job.req, value, final_chunk=True))
                if (failure := failure_body(value, job.req)) is not None:
                    yield sse(failure)
            else:
                yield sse(event_error(kind, value, job.req).body())
    finally:
        job.cancel()


def _logprobs_formatter(srv, req: fields.Request) -> LogprobsFormatter | None:
    if req.logprobs is None:
        return None
    return LogprobsFormatter(req.kind == "chat", srv.engine.token_piece)


def _events(srv, job: Job, meta: dict, event):
    """OpenAI's stream: the chunks of ``chunks.ChunkStream``, an error object if the job fails,
    then ``[DONE]``."""
    req = job.req
    chunks = ChunkStream(job.plan, meta, chat=req.kind == "chat", logprobs=_logprobs_formatter(srv, req),
                         usage="chunk" if req.include_usage else "none")
    return relay(job, event, chunks, OpenAISink())
