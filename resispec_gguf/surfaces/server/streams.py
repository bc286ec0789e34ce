"""Server-sent events: the response that carries them (``SSEResponse``, which cancels its job
however it ends), the encoding (``sse``: OpenAI's ``data:`` lines, or named events), and
``relay``, which turns a job's events into a stream through a *sink*: what writes the chat
chunks in one API's shape (``OpenAISink`` here; Anthropic's in ``anthropic``, the Responses
API's in ``responses``).

May import ``server.errors``, ``server.worker`` and the chunks surface; never the app, the
engine or ``llama``.
"""

from __future__ import annotations

import json

from starlette.responses import StreamingResponse

from ..chunks import ChunkStream
from .errors import ApiError, event_error, failure_error
from .worker import Job

__all__ = ["SSEResponse", "OpenAISink", "relay", "sse", "events_from"]


def sse(obj, event: str | None = None) -> bytes:
    """One event: ``obj`` (a string as it is, else JSON) as its data, named ``event`` if given."""
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + b"data: " + data.encode() + b"\n\n"


class SSEResponse(StreamingResponse):
    """A streaming response that cancels its job however the response ends."""

    def __init__(self, content, job: Job):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._job = job

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._job.cancel()


async def events_from(job: Job, event):
    """``event`` and the job's next events, up to its final one (anything but a piece)."""
    while True:
        yield event
        if event[0] != "piece":
            return
        event = await job.events.get()


class OpenAISink:
    """OpenAI's stream as ``relay`` writes it: every chunk as it is, an error as OpenAI's error
    object, ``[DONE]`` last."""

    def begin(self) -> list[bytes]:
        return []

    def chunks(self, chunks: list) -> list[bytes]:
        return [sse(c) for c in chunks]

    def done(self, result) -> list[bytes]:
        return []

    def error(self, err: ApiError) -> list[bytes]:
        return [sse(err.body())]

    def close(self) -> list[bytes]:
        return [sse("[DONE]")]


async def relay(job: Job, event, chunks: ChunkStream, sink):
    """A job's stream from its first ``event`` on: the chat chunks ``chunks`` makes, written by
    ``sink`` (``begin()`` first, ``chunks(list)``, ``done(result)`` after the last chunk,
    ``error(ApiError)`` when the job fails, ``close()`` at the end; each gives the bytes to
    send).  The job is cancelled however the stream ends."""
    req = job.req
    try:
        for b in sink.begin() + sink.chunks(chunks.start()):
            yield b
        async for kind, value in events_from(job, event):
            if kind == "piece":
                out = sink.chunks(chunks.push(value))
            elif kind == "done":
                out = sink.chunks(chunks.finish(value))
                failure = failure_error(value, req)
                out += sink.done(value) if failure is None else sink.error(failure)
            else:
                out = sink.error(event_error(kind, value, req))
            for b in out:
                yield b
        for b in sink.close():
            yield b
    finally:
        job.cancel()
