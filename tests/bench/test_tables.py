"""tables.py: every column labelled once in a legend under the tables, acceptance named
by depth, auto's predicted against measured step times per kind of step, and one sentence
explaining the auto row from the measured costs."""

from resispec_gguf.bench import tables


def _method(**extra) -> dict:
    m = {"tokens_per_s": 10.0, "speedup_vs_none": 1.0, "end_to_end_tokens_per_s": 8.0, "end_to_end_vs_none": 1.0,
         "tau": 1.0, "acceptance_rate": None, "nodes_per_step": 0.0, "draft_ms_per_step": 0.0,
         "target_ms_per_step": 100.0, "overhead_ms_per_step": 1.0, "accept_by_depth": [], "runs": 2}
    return m | extra


def _results():
    auto = _method(speedup_vs_none=0.98, accept_by_depth=[0.13, 0.5, 1.0], steps_by_kind={"none": 24, "draft": 1},
                   step_times={"none": [24, 24 * 0.1688, 24 * 0.4697], "chain": [1, 0.2596, 4.384]})
    return [{"workload": "code", "temperature": 0.0, "methods": {"none": _method(), "auto": auto}}]


def test_the_auto_row_is_explained_and_its_step_times_shown():
    outlook = "plain decoding likely: a 4-row decode costs 2.7x one row on this CPU"
    table = tables.format_table(_results(), outlook)
    assert "auto T=0.0: step time predicted/measured: plain 168.8/469.7 ms over 24 steps, " \
           "chain 259.6/4384.0 ms over 1 step" in table
    assert (f"auto T=0.0: decoded plainly in 96% of its steps, 0.98x plain decoding's speed; the measured costs "
            f"say: {outlook}.") in table


def test_every_column_is_in_the_legend_and_depths_are_named():
    table = tables.format_table(_results())
    head = table.splitlines()[1]
    assert head.rstrip().endswith("accepted at depth") and "1:0.13 2:0.50 3:1.00" in table
    assert table.rstrip().endswith(tables.LEGEND) and table.count("columns:") == 1
    for column in ("tok/s", "vs none", "e2e tok/s", "e2e vs", "tau", "accept", "nodes", "draft ms", "target ms",
                   "overhead ms", "accepted at depth 1, 2", "prompt tok", "reused", "decode s"):
        assert column in tables.LEGEND, column


def test_a_loss_to_host_work_is_said():
    m = _method(speedup_vs_none=0.22, steps_by_kind={"draft": 13, "none": 9}, overhead_ms_per_step=0.63,
                target_ms_per_step=0.2)
    assert tables.auto_sentence(m, None) == (
        "speculated in 59% of its steps, 0.22x plain decoding's speed. Its host work per step (0.63 ms) outweighed "
        "the target's calls (0.20 ms), which the costs do not price.")


def test_no_sentence_without_steps():
    assert tables.auto_sentence(_method(), "x") == ""
    assert tables.step_times_line({}) == ""
    assert tables.auto_sentence(_method(steps_by_kind={"draft": 3, "none": 1}, speedup_vs_none=None), None) \
        == "speculated in 75% of its steps."
