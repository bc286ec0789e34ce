"""What every benchmark command ends with: the JSON report written and the plot drawn where
the command line asks for them (``write_report``), matplotlib checked for before a run that
is to be plotted (``require_pyplot``), and the process's peak resident set
(``peak_rss_mb``).  Imports only the standard library, the settings' errors and, when a
plot is asked for, matplotlib."""

from __future__ import annotations

import json
import resource
import sys
from typing import Callable

from ..errors import UserError

__all__ = ["peak_rss_mb", "require_pyplot", "write_report"]


def peak_rss_mb() -> float:
    """The process's peak resident set since it started, in MiB (``getrusage``)."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def require_pyplot():
    """matplotlib's pyplot drawing to files only, or a ``UserError`` naming the extra that
    brings it: called before a benchmark that is to be plotted, not after it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install -e '.[plot]'") from None
    return plt


def write_report(report: dict, json_path: str | None = None, plot_path: str | None = None,
                 draw: Callable[[str], None] | None = None) -> dict:
    """Write ``report`` as indented JSON to ``json_path`` and call ``draw(plot_path)``, each
    only when its path is given; returns ``report``."""
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    if plot_path and draw is not None:
        draw(plot_path)
    return report
