"""DeepSeek-R1 and its distills: calls between ``<｜tool▁calls▁begin｜>`` and
``<｜tool▁calls▁end｜>``, each ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` then the
arguments in a fenced json block and ``<｜tool▁call▁end｜>`` (calls one per line), after a
``<think>…</think>`` reasoning part (``reasoning`` names its markers, which
``assist.reasoning`` looks for).  Chosen when the chat template mentions
``<｜tool▁calls▁begin｜>``.

May import its ``formats`` neighbours and ``tools``; nothing above.
"""

from __future__ import annotations

import json
import re

from ..grammar import laid_out
from ..tools import ToolRequest, rebased
from .base import ToolFormat

__all__ = ["DeepSeekR1Format"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"

# one call: its name, then its arguments' JSON (in a fence whose language may be missing)
_CALL = re.compile(re.escape(CALL_BEGIN) + r"\s*function\s*" + re.escape(SEP) + r"([^\n]+)\n"
                   r"```(?:json)?\s*\n?(.*?)\s*```\s*" + re.escape(CALL_END), re.S)


class DeepSeekR1Format(ToolFormat):
    """``<｜tool▁calls▁begin｜>`` calls ``<｜tool▁calls▁end｜>``, thinking first."""

    name = "deepseek_r1"
    open = CALLS_BEGIN
    markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    reasoning = ("<think>", "</think>")
    example = (f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}<function-name>\n```json\n<args-json-object>\n```"
               f"{CALL_END}{CALLS_END}")

    def body_rules(self, req: ToolRequest) -> list[str]:
        calls = 'ds_call ("\\n"? ds_call)*' if req.parallel else "ds_call"
        rules = [f"body: {calls} {self.lark(CALLS_END)}"]
        names = []
        for k, f in enumerate(fn for fn in req.functions if fn["name"] in req.allowed):
            schema = laid_out(rebased(f["parameters"], ""))
            rules += [f'ds_fn_{k}: {json.dumps(f["name"] + chr(10) + "```json" + chr(10))} ds_args_{k} '
                      f'"\\n```" {self.lark(CALL_END)}',
                      f"ds_args_{k}: %json {json.dumps(schema, ensure_ascii=False)}"]
            names.append(f"ds_fn_{k}")
        rules.append(f'ds_call: {self.lark(CALL_BEGIN)} "function" {self.lark(SEP)} ({" | ".join(names)})')
        return rules

    def read_calls(self, text: str, allowed):
        end = text.find(CALLS_END)
        if end < 0:
            return None
        calls, pos = [], 0
        for m in _CALL.finditer(text, 0, end):
            if text[pos:m.start()].strip():
                return None
            name = m.group(1).strip()
            if allowed is not None and name not in allowed:
                return None
            try:
                args = json.loads(m.group(2))
            except json.JSONDecodeError:
                return None
            if not isinstance(args, dict):
                return None
            calls.append(self.call(name, args))
            pos = m.end()
        return calls if calls and not text[pos:end].strip() else None

    def write_calls(self, calls: list[dict]) -> str:
        written = [f"{CALL_BEGIN}function{SEP}{c['function']['name']}\n```json\n"
                   + json.dumps(c["function"]["arguments"], ensure_ascii=False) + f"\n```{CALL_END}" for c in calls]
        return CALLS_BEGIN + "\n".join(written) + CALLS_END
