"""One streamed reply as OpenAI chunks, for the server and the in-process API alike.

``pieces`` runs a plan on the engine (text pieces, with their logprobs entries when asked
for); a ``ChunkStream`` turns them into chunks: the role chunk of a chat, a reasoning model's
thinking as ``delta.reasoning_content`` (``reasoning.ReasoningStream``), content held back
while it may be a tool call (``tools.ToolStream``), each chunk's logprobs, and at the end the
rest of the content, the calls, the finish_reason and the ``usage``/``speculative`` extras.

May import ``assist`` (plans, reasoning and tool streams) and the shapes and logprobs surfaces; never
the server, ``llama`` or the engine's models.
"""

from __future__ import annotations

from typing import Iterator

from ..assist.plan import ChatPlan
from .logprobs import LogprobsFormatter
from .shapes import chunk_object, finish_reason, stats_dict, timings, tool_call_deltas, usage, with_calls

__all__ = ["ChunkStream", "pieces"]

USAGE_PLACES = ("finish", "chunk", "none")


def pieces(engine, plan: ChatPlan, sampling, draft, logprobs: int | None = None, cancel=None) -> Iterator:
    """The engine's stream for ``plan``: text pieces, or with ``logprobs`` (alternatives per
    token) ``(text, TokenLogprob entries)`` pairs (``Engine.stream_logprobs``).  ``cancel``:
    the engine's (``Engine.stream``), passed on when given."""
    kw = {} if cancel is None else {"cancel": cancel}
    if logprobs is None:
        return engine.stream(plan.prompt, sampling, draft, constraint=plan.constraint, **kw)
    return engine.stream_logprobs(plan.prompt, sampling, draft, logprobs, constraint=plan.constraint, **kw)


class ChunkStream:
    """The chunks of one streamed reply (a chat's, or with ``chat`` False a completion's).

    Feed it ``start()``, a ``push`` per piece (a string, or with ``logprobs`` a
    ``(text, entries)`` pair) and ``finish(result)``; each returns the chunks to send.
    ``logprobs``: the request's ``LogprobsFormatter`` (None: no logprobs); each chunk carries
    its tokens' and the finish chunk those no earlier chunk carried (held back, or a stop
    string's).  ``usage``: where it goes, "finish" (on the finish chunk, the in-process
    API's), "chunk" (OpenAI's ``stream_options.include_usage``: every chunk says
    ``"usage": null`` and one more chunk with no choices carries it) or "none".
    ``speculative`` and llama.cpp's ``timings`` ride on the last chunk."""

    def __init__(self, plan: ChatPlan, meta: dict, *, chat: bool = True, logprobs: LogprobsFormatter | None = None,
                 usage: str = "finish"):
        if usage not in USAGE_PLACES:
            raise ValueError(f"usage must be one of {USAGE_PLACES}, got {usage!r}")
        self.chat, self.meta, self.logprobs, self.usage = chat, meta, logprobs, usage
        self.plan = plan
        self.held = plan.tool_stream()
        self.thinking = plan.reasoning_stream() if chat else None  # None: the text is not split
        self._pending: list = []  # logprobs entries of text not sent yet
        self._sent = 0  # logprobs entries sent

    def _chunk(self, content: str | None, finish: str | None, **kw) -> dict:
        out = chunk_object(self.chat, self.meta, content, finish, **kw)
        if self.usage == "chunk":
            out["usage"] = None
        return out

    def start(self) -> list[dict]:
        """A chat's first chunk, which names the role; nothing for a completion."""
        return [self._chunk("", None, role=True)] if self.chat else []

    def push(self, piece) -> list[dict]:
        if self.logprobs is not None:
            piece, entries = piece
            self._pending += entries
        thinking = ""
        if self.thinking is not None:
            thinking, piece = self.thinking.push(piece)
        out = self.held.push(piece)
        parts = ([(None, thinking)] if thinking else []) + ([(out, None)] if out else [])
        if not parts:
            return []
        if self.logprobs is None:
            return [self._chunk(c, None, reasoning=r) for c, r in parts]
        self._sent += len(self._pending)
        lp, self._pending = self.logprobs.format(self._pending), []  # on the first chunk
        return [self._chunk(c, None, reasoning=r, logprobs=lp if i == 0 else None) for i, (c, r) in enumerate(parts)]

    def finish(self, result) -> list[dict]:
        """The chunks that end the stream: the rest of the thinking, held-back content or the
        tool calls, then the chunk with finish_reason (and the usage chunk)."""
        text, out = result.text, []
        if self.thinking is not None:
            thinking, _ = self.thinking.finish(text)
            out += [self._chunk(None, None, reasoning=thinking)] if thinking else []
            text = self.plan.split(text)[1]
        rest, calls = self.held.finish(text)
        out += [self._chunk(rest, None)] if rest else []
        reason = finish_reason(result.finish_reason)
        if calls is not None:
            out += [self._chunk(None, None, tool_calls=entries) for entries in tool_call_deltas(calls)]
            reason = with_calls(reason)
        left = result.logprobs[self._sent:] if self.logprobs is not None else None
        last = self._chunk(None, reason, logprobs=self.logprobs.format(left) if left else None)
        if self.usage == "chunk":
            out.append(last)
            last = {**chunk_object(self.chat, self.meta, None, None), "choices": []}
        if self.usage != "none":
            last["usage"] = usage(result)
        last["timings"] = timings(result)
        last["speculative"] = stats_dict(result)
        return out + [last]
