"""Hermes / Qwen2.5 (and most ChatML models with tools): ``<tool_call>\\n{"name": ...,
"arguments": {...}}\\n</tool_call>`` blocks, one per call.  Chosen when the chat template
mentions ``<tool_call>``; the template renders the tool list, earlier calls and results.

The openings these models actually use under ``tool_choice`` "auto" all start a constrained
call: the ``<tool_call>`` marker, and — as Qwen2.5-Coder writes its calls — a fenced ```json
block or a bare object at the start of a line whose first key is ``"name"`` and whose name is
an offered function (``json_calls``), the object maybe in doubled braces (``{{"name": ...}}``:
Qwen2.5's own template shows the call syntax so, its braces doubled inside a Jinja string, and
its models copy it).  JSON naming no offered function stays text.

May import its ``formats`` neighbours and ``tools``; nothing above.
"""

from __future__ import annotations

import json
import re

from ..tools import ToolCall, ToolRequest
from .base import ToolFormat
from .json_calls import args_rules, json_call_rule, json_calls, json_pending, lazy_json_rules

__all__ = ["HermesFormat"]

_LINE_START = r"((.|\n)*\n)?"  # free text ending where a line starts (or nothing: the reply's start)
_FENCE = r"```(json)?[ \t]*\n[ \t\n]{0,32}"
# blanks as the JSON scanner (``json_calls``) skips them: a regex's \s would take any Unicode
# space too, which a reply the grammar let through would then not be read with
_BLANK = r"[ \t\r\n]"
# the call object in doubled braces, {{"name": ..., "arguments": {...}}}, as Qwen2.5's template
# shows the call syntax (``json_calls._doubled``): the extra opening brace, and the closing one
# right after the object (no blanks between: the template has none, and a model that would
# rather stop spends no tokens on blanks before it)
_DOUBLED, _UNDOUBLED = r"\{", " /\\}/"


class HermesFormat(ToolFormat):
    """``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` blocks; also calls as
    JSON alone (fenced or bare), constrained from their opening on."""

    name = "hermes"
    open = "<tool_call>"
    close = "</tool_call>"
    markers = (open, close)
    bare_calls = True  # a call written as JSON alone (fenced or bare) is read and constrained too
    example = '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'

    def body_rules(self, req: ToolRequest) -> list[str]:
        op, cl = self.lark(self.open), self.lark(self.close)
        more = ' ("\\n" call)*' if req.parallel else ""
        return [f'body: "\\n" call_body "\\n" {cl}{more}',
                f'call: {op} "\\n" call_body "\\n" {cl}',
                json_call_rule(req, "call_body")]

    def answer_calls(self) -> list[str]:
        """A bare call object (``call_body``) in the answer's place under a typed output."""
        return ["call_body"] if self.bare_calls else []

    def lazy_openings(self, req: ToolRequest) -> tuple[list[str], list[str]]:
        """A fenced ```json block or a bare object naming an offered function, at the start of
        a line, the object maybe in doubled braces (as Qwen2.5's template shows a call): the
        call from there on (more such calls after it with ``parallel``)."""
        if not self.bare_calls:
            return [], []
        rules = args_rules(req, "args")  # each function's arguments, once for every opening
        fence_close = f" /{_BLANK}{{0,8}}```/"
        openings = [("fenced", _LINE_START + _FENCE, fence_close), ("bare", _LINE_START, ""),
                    ("fenced2", _LINE_START + _FENCE + _DOUBLED, _UNDOUBLED + fence_close),
                    ("bare2", _LINE_START + _DOUBLED, _UNDOUBLED)]
        alternatives = []
        for tag, prefix, suffix in openings:
            found, more = lazy_json_rules(req, tag, "arguments", prefix, suffix, "args")
            alternatives += found
            rules += more
        if not req.parallel:
            return alternatives, rules
        rules += [f"json_next: /{_BLANK}{{1,8}}/ (fenced_call | call_body)",  # call_body: any call's object
                  f"fenced_call: /```(json)?[ \\t]*\\n{_BLANK}{{0,8}}/ call_body /{_BLANK}{{0,8}}```/"]
        return [f"{a} json_next*" for a in alternatives], rules

    _BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)

    def _block_call(self, body: str, allowed) -> ToolCall | None:
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        if allowed is not None and obj["name"] not in allowed:
            return None
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None
        return self.call(obj["name"], args) if isinstance(args, dict) else None

    def parse(self, text: str, allowed=None, parallel: bool = True):
        """``ToolFormat.parse``, reading every ``<tool_call>`` block wherever it stands; the
        content is the text around them (a block cut short by max_tokens is not content)."""
        if self.open not in text:
            return super().parse(text, allowed, parallel)
        calls = []
        for m in self._BLOCK.finditer(text):
            call = self._block_call(m.group(1), allowed)
            if call is None:
                return None
            calls.append(call)
        if not calls:
            return None
        content = self._BLOCK.sub("", text)
        cut = content.find(self.open)
        if cut >= 0:
            content = content[:cut]
        else:  # a reply cut inside a next block's marker: not content either (nor streamed)
            for k in range(len(self.open) - 1, 0, -1):
                if text.endswith(self.open[:k]):
                    content = content[:-k]
                    break
        return content.strip(), calls

    def unmarked_calls(self, text: str, allowed):
        return json_calls(text, allowed, doubled=True) if self.bare_calls else None

    def unmarked_pending(self, text: str, allowed, start: int) -> int:
        return json_pending(text, allowed, start, doubled=True) if self.bare_calls else len(text)

    def write_calls(self, calls: list[dict]) -> str:
        return "\n".join(f"{self.open}\n" + json.dumps({"name": c["function"]["name"],
                                                        "arguments": c["function"]["arguments"]},
                                                       ensure_ascii=False) + f"\n{self.close}" for c in calls)
