"""Chat messages and templates: check OpenAI-style messages (``check_messages``), render a
model's Jinja chat template in the environment Hugging Face's ``apply_chat_template`` gives it,
which the models were trained with (sandboxed Jinja2 with its ``tojson``, ``raise_exception``,
``strftime_now``, loop controls and ``{% generation %}``;
``messages``/``bos_token``/``eos_token``/``add_generation_prompt``/``tools``, and a request's
``chat_template_kwargs``), and split a
rendered chat into the template's own text and the messages' contents, so that only the
template's text can become control tokens (``Engine.chat_tokens``).

Messages are checked once per request: ``check_messages`` returns ``Messages``, a list that
says it has been checked, and passes one through unchanged.  ``utf8_size`` is the one check
for text that UTF-8 cannot encode (a lone surrogate).

Pure Python, no model.  May import ``errors`` only; never the engine, ``llama`` or a surface.
"""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from typing import Callable
import secrets

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import FieldError, UserError

# Used when a GGUF carries no template: ChatML, which most instruct models understand.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_ROLES = ("system", "user", "assistant", "tool", "developer")
# OpenAI's newer name for the system role (what its client and some agent frameworks send);
# chat templates know only "system", so a developer message is rendered as one
_RENAMED_ROLES = {"developer": "system"}


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """The ``tojson`` filter as Hugging Face's templates have it: keys in their given order,
    no HTML escaping, non-ASCII kept, with ``json.dumps``' ``indent``, ``separators`` and
    ``sort_keys`` (Jinja's own sorts the keys and writes ``'``, ``<``, ``>``, ``&`` as
    ``\\u0027`` and the like, text the models never saw in training)."""
    try:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)
    except (TypeError, ValueError) as e:  # an undefined or unserializable value: the template's fault
        raise jinja2.exceptions.TemplateError(f"tojson: {e}") from None


def _strftime_now(format):
    """Today's date or time in ``format``, which templates print in their system text."""
    return datetime.now().strftime(format)


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``, which marks the assistant's text for
    Hugging Face's training masks: rendered as its body alone."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        # a call block, as there: the body is rendered in a scope of its own
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


_ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                     extensions=[_Generation, jinja2.ext.loopcontrols])
_ENV.filters["tojson"] = _tojson
_ENV.globals.update(raise_exception=_raise, strftime_now=_strftime_now)


@functools.lru_cache(maxsize=16)
def _compiled(template: str) -> jinja2.Template:
    """``template`` compiled once: every chat is rendered twice (contents, then marks)."""
    return _ENV.from_string(template)


class MessageError(FieldError):
    """A malformed message; ``param`` names the offending field, e.g. ``messages[0].content``."""

    def __init__(self, message: str, param: str = "messages", code: str = "invalid_value"):
        super().__init__(message, param, code)


class Messages(list):
    """Messages ``check_messages`` has checked (or made from checked ones): string contents,
    known roles.  ``check_messages`` passes them through unchanged."""


def utf8_size(text: str, where: str, error: Callable[[str, str], Exception] = FieldError) -> int:
    """``text``'s size in UTF-8 bytes; ``error`` naming ``where`` when UTF-8 cannot encode it
    (a lone surrogate such as ``"\\ud800"``, which JSON can carry)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise error(f"{where} is not valid Unicode (a lone surrogate at character {e.start})", where) from None


# content parts a text model cannot read: refused, never dropped (the answer would be about
# the text alone, as if the rest had been seen)
_NOT_TEXT = {"image_url": "an image", "input_image": "an image", "image": "an image", "input_audio": "audio",
             "audio": "audio", "file": "a file", "input_file": "a file", "video_url": "a video"}


def _part_text(part, where: str) -> str:
    """The text of one content part (``text``; an assistant's ``refusal``), or ``MessageError``
    for a part the model cannot read."""
    if not isinstance(part, dict):
        raise MessageError(f"{where} must be an object", where)
    kind = part.get("type")
    key = {"text": "text", "refusal": "refusal"}.get(kind) if isinstance(kind, str) else None
    if key is not None:
        text = part.get(key)
        if not isinstance(text, str):
            raise MessageError(f"{where}.{key} must be a string", f"{where}.{key}")
        utf8_size(text, f"{where}.{key}", MessageError)
        return text
    if kind in _NOT_TEXT:
        raise MessageError(f"{where} is {_NOT_TEXT[kind]} ({kind} part): the model serves text only (this server "
                           "has no vision or audio input); send text parts", f"{where}.type", "unsupported_value")
    if not isinstance(kind, str):
        raise MessageError(f"{where} must be a content part with a type (text)", f"{where}.type")
    raise MessageError(f"{where}.type {kind[:40]!r} is not supported: only text parts are", f"{where}.type",
                       "unsupported_value")


def _content(m: dict, where: str) -> str:
    """A message's content as one string: text parts joined, None as empty; any other part
    (an image, audio, a file) is refused."""
    content = m.get("content", "")
    if isinstance(content, list):  # OpenAI content parts
        return "".join(_part_text(part, f"{where}.content[{j}]") for j, part in enumerate(content))
    if content is None:
        return ""
    if not isinstance(content, str):
        raise MessageError(f"{where}.content must be a string or a list of parts", f"{where}.content")
    utf8_size(content, f"{where}.content", MessageError)
    return content


def _check_message(m, where: str) -> dict:
    if not isinstance(m, dict) or "role" not in m:
        raise MessageError(f"{where} must be an object with a role", where)
    if not isinstance(m["role"], str) or m["role"] not in _ROLES:
        raise MessageError(f"{where}.role must be one of {', '.join(_ROLES)}, got {str(m['role'])[:40]!r}",
                           f"{where}.role")
    return {**m, "role": _RENAMED_ROLES.get(m["role"], m["role"]), "content": _content(m, where)}


def check_messages(messages) -> Messages:
    """Validate OpenAI-style messages; returns them with string content (text parts joined).
    ``Messages`` (already checked) come back as they are.

    A ``developer`` message (OpenAI's newer name for the system role) becomes a ``system``
    one.  Raises ``MessageError`` naming the field for anything else: a missing or unknown role,
    content that is not a string, null or a list of parts, a part that is not text (an image,
    audio, a file: the model reads text only), a text part whose ``text`` is not a string, or
    text that cannot be encoded as UTF-8 (a lone surrogate such as ``"\\ud800"``).
    """
    if isinstance(messages, Messages):
        return messages
    if not isinstance(messages, list) or not messages:
        raise MessageError("messages must be a non-empty list")
    return Messages(_check_message(m, f"messages[{i}]") for i, m in enumerate(messages))


def new_nonce() -> str:
    """Digits only, so that no template filter (upper, title, ...) can change a mark."""
    return str(secrets.randbelow(10**12)).zfill(12)


def mark(nonce: str, index: int) -> str:
    """The stand-in for message ``index``'s content: private-use characters around digits."""
    return f"\ue000{nonce}:{index}\ue001"


def pasted_segments(marked: str, nonce: str, contents: list[str], shape=None) -> list[tuple[str, bool]]:
    """``(text, is_content)`` pieces of ``marked`` (a template applied to ``mark(nonce, i)`` in
    place of every content) with each mark replaced by ``shape(contents[i])``."""
    parts = re.split("\ue000" + nonce + ":(\\d+)\ue001", marked)  # text, index, text, ..., text
    segments = []
    for k, text in enumerate(parts):
        if k % 2 == 0:
            segments.append((text, False))
        else:
            content = contents[int(text)] if int(text) < len(contents) else ""
            segments.append((shape(content) if shape else content, True))
    return [(t, c) for t, c in segments if t]


def content_segments(rendered: str, marked: str, nonce: str, contents: list[str]) -> list[tuple[str, bool]] | None:
    """Split ``rendered`` (a template applied to ``contents``) into ``(text, is_content)``
    pieces with the help of ``marked`` (the same template applied to the marks).  None when the
    template does more with a content than paste it in, or paste it stripped of surrounding
    whitespace (``| trim``): then ``rendered`` is not ``marked`` with its marks replaced."""
    for shape in (None, str.strip):
        segments = pasted_segments(marked, nonce, contents, shape)
        if "".join(t for t, _ in segments) == rendered:
            return segments
    return None


_WHITESPACE = " \t\n\v\f\r"  # C isspace(), which llama.cpp strips with


def split_special(segments: list[tuple[str, bool]], specials) -> list[str | int]:
    """Cut the template's text (never a content's) at special-token texts, as llama.cpp does
    with ``parse_special``: ``specials`` is ``(text, id, lstrip, rstrip)`` longest first, each
    cutting every text fragment left to right.  Returns text runs (a content joined with the
    template text around it) and token ids, in order."""
    frags: list = [(t, c) for t, c in segments]
    strip: dict[int, tuple[bool, bool]] = {}
    for text, tid, lstrip, rstrip in specials:
        if not text:
            continue
        strip[tid] = (lstrip, rstrip)
        out = []
        for frag in frags:
            if isinstance(frag, int) or frag[1]:
                out.append(frag)
                continue
            s, pos = frag[0], 0
            while (m := s.find(text, pos)) >= 0:
                if m > pos:
                    out.append((s[pos:m], False))
                out.append(tid)
                pos = m + len(text)
            if pos < len(s):
                out.append((s[pos:], False))
        frags = out
    runs: list[str | int] = []
    for frag in frags:
        if isinstance(frag, int):
            runs.append(frag)
        elif runs and isinstance(runs[-1], str):
            runs[-1] += frag[0]
        else:
            runs.append(frag[0])
    for k, item in enumerate(runs):  # whitespace that lstrip/rstrip tokens swallow
        if isinstance(item, int):
            lstrip, rstrip = strip.get(item, (False, False))
            if lstrip and k > 0 and isinstance(runs[k - 1], str):
                runs[k - 1] = runs[k - 1].rstrip(_WHITESPACE)
            if rstrip and k + 1 < len(runs) and isinstance(runs[k + 1], str):
                runs[k + 1] = runs[k + 1].lstrip(_WHITESPACE)
    return [r for r in runs if not (isinstance(r, str) and not r)]


def render(template: str | None, messages, *, bos_token="", eos_token="", add_generation_prompt=True,
           tools=None, extra: dict | None = None) -> str:
    """``template`` (None: ChatML) applied to ``messages``; ``extra``: more template variables
    (a request's ``chat_template_kwargs``, such as ``enable_thinking``), set under the
    renderer's own."""
    try:
        tmpl = _compiled(template or CHATML)
        return tmpl.render({
            **(extra or {}),
            "messages": check_messages(messages),
            "bos_token": bos_token,
            "eos_token": eos_token,
            "add_generation_prompt": add_generation_prompt,
            "raise_exception": _raise,
            "tools": tools,
        })
    except jinja2.exceptions.TemplateError as e:
        raise UserError(f"the chat template failed: {e}") from None
