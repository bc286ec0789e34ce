"""The chat surface in-process: ``/set`` parsing (``apply_setting``) and a ``ChatSession`` on
the tiny pair, writing to string buffers.  test_cli.py drives the same through a terminal-less
subprocess."""

import io
import json

import pytest

from resispec_gguf import config
from resispec_gguf.surfaces.chat import ChatSession, apply_setting, setting_names
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.errors import UserError

SP, DP = SamplingParams(max_tokens=6, seed=1), DraftParams()


@pytest.mark.parametrize("name,value,sp,dp", [
    ("temp", "0.5", SP.replace(temperature=0.5), DP),
    ("temperature", "0", SP.replace(temperature=0.0), DP),
    ("top-k", "7", SP.replace(top_k=7), DP),
    ("max_tokens", "9", SP.replace(max_tokens=9), DP),
    ("seed", "random", SP.replace(seed=None), DP),
    ("k", "2", SP, DP.replace(draws=2)),
    ("method", "specinfer", SP, DP.replace(method="specinfer")),
    ("lookup", "on", SP, DP.replace(lookup=True)),
    ("draft-support", "16", SP, DP.replace(draft_support=16)),
])
def test_apply_setting(name, value, sp, dp):
    assert apply_setting(SP, DP, name, value) == (sp, dp)


@pytest.mark.parametrize("name,value,needle", [
    ("temp", "hot", "/set temp: temperature must be a number"),
    ("top_p", "0", "/set top_p: top_p must be in (0, 1]"),
    ("method", "magic", "method must be one of"),
    ("bogus", "1", "unknown setting 'bogus'"),
    ("stop", "x", "stop cannot be set here"),
    ("ctx", "4096", "unknown setting"),  # a model setting: fixed once loaded
])
def test_apply_setting_refuses(name, value, needle):
    with pytest.raises(UserError) as e:
        apply_setting(SP, DP, name, value)
    assert needle in str(e.value)


def test_help_names_every_settable_setting():
    names = setting_names().split(", ")
    assert names[:2] == ["temp", "top-k"] and "lookup" in names and "draws" in names and "stop" not in names
    for name in names:  # each name is understood
        assert config.find_setting((SamplingParams, DraftParams), name)


class _Out(io.StringIO):
    """A terminal stand-in that can press Ctrl-C after ``interrupt_after`` writes."""

    def __init__(self, interrupt_after=None):
        super().__init__()
        self.interrupt_after = interrupt_after

    def write(self, s):
        if self.interrupt_after is not None:
            if self.interrupt_after == 0:
                self.interrupt_after = None
                raise KeyboardInterrupt
            self.interrupt_after -= 1
        return super().write(s)


def _session(engine, **kw):
    out, err = _Out(), io.StringIO()
    return ChatSession(engine, SP, DP, kw.pop("system", None), out=out, err=err), out, err


def test_session_turns_commands_and_save(engine, tmp_path):
    s, out, err = _session(engine, system="Be brief.")
    s.say("Hello")
    s.command("/set temp 0")
    s.say("Again")
    assert s.sp.temperature == 0.0 and out.getvalue().count("tok/s") == 2
    assert [m["role"] for m in s.messages] == ["user", "assistant", "user", "assistant"]
    s.command("/stats")
    assert f"tokens {s.total.tokens} " in out.getvalue() and "steps by kind" in out.getvalue()
    path = tmp_path / "c.json"
    assert s.command(f"/save {path}")
    data = json.loads(path.read_text())
    assert data["messages"][0] == {"role": "system", "content": "Be brief."}
    assert data["sampling"]["temperature"] == 0.0 and data["stats"]["tokens"] == s.total.tokens
    s.command("/set bogus 1")
    s.command("/set method rrs")  # a draft is loaded
    assert s.dp.method == "rrs"
    assert "unknown setting" in err.getvalue()
    s.command("/reset")
    assert s.messages == [] and s.system == "Be brief."
    s.command("/retry")
    assert [m["content"] for m in s.messages if m["role"] == "user"] == ["Again"]
    s.command("/nonsense")
    assert "unknown command /nonsense" in err.getvalue()
    assert s.command("/help") and "lookup" in out.getvalue()
    assert s.command("/exit") is False


def test_ctrl_c_stops_the_reply_and_keeps_what_was_said(engine):
    s, out, err = _session(engine)
    s.sp = s.sp.replace(max_tokens=40, temperature=0.0)
    out.interrupt_after = 2  # the third piece written is interrupted
    s.say("Tell me more")
    assert engine.last_result.finish_reason == "interrupted"
    assert "[stopped]" in err.getvalue()
    reply = s.messages[-1]["content"]
    assert reply == engine.last_result.text and len(engine.last_result.tokens) < 40
    assert out.getvalue().count("tok/s") == 1  # the stats line still comes


def test_a_method_the_models_cannot_run_is_refused(tiny_pair):
    from resispec_gguf.engine import Engine

    with Engine.load(str(tiny_pair[0]), "", n_ctx=128, n_threads=1, progress=False) as e:
        s, out, err = _session(e)
        s.command("/set method chain")
        assert "needs a draft model" in err.getvalue() and s.dp.method == "auto"
        s.command("/set lookup on")
        s.command("/set method chain")  # chains of lookup candidates need no draft model
        assert s.dp.method == "chain" and s.dp.lookup


def test_a_full_context_is_a_message(engine):
    s, out, err = _session(engine)
    s.say("word " * 600)
    assert "/reset" in err.getvalue() and s.messages == []


def test_reasoning_is_shown_dimmed_and_kept_out_of_the_conversation(open_think_pair):
    """A reasoning model (its template opens the thinking; a budget of 3 closes it): the
    thinking is written dimmed on a terminal, hidden after ``/set reasoning off``, and the
    conversation keeps only the answer."""
    from resispec_gguf.config import ReasoningParams
    from resispec_gguf.engine import Engine

    with Engine.load(str(open_think_pair[0]), str(open_think_pair[1]), n_ctx=512, n_threads=1,
                     progress=False) as e:
        out, err = _Out(), io.StringIO()
        s = ChatSession(e, SP.replace(max_tokens=8), DP, None, out=out, err=err,
                        reasoning=ReasoningParams(reasoning_budget=3))
        s.dim = True
        s.say("Think")
        thinking, answer = e.last_result.text.split("</think>")
        shown = out.getvalue()
        assert "\x1b[2m" in shown and "</think>" not in shown
        assert s.messages[-1] == {"role": "assistant", "content": answer.lstrip()}
        s.command("/set reasoning off")
        s.command("/set reasoning maybe")
        assert "[reasoning hidden]" in out.getvalue() and "usage: /set reasoning on|off" in err.getvalue()
        before = len(out.getvalue())
        s.say("Again")
        reply = out.getvalue()[before:].rsplit("\x1b[2m[", 1)[0]  # before the dim stats line
        assert "\x1b[2m" not in reply and e.last_result.text.split("</think>")[1].lstrip() in reply
