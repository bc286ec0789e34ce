"""Text renderings of a generation's ``Stats`` for the terminal surfaces (``generate``, ``chat``).

Pure formatting: no I/O, no model.
"""

from __future__ import annotations

from ..engine import Stats

__all__ = ["dimmed", "stats_line", "stats_report"]


def dimmed(text: str, on: bool) -> str:
    """``text`` in the terminal's dim style when ``on`` (a terminal), else as it is."""
    return f"\x1b[2m{text}\x1b[0m" if on and text else text


def _tau(st: Stats) -> str:
    return "-" if st.tau is None else f"{st.tau:.2f}"


def _rate(rate: float | None, spec: str) -> str:
    return "-" if rate is None else format(rate, spec)


def stats_line(st: Stats) -> str:
    """One line per reply: tokens, speed, tau, acceptance ("-" when nothing was speculated),
    method."""
    return (
        f"[{st.tokens} tokens, {st.tokens_per_s:.1f} tok/s, tau {_tau(st)} tokens/target call, "
        f"acceptance {_rate(st.acceptance_rate, '.0%')}, {st.method}]"
    )


def stats_report(st: Stats) -> str:
    """Totals, times, auto's choices and acceptance per tree depth (chat's ``/stats``)."""
    lines = [
        f"tokens {st.tokens}  steps {st.steps}  target calls {st.target_calls}  draft calls {st.draft_calls}",
        f"tau {_tau(st)}  tokens/s {st.tokens_per_s:.1f}  acceptance {_rate(st.acceptance_rate, '.1%')}  "
        f"nodes/step {st.nodes_per_step:.1f}",
        f"time: draft {st.draft_time:.2f}s  target {st.target_time:.2f}s  overhead {st.overhead_time:.2f}s  prompt {st.prompt_time:.2f}s",
    ]
    if st.auto:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(st.steps_by_kind.items()))
        lines.append(f"steps by kind: {kinds}")
        lines.append(st.auto)
    if st.reached_by_depth:
        lines.append("acceptance by depth:")
        for d, (a, r) in enumerate(zip(st.accepted_by_depth, st.reached_by_depth), 1):
            lines.append(f"  depth {d:>2}: {a:>6}/{r:<6} {_rate(a / r if r else None, '.1%')}")
    return "\n".join(lines)
