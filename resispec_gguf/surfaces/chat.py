"""``resispec-gguf chat``: a multi-turn terminal chat over the engine.

Reads turns from the terminal (or, when stdin is not a terminal, one turn per line so it can
be scripted), streams replies, prints one dim stats line per reply, and handles slash
commands.  Ctrl-C stops the current reply, Ctrl-D or /exit quits, a full context says how to
go on.  All generation goes through ``Engine``; this module only renders.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from .. import config
from ..assist.plan import plan_chat
from ..config import DraftParams, ReasoningParams, SamplingParams
from .display import dimmed, stats_line, stats_report
from ..engine import Stats
from ..errors import ContextFullError, UserError

# the line a session opens with, on a terminal (README quotes it)
BANNER = "resispec-gguf chat — /help for commands, Ctrl-D to quit"
HELP = """commands:
  /help              this help
  /reset             forget the conversation (keeps the system prompt)
  /retry             send the last message again (after /reset, say)
  /stats             totals for this session and acceptance per tree depth
  /set NAME VALUE    change a setting, e.g. /set temp 0.7, /set method specinfer
                     names: {names}, system
  /set reasoning on|off  show a reasoning model's thinking (dimmed) or hide it
  /save FILE         write the conversation to FILE as JSON
  /exit              quit (so does Ctrl-D)
Ctrl-C stops a reply."""

# what /set can change: every sampling and draft setting that takes one value
_SETTABLE = (SamplingParams, DraftParams)


def _settable(cls) -> list:
    return [f for f in config.settings(cls) if not config.kind(cls, f.name).many]


def setting_names() -> str:
    return ", ".join(config.short_name(f) for cls in _SETTABLE for f in _settable(cls))


def apply_setting(sp: SamplingParams, dp: DraftParams, name: str, value: str):
    """Return new (sp, dp) with one setting changed; ``name`` is a field name or one of its
    flags (``temp``, ``top-k``, ``K``).  Raises UserError on a bad name or value."""
    try:
        cls, field = config.find_setting(_SETTABLE, name)
    except config.ConfigError:
        raise UserError(f"/set: unknown setting {name!r}; try one of {setting_names()}") from None
    if config.kind(cls, field).many:
        raise UserError(f"/set: {field} cannot be set here; try one of {setting_names()}")
    try:
        new = config.parse_field(cls, field, value)
        if cls is SamplingParams:
            return sp.replace(**{field: new}), dp
        return sp, dp.replace(**{field: new})
    except config.ConfigError as e:
        raise UserError(f"/set {name}: {e}") from None


class ChatSession:
    """Conversation state and turn handling, separate from terminal I/O for testing."""

    def __init__(self, engine, sp: SamplingParams, dp: DraftParams, system: str | None, out=sys.stdout, err=sys.stderr,
                 reasoning: ReasoningParams | None = None):
        self.engine = engine
        self.sp, self.dp = sp, dp
        self.reasoning = reasoning or ReasoningParams()
        self.show_reasoning = True  # /set reasoning on|off
        self._thinking = False  # the reply's thinking is being shown
        self.system = system
        self.messages: list[dict] = []
        self.total = Stats(method=dp.method)
        self.out, self.err = out, err
        self.last_user: str | None = None
        self.dim = out.isatty() if hasattr(out, "isatty") else False

    def _all_messages(self):
        sys_msg = [{"role": "system", "content": self.system}] if self.system else []
        return sys_msg + self.messages

    def say(self, text: str) -> None:
        self.last_user = text
        messages = self._all_messages() + [{"role": "user", "content": text}]
        self._thinking = False
        try:
            plan = plan_chat(self.engine, messages, reasoning=self.reasoning)
            split = plan.reasoning_stream()
            stream = self.engine.stream(plan.prompt, self.sp, self.dp, constraint=plan.constraint)
            try:
                for piece in stream:
                    self._show(*(split.push(piece) if split else ("", piece)))
            except KeyboardInterrupt:
                stream.close()  # the result says "interrupted"
        except ContextFullError as e:
            self.out.write("\n")
            print(f"{e} — /reset starts a new conversation; /retry sends your message again.", file=self.err)
            return
        res = self.engine.last_result
        if split:
            self._show(*split.finish(res.text))
        self.out.write("\n")
        if res.finish_reason == "interrupted":
            print("[stopped]", file=self.err)
        answer = plan.split(res.text)[1]  # the thinking stays out of the conversation, as templates want
        self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
        self.total.merge(res.stats)
        line = stats_line(res.stats)
        print(f"\x1b[2m{line}\x1b[0m" if self.dim else line, file=self.out)
        self.out.flush()

    def _show(self, thinking: str, answer: str) -> None:
        """Write a piece of the reply: its thinking dimmed (unless hidden), then its answer."""
        if thinking and self.show_reasoning:
            self.out.write(dimmed(thinking, self.dim))
            self._thinking = True
        if answer:
            if self._thinking:
                self.out.write("\n\n")
                self._thinking = False
            self.out.write(answer)
        self.out.flush()

    def _set_reasoning(self, value: str) -> None:
        word = value.strip().lower()
        if word not in ("on", "off"):
            print("usage: /set reasoning on|off", file=self.err)
            return
        self.show_reasoning = word == "on"
        print(f"[reasoning {'shown' if self.show_reasoning else 'hidden'}]", file=self.out)

    def command(self, line: str) -> bool:
        """Handle a slash command; returns False when the session should end."""
        parts = line.strip().split(maxsplit=2)
        cmd = parts[0].lower()
        if cmd in ("/exit", "/quit"):
            return False
        if cmd == "/help":
            print(HELP.format(names=setting_names()), file=self.out)
        elif cmd == "/reset":
            self.messages.clear()
            print("[conversation cleared]", file=self.out)
        elif cmd == "/retry":
            if self.last_user is None:
                print("nothing to retry", file=self.err)
            else:
                self.say(self.last_user)
        elif cmd == "/stats":
            print(stats_report(self.total), file=self.out)
        elif cmd == "/set":
            if len(parts) < 3:
                print("usage: /set NAME VALUE", file=self.err)
            elif parts[1] == "system":
                self.system = parts[2]
                print("[system prompt set]", file=self.out)
            elif parts[1] == "reasoning":
                self._set_reasoning(parts[2])
            else:
                try:
                    sp, dp = apply_setting(self.sp, self.dp, parts[1], parts[2])
                    self.engine.check_draft_params(dp)
                    self.sp, self.dp = sp, dp
                    print(f"[{parts[1]} = {parts[2]}]", file=self.out)
                except UserError as e:
                    print(f"error: {e}", file=self.err)
        elif cmd == "/save":
            if len(parts) < 2:
                print("usage: /save FILE", file=self.err)
            else:
                data = {
                    "messages": self._all_messages(),
                    "sampling": dataclasses.asdict(self.sp),
                    "draft": dataclasses.asdict(self.dp),
                    "stats": self.total.as_dict(),
                }
                try:
                    with open(parts[1], "w", encoding="utf-8") as f:
                        json.dump(data, f, indent=2, ensure_ascii=False)
                    print(f"[saved to {parts[1]}]", file=self.out)
                except (OSError, ValueError) as e:  # ValueError: a NUL in the path
                    print(f"error: cannot write {parts[1]!r}: {getattr(e, 'strerror', None) or e}", file=self.err)
        else:
            print(f"unknown command {cmd}; /help lists them", file=self.err)
        self.out.flush()
        return True


def _read_lines(interactive: bool):
    if interactive:
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:
            pass
        while True:
            try:
                yield input(">>> ")
            except KeyboardInterrupt:
                print("", file=sys.stderr)  # Ctrl-C at the prompt clears the line
                continue
            except EOFError:
                print("", file=sys.stderr)
                return
    else:
        for line in sys.stdin:
            yield line.rstrip("\n")


def run_chat(engine, sp: SamplingParams, dp: DraftParams, system: str | None = None,
             reasoning: ReasoningParams | None = None) -> int:
    """The chat loop on a loaded engine: turns from the terminal, or one per line of stdin;
    ``reasoning``: what a reasoning model's thinking becomes (shown dimmed, by default)."""
    interactive = sys.stdin.isatty()
    session = ChatSession(engine, sp, dp, system, reasoning=reasoning)
    if interactive:
        print(BANNER, file=sys.stderr)
    for line in _read_lines(interactive):
        if not line.strip():
            continue
        if line.startswith("/"):
            if not session.command(line):
                break
            continue
        try:
            session.say(line)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
    return 0
