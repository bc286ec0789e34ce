"""bench's tables in words a person can read: per workload a row per temperature and method,
where a request's time went, ``auto``'s predicted against measured step times per kind of
step, and one sentence that explains the ``auto`` row from the measured costs; a legend
under the tables labels every column once.  Pure formatting of ``measure.run_bench``'s
results (``format_table``) and of a sweep's best settings (``format_sweep``)."""

from __future__ import annotations

__all__ = ["LEGEND", "auto_sentence", "format_phases", "format_table", "step_times_line"]

# every column of the speeds table and of the time table, once
LEGEND = (
    "columns: T temperature; tok/s output tokens per second of decoding (the prompt's processing apart); "
    "vs none that speed over plain decoding's on the same prompts and seeds (median of the per-prompt ratios); "
    "e2e tok/s and e2e vs the same with the prompt's processing counted; tau tokens emitted per target call; "
    "accept the share of reached draft candidates' nodes that accepted one; nodes candidate nodes per step; "
    "draft ms, target ms, overhead ms per step in draft calls, target calls and host work; "
    "accepted at depth 1, 2, ... the share of nodes reached at that depth of the tree that accepted a candidate. "
    "Time table: prompt tok and reused the prompt's tokens and those found in a cache; prompt tgt/dft/host s its "
    "target, draft and host seconds; decode s, dec dft/tgt/host s the reply's seconds, in all and by part.")


def _x(value, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def _by_depth(m: dict) -> str:
    return " ".join(f"{d}:{a:.2f}" if a is not None else f"{d}:-" for d, a in enumerate(m["accept_by_depth"][:6], 1))


def format_table(results, outlook: str | None = None) -> str:
    """Per workload: a row per temperature and method (decode-only and end-to-end speeds,
    the draft's figures), ``auto``'s step times and the sentence explaining its row
    (``outlook``: ``Engine.auto_outlook()``, what the measured costs say), then where a
    request's time went (``format_phases``); the legend once at the end."""
    lines = []
    width = max([13] + [len(name) for block in results for name in block["methods"]])
    head = (f"{'T':>4} {'method':<{width}} {'tok/s':>7} {'vs none':>8} {'e2e tok/s':>9} {'e2e vs':>7} {'tau':>5} "
            f"{'accept':>7} {'nodes':>6} {'draft ms':>9} {'target ms':>10} {'overhead ms':>12}  accepted at depth")
    workload = None
    for n, block in enumerate(results):
        if block.get("workload") != workload:
            workload = block.get("workload")
            if lines:
                lines.append("")
            order = ", each method's sequence in turn" if block.get("sequential") else ""
            lines += [f"workload: {workload}{order}", head, "-" * len(head)]
        lines += [_row(block["temperature"], name, m, width) for name, m in block["methods"].items()]
        for name, m in block["methods"].items():
            if m.get("errors"):  # its speeds are not the method's: some replies stopped early
                lines.append(f"     {name}: {m['errors']} of {m['runs']} replies ended in an error, the first: "
                             f"{m['first_error']}")
        if n + 1 == len(results) or results[n + 1].get("workload") != workload:
            blocks = [b for b in results if b.get("workload") == workload]
            below = [line for b in blocks for line in _pooled_lines(b)] + _auto_lines(blocks, outlook)
            lines += [""] + below if below else []
            lines += format_phases(blocks, width)
    if lines:
        lines += ["", LEGEND]
    return "\n".join(lines)


def _pooled_lines(block: dict) -> list[str]:
    """After a workload's rows, for a sampled block: each method's speed over all its replies
    pooled (total tokens over total time), where reply lengths differ between methods and the
    median of per-prompt ratios weighs a short reply as much as a long one."""
    if not block["temperature"]:
        return []
    compared = list(block["methods"].items())[1:]  # the first is the baseline itself
    parts = [f"{name} {m['pooled_vs_none']:.3f}x decode, {_x(m.get('end_to_end_pooled_vs_none'), '.3f')}x end to end"
             for name, m in compared if m.get("pooled_vs_none") is not None and m.get("runs", 0) > 1]
    return [f"T={block['temperature']} pooled (total tokens over total time): {'; '.join(parts)}"] if parts else []


def _row(temperature, name: str, m: dict, width: int) -> str:
    by_depth = _by_depth(m)
    if m.get("mask_ms_median") is not None:
        free = m.get("speedup_vs_free")
        by_depth += f"  [mask {m['mask_ms_median']:.3f} ms/node" + (f", {free:.3f}x unconstrained]"
                                                                   if free is not None else "]")
    return (f"{temperature:>4} {name:<{width}} {m['tokens_per_s']:>7.2f} {_x(m['speedup_vs_none'], '.3f'):>8} "
            f"{_x(m.get('end_to_end_tokens_per_s'), '.2f'):>9} {_x(m.get('end_to_end_vs_none'), '.3f'):>7} "
            f"{_x(m['tau'], '.2f'):>5} {_x(m['acceptance_rate'], '.3f'):>7} {m['nodes_per_step']:>6.1f} "
            f"{m['draft_ms_per_step']:>9.1f} {m['target_ms_per_step']:>10.1f} {m['overhead_ms_per_step']:>12.2f}  "
            f"{by_depth}")


def _auto_lines(blocks, outlook: str | None) -> list[str]:
    """After a workload's rows (``format_table`` sets them off by a blank line): each
    ``auto`` row's step times and the sentence that explains it."""
    out = []
    for block in blocks:
        for name, m in block["methods"].items():
            if not name.startswith("auto"):
                continue
            times = step_times_line(m.get("step_times") or {})
            sentence = auto_sentence(m, outlook)
            label = f"{name} T={block['temperature']}"
            out += [f"{label}: step time predicted/measured: {times}"] if times else []
            out += [f"{label}: {sentence}"] if sentence else []
    return out


def step_times_line(times: dict) -> str:
    """``kind predicted/measured ms over n steps`` per kind of step (``Stats.step_times``)."""
    return ", ".join(f"{'plain' if k == 'none' else k} {1000 * p / n:.1f}/{1000 * s / n:.1f} ms over {n} "
                     f"step{'s' * (n != 1)}"
                     for k, (n, p, s) in sorted(times.items(), key=lambda kv: -kv[1][0]) if n)


def auto_sentence(m: dict, outlook: str | None) -> str:
    """What the ``auto`` row did, in words: how much of it was plain decoding, its speed
    against plain decoding's, what the measured costs say (``outlook``) and, where it lost
    while its host work per step outweighed the target's calls, that."""
    kinds = m.get("steps_by_kind") or {}
    total = sum(kinds.values())
    if not total:
        return ""
    plain = kinds.get("none", 0) / total
    vs = m.get("speedup_vs_none")
    speed = f", {vs:.2f}x plain decoding's speed" if vs is not None else ""
    what = (f"decoded plainly in {plain:.0%} of its steps{speed}" if plain >= 0.5
            else f"speculated in {1 - plain:.0%} of its steps{speed}")
    text = what + (f"; the measured costs say: {outlook}." if outlook else ".")
    if vs is not None and vs < 0.95 and m.get("overhead_ms_per_step", 0.0) > m.get("target_ms_per_step", 0.0):
        text += (f" Its host work per step ({m['overhead_ms_per_step']:.2f} ms) outweighed the target's calls "
                 f"({m['target_ms_per_step']:.2f} ms), which the costs do not price.")
    return text


def format_phases(blocks, width: int = 13) -> list[str]:
    """Where a request's time went, seconds per request: the prompt's processing (target,
    draft, host work between them) and the decode (draft calls, target calls, host work)."""
    head = (f"{'T':>4} {'method':<{width}} {'prompt tok':>10} {'reused':>7} {'prompt tgt s':>12} {'prompt dft s':>12} "
            f"{'prompt host s':>13} {'decode s':>9} {'dec dft s':>9} {'dec tgt s':>9} {'dec host s':>10}")
    lines = ["where a request's time went (seconds per request):", head]
    for block in blocks:
        for name, m in block["methods"].items():
            if "prompt_target_s" not in m:
                continue
            lines.append(
                f"{block['temperature']:>4} {name:<{width}} {m['prompt_tokens']:>10.0f} {m['prompt_reused']:>7.0f} "
                f"{m['prompt_target_s']:>12.3f} {m['prompt_draft_s']:>12.3f} {m['prompt_host_s']:>13.3f} "
                f"{m['decode_s']:>9.3f} {m['decode_draft_s']:>9.3f} {m['decode_target_s']:>9.3f} "
                f"{m['decode_host_s']:>10.3f}")
    return lines if len(lines) > 2 else []
