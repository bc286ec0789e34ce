"""Progress on a terminal: a tqdm bar on stderr, or a no-op stand-in when progress is off or
tqdm is missing.  The one place that draws one; the engine reports through a callback
(``steps``) and never prints itself."""

from __future__ import annotations

import sys
from typing import Callable

__all__ = ["bar", "steps"]


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
