"""OpenAI-shaped results: the response and chunk objects the server sends, and
``create_chat_completion`` — the same shapes for in-process use, mirroring
llama-cpp-python's ``Llama.create_chat_completion`` so an assistant can switch with little
change.  Built on the engine's public API only.
"""

from __future__ import annotations

import codecs
import math
import time
import uuid
from typing import Callable, Iterator

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


def completion_object(chat: bool, meta: dict, result, *, logprobs: dict | None = None) -> dict:
    """A non-streaming ``chat.completion`` / ``text_completion`` with a ``speculative`` extra;
    ``logprobs``: the choice's (from ``LogprobsFormatter``), if asked for."""
    reason = finish_reason(result.finish_reason)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": result.text}, "logprobs": logprobs, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": result.text, "logprobs": logprobs, "finish_reason": reason}
    return {
        **_header(meta, "chat.completion" if chat else "text_completion"),
        "choices": [choice],
        "usage": usage(result),
        "speculative": stats_dict(result),
    }


def chunk_object(chat: bool, meta: dict, content: str | None, finish: str | None, *, role: bool = False,
                 logprobs: dict | None = None) -> dict:
    """One streaming chunk (``chat.completion.chunk`` delta, or ``text_completion`` text);
    ``logprobs``: those of the chunk's tokens, if asked for."""
    if chat:
        delta = {} if content is None else {"content": content}
        if role:
            delta = {"role": "assistant", **delta}
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": content or "", "logprobs": logprobs, "finish_reason": finish}
    return {**_header(meta, "chat.completion.chunk" if chat else "text_completion"), "choices": [choice]}


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
    logprobs: bool = False,
    top_logprobs: int | None = None,
):
    """Chat completion in OpenAI's shape: a dict, or an iterator of chunk dicts when
    ``stream=True``.  The extra ``speculative`` key carries the step statistics.  A sampling
    argument left at None takes ``SamplingParams``' default; ``draft`` None the engine's
    (``DraftParams()``).  ``logprobs``/``top_logprobs``: as OpenAI's (the target's own
    log-probabilities at T = 1 before filters)."""
    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, max_tokens=max_tokens,
                 stop=stop, seed=seed)
    sp = SamplingParams(**{k: v for k, v in given.items() if v is not None})
    if top_logprobs is not None and not logprobs:
        raise ValueError("top_logprobs needs logprobs=True")
    n_lp = (top_logprobs or 0) if logprobs else None
    prompt = engine.chat_tokens(messages)
    meta = new_meta(model, chat=True)
    if not stream:
        result = engine.generate(prompt, sp, draft, logprobs=n_lp)
        lp = LogprobsFormatter(True, engine.token_piece).format(result.logprobs) if n_lp is not None else None
        return completion_object(True, meta, result, logprobs=lp)
    return _stream_chunks(engine, prompt, sp, draft, meta, n_lp)


def _stream_chunks(engine, prompt, sp, draft, meta, n_lp=None) -> Iterator[dict]:
    yield chunk_object(True, meta, "", None, role=True)
    fmt = LogprobsFormatter(True, engine.token_piece) if n_lp is not None else None
    sent = 0
    if fmt is None:
        for piece in engine.stream(prompt, sp, draft):
            yield chunk_object(True, meta, piece, None)
    else:
        for piece, entries in engine.stream_logprobs(prompt, sp, draft, n_lp):
            sent += len(entries)
            yield chunk_object(True, meta, piece, None, logprobs=fmt.format(entries))
    result = engine.last_result
    rest = fmt.format(result.logprobs[sent:]) if fmt is not None and len(result.logprobs) > sent else None
    last = chunk_object(True, meta, None, finish_reason(result.finish_reason), logprobs=rest)
    last["usage"] = usage(result)
    last["speculative"] = stats_dict(result)
    yield last
