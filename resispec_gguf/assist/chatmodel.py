"""What chat planning reads of a model: ``ChatModel``, the narrow protocol ``plan`` is handed.

A chat request is planned (``plan.plan_chat``) from three of the model's parts, each an
``assist`` object the caller built once per model and keeps (they cache what is costly):

* ``prompts`` — the chat template rendered and tokenized (``prompts.Prompts``:
  ``chat_tokens``, ``render_chat``);
* ``grammars`` — constraints compiled against the vocabulary (``grammar.Grammars``:
  ``compile``, ``check``);
* ``chat_formats`` — how the model writes tool calls and thinks, and its token pieces
  (``ChatFormats``: ``tool_format``, ``reasoning_format``, ``token_piece``, ``n_vocab``).

The engine holds all three under these names, so it can be handed to ``plan_chat`` as it is;
planning only reads the three attributes and calls the parts, never a method of the object
it is handed (the flow is surfaces → assist → engine, never back).  A test or another caller
may hand any object with these members.

May import ``errors``, ``config`` and its ``assist`` neighbours; never the engine, ``llama``
or a surface.
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

from . import reasoning as _reasoning
from .formats import ToolFormat, detect_format

__all__ = ["ChatPrompts", "ChatConstraints", "ChatMarkers", "ChatModel", "ChatFormats"]


class ChatPrompts(Protocol):
    """A chat template applied to messages: as text, and as the prompt's tokens."""

    def chat_tokens(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
                    template_kwargs: dict | None = None) -> list[int]: ...

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
                    template_kwargs: dict | None = None) -> str: ...


class ChatConstraints(Protocol):
    """Constraints compiled against the model's vocabulary (``GrammarError`` when one cannot be)."""

    def compile(self, *, json_schema=None, grammar: str | None = None): ...

    def check(self, json_schema) -> None: ...


class ChatMarkers(Protocol):
    """The model's tool-call format, its thinking markers (None: it does not think in a marked
    block), the bytes each token adds to the text and the vocabulary's size."""

    n_vocab: int

    def tool_format(self) -> ToolFormat: ...

    def reasoning_format(self) -> _reasoning.ReasoningFormat | None: ...

    def token_piece(self, token: int) -> bytes: ...


@runtime_checkable
class ChatModel(Protocol):
    """What ``plan.plan_chat`` and ``plan.chat_text`` read of a model: three parts, nothing else."""

    prompts: ChatPrompts
    grammars: ChatConstraints
    chat_formats: ChatMarkers


class ChatFormats:
    """A ``ChatMarkers`` read from a model's vocabulary (``vocab``: ``n_vocab``, ``tokenize``,
    ``token_piece``, ``token_text``; any ``backend.LlamaModel``) and chat template, each found
    once: the tool format (``formats.detect_format``; ``tool_format_name`` overrides the family
    read from the template; ``tokenizer()`` gives the grammar engine's vocabulary, which says
    which tokens are special) and the thinking markers (``reasoning.detect_reasoning``).  The
    control tokens they write are added to those whose text the reply shows
    (``vocab.shown_specials``, where the vocabulary has it)."""

    def __init__(self, vocab, chat_template: str | None, tokenizer: Callable[[], object],
                 tool_format_name: str | None = None):
        self.vocab = vocab
        self.chat_template = chat_template
        self._tokenizer = tokenizer
        self._tool_format_name = tool_format_name
        self._tool_format = None
        self._reasoning = False  # not looked for yet

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    def token_piece(self, token: int) -> bytes:
        """The bytes ``token`` adds to the text (possibly part of a UTF-8 character)."""
        return self.vocab.token_piece(int(token))

    def tool_format(self) -> ToolFormat:
        """How this model writes tool calls (found once)."""
        if self._tool_format is None:
            self._tool_format = detect_format(self.chat_template, self.vocab, self._tokenizer(),
                                              self._tool_format_name)
            self._show(self._tool_format.special.values())  # the reply's text shows the format's markers
        return self._tool_format

    def reasoning_format(self) -> _reasoning.ReasoningFormat | None:
        """The model's thinking markers (found once), None for a model that does not think in
        a marked block."""
        if self._reasoning is False:
            self._reasoning = _reasoning.detect_reasoning(self.vocab, self.chat_template)
            if self._reasoning is not None:
                self._show(self._reasoning.shown)  # markers that are control tokens show in the text
        return self._reasoning

    def _show(self, tokens) -> None:
        """Special tokens whose text the reply's text shows (``LlamaModel.shown_specials``),
        added to those shown already (a tool format's markers, a reasoning model's)."""
        if hasattr(self.vocab, "shown_specials"):
            self.vocab.shown_specials = self.vocab.shown_specials | frozenset(int(t) for t in tokens)
