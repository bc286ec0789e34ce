"""Which tool-call format a model writes, read from its chat template as llama.cpp reads it
(``family_of``), or named (``--tool-format``), and which of the format's markers are single
special tokens of its vocabulary (``detect_format``).

May import its ``formats`` neighbours; nothing above (``config.TOOL_FORMATS`` lists the
names of ``FORMATS`` for the command line, and a test holds the two equal).
"""

from __future__ import annotations

from .base import ToolFormat
from .deepseek_r1 import DeepSeekR1Format
from .generic import GenericFormat
from .hermes import HermesFormat
from .llama3 import Llama3Format
from .mistral import MistralFormat
from .qwen3 import Qwen3Format

__all__ = ["FORMATS", "family_of", "detect_format", "template_knows_tools"]

FORMATS: dict[str, type[ToolFormat]] = {cls.name: cls for cls in (
    HermesFormat, GenericFormat, Llama3Format, MistralFormat, Qwen3Format, DeepSeekR1Format)}


def family_of(template: str | None) -> str:
    """The format a chat template's model writes: the first of its telltale texts found
    (DeepSeek-R1's call marker, Hermes' ``<tool_call>`` — Qwen3 when it also thinks — Llama
    3.x's ``ipython`` header, Mistral's ``[TOOL_CALLS]``), else ``generic``."""
    src = template or ""
    if "<｜tool▁calls▁begin｜>" in src:
        return "deepseek_r1"
    if "<tool_call>" in src:
        return "qwen3" if "<think>" in src else "hermes"
    if "<|start_header_id|>ipython<|end_header_id|>" in src or ("ipython" in src and "<|python_tag|>" in src):
        return "llama3"
    if "[TOOL_CALLS]" in src:
        return "mistral"
    return "generic"


def template_knows_tools(template: str | None) -> bool:
    """Whether the template renders the tools it is given (uses the Jinja ``tools`` variable)."""
    return bool(template) and "tools" in template


def detect_format(template: str | None, vocab, tokenizer, name: str | None = None) -> ToolFormat:
    """How a model writes tool calls: the format ``name`` (None: ``family_of`` its
    template), rendered by the template when it knows tools, with the markers that are
    single special tokens of its vocabulary (``vocab.tokenize``; the grammar engine's
    ``tokenizer`` says which tokens are special) named by id."""
    cls = FORMATS[name or family_of(template)]
    special = {}
    for text in cls.markers:
        ids = vocab.tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1 and tokenizer.is_special_token(ids[0]):
            special[text] = int(ids[0])
    return cls(special, native=template_knows_tools(template))
