"""Reasoning models: their thinking markers, the reply split into reasoning and answer, and
the constraint that lets them think before a grammar applies.

Qwen3, QwQ, DeepSeek-R1 and its distills think in a ``<think>…</think>`` block before they
answer.  The marker pairs looked for are the tool formats' ``reasoning`` (``formats``: the
families that think).  Most vocabularies hold both markers as single tokens: user-defined,
whose text shows in the reply, or control tokens, whose text the reply shows only when asked
(``ReasoningFormat.shown``: the engine adds them to the tokens the reply's text shows).  A
vocabulary without them spells a marker in several tokens; the markers are then taken when the
chat template mentions the opening one, each as its tokens in one fixed tokenisation
(``detect_reasoning``).  Some templates open the block themselves at the end of the
generation prompt (DeepSeek-R1 distills, QwQ), some let the model open it (Qwen3), and some
close it at once when asked not to think (Qwen3 with ``enable_thinking`` false): where a
reply starts is read from the prompt's last text (``ReasoningFormat.phase``).

* ``split_reasoning`` — a finished reply as ``(reasoning, content)``; ``ReasoningStream``
  streams the same split, so that its deltas concatenate to exactly the non-streamed parts.
* ``constrain`` — a request's constraint (tools, ``response_format``) made to start after the
  block (``lazy.After``, which recognises a marker of several tokens in its fixed
  tokenisation), and a reasoning budget: after N tokens of thinking only the closing marker
  (its tokens, one after the other) may follow.
* ``check_reasoning`` — a request's ``reasoning_format``, ``reasoning_budget`` and
  ``chat_template_kwargs`` checked (``ReasoningRequest``).

Pure Python: the vocabulary comes in as an object (``tokenize``, ``token_piece``,
``token_text``).  May import ``errors``, ``config`` and its ``assist`` neighbours (``lazy``,
``formats``); never the engine,
``llama`` or a surface.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import ConfigError, ReasoningParams
from ..errors import FieldError
from .formats import FORMATS
from .lazy import AFTER, BEFORE, FREE, After

__all__ = ["ReasoningFormat", "ReasoningRequest", "ReasoningStream", "detect_reasoning", "split_reasoning",
           "constrain", "check_reasoning", "check_template_kwargs", "marker_pairs"]


def marker_pairs() -> tuple[tuple[str, str], ...]:
    """The marker pairs looked for, in order: the ``reasoning`` of the tool formats' families
    that think (the one place they are written)."""
    return tuple(dict.fromkeys(cls.reasoning for cls in FORMATS.values() if cls.reasoning))

# variables the renderer sets itself: chat_template_kwargs may not replace them
_RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception"})


def _tokens(value) -> tuple[int, ...]:
    return (int(value),) if isinstance(value, int) else tuple(int(t) for t in value)


@dataclass(frozen=True)
class ReasoningFormat:
    """A model's thinking markers: their texts and their tokens (a token, or the tokens that
    spell the marker in a fixed tokenisation; given as an int or a sequence)."""

    start: str
    end: str
    start_ids: tuple
    end_ids: tuple
    # the vocabulary's end-of-generation tokens (refused inside a constrained block); a format
    # is its markers, so they take no part in comparisons
    ends: tuple = field(default=(), compare=False)
    # the markers that are control tokens: the reply's text must show them (``split_reasoning``
    # reads the text)
    shown: tuple = field(default=(), compare=False)

    def __post_init__(self):
        object.__setattr__(self, "start_ids", _tokens(self.start_ids))
        object.__setattr__(self, "end_ids", _tokens(self.end_ids))

    def phase(self, prompt, piece) -> str:
        """Where a reply to ``prompt`` (token ids) starts: ``lazy.FREE`` when the prompt's text
        ends with the opening marker (the template opened the block), ``lazy.AFTER`` when it
        ends with the closing one (closed already: no thinking this turn), else
        ``lazy.BEFORE`` (the model may open it).  Trailing whitespace is looked past;
        ``piece(id)`` is a token's bytes (a control marker's text included: ``shown``)."""
        start, end = self.start.encode(), self.end.encode()
        tail = b""
        for t in reversed(prompt):
            tail = piece(int(t)) + tail
            if len(tail.rstrip()) >= max(len(start), len(end)):
                break
        tail = tail.rstrip()
        if tail.endswith(end):
            return AFTER
        return FREE if tail.endswith(start) else BEFORE


def _single_token(vocab, text: str) -> tuple[int | None, bool]:
    """``(id, control)``: the one token whose text is ``text`` (user-defined, its piece the
    text; or a control token, whose piece is empty unless shown), or ``(None, False)``."""
    found = vocab.tokenize(text, add_special=False, parse_special=True)
    if len(found) != 1:
        return None, False
    t = int(found[0])
    if vocab.token_piece(t) == text.encode():
        return t, False
    token_text = getattr(vocab, "token_text", None)
    if token_text is not None and token_text(t) == text.encode():
        return t, True
    return None, False


def detect_reasoning(vocab, template: str | None = None) -> ReasoningFormat | None:
    """The model's thinking markers (``vocab.tokenize``, ``vocab.token_piece``,
    ``vocab.token_text``): a pair both of whose markers are single tokens of the vocabulary
    (as text or as control tokens); else, when the chat ``template`` mentions a pair's
    opening marker, that pair with each marker as its tokens (a single token where there is
    one); None otherwise."""
    for start, end in marker_pairs():
        (a, a_shown), (b, b_shown) = _single_token(vocab, start), _single_token(vocab, end)
        shown = tuple(t for t, c in ((a, a_shown), (b, b_shown)) if c)
        if a is not None and b is not None:
            return ReasoningFormat(start, end, a, b, _end_tokens(vocab), shown)
        if template and start in template:
            ids = [t if t is not None else vocab.tokenize(text, add_special=False, parse_special=True)
                   for t, text in ((a, start), (b, end))]
            return ReasoningFormat(start, end, *ids, _end_tokens(vocab), shown)
    return None


def _end_tokens(vocab) -> tuple:
    """The end-of-generation tokens among the vocabulary's special tokens and its eos."""
    ids = {int(t) for _, t, *_ in getattr(vocab, "special_tokens", list)()}
    eos = getattr(vocab, "eos", None)
    if isinstance(eos, int) and eos >= 0:
        ids.add(eos)
    return tuple(sorted(t for t in ids if vocab.is_eog(t)))


def split_reasoning(fmt: ReasoningFormat | None, phase: str, text: str) -> tuple[str | None, str]:
    """A finished reply as ``(reasoning, content)``: the text inside the block (stripped of
    surrounding whitespace) and the answer after it (its leading whitespace dropped).  A
    reply whose block never closed (cut by max_tokens) is all reasoning; one with no block
    (or no ``fmt``) has reasoning None and all its text as content.  ``phase``: where the
    reply started (``ReasoningFormat.phase``); from ``lazy.BEFORE`` only a reply that opens
    with the marker has a block."""
    if fmt is None or phase == AFTER:
        return None, text
    body = text
    if phase == BEFORE:
        if not text.startswith(fmt.start):
            return None, text
        body = text[len(fmt.start):]
    i = body.find(fmt.end)
    if i < 0:
        return body.strip(), ""
    return body[:i].strip(), body[i + len(fmt.end):].lstrip()


def _marker_tail(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that may begin ``marker`` (held back)."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


class ReasoningStream:
    """A streamed reply split as ``split_reasoning`` splits it: ``push`` a piece, get the
    ``(reasoning, content)`` text that may go out now; ``finish`` with the whole reply gives
    the rest.  What goes out is always a prefix of the final parts: a tail that may be a
    marker, and whitespace that may end the reasoning, are held back until they are known.
    Each piece costs time in its own length only (a long thinking block is never rescanned)."""

    def __init__(self, fmt: ReasoningFormat, phase: str):
        self.fmt, self.phase = fmt, phase
        self.state = {AFTER: "content", FREE: "reasoning", BEFORE: "opening"}[phase]
        self.held = ""  # text not classified yet
        self.blank = ""  # whitespace that may end the reasoning
        self.sent_reasoning = self.sent_content = 0

    def _reasoning(self, text: str, last: bool) -> str:
        """``text`` of the reasoning as it may go out: leading whitespace of the block
        dropped, trailing whitespace held (dropped when ``last``)."""
        text = self.blank + text
        if not self.sent_reasoning:
            text = text.lstrip()
        out = text.rstrip()
        self.blank = "" if last else text[len(out):]
        self.sent_reasoning += len(out)
        return out

    def push(self, piece: str) -> tuple[str, str]:
        text, self.held = self.held + piece, ""
        reasoning = content = ""
        if self.state == "opening":
            start = self.fmt.start
            if text.startswith(start):
                self.state, text = "reasoning", text[len(start):]
            elif start.startswith(text):
                self.held = text
                return "", ""
            else:
                self.state = "content"
        if self.state == "reasoning":
            i = text.find(self.fmt.end)
            if i < 0:
                k = _marker_tail(text, self.fmt.end)
                self.held = text[len(text) - k:] if k else ""
                return self._reasoning(text[:len(text) - k], False), ""
            reasoning = self._reasoning(text[:i], True)
            self.state, text = "answer", text[i + len(self.fmt.end):]
        if self.state == "answer":  # the answer's leading whitespace is dropped
            text = text.lstrip()
            if text:
                self.state = "content"
        if self.state == "content":
            content = text
            self.sent_content += len(content)
        return reasoning, content

    def finish(self, text: str) -> tuple[str, str]:
        """The parts of the whole reply ``text`` not sent yet."""
        reasoning, content = split_reasoning(self.fmt, self.phase, text)
        return (reasoning or "")[self.sent_reasoning:], content[self.sent_content:]


def constrain(fmt: ReasoningFormat, inner, phase: str, budget: int, n_vocab: int):
    """The constraint of a request on a reasoning model: ``inner`` (None: none) applies only
    after the closing marker, and with ``budget`` >= 0 the block ends after that many tokens.
    None when nothing needs constraining (no inner constraint and no budget); ``inner`` itself
    when the prompt closed the block already."""
    if phase == AFTER or (inner is None and budget < 0):
        return inner
    return After(inner, fmt.end_ids, n_vocab, open=fmt.start_ids, phase=phase, budget=budget, ends=fmt.ends)


def check_template_kwargs(value, param: str = "chat_template_kwargs") -> dict | None:
    """``chat_template_kwargs``: None, or an object whose keys become template variables
    (``{"enable_thinking": false}``); ``FieldError`` naming the field otherwise."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise FieldError(f"{param} must be an object, e.g. {{\"enable_thinking\": false}}", param)
    for key in value:
        if key in _RESERVED:
            raise FieldError(f"{param}.{key} is set by the server and cannot be given", f"{param}.{key}")
    return dict(value)


@dataclass(frozen=True)
class ReasoningRequest:
    """A chat request's checked reasoning fields: ``params`` (``config.ReasoningParams``: the
    format and the budget) and the template variables it sends (``chat_template_kwargs``)."""

    params: ReasoningParams = ReasoningParams()
    template_kwargs: dict | None = None

    @property
    def split(self) -> bool:
        """Whether the thinking is returned apart from the answer."""
        return self.params.reasoning_format == "auto"

    @property
    def budget(self) -> int:
        return self.params.reasoning_budget

    def template_variables(self) -> dict | None:
        """The variables the template gets: the request's, with ``enable_thinking`` false
        under a budget of 0 unless the request sets it (as llama.cpp does)."""
        if self.budget == 0 and "enable_thinking" not in (self.template_kwargs or {}):
            return {**(self.template_kwargs or {}), "enable_thinking": False}
        return self.template_kwargs


def check_reasoning(defaults: ReasoningParams | None = None, *, reasoning_format=None, reasoning_budget=None,
                    chat_template_kwargs=None) -> ReasoningRequest:
    """A request's reasoning fields over ``defaults`` (the server's or the command line's
    settings; None: ``ReasoningParams()``), each None when not given; ``FieldError`` naming
    the field for a bad one."""
    params = defaults if defaults is not None else ReasoningParams()
    given = {"reasoning_format": reasoning_format, "reasoning_budget": reasoning_budget}
    try:
        params = params.replace(**{k: v for k, v in given.items() if v is not None})
    except ConfigError as e:
        raise FieldError(str(e), e.field) from None
    return ReasoningRequest(params, check_template_kwargs(chat_template_kwargs))
