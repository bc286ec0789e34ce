"""Llama 3.1 / 3.2 / 3.3: a call is a JSON object ``{"name": ..., "parameters": {...}}`` that
is the whole reply (optionally after ``<|python_tag|>``); tool results come back in the
``ipython`` role (the template turns a ``tool`` message into it).  A call ends the turn with
``<|eom_id|>`` or ``<|eot_id|>``, both end-of-generation tokens of the vocabulary.  Chosen
when the chat template has an ``ipython`` header.

Under ``tool_choice`` "auto" the reply is free text unless it opens, at its very start, with
``{"name": "<an offered function>"``; from there the call is constrained (several, one per
line or separated by ``;``, with ``parallel_tool_calls``).  With a typed answer
(``response_format``) the call must open with ``<|python_tag|>``, since the answer is JSON
too and the first token has to tell them apart.  (The built-in tools' ``name.call(...)``
syntax is not supported.)

May import its ``formats`` neighbours and ``tools``; nothing above.
"""

from __future__ import annotations

import json

from ..tools import ToolRequest
from .base import TEXT_RULE, ToolFormat
from .json_calls import json_call_rule, json_calls, json_pending, lazy_json_rules

__all__ = ["Llama3Format"]

_KEYS = ("parameters", "arguments")  # Llama writes "parameters"; some fine-tunes "arguments"
_SEP = r"/[ \t]{0,4}(;|\n)[ \t\n]{0,8}/"


class Llama3Format(ToolFormat):
    """``{"name": ..., "parameters": ...}`` as the whole reply, after ``<|python_tag|>`` or not."""

    name = "llama3"
    open = "<|python_tag|>"
    markers = (open,)
    example = '{"name": <function-name>, "parameters": <args-json-object>}'

    def body_rules(self, req: ToolRequest) -> list[str]:
        more = f" ({_SEP} l3_call)*" if req.parallel else ""
        return [f"body: l3_call{more}", json_call_rule(req, "l3_call", "parameters")]

    def grammar(self, req: ToolRequest, final=None, bare: bool = True) -> str:
        """``ToolFormat.grammar``, except that calls need no marker: forced calls may follow
        ``<|python_tag|>`` or not, and under "auto" the call opens at the reply's start."""
        if final is not None:
            return super().grammar(req, final, bare)
        op = self.lark(self.open)
        rules = self.body_rules(req)
        if req.choice == "required":
            return "\n".join([f"start: {op}? body"] + rules) + "\n"
        tag = "" if self.open in self.special else r"(<\|python_tag\|>)?[ \t\n]{0,8}"  # the marker as text
        alternatives, more = lazy_json_rules(req, "l3", "parameters", r"[ \t\n]{0,8}" + tag)
        if req.parallel:
            alternatives = [f"{a} ({_SEP} l3_call)*" for a in alternatives]
        starts = ["TEXT"] + alternatives + ([f"{op} body"] if self.open in self.special else [])
        return "\n".join([f"start: {' | '.join(starts)}"] + more + rules + [TEXT_RULE]) + "\n"

    def read_calls(self, text: str, allowed):
        found = json_calls(text, _ANY if allowed is None else allowed, _KEYS, anywhere=False, separators=";")
        return found[1] if found else None

    def unmarked_calls(self, text: str, allowed):
        return json_calls(text, allowed, _KEYS, anywhere=False, separators=";")

    def unmarked_pending(self, text: str, allowed, start: int) -> int:
        return json_pending(text, allowed, start, anywhere=False, keys=_KEYS, separators=";")

    def write_calls(self, calls: list[dict]) -> str:
        return "\n".join(json.dumps({"name": c["function"]["name"], "parameters": c["function"]["arguments"]},
                                    ensure_ascii=False) for c in calls)


class _Anything:
    """Every name (``read_calls`` with no ``allowed``)."""

    def __contains__(self, name) -> bool:
        return isinstance(name, str)

    def __iter__(self):
        return iter(())


_ANY = _Anything()
