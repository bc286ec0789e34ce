"""Qwen3 and QwQ: Hermes ``<tool_call>`` calls, after a ``<think>…</think>`` reasoning part.
Chosen when the chat template mentions both ``<tool_call>`` and ``<think>``.  The calls are
read and constrained as Hermes'; ``reasoning`` names its thinking markers, which
``assist.reasoning`` looks for (in the vocabulary, or the template), returns apart and starts
the constraint after.

May import its ``formats`` neighbours; nothing above.
"""

from __future__ import annotations

from .hermes import HermesFormat

__all__ = ["Qwen3Format"]


class Qwen3Format(HermesFormat):
    """Hermes calls from a model that thinks first."""

    name = "qwen3"
    reasoning = ("<think>", "</think>")
