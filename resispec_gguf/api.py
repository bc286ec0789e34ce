"""OpenAI-shaped results: the response and chunk objects the server sends, and
``create_chat_completion`` — the same shapes for in-process use, mirroring
llama-cpp-python's ``Llama.create_chat_completion`` so an assistant can switch with little
change.  Built on the engine's public API only.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Iterator

from .config import DraftParams, SamplingParams


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


def completion_object(chat: bool, meta: dict, result) -> dict:
    """A non-streaming ``chat.completion`` / ``text_completion`` with a ``speculative`` extra."""
    reason = finish_reason(result.finish_reason)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": result.text}, "logprobs": None, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": result.text, "logprobs": None, "finish_reason": reason}
    return {
        **_header(meta, "chat.completion" if chat else "text_completion"),
        "choices": [choice],
        "usage": usage(result),
        "speculative": stats_dict(result),
    }


def chunk_object(chat: bool, meta: dict, content: str | None, finish: str | None, *, role: bool = False) -> dict:
    """One streaming chunk (``chat.completion.chunk`` delta, or ``text_completion`` text)."""
    if chat:
        delta = {} if content is None else {"content": content}
        if role:
            delta = {"role": "assistant", **delta}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": content or "", "logprobs": None, "finish_reason": finish}
    return {**_header(meta, "chat.completion.chunk" if chat else "text_completion"), "choices": [choice]}


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
):
    """Chat completion in OpenAI's shape: a dict, or an iterator of chunk dicts when
    ``stream=True``.  The extra ``speculative`` key carries the step statistics.  A sampling
    argument left at None takes ``SamplingParams``' default; ``draft`` None the engine's
    (``DraftParams()``)."""
    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, max_tokens=max_tokens,
                 stop=stop, seed=seed)
    sp = SamplingParams(**{k: v for k, v in given.items() if v is not None})
    prompt = engine.chat_tokens(messages)
    meta = new_meta(model, chat=True)
    if not stream:
        return completion_object(True, meta, engine.generate(prompt, sp, draft))
    return _stream_chunks(engine, prompt, sp, draft, meta)


def _stream_chunks(engine, prompt, sp, draft, meta) -> Iterator[dict]:
    yield chunk_object(True, meta, "", None, role=True)
    for piece in engine.stream(prompt, sp, draft):
        yield chunk_object(True, meta, piece, None)
    result = engine.last_result
    last = chunk_object(True, meta, None, finish_reason(result.finish_reason))
    last["usage"] = usage(result)
    last["speculative"] = stats_dict(result)
    yield last
