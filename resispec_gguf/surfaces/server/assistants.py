"""The routes of the assistant APIs besides OpenAI's chat: Anthropic's Messages
(``/v1/messages``, ``/v1/messages/count_tokens``) and OpenAI's Responses (``/v1/responses``,
``GET /v1/responses/{id}``).  Each translates its body into a chat request (``anthropic``,
``responses``), runs it as the app runs a chat (``_Server.run``: the same checks, queue, tools,
reasoning and constraints) and writes the reply in its own shape, streamed through
``app.relay`` with a sink of its own.  Errors keep the route's shape and name the route's
own fields.

May import the other server modules but the app (which hands in its server object), the
shapes and chunks surfaces and ``assist``; never the engine's models or ``llama``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..chunks import ChunkStream
from ..shapes import completion_object, new_meta, stats_dict, timings
from . import anthropic, dialects, responses
from .errors import ApiError
from .streams import SSEResponse, relay
from .worker import prepare

__all__ = ["routes", "stop_sequence"]


def routes(srv) -> list[Route]:
    """The routes, over the app's server object ``srv``."""
    def shape(err: ApiError) -> Response:
        return JSONResponse(anthropic.error_body(err), status_code=err.status, headers=err.headers)

    return [
        Route("/v1/messages", srv.endpoint(lambda r: messages(srv, r), shape=shape), methods=["POST"]),
        Route("/v1/messages/count_tokens", srv.endpoint(lambda r: count_tokens(srv, r), shape=shape),
              methods=["POST"]),
        Route("/v1/responses", srv.endpoint(lambda r: create_response(srv, r)), methods=["POST"]),
        Route("/v1/responses/{response_id}", srv.endpoint(lambda r: get_response(srv, r)), methods=["GET"]),
    ]


def stop_sequence(result, stops, token_piece) -> str | None:
    """The stop string that ended ``result`` (its tokens run on through it), None if none did:
    the one found first in the reply's whole text, as the engine looks for them."""
    if result.finish_reason != "stop" or not stops:
        return None
    text = b"".join(token_piece(t) for t in result.tokens).decode("utf-8", "replace")
    found = [(text.find(s), i) for i, s in enumerate(stops) if s in text]
    return stops[min(found)[1]] if found else None


# ---------------------------------------------------------------------------------- Anthropic


async def messages(srv, request: Request) -> Response:
    chat, where = anthropic.chat_body(await srv.read_body(request))
    msg_id = anthropic.new_id()
    try:
        req = srv.parse(chat, "chat")
        return await srv.run(request, req, lambda job, event: _message(srv, job, event, msg_id, where))
    except ApiError as e:
        raise anthropic.rename(e, where) from None


def _message(srv, job, event, msg_id: str, where: list) -> Response:
    req = job.req
    meta = new_meta(srv.model_name, chat=True)
    if req.stream:
        sink = _MessageSink(srv, req, anthropic.MessageStream(msg_id, srv.model_name, len(job.plan.prompt)), where)
        return SSEResponse(relay(job, event, ChunkStream(job.plan, meta, usage="none"), sink), job)
    result = event[1]
    chat = completion_object(True, meta, result, job.plan)
    return JSONResponse(anthropic.message_object(chat, result, msg_id=msg_id, model=srv.model_name,
                                                 stop_sequence=stop_sequence(result, req.sampling.stop,
                                                                             srv.engine.token_piece)))


class _MessageSink:
    """Anthropic's events for ``app.relay``."""

    def __init__(self, srv, req, stream: anthropic.MessageStream, where: list):
        self.srv, self.req, self.stream, self.where = srv, req, stream, where

    def begin(self) -> list[bytes]:
        return self.stream.start()

    def chunks(self, chunks: list) -> list[bytes]:
        return self.stream.chunks(chunks)

    def done(self, result) -> list[bytes]:
        stop = stop_sequence(result, self.req.sampling.stop, self.srv.engine.token_piece)
        return self.stream.finish(result, stop, {"timings": timings(result), "speculative": stats_dict(result)})

    def error(self, err: ApiError) -> list[bytes]:
        return self.stream.error(anthropic.rename(err, self.where))

    def close(self) -> list[bytes]:
        return []


async def count_tokens(srv, request: Request) -> Response:
    """The prompt's tokens, as ``/v1/messages`` would tokenize it (tools and system included)."""
    chat, where = anthropic.chat_body(await srv.read_body(request), count=True)
    try:
        req = srv.parse(chat, "chat")
        present, plan = await srv.off_loop(request, req, prepare, srv.engine, req)
    except ApiError as e:
        raise anthropic.rename(e, where) from None
    if not present:
        return Response(status_code=499)
    return JSONResponse({"input_tokens": len(plan.prompt)})


# ---------------------------------------------------------------------------------- Responses


async def create_response(srv, request: Request) -> Response:
    chat, turn = responses.chat_body(await srv.read_body(request), srv.responses)
    try:
        req = srv.parse(chat, "chat")
        return await srv.run(request, req, lambda job, event: _response(srv, job, event, turn))
    except ApiError as e:
        raise responses.rename(e, turn.where) from None


def _store(srv, turn: responses.Turn, response: dict, items: list) -> None:
    if turn.store:
        srv.responses.put(response, turn.messages + [responses.history_message(items)])


def _response(srv, job, event, turn: responses.Turn) -> Response:
    req = job.req
    meta = new_meta(srv.model_name, chat=True)
    if req.stream:
        sink = _ResponseSink(srv, responses.ResponseStream(turn, srv.model_name), turn)
        return SSEResponse(relay(job, event, ChunkStream(job.plan, meta, usage="none"), sink), job)
    result = event[1]
    chat = completion_object(True, meta, result, job.plan)
    items = responses.output_items(chat)
    obj = responses.response_object(turn, srv.model_name, items, result,
                                    extras={"timings": chat["timings"], "speculative": chat["speculative"]})
    _store(srv, turn, obj, items)
    return JSONResponse(obj)


class _ResponseSink:
    """The Responses events for ``app.relay``; a finished response is stored (``store``)."""

    def __init__(self, srv, stream: responses.ResponseStream, turn: responses.Turn):
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
        return [dialects.sse(e) for e in self.stream.error(responses.rename(err, self.turn.where))]

    def close(self) -> list[bytes]:
        return []


async def get_response(srv, request: Request) -> Response:
    resp_id = request.path_params["response_id"]
    found = srv.responses.response(resp_id)
    if found is None:
        raise ApiError(404, f"no stored response {resp_id[:64]!r} (this server keeps the last {srv.responses.limit} "
                            "made with store on, in memory)", param="response_id", code="not_found")
    return JSONResponse(found)

