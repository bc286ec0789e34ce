"""The in-process Python API, shaped like OpenAI's: ``create_chat_completion`` mirrors
llama-cpp-python's ``Llama.create_chat_completion`` (a dict, or an iterator of chunk dicts),
so that an assistant can switch with little change.

It plans the request with ``assist.plan`` (tools, response formats), runs it on the engine's
public API, and shapes the answer with ``shapes`` and ``chunks`` (the server's shapes and
chunk stream too).  May
import ``assist``, ``config`` and the shapes, chunks and logprobs surfaces; never the
server, ``llama`` or the engine's models.
"""

from __future__ import annotations

from typing import Iterator

from ..assist.plan import ChatPlan, plan_chat
from ..config import DraftParams, SamplingParams
from .chunks import ChunkStream, pieces
from .logprobs import LogprobsFormatter
from .shapes import completion_object, new_meta

__all__ = ["create_chat_completion"]


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
    reasoning_format: str | None = None,
    reasoning_budget: int | None = None,
    chat_template_kwargs: dict | None = None,
):
    """Chat completion in OpenAI's shape: a dict, or an iterator of chunk dicts when
    ``stream=True``.  The extra ``speculative`` key carries the step statistics.  A sampling
    argument left at None takes ``SamplingParams``' default; ``draft`` None the engine's
    (``DraftParams()``).  ``tools``/``tool_choice``/``parallel_tool_calls`` and
    ``response_format`` are OpenAI's: calls come back as ``message.tool_calls`` with
    finish_reason "tool_calls", JSON formats are enforced by a grammar (exactly, under
    speculation).  ``logprobs``/``top_logprobs``: as OpenAI's (the target's own
    log-probabilities at T = 1 before filters).  On a reasoning model (thinking markers in its
    vocabulary) the thinking comes back as ``message.reasoning_content`` (streamed:
    ``delta.reasoning_content``) unless ``reasoning_format`` is "none"; ``reasoning_budget``
    (-1: no limit) ends it after that many tokens; ``chat_template_kwargs`` are template
    variables (``{"enable_thinking": False}``)."""
    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, max_tokens=max_tokens,
                 stop=stop, seed=seed)
    sp = SamplingParams(**{k: v for k, v in given.items() if v is not None})
    if top_logprobs is not None and not logprobs:
        raise ValueError("top_logprobs needs logprobs=True")
    n_lp = (top_logprobs or 0) if logprobs else None
    plan = plan_chat(engine, messages, tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                     response_format=response_format, reasoning_format=reasoning_format,
                     reasoning_budget=reasoning_budget, chat_template_kwargs=chat_template_kwargs)
    meta = new_meta(model, chat=True)
    if not stream:
        result = engine.generate(plan.prompt, sp, draft, constraint=plan.constraint, logprobs=n_lp)
        lp = LogprobsFormatter(True, engine.token_piece).format(result.logprobs) if n_lp is not None else None
        return completion_object(True, meta, result, plan, logprobs=lp)
    return _stream_chunks(engine, plan, sp, draft, meta, n_lp)


def _stream_chunks(engine, plan: ChatPlan, sp, draft, meta, n_lp=None) -> Iterator[dict]:
    formatter = LogprobsFormatter(True, engine.token_piece) if n_lp is not None else None
    chunks = ChunkStream(plan, meta, logprobs=formatter)
    yield from chunks.start()
    for piece in pieces(engine, plan, sp, draft, n_lp):
        yield from chunks.push(piece)
    yield from chunks.finish(engine.last_result)
