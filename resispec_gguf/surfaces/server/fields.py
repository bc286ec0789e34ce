"""Request bodies into requests: every field of a chat, completion or ``/infill`` body is
type-checked here and turned into a ``Request`` (settings dataclasses, the prompt, the
options), or refused with a 400 naming the field.

Prompts that cannot fit the context whatever their text (more UTF-8 bytes than the limit)
are refused here, before anything is tokenized, and so are the samplers this server does not
run; ``logit_bias`` is checked against the vocabulary (``samplers``).  The fields that set a
setting are not listed here: each setting a request may set says so in its metadata
(``config.setting(request=...)``), which gives the field's name and type (``setting_fields``,
``REQUEST_SETTINGS``); ranges are the settings' own (a ``ConfigError`` names its field).  May import ``config``,
``errors``, ``assist`` (message and option checks), ``server.errors`` and
``server.samplers``; never the engine, ``llama``, the worker or the app.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ...assist.chat_format import Messages, check_messages, utf8_size
from ...assist.plan import ChatOptions, check_chat_options
from ...config import ConfigError, DraftParams, ReasoningParams, SamplingParams, kind, request_fields, request_name
from ...errors import FieldError
from . import samplers
from .errors import ApiError, bad

__all__ = ["Infill", "Request", "SETTINGS", "REQUEST_SETTINGS", "setting_fields", "parse", "parse_json",
           "parse_tokenize", "parse_detokenize", "integer", "number", "string", "boolean", "typed"]

MAX_TOKENS_LIMIT = 1_000_000
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1000
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on chat's top_logprobs; the same for completions' logprobs
# JSON integers are unbounded; these keep them within what NumPy and the kernels take.  The
# settings' own bounds are the dataclasses' (config.py), checked after these.
_INT32 = 2**31 - 1
_SEED_LIMIT = 2**64 - 1
_SIZE_LIMITS = {"seed": _SEED_LIMIT, "max_tokens": MAX_TOKENS_LIMIT}  # a setting's, else _INT32

#: the settings dataclasses a request may override, and every request field that sets one
#: (``config.setting(request=...)``): its name -> ``(class, setting)``
SETTINGS = (SamplingParams, DraftParams, ReasoningParams)
REQUEST_SETTINGS = {request_name(f): (cls, f.name) for cls in SETTINGS for f in request_fields(cls)}


@dataclass
class Infill:
    """A fill-in-the-middle prompt (``Engine.infill_tokens``'s arguments); ``truncated`` is set
    when it is tokenized."""

    prefix: str
    suffix: str
    middle: str = ""
    extra: tuple = ()  # (filename, text) pairs
    repo_level: bool = False
    truncated: bool = False


@dataclass
class Request:
    kind: str  # "chat" | "completion" | "infill"
    prompt: Any  # chat: checked messages; completion: a string, a list of token ids or an Infill
    sampling: SamplingParams
    draft: DraftParams
    stream: bool
    include_usage: bool
    options: ChatOptions | None = None  # chat: the checked tool and format fields
    logprobs: int | None = None  # alternatives per token when logprobs are asked for
    response_fields: tuple | None = None  # /infill: only these (nested "a/b") fields, flattened

    @property
    def prompt_param(self) -> str:
        return "messages" if self.kind == "chat" else "prompt"

    @property
    def constraint_param(self) -> str:
        """The request field a constraint came from."""
        return self.options.constraint_param if self.options else "response_format"


def parse(body: dict, kind: str, sp0: SamplingParams, dp0: DraftParams, limit: int, n_ctx: int,
          rp0: ReasoningParams | None = None, n_vocab: int | None = None) -> Request:
    """A ``kind`` ("chat", "completion" or "infill") request from its JSON body, or the 400
    naming its first bad field.  ``sp0``/``dp0``/``rp0``: the server's settings, which fields
    override; ``limit``: prompts of more UTF-8 bytes cannot fit ``n_ctx`` tokens;
    ``n_vocab``: ``logit_bias`` may name tokens below it (None: the engine checks)."""
    try:
        samplers.refuse_unhonoured(body)
        if kind == "infill":
            return _parse_infill(body, sp0, dp0, limit, n_ctx, n_vocab)
        return _parse_request(body, kind, sp0, dp0, limit, n_ctx, rp0, n_vocab)
    except FieldError as e:  # messages, tools, response_format, text that is not Unicode
        raise bad(str(e), e.param, e.code) from None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object", code="invalid_json")
    return body


def _number(body: dict, name: str) -> float | None:
    f = samplers.number(body, name)
    if f is not None and not math.isfinite(f):
        raise bad(f"{name} must be a finite number", name, "invalid_value")
    return f


def _integer(body: dict, name: str, limit: int = _INT32) -> int | None:
    """An integer field of at most ``limit`` in size; its range is the setting's to check."""
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(f"{name} must be an integer, got {json.dumps(v)[:80]}", name, "invalid_type")
    if abs(v) > limit:
        raise bad(f"{name} is out of range: at most {limit} in size, got {v}", name, "invalid_value")
    return v


def _typed(body: dict, name: str, kind: type, label: str):
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, kind):
        raise bad(f"{name} must be {label}, got {json.dumps(v)[:80]}", name, "invalid_type")
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
        raise bad("stop must be a string or a list of strings", "stop", "invalid_type")
    if len(v) > MAX_STOP_STRINGS:
        raise bad(f"stop may hold at most {MAX_STOP_STRINGS} strings", "stop", "invalid_value")
    for s in v:
        if len(s) > MAX_STOP_CHARS:  # the stop-string check costs up to its length squared per token
            raise bad(f"a stop string may have at most {MAX_STOP_CHARS} characters", "stop", "invalid_value")
        utf8_size(s, "stop")
    return tuple(v)


def _refuse_unsupported(body: dict, chat: bool) -> None:
    n = _integer(body, "n")
    if n is not None and n != 1:
        raise bad("only n=1 is supported", "n", "unsupported_value")
    if not chat:
        if body.get("echo"):
            raise bad("echo is not supported", "echo", "unsupported_value")
        best_of = body.get("best_of")
        if best_of is not None and best_of != 1:
            raise bad("only best_of=1 is supported", "best_of", "unsupported_value")


def _logprobs_option(body: dict, chat: bool) -> int | None:
    """The number of alternatives per token the request wants logprobs with, None for none.
    Chat: ``logprobs`` (a boolean) and ``top_logprobs`` (0-20, only with ``logprobs``);
    completions: ``logprobs`` (an integer 0-20; false or null for none)."""
    if chat:
        on = bool(_boolean(body, "logprobs"))
        top = _integer(body, "top_logprobs")
        if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
            raise bad(f"top_logprobs must be from 0 to {MAX_TOP_LOGPROBS}, got {top}", "top_logprobs", "invalid_value")
        if top is not None and not on:
            raise bad("top_logprobs needs logprobs set to true", "top_logprobs", "invalid_value")
        return (top or 0) if on else None
    if body.get("logprobs") is False:
        return None
    n = _integer(body, "logprobs")
    if n is not None and not 0 <= n <= MAX_TOP_LOGPROBS:
        raise bad(f"logprobs must be from 0 to {MAX_TOP_LOGPROBS}, got {n}", "logprobs", "invalid_value")
    return n


def _check_fits(text: str, limit: int, n_ctx: int, param: str) -> None:
    """Refuse prompt text of more than ``limit`` UTF-8 bytes (the characters first: a lower
    bound on the bytes, free to get), or that is not valid Unicode."""
    if len(text) > limit or utf8_size(text, param) > limit:
        raise bad(f"the prompt ({len(text)} bytes or more) cannot fit the context ({n_ctx} tokens): the limit is "
                  f"{limit} bytes", param, "context_length_exceeded")


def _text_field(body: dict, name: str, limit: int, n_ctx: int, *, required: bool) -> str | None:
    """A string field holding prompt text: present if ``required``, at most ``limit`` bytes."""
    if body.get(name) is None:
        if required:
            raise bad(f"{name} is required", name, "missing_field")
        return None
    text = _string(body, name)
    _check_fits(text, limit, n_ctx, name)
    return text


def _chat_prompt(body: dict, limit: int, n_ctx: int) -> Messages:
    if "messages" not in body:
        raise bad("messages is required", "messages", "missing_field")
    messages = body["messages"]
    if isinstance(messages, list) and len(messages) >= n_ctx:  # every turn costs tokens in any template
        raise bad(f"{len(messages)} messages cannot fit the context ({n_ctx} tokens)", "messages",
                  "context_length_exceeded")
    prompt = check_messages(messages)
    _check_fits("".join(m["content"] for m in prompt), limit, n_ctx, "messages")
    return prompt


def _completion_prompt(body: dict, limit: int, n_ctx: int):
    """A completion's prompt (a string or token ids), or with a non-empty ``suffix`` the
    fill-in-the-middle prompt between them."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list):
        if len(prompt) >= n_ctx:
            raise bad(f"the prompt ({len(prompt)} tokens) does not fit the context ({n_ctx} tokens)",
                      "prompt", "context_length_exceeded")
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise bad("prompt must be a string, a list with one string, or a list of token ids",
                      "prompt", "invalid_type")
    elif prompt is None:
        raise bad("prompt is required", "prompt", "missing_field")
    elif not isinstance(prompt, str):
        raise bad("prompt must be a string, a list with one string, or a list of token ids", "prompt", "invalid_type")
    else:
        _check_fits(prompt, limit, n_ctx, "prompt")
    suffix = _text_field(body, "suffix", limit, n_ctx, required=False)
    if not suffix:
        return prompt
    if not isinstance(prompt, str):
        raise bad("with a suffix, prompt must be text", "prompt", "invalid_type")
    return Infill(prompt, suffix)


def _extra_chunk(chunk, i: int) -> tuple[str, str]:
    """One ``input_extra`` item as ``(filename, text)``, its fields named in errors."""
    where = f"input_extra[{i}]"
    if not isinstance(chunk, dict):
        raise bad("input_extra items must be {filename, text} objects", where, "invalid_type")
    try:
        text = _typed(chunk, "text", str, "a string") or ""
        filename = _typed(chunk, "filename", str, "a string") or "tmp"  # llama.cpp's default name
    except ApiError as e:
        raise bad(e.message.replace(e.param, f"{where}.{e.param}", 1), f"{where}.{e.param}", e.code) from None
    return filename, text


def _input_extra(body: dict, limit: int, n_ctx: int) -> tuple:
    """``/infill``'s ``input_extra``: ``[{filename, text}]`` as ``(filename, text)`` pairs; every
    chunk costs a token or more, and all their text together must fit ``limit`` bytes."""
    chunks = body.get("input_extra")
    if chunks is None:
        return ()
    if not isinstance(chunks, list):
        raise bad("input_extra must be a list of {filename, text} objects", "input_extra", "invalid_type")
    if len(chunks) >= n_ctx:
        raise bad(f"input_extra has {len(chunks)} chunks; the context holds {n_ctx} tokens", "input_extra",
                  "context_length_exceeded")
    out, size = [], 0
    for i, chunk in enumerate(chunks):
        filename, text = _extra_chunk(chunk, i)
        size += len(text) + len(filename)  # characters first: a lower bound on the bytes, free to get
        if size <= limit:
            size += (utf8_size(text, f"input_extra[{i}].text") - len(text)
                     + utf8_size(filename, f"input_extra[{i}].filename") - len(filename))
        if size > limit:
            raise bad(f"input_extra is too large: more than {limit} bytes of text cannot fit the context "
                      f"({n_ctx} tokens)", "input_extra", "context_length_exceeded")
        out.append((filename, text))
    return tuple(out)


def _setting(body: dict, cls, f, n_vocab: int | None):
    """The request's value of setting ``f`` of ``cls`` (None: not given), type-checked as its
    type says; its range is the setting's own, checked when the settings are made."""
    name, k = request_name(f), kind(cls, f.name)
    if f.name == "logit_bias":  # OpenAI's map or llama.cpp's pairs, against the vocabulary
        return samplers.logit_bias(body, n_vocab)
    if f.name == "stop":  # a string or a list of them, each of bounded length
        return _stop(body)
    if k.base is bool:
        return _boolean(body, name)
    if k.base is int:
        return _integer(body, name, _SIZE_LIMITS.get(f.name, _INT32))
    if k.base is float:
        return _number(body, name)
    return _string(body, name)


def setting_fields(body: dict, cls, n_vocab: int | None = None, skip=()) -> tuple[dict, dict]:
    """The settings of ``cls`` the request may set (``config.setting(request=...)``; those in
    ``skip`` are the route's own to spell), each None when not given, and the request field
    behind each setting not named as the setting."""
    values, renamed = {}, {}
    for f in request_fields(cls):
        if f.name in skip:
            continue
        values[f.name] = _setting(body, cls, f, n_vocab)
        if request_name(f) != f.name:
            renamed[f.name] = request_name(f)
    return values, renamed


def _draft_fields(body: dict) -> tuple[dict, dict]:
    """The speculation settings a request may override (None: not given), and the request
    field behind each setting not named as the setting (``speculative.n_max``)."""
    draft, renamed = setting_fields(body, DraftParams)
    spec = _speculative(body)
    n_max = _integer(spec, "speculative.n_max")
    if n_max is not None:
        if draft["depth"] is not None:
            raise bad("give depth or speculative.n_max, not both", "speculative.n_max", "invalid_value")
        deepest = _DEPTH.hi
        if not 0 <= n_max <= deepest:
            raise bad(f"speculative.n_max must be from 0 (no drafting) to {deepest} (the deepest tree), got {n_max}",
                      "speculative.n_max", "invalid_value")
        if n_max == 0:  # llama.cpp's way of drafting nothing
            draft["method"] = "none"
        else:
            draft["depth"], renamed["depth"] = n_max, "speculative.n_max"
    n_min = _integer(spec, "speculative.n_min")
    if n_min not in (None, 0):
        raise bad("speculative.n_min must be 0: a step verifies whatever the tree holds, however short (no "
                  "minimum draft)", "speculative.n_min", "unsupported_value")
    if _number(spec, "speculative.p_min") is not None:
        raise bad("speculative.p_min is not supported: the draft tree grows by estimated reach within depth and "
                  "budget, not by a probability cutoff (set depth/budget, or speculative.n_max)",
                  "speculative.p_min", "unsupported_value")
    return draft, renamed


_SPECULATIVE = ("n_max", "n_min", "p_min")
_DEPTH = next(f for f in request_fields(DraftParams) if f.name == "depth").metadata["check"]  # a Range


def _speculative(body: dict) -> dict:
    """llama.cpp's per-request speculation fields, from a nested ``speculative`` object or
    dotted ``speculative.*`` keys, under their dotted names."""
    nested = body.get("speculative")
    if nested is not None and not isinstance(nested, dict):
        raise bad("speculative must be an object (n_max, n_min, p_min)", "speculative", "invalid_type")
    out = {}
    for key, value in (nested or {}).items():
        if key not in _SPECULATIVE:
            raise bad(f"speculative.{str(key)[:40]} is not a known field; known: {', '.join(_SPECULATIVE)}",
                      f"speculative.{str(key)[:40]}", "unknown_field")
        out[f"speculative.{key}"] = value
    for key in _SPECULATIVE:
        dotted = f"speculative.{key}"
        if dotted in body:
            if dotted in out:
                raise bad(f"{dotted} is given twice (nested and dotted)", dotted, "invalid_value")
            out[dotted] = body[dotted]
    return out


def _settings(sp0: SamplingParams, dp0: DraftParams, sampling: dict, draft: dict,
              renamed: dict) -> tuple[SamplingParams, DraftParams]:
    """The server's settings with the request's (None: not given) in place; ``renamed``: the
    request field behind a setting, where it is not named as the setting."""
    try:
        sp = sp0.replace(**{k: v for k, v in sampling.items() if v is not None})
        dp = dp0.replace(**{k: v for k, v in draft.items() if v is not None})
    except ConfigError as e:
        name = renamed.get(e.field, e.field)
        raise bad(str(e).replace(e.field, name, 1), name, "invalid_value") from None
    return sp, dp


def _stream_fields(body: dict) -> tuple[bool, bool]:
    """``(stream, stream_options.include_usage)``."""
    stream = bool(_boolean(body, "stream"))
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise bad("stream_options must be an object", "stream_options", "invalid_type")
    return stream, bool(_boolean(opts or {}, "include_usage"))


def _parse_request(body: dict, kind: str, sp0: SamplingParams, dp0: DraftParams, limit: int, n_ctx: int,
                   rp0: ReasoningParams | None, n_vocab: int | None) -> Request:
    """A chat or completion request: every field, in a fixed order (the first bad one is
    named)."""
    chat = kind == "chat"
    _refuse_unsupported(body, chat)
    prompt = _chat_prompt(body, limit, n_ctx) if chat else _completion_prompt(body, limit, n_ctx)
    sampling, renamed = setting_fields(body, SamplingParams, n_vocab)
    if chat and (mct := _integer(body, "max_completion_tokens", MAX_TOKENS_LIMIT)) is not None:
        sampling["max_tokens"] = mct
        renamed["max_tokens"] = "max_completion_tokens"
    draft, renamed_draft = _draft_fields(body)
    sp, dp = _settings(sp0, dp0, sampling, draft, {**renamed, **renamed_draft})
    stream, include_usage = _stream_fields(body)
    options = None
    if chat:  # the reasoning settings are chat's alone
        reasoning, _ = setting_fields(body, ReasoningParams)
        options = check_chat_options(body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls"),
                                     body.get("response_format"), body.get("functions"), body.get("function_call"),
                                     reasoning=rp0, chat_template_kwargs=body.get("chat_template_kwargs"), **reasoning)
    return Request(kind, prompt, sp, dp, stream, include_usage, options, logprobs=_logprobs_option(body, chat))


def _parse_infill(body: dict, sp0: SamplingParams, dp0: DraftParams, limit: int, n_ctx: int,
                  n_vocab: int | None) -> Request:
    """llama.cpp's ``/infill`` fields: ``input_prefix``, ``input_suffix`` (required),
    ``input_extra``, ``prompt`` (text after the prefix), ``n_predict`` (-1: until the context
    is full), ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed`` (-1: random), ``stop``,
    ``logit_bias``, ``stream``, ``response_fields``, and this server's draft parameters.  The
    samplers it does not run are refused (``samplers``); other llama.cpp fields (``n_indent``,
    ``samplers``, ``cache_prompt``, ``t_max_*_ms``, ...) are ignored."""
    prefix = _text_field(body, "input_prefix", limit, n_ctx, required=True)
    suffix = _text_field(body, "input_suffix", limit, n_ctx, required=True)
    middle = _text_field(body, "prompt", limit, n_ctx, required=False) or ""
    extra = _input_extra(body, limit, n_ctx)
    if body.get("seed") == -1:
        body = {k: v for k, v in body.items() if k != "seed"}
    n_predict = _integer(body, "n_predict", MAX_TOKENS_LIMIT)
    fields = body.get("response_fields")
    if fields is not None and not (isinstance(fields, list) and all(isinstance(f, str) for f in fields)):
        raise bad("response_fields must be a list of strings", "response_fields", "invalid_type")
    sampling, _ = setting_fields(body, SamplingParams, n_vocab, skip=("max_tokens",))  # spelled n_predict here
    sampling["max_tokens"] = n_ctx if n_predict == -1 else n_predict
    draft, renamed = _draft_fields(body)
    sp, dp = _settings(sp0, dp0, sampling, draft, {"max_tokens": "n_predict", **renamed})
    prompt = Infill(prefix, suffix, middle, extra, repo_level=True)
    return Request("infill", prompt, sp, dp, bool(_boolean(body, "stream")), False,
                   response_fields=None if fields is None else tuple(fields))


def parse_tokenize(body: dict) -> tuple[str, bool, bool, bool]:
    """llama.cpp's ``/tokenize``: ``(content, add_special, parse_special, with_pieces)``;
    ``content`` is required, ``add_special`` (BOS/EOS) off and ``parse_special`` on by default."""
    if body.get("content") is None:
        raise bad("content is required", "content", "missing_field")
    content = _string(body, "content")
    utf8_size(content, "content", lambda message, where: bad(message, where, "invalid_value"))
    parse_special = _boolean(body, "parse_special")
    return (content, bool(_boolean(body, "add_special")), parse_special is not False,
            bool(_boolean(body, "with_pieces")))


def parse_detokenize(body: dict, n_vocab: int) -> list[int]:
    """llama.cpp's ``/detokenize``: the ``tokens`` list, each an id below ``n_vocab``."""
    tokens = body.get("tokens")
    if tokens is None:
        raise bad("tokens is required", "tokens", "missing_field")
    if not isinstance(tokens, list):
        raise bad("tokens must be a list of token ids", "tokens", "invalid_type")
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int):
            raise bad(f"tokens[{i}] must be an integer token id", f"tokens[{i}]", "invalid_type")
        if not 0 <= t < n_vocab:
            raise bad(f"tokens[{i}] is {t}, not a token id of this model (0 to {n_vocab - 1})", f"tokens[{i}]",
                      "invalid_value")
    return tokens


# the type checks, for the routes that translate their own bodies (anthropic, responses)
integer, number, string, boolean, typed = _integer, _number, _string, _boolean, _typed
