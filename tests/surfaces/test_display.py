"""display.py: a reply's one-line summary (``stats_line``) and chat's ``/stats`` report
(``stats_report``), with "-" wherever nothing was measured."""

from resispec_gguf.engine import Stats
from resispec_gguf.surfaces.display import dimmed, stats_line, stats_report


def _speculated() -> Stats:
    return Stats(method="resispec", tokens=40, steps=10, target_calls=10, draft_calls=30, tree_nodes=45,
                 accepted_by_depth=[8, 3, 0], reached_by_depth=[10, 6, 0], draft_time=0.5, target_time=1.25,
                 total_time=2.0, prompt_time=0.25, steps_by_kind={"lookup": 2, "draft": 8}, auto="auto: K=4 depth 3")


def test_stats_line():
    assert stats_line(_speculated()) == "[40 tokens, 20.0 tok/s, tau 4.00 tokens/target call, acceptance 69%, resispec]"
    plain = Stats(method="none", tokens=6, eos_tokens=1, target_calls=7, steps=7, total_time=0.5)
    assert stats_line(plain) == "[6 tokens, 12.0 tok/s, tau 1.00 tokens/target call, acceptance -, none]"
    assert stats_line(Stats()) == "[0 tokens, 0.0 tok/s, tau - tokens/target call, acceptance -, none]"


def test_stats_report_with_auto_and_depths():
    st = _speculated()
    st.step_times = {"none": [2, 0.2, 0.3], "chain": [8, 1.6, 2.0]}
    assert stats_report(st).splitlines() == [
        "40 tokens in 10 steps, 4.00 per target call (plain decoding: 1.00), 20.0 tokens/s; 69% of the candidates' "
        "nodes reached accepted one.",
        "tokens 40  steps 10  target calls 10  draft calls 30",
        "tau 4.00 tokens per target call  tokens/s 20.0  acceptance 68.8% of nodes reached  nodes/step 4.5",
        "time: draft calls 0.50s  target calls 1.25s  host work 0.25s  prompt 0.25s",
        "steps by kind: draft 8 (draft model), lookup 2 (context and memory, no draft call)",
        "auto: K=4 depth 3",
        "step time predicted/measured, all replies: chain 200.0/250.0 ms over 8 steps, plain 100.0/150.0 ms over "
        "2 steps",
        "acceptance by depth (nodes at that depth of the tree that accepted a candidate):",
        "  depth  1:      8/10     80.0%",
        "  depth  2:      3/6      50.0%",
        "  depth  3:      0/0      -",
    ]


def test_stats_report_without_speculation_has_four_lines():
    st = Stats(method="chain", tokens=5, steps=5, target_calls=5, total_time=1.0, steps_by_kind={"none": 5})
    report = stats_report(st)
    assert report.splitlines() == [
        "5 tokens in 5 steps, 1.00 per target call (plain decoding: 1.00), 5.0 tokens/s; nothing speculated.",
        "tokens 5  steps 5  target calls 5  draft calls 0",
        "tau 1.00 tokens per target call  tokens/s 5.0  acceptance - of nodes reached  nodes/step 0.0",
        "time: draft calls 0.00s  target calls 0.00s  host work 1.00s  prompt 0.00s",
    ]  # steps by kind only with auto's note; depths only once a draw was verified
    assert stats_report(Stats()).splitlines()[0] == "0 tokens, no step yet."


def test_dimmed_only_on_a_terminal():
    assert dimmed("hmm", True) == "\x1b[2mhmm\x1b[0m"
    assert dimmed("hmm", False) == "hmm" and dimmed("", True) == ""
