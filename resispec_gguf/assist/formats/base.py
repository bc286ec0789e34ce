"""What every tool-call format shares: the interface the planner and ``tools.ToolStream`` use
(``grammar``, ``parse``, ``pending``, ``calls_start``, ``prepare_messages``), the grammar's
skeleton around a call marker (forced, lazy, or calls-or-answer), and rendering for a
template that knows no tools (the tool list and the call syntax in a system message, earlier
calls and results as text).

A family's module says only what is its own: its marker(s), what follows the opening marker
(``body_rules``), how it reads its calls back (``read_calls``) and how it writes them
(``write_calls``).  ``reasoning`` names the thinking markers of a family that thinks before
answering (Qwen3, DeepSeek-R1): the one list ``assist.reasoning`` looks for (as single tokens
of the vocabulary, or spelled in several when the template mentions them), and which then
handles the block.  A format's ``markers`` are its calls' only, so that showing them in the
reply's text never changes what the reasoning support sees.

Pure text and grammar text.  May import ``tools``, ``chat_format`` and ``grammar``; never
the engine, ``llama`` or a surface.
"""

from __future__ import annotations

import json

from ..chat_format import MessageError, Messages, utf8_size
from ..grammar import laid_out
from ..tools import ToolCall, ToolRequest, check_tool_messages, new_call, new_call_id

__all__ = ["ToolFormat"]

TEXT_RULE = r"TEXT: /(.|\n)*/"


class ToolFormat:
    """A tool-call format whose calls start at a marker (``open``).

    ``special``: marker text -> token id, for each of the format's ``markers`` that is one
    special token of the model's vocabulary (the grammar then names the token; free text can
    never produce it).  ``native``: the chat template renders the tools (its Jinja ``tools``
    variable), earlier calls and results; when not, this class writes them as text."""

    name = ""
    open = ""
    markers: tuple[str, ...] = ()
    reasoning: tuple[str, str] | None = None  # (open, close) thinking markers, read by ``assist.reasoning``
    example = ""  # the call syntax, as the system message for a template without tools shows it

    def __init__(self, special: dict[str, int] | None = None, native: bool = True):
        self.special = dict(special or {})
        self.native = native

    # ------------------------------------------------------------------ grammar

    def lark(self, text: str) -> str:
        """A marker in Lark: the special token by id, or the text as a string."""
        return f"<[{self.special[text]}]>" if text in self.special else json.dumps(text, ensure_ascii=False)

    def body_rules(self, req: ToolRequest) -> list[str]:
        """Lark rules defining ``body``: the calls after the opening marker (several when
        ``req.parallel``)."""
        raise NotImplementedError

    def answer_calls(self) -> list[str]:
        """Under tools with a typed output, the rules (of ``body_rules``) of calls a reply may
        make without the marker, in the answer's place (a JSON call object alone, as Qwen2.5
        models write calls); none by default."""
        return []

    def lazy_openings(self, req: ToolRequest) -> tuple[list[str], list[str]]:
        """``(alternatives, rules)``: other openings than the marker that trigger a call under
        "auto" (each alternative free text and then a constrained call); none by default."""
        return [], []

    def grammar(self, req: ToolRequest, final=None, bare: bool = True) -> str:
        """Lark for a reply under ``req`` (llguidance's syntax, with an inline %json).  ``final``:
        under "auto", a JSON schema (True: any object) the reply may follow instead of calling
        (tools with a typed output): the first token chooses, and free text is not allowed;
        ``bare``: whether a call written without the marker (``answer_calls``) may stand in
        the answer's place."""
        op = self.lark(self.open)
        rules = self.body_rules(req)
        if req.choice == "required":
            return "\n".join([f"start: {op} body"] + rules) + "\n"
        if final is not None:  # a call marker or the answer's JSON, from the first token
            answer = laid_out({"type": "object"} if final is True else final)
            alternatives = " | ".join([f"{op} body", "final"] + (self.answer_calls() if bare else []))
            return "\n".join([f"start: {alternatives}", f"final: %json {json.dumps(answer, ensure_ascii=False)}"]
                             + rules) + "\n"
        alternatives, more = self.lazy_openings(req)
        if self.open in self.special:  # free text cannot contain a special token: the call starts at it
            start = [f"TEXT ({op} body)?"]
        else:  # a text marker: free text up to the first marker (a lazy lexeme), then the calls
            start = ["TEXT", "call_head body"]
            more = [f"call_head[lazy]: TEXT {op}"] + more
        return "\n".join([f"start: {' | '.join(start + alternatives)}"] + more + rules + [TEXT_RULE]) + "\n"

    # ------------------------------------------------------------------ reading replies

    def read_calls(self, text: str, allowed) -> list[ToolCall] | None:
        """The calls written after the opening marker (``text`` starts right after it); None
        when they are malformed or name a function not in ``allowed`` (None: any)."""
        raise NotImplementedError

    def unmarked_calls(self, text: str, allowed) -> tuple[int, list[ToolCall]] | None:
        """``(start, calls)`` for calls a reply makes without the marker; none by default."""
        return None

    def parse(self, text: str, allowed=None, parallel: bool = True) -> tuple[str, list[ToolCall]] | None:
        """``(content, calls)`` when ``text`` holds complete, well-formed calls; None when it
        holds none (or a malformed one: it is then left as text).  Calls made without the
        marker (``unmarked_calls``) have no grammar limiting them to one, so without
        ``parallel`` only the first is kept."""
        i = text.find(self.open)
        if i < 0:
            found = self.unmarked_calls(text, allowed)
            if found is None:
                return None
            return text[:found[0]].strip(), found[1] if parallel else found[1][:1]
        calls = self.read_calls(text[i + len(self.open):], allowed)
        if not calls:
            return None
        return text[:i].strip(), calls

    def calls_start(self, text: str, allowed=None) -> int:
        """Where the calls begin in a reply ``parse`` read calls from."""
        i = text.find(self.open)
        if i >= 0:
            return i
        found = self.unmarked_calls(text, allowed)
        return found[0] if found else len(text)

    def unmarked_pending(self, text: str, allowed, start: int) -> int:
        """Where streamed text may be the beginning of unmarked calls; ``len(text)``: nowhere."""
        return len(text)

    def pending(self, text: str, allowed=None, start: int = 0) -> int:
        """Where streamed text must be held back: the index of a call marker (or of a tail
        that may begin one) in ``text``, or of unmarked calls that may be under way (looked
        for from ``start``: what went out before it was no call); ``len(text)`` when none."""
        i = text.find(self.open)
        if i < 0:
            i = len(text)
            for k in range(min(len(self.open) - 1, len(text)), 0, -1):
                if self.open.startswith(text[-k:]):
                    i = len(text) - k
                    break
        if allowed is not None:
            i = min(i, self.unmarked_pending(text, allowed, start))
        return i

    # ------------------------------------------------------------------ writing prompts

    def new_id(self) -> str:
        """An id for a call the model made (clients send it back with the result)."""
        return new_call_id()

    def call(self, name: str, args, call_id: str | None = None) -> ToolCall:
        return new_call(name, args, call_id or self.new_id())

    def write_calls(self, calls: list[dict]) -> str:
        """Calls (OpenAI's ``{"id", "function": {"name", "arguments": object}}``) as the model
        writes them: for a template that knows no tools, and the inverse of ``parse``."""
        raise NotImplementedError

    def system_text(self, req: ToolRequest) -> str:
        """The tool list and the call syntax, for a template that knows no tools."""
        lines = ["You may call functions to answer. The functions, as JSON schemas:", "<tools>"]
        lines += [json.dumps({"type": "function", "function": f}, ensure_ascii=False)
                  for f in req.functions if f["name"] in req.allowed]
        lines += ["</tools>", "To call a function, reply with its name and arguments like this:", self.example]
        return "\n".join(lines)

    def native_messages(self, messages: list[dict]) -> list[dict]:
        """Checked messages as this family's template wants them (a family whose template
        needs ids of its own shape rewrites them here)."""
        return messages

    def _as_text(self, m: dict) -> dict:
        """A message for a template that knows no tools: calls as written, results as user text."""
        if m.get("tool_calls"):
            text = self.write_calls(m["tool_calls"])
            return {"role": "assistant", "content": "\n".join(([m["content"]] if m.get("content") else []) + [text])}
        if m.get("role") == "tool":
            return {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"}
        return m

    def prepare_messages(self, messages: Messages, req: ToolRequest | None) -> tuple[Messages, list | None]:
        """``(messages, tools)`` to render, from checked ``messages`` (``check_messages``): with a
        template that knows tools, it gets them (OpenAI's shape) and renders calls and results
        itself; otherwise the tools and the call syntax become a system message, and calls and
        results become text (whose JSON parts are checked here, as ``check_messages`` would
        check them: the result is ``Messages``)."""
        messages = check_tool_messages(messages)
        shown = req is not None and req.active
        if self.native:
            tools = [{"type": "function", "function": f} for f in req.functions if f["name"] in req.allowed] \
                if shown else None
            return Messages(self.native_messages(messages)), tools
        out = [self._as_text(m) for m in messages]
        written = [b is not a for a, b in zip(messages, out)]  # rewritten here: check their text
        if shown:
            note = self.system_text(req)
            if out and out[0].get("role") == "system":
                out[0], written[0] = {**out[0], "content": (out[0].get("content") or "") + "\n\n" + note}, True
            else:
                out.insert(0, {"role": "system", "content": note})
                written.insert(0, True)
        for k, m in enumerate(out):
            if written[k]:
                utf8_size(m["content"], f"messages[{k}].content", MessageError)
        return Messages(out), None
