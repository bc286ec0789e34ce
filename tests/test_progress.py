"""progress.py: a tqdm bar on stderr, a silent stand-in when progress is off or tqdm is
missing, and ``steps``' callback: a bar of steps only on a terminal, closed at the end."""

import io
import sys

from resispec_gguf import progress


def test_off_is_a_silent_stand_in(capsys):
    b = progress.bar(5, "loading", False)
    b.update()
    b.update(3)
    b.set_postfix_str("x")
    b.close()
    assert capsys.readouterr() == ("", "")
    assert not type(b).__module__.startswith("tqdm")


def test_on_draws_a_tqdm_bar_on_stderr(capsys):
    b = progress.bar(4, "loading", True, unit="file")
    b.update(4)
    b.close()
    out, err = capsys.readouterr()
    assert out == "" and "loading" in err and "4/4" in err and "file" in err


def test_without_tqdm_progress_is_the_stand_in(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import tqdm.auto -> ImportError
    b = progress.bar(2, "loading", True)
    b.update(2)
    b.close()
    assert capsys.readouterr().err == ""


class _Bar:
    def __init__(self, log, **kw):
        self.log = log
        log.append(("new", kw))

    def update(self, n=1):
        self.log.append(("update", n))

    def close(self):
        self.log.append(("close",))


def test_steps_reports_done_of_total_and_closes_at_the_end(monkeypatch):
    log = []
    monkeypatch.setattr(progress, "bar", lambda total, desc, on, **kw: _Bar(log, total=total, desc=desc, on=on, **kw))
    report = progress.steps("warming up")
    report(0, 3)  # the bar appears before the first step is done
    report(1, 3)
    report(2, 3)
    assert log == [("new", dict(total=3, desc="warming up", on=False, unit="step", leave=False)),
                   ("update", 1), ("update", 1)]
    report(3, 3)
    assert log[-2:] == [("update", 1), ("close",)]
    assert sum(1 for e in log if e[0] == "new") == 1  # one bar per callback


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_steps_draw_only_on_a_terminal(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    report = progress.steps("compiling")
    for done in range(3):
        report(done, 2)
    assert piped.getvalue() == ""  # a log gets no bar
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    report = progress.steps("compiling")
    for done in range(3):
        report(done, 2)
    assert "compiling" in terminal.getvalue()


def test_slow_note_speaks_only_when_the_work_is_slow():
    import time

    lines = []
    with progress.slow_note(lines.append, "compiling", after=0.05):
        pass
    time.sleep(0.1)
    assert lines == []  # quick: nothing said
    with progress.slow_note(lines.append, "compiling", after=0.01):
        time.sleep(0.2)
    assert lines == ["compiling"]
    with progress.slow_note(None, "compiling", after=0.0):  # no one to tell
        time.sleep(0.01)
