"""Response objects in the shapes clients expect: OpenAI's (``completion_object``,
``chunk_object``, ``tool_call_deltas``, ``usage``, finish reasons) and llama.cpp server's
``/infill`` answer (``infill_object``, ``infill_chunk``, ``nested_fields``), each with the
``speculative`` extra (``stats_dict``) and llama.cpp's ``timings``.

Pure functions of a ``Result`` and a ``ChatPlan``.  May import ``assist.plan`` (the plan a
reply's calls are read with); never the engine, ``llama`` or another surface.
"""

from __future__ import annotations

import math
import time
import uuid

from ..assist.plan import ChatPlan

__all__ = ["finish_reason", "stats_dict", "timings", "usage", "new_meta", "completion_object", "chunk_object",
           "tool_call_deltas", "with_calls", "infill_object", "infill_chunk", "nested_fields"]


def finish_reason(engine_reason: str) -> str:
    """OpenAI's vocabulary: an end-of-generation token or a stop string are both "stop".

    An "interrupted" result (its stream was closed or failed before the end) keeps that
    name, which OpenAI's vocabulary lacks; the server never sends one, since a request is
    interrupted only when its client has gone or the server is stopping (503).  An "error"
    result (its constraint failed after the first token, ``Result.error``) keeps that name
    too: the server sends it only in a stream, followed by the error object."""
    return {"eos": "stop", "stop": "stop"}.get(engine_reason, engine_reason)


def with_calls(reason: str) -> str:
    """The finish_reason of a reply that made tool calls: "tool_calls", unless it was cut by
    max_tokens ("length")."""
    return reason if reason == "length" else "tool_calls"


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


def completion_object(chat: bool, meta: dict, result, plan: ChatPlan | None = None, *,
                      logprobs: dict | None = None) -> dict:
    """A non-streaming ``chat.completion`` / ``text_completion`` with a ``speculative`` extra;
    with a ``plan`` whose tools may be called, calls in the reply become ``tool_calls``; a
    reasoning model's thinking, when the plan returns it apart, is ``reasoning_content``;
    ``logprobs``: the choice's (from ``LogprobsFormatter``), if asked for."""
    reason = finish_reason(result.finish_reason)
    if chat:
        thinking, text = plan.split(result.text) if plan is not None else (None, result.text)
        message = {"role": "assistant", "content": text}
        parsed = plan.tool_calls(text) if plan is not None else None
        if parsed is not None:
            content, calls = parsed
            message = {"role": "assistant", "content": content or None, "tool_calls": [c.as_dict() for c in calls]}
            reason = with_calls(reason)
        if thinking is not None:
            message["reasoning_content"] = thinking
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": result.text, "logprobs": logprobs, "finish_reason": reason}
    return {
        **_header(meta, "chat.completion" if chat else "text_completion"),
        "choices": [choice],
        "usage": usage(result),
        "timings": timings(result),
        "speculative": stats_dict(result),
    }


def chunk_object(chat: bool, meta: dict, content: str | None, finish: str | None, *, role: bool = False,
                 tool_calls: list | None = None, logprobs: dict | None = None, reasoning: str | None = None) -> dict:
    """One streaming chunk (``chat.completion.chunk`` delta, or ``text_completion`` text);
    ``tool_calls``: the delta's tool-call entries (``tool_call_deltas``); ``logprobs``: those of
    the chunk's tokens, if asked for; ``reasoning``: a piece of the thinking
    (``delta.reasoning_content``)."""
    if chat:
        delta = {} if content is None else {"content": content}
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
        if role:
            delta = {"role": "assistant", **delta}
        if tool_calls is not None:
            delta["tool_calls"] = tool_calls
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": content or "", "logprobs": logprobs, "finish_reason": finish}
    return {**_header(meta, "chat.completion.chunk" if chat else "text_completion"), "choices": [choice]}


def tool_call_deltas(calls) -> list[list[dict]]:
    """The streamed form of finished calls: per call, a delta entry with its index, id, type
    and name (empty arguments), then one with the arguments.  Concatenating each index's
    ``arguments`` gives exactly the non-streamed call."""
    out = []
    for i, c in enumerate(calls):
        out.append([{"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}])
        out.append([{"index": i, "function": {"arguments": c.arguments}}])
    return out


def timings(result) -> dict:
    """llama.cpp server's ``timings``: the prompt (the tokens not reused from the cache) and the
    generation, with ``draft_n`` (candidate tokens the target verified) and
    ``draft_n_accepted`` (those it accepted)."""
    stats = result.stats
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
        "draft_n": int(stats.tree_nodes),
        "draft_n_accepted": int(sum(stats.accepted_by_depth)),
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
        "timings": timings(result),
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
