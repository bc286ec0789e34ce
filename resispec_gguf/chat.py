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

from .config import DraftParams, SamplingParams
from .engine import Stats
from .errors import ContextFullError, UserError

HELP = """commands:
  /help              this help
  /reset             forget the conversation (keeps the system prompt)
  /retry             send the last message again (after /reset, say)
  /stats             totals for this session and acceptance per tree depth
  /set NAME VALUE    change a setting, e.g. /set temp 0.7, /set method specinfer
                     names: {names}, system
  /save FILE         write the conversation to FILE as JSON
  /exit              quit (so does Ctrl-D)
Ctrl-C stops a reply."""

_ALIASES = {"temp": "temperature", "k": "draws", "top-k": "top_k", "top-p": "top_p", "min-p": "min_p",
            "max-tokens": "max_tokens", "draft-support": "draft_support"}


def stats_line(st: Stats) -> str:
    acc = f"{st.acceptance_rate:.0%}" if st.reached_by_depth else "-"
    return (
        f"[{st.tokens} tokens, {st.tokens_per_s:.1f} tok/s, tau {st.tau:.2f} tokens/target call, "
        f"acceptance {acc}, {st.method}]"
    )


def stats_report(st: Stats) -> str:
    lines = [
        f"tokens {st.tokens}  steps {st.steps}  target calls {st.target_calls}  draft calls {st.draft_calls}",
        f"tau {st.tau:.2f}  tokens/s {st.tokens_per_s:.1f}  acceptance {st.acceptance_rate:.1%}  nodes/step {st.nodes_per_step:.1f}",
        f"time: draft {st.draft_time:.2f}s  target {st.target_time:.2f}s  overhead {st.overhead_time:.2f}s  prompt {st.prompt_time:.2f}s",
    ]
    if st.auto:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(st.steps_by_kind.items()))
        lines.append(f"steps by kind: {kinds}")
        lines.append(st.auto)
    if st.reached_by_depth:
        lines.append("acceptance by depth:")
        for d, (a, r) in enumerate(zip(st.accepted_by_depth, st.reached_by_depth), 1):
            lines.append(f"  depth {d:>2}: {a:>6}/{r:<6} {a / r if r else 0:.1%}")
    return "\n".join(lines)


def apply_setting(sp: SamplingParams, dp: DraftParams, name: str, value: str):
    """Return new (sp, dp) with one field changed; raises UserError on a bad name/value."""
    name = _ALIASES.get(name, name).replace("-", "_")
    for obj in (sp, dp):
        fields = {f.name: f for f in dataclasses.fields(obj)}
        if name in fields and name != "stop":
            current = getattr(obj, name)
            try:
                if name == "seed" and value.lower() in ("none", "random", "-"):
                    new = None
                elif isinstance(current, bool):
                    new = value.lower() in ("1", "true", "yes", "on")
                elif isinstance(current, int) or name == "seed":
                    new = int(value)
                elif isinstance(current, float):
                    new = float(value)
                else:
                    new = value
                obj = obj.replace(**{name: new})
            except ValueError as e:
                raise UserError(f"/set {name}: {e}") from None
            return (obj, dp) if isinstance(obj, SamplingParams) else (sp, obj)
    names = [f.name for f in dataclasses.fields(SamplingParams) if f.name != "stop"] + [f.name for f in dataclasses.fields(DraftParams)]
    raise UserError(f"/set: unknown setting {name!r}; try one of {', '.join(names)}")


class ChatSession:
    """Conversation state and turn handling, separate from terminal I/O for testing."""

    def __init__(self, engine, sp: SamplingParams, dp: DraftParams, system: str | None, out=sys.stdout, err=sys.stderr):
        self.engine = engine
        self.sp, self.dp = sp, dp
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
        try:
            prompt = self.engine.chat_tokens(messages)
            stream = self.engine.stream(prompt, self.sp, self.dp)
            interrupted = False
            try:
                for piece in stream:
                    self.out.write(piece)
                    self.out.flush()
            except KeyboardInterrupt:
                interrupted = True
                stream.close()
        except ContextFullError as e:
            self.out.write("\n")
            print(f"{e} — /reset starts a new conversation; /retry sends your message again.", file=self.err)
            return
        res = self.engine.last_result
        self.out.write("\n")
        if interrupted:
            print("[stopped]", file=self.err)
        self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": res.text}]
        self.total.merge(res.stats)
        line = stats_line(res.stats)
        print(f"\x1b[2m{line}\x1b[0m" if self.dim else line, file=self.out)
        self.out.flush()

    def command(self, line: str) -> bool:
        """Handle a slash command; returns False when the session should end."""
        parts = line.strip().split(maxsplit=2)
        cmd = parts[0].lower()
        if cmd in ("/exit", "/quit"):
            return False
        if cmd == "/help":
            names = ", ".join(["temp", "top_k", "top_p", "min_p", "max_tokens", "seed", "method", "draws", "depth", "budget", "draft_support", "policy"])
            print(HELP.format(names=names), file=self.out)
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
            else:
                try:
                    self.sp, self.dp = apply_setting(self.sp, self.dp, parts[1], parts[2])
                    if self.dp.method != "none" and self.engine.draft is None:
                        raise UserError("no draft model is loaded; only method none works")
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


def run_chat(args) -> int:
    from .cli import draft_from_args, load_engine, sampling_from_args

    sp, dp = sampling_from_args(args), draft_from_args(args)
    interactive = sys.stdin.isatty()
    with load_engine(args) as engine:
        session = ChatSession(engine, sp, dp, args.system)
        if interactive:
            print("resispec-gguf chat — /help for commands, Ctrl-D to quit", file=sys.stderr)
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
