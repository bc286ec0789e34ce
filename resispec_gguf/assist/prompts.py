"""Prompts from text: a plain prompt, a chat rendered with the model's template, a
fill-in-the-middle layout, each tokenized so that only the template's own text can become
control tokens, and refused before tokenizing when it cannot fit the context.

``Prompts`` works on a vocabulary (the target's ``tokenize``, ``token_text``,
``special_tokens``, ``bos``/``eos``, ``add_bos``/``add_eos``, ``max_piece_bytes``,
``n_ctx``, ``n_vocab``: any ``backend.LlamaModel``) and the model's chat template; the
template rendering and content marks are ``chat_format``'s, the FIM layout ``fim``'s.
"""

from __future__ import annotations

import functools

from ..errors import ContextFullError, UserError
from . import chat_format as cf
from .chat_format import render
from .fim import FimTokens, find_fim_tokens, infill_prompt

__all__ = ["Prompts"]


class Prompts:
    """The prompt builders of one model: ``vocab`` (see the module docstring) and its chat
    template (None: ChatML)."""

    def __init__(self, vocab, chat_template: str | None):
        self.vocab = vocab
        self.chat_template = chat_template

    @functools.cached_property
    def fim_tokens(self) -> FimTokens | None:
        """The target's fill-in-the-middle tokens (``find_fim_tokens`` among its special
        tokens), None when it has none."""
        return find_fim_tokens((text, i) for text, i, *_ in self.vocab.special_tokens())

    def infill_tokens(self, prefix: str, suffix: str, *, middle: str = "", extra=(), repo_level: bool = False,
                      reserve: int = 0) -> tuple[list[int], bool]:
        """The prompt for filling in between ``prefix`` and ``suffix`` with the target's FIM
        tokens, laid out by ``infill_prompt`` (``middle``, ``extra`` ``(filename, text)``
        pairs and ``repo_level`` as there), and whether anything was cut so that the prompt
        leaves ``reserve`` tokens of the context for the answer.  Texts stay text (special
        tokens are not parsed); BOS comes first when the model wants it.  ``UserError`` when
        the model has no FIM tokens, or a text is longer than ``max_prompt_bytes``."""
        tokens = self.fim_tokens
        if tokens is None:
            raise UserError("this model has no fill-in-the-middle tokens (such as <|fim_prefix|>, <|fim_suffix|>, "
                            "<|fim_middle|>)")
        for text in (prefix, suffix, middle, *(t for pair in extra for t in pair)):
            self.check_prompt_size(text)
        bos = [self.vocab.bos] if self.vocab.add_bos else []
        budget = max(0, self.vocab.n_ctx - 1 - len(bos) - max(0, int(reserve)))
        try:
            body, truncated = infill_prompt(
                tokens, lambda s: self.vocab.tokenize(s, add_special=False, parse_special=False) if s else [],
                prefix, suffix, middle=middle, extra=extra, repo_level=repo_level, budget=budget)
        except ValueError as e:
            raise ContextFullError(str(e)) from None
        return bos + body, truncated

    def special_text(self, token: int) -> str:
        if token is None or not 0 <= token < self.vocab.n_vocab:
            return ""
        return self.vocab.token_text(token).decode("utf-8", "replace")

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
                    template_kwargs: dict | None = None) -> str:
        """The chat template applied to ``messages`` (and ``tools``, OpenAI's tool objects,
        for templates that render them); ``template_kwargs``: more template variables."""
        return render(
            self.chat_template,
            messages,
            bos_token=self.special_text(self.vocab.bos),
            eos_token=self.special_text(self.vocab.eos),
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            extra=template_kwargs,
        )

    @property
    def max_prompt_bytes(self) -> int:
        """No prompt of more UTF-8 bytes can fit the context: a token stands for at most
        ``target.max_piece_bytes()`` bytes of text (128 for Qwen2.5's vocabulary, 12 for the
        test models'), so such a prompt is more than ``n_ctx`` tokens.  (Vocabularies that
        normalise text, BERT/T5-style, may drop characters; none is a generative model here.)"""
        return self.vocab.n_ctx * self.vocab.max_piece_bytes()

    def check_prompt_size(self, text: str) -> None:
        """Refuse a prompt that cannot fit before paying for its tokenization."""
        limit = self.max_prompt_bytes
        size = len(text)  # characters: a lower bound on the bytes, free to get
        if size <= limit:
            size = cf.utf8_size(text, "the text", lambda message, _where: UserError(message))
        if size > limit:
            raise ContextFullError(
                f"the prompt ({size} bytes or more) cannot fit the context ({self.vocab.n_ctx} tokens of at most "
                f"{self.vocab.max_piece_bytes()} bytes each)")

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """``text``'s tokens as llama.cpp's ``/tokenize`` gives them: BOS (and EOS) only with
        ``add_special``, control-token text parsed into control tokens with ``parse_special``.
        Unlike a prompt it may exceed the context."""
        cf.utf8_size(text, "the text", lambda message, _where: UserError(message))
        return self.vocab.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens) -> bytes:
        """The bytes ``tokens`` stand for, control tokens as their text (as llama.cpp's
        ``/detokenize``); ``tokens`` are ids of the vocabulary."""
        specials = self._special_ids
        return b"".join(self.vocab.token_text(t) if t in specials else self.vocab.token_piece(t) for t in tokens)

    @functools.cached_property
    def _special_ids(self) -> frozenset[int]:
        return frozenset(i for _, i, *_ in self.vocab.special_tokens())

    def text_tokens(self, text: str) -> list[int]:
        """Tokenize a prompt, adding BOS (when the model wants it) unless the text already
        starts with it, as a rendered chat template often does.  A text longer than
        ``max_prompt_bytes`` raises ``ContextFullError`` without being tokenized."""
        self.check_prompt_size(text)
        bos = self.special_text(self.vocab.bos)
        return self.vocab.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)

    def chat_tokens(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
                    template_kwargs: dict | None = None) -> list[int]:
        """The prompt for a chat: the template rendered with a generation prompt, tokenized so
        that only the template's own text can become control tokens.

        A message's content is always text: ``<|im_start|>`` typed by a user (or inside a pasted
        document) stays those twelve characters and cannot open a turn.  The template is
        rendered a second time with a unique mark in place of each content, which shows where
        the template's text ends and a content begins; control tokens are cut out of the
        template's text only (as llama.cpp's ``parse_special`` would) and every text run
        between them is tokenized with ``parse_special=False``.  For contents without control
        text the tokens are exactly ``text_tokens(render_chat(messages))``.  When the template
        does more with a content than paste it in (or trim it), the contents are placed where
        the marks are, unchanged, if any of them holds control text.  Like ``text_tokens`` it
        refuses a prompt longer than ``max_prompt_bytes`` before tokenizing it.
        ``template_kwargs``: more template variables (``render_chat``).
        """
        msgs = cf.check_messages(messages)
        contents = [m["content"] for m in msgs]
        self.check_prompt_size("".join(contents))
        rendered = self.render_chat(msgs, add_generation_prompt, tools, template_kwargs)
        self.check_prompt_size(rendered)  # other fields a template may print are text too
        specials = self.vocab.special_tokens()
        nonce = cf.new_nonce()
        marked = self.render_chat(cf.Messages({**m, "content": cf.mark(nonce, i)} for i, m in enumerate(msgs)),
                                  add_generation_prompt, tools, template_kwargs)
        segments = cf.content_segments(rendered, marked, nonce, contents)
        if segments is None:
            if not any(text in c for c in contents for text, *_ in specials):
                return self.text_tokens(rendered)  # nothing to protect: keep the template's output
            segments = cf.pasted_segments(marked, nonce, contents)
            rendered = "".join(t for t, _ in segments)
        bos = self.special_text(self.vocab.bos)
        add_special = not (bos and rendered.startswith(bos))
        tokens = [self.vocab.bos] if add_special and self.vocab.add_bos else []
        for run in cf.split_special(segments, specials):
            if isinstance(run, int):
                tokens.append(run)
            else:
                tokens += self.vocab.tokenize(run, add_special=False, parse_special=False)
        if add_special and self.vocab.add_eos:
            tokens.append(self.vocab.eos)
        return tokens
