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
    assert stats_report(_speculated()).splitlines() == [
        "tokens 40  steps 10  target calls 10  draft calls 30",
        "tau 4.00  tokens/s 20.0  acceptance 68.8%  nodes/step 4.5",
        "time: draft 0.50s  target 1.25s  overhead 0.25s  prompt 0.25s",
        "steps by kind: draft 8, lookup 2",
        "auto: K=4 depth 3",
        "acceptance by depth:",
        "  depth  1:      8/10     80.0%",
        "  depth  2:      3/6      50.0%",
        "  depth  3:      0/0      -",
    ]


def test_stats_report_without_speculation_has_three_lines():
    st = Stats(method="chain", tokens=5, steps=5, target_calls=5, total_time=1.0, steps_by_kind={"none": 5})
    report = stats_report(st)
    assert report.splitlines() == [
        "tokens 5  steps 5  target calls 5  draft calls 0",
        "tau 1.00  tokens/s 5.0  acceptance -  nodes/step 0.0",
        "time: draft 0.00s  target 0.00s  overhead 1.00s  prompt 0.00s",
    ]  # steps by kind only with auto's note; depths only once a draw was verified
    assert stats_report(Stats()).splitlines()[1] == "tau -  tokens/s 0.0  acceptance -  nodes/step 0.0"


def test_dimmed_only_on_a_terminal():
    assert dimmed("hmm", True) == "\x1b[2mhmm\x1b[0m"
    assert dimmed("hmm", False) == "hmm" and dimmed("", True) == ""
