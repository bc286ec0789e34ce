"""Progress on a terminal: a tqdm bar on stderr, or a no-op stand-in when progress is off or
tqdm is missing.  The one place that draws one; the engine reports through a callback
(``steps``) and never prints itself.  ``slow_note``: a line for a log too, told only when
the work it names turns out slow."""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Callable

__all__ = ["bar", "slow_note", "steps"]


@contextlib.contextmanager
def slow_note(note: Callable[[str], None] | None, line: str, after: float = 1.0):
    """Run the block; if it is still running ``after`` seconds in, tell ``note(line)`` once
    (from a timer thread): a start whose work is usually quick (kernels from Numba's cache)
    says what it is doing when it is not, terminal or log alike."""
    if note is None:
        yield
        return
    timer = threading.Timer(after, note, (line,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def bar(total: int, desc: str, progress: bool, *, unit: str = "part", leave: bool = True):
    """A tqdm bar on stderr (``leave``: keep the finished bar on screen, else erase it)."""
    if progress:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave)
        except ImportError:
            pass

    class _NoBar:
        def update(self, n: int = 1) -> None:
            pass

        def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
            pass

        def close(self) -> None:
            pass

    return _NoBar()


def steps(desc: str) -> Callable[[int, int], None]:
    """A ``report(done, total)`` callback drawing an erasable bar of steps, shown only when
    stderr is a terminal (a script's or a server's log gets no bar); the bar closes when
    ``done == total``."""
    state = {}

    def report(done: int, total: int) -> None:
        b = state.get("bar")
        if b is None:
            b = state["bar"] = bar(total, desc, sys.stderr.isatty(), unit="step", leave=False)
        if done > 0:
            b.update(1)
        if done >= total:
            b.close()

    return report
