"""Text renderings of a generation's ``Stats`` for the terminal surfaces (``generate``, ``chat``).

Pure formatting: no I/O, no model.
"""

from __future__ import annotations

from ..engine import Stats

__all__ = ["dimmed", "stats_line", "stats_report", "stats_words"]


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


# what each kind of step drew its candidates from (``Stats.steps_by_kind``)
_KINDS = {"none": "plain", "draft": "draft model", "lookup": "context and memory, no draft call",
          "grammar": "the grammar's forced tokens"}


def stats_words(st: Stats) -> str:
    """What happened, in one sentence: tokens and steps, tokens per target call against
    plain decoding's one, speed, and how often a reached node accepted a candidate."""
    if not st.steps:
        return f"{st.tokens} tokens, no step yet."
    accept = (f"; {st.acceptance_rate:.0%} of the candidates' nodes reached accepted one"
              if st.acceptance_rate is not None else "; nothing speculated")
    return (f"{st.tokens} tokens in {st.steps} steps, {_tau(st)} per target call (plain decoding: 1.00), "
            f"{st.tokens_per_s:.1f} tokens/s{accept}.")


def stats_report(st: Stats) -> str:
    """Chat's ``/stats``: what happened in one sentence, then the totals and times, each
    figure labelled; auto's choices in words with its predicted and measured step times;
    acceptance per tree depth."""
    lines = [
        stats_words(st),
        f"tokens {st.tokens}  steps {st.steps}  target calls {st.target_calls}  draft calls {st.draft_calls}",
        f"tau {_tau(st)} tokens per target call  tokens/s {st.tokens_per_s:.1f}  "
        f"acceptance {_rate(st.acceptance_rate, '.1%')} of nodes reached  nodes/step {st.nodes_per_step:.1f}",
        f"time: draft calls {st.draft_time:.2f}s  target calls {st.target_time:.2f}s  host work "
        f"{st.overhead_time:.2f}s  prompt {st.prompt_time:.2f}s",
    ]
    if st.auto:
        kinds = ", ".join(f"{k} {n} ({_KINDS.get(k, k)})" for k, n in sorted(st.steps_by_kind.items()))
        lines.append(f"steps by kind: {kinds}")
        lines.append(st.auto)
    if st.step_times:
        from ..bench.tables import step_times_line

        lines.append(f"step time predicted/measured, all replies: {step_times_line(st.step_times)}")
    if st.reached_by_depth:
        lines.append("acceptance by depth (nodes at that depth of the tree that accepted a candidate):")
        for d, (a, r) in enumerate(zip(st.accepted_by_depth, st.reached_by_depth), 1):
            lines.append(f"  depth {d:>2}: {a:>6}/{r:<6} {_rate(a / r if r else None, '.1%')}")
    return "\n".join(lines)
