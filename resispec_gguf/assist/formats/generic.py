"""The fallback for a template that knows no tools: Hermes ``<tool_call>`` blocks, described to
the model in a system message (``ToolFormat.system_text``); earlier calls and results are
rendered as message text.  Calls written as JSON alone are read and constrained as Hermes
reads them.

May import its ``formats`` neighbours; nothing above.
"""

from __future__ import annotations

from .hermes import HermesFormat

__all__ = ["GenericFormat"]


class GenericFormat(HermesFormat):
    """Hermes blocks for a template that knows no tools (never ``native``)."""

    name = "generic"

    def __init__(self, special: dict[str, int] | None = None, native: bool = False):
        super().__init__(special, native=False)
