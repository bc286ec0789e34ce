"""stats.py: ``Stats`` adds up over replies (``merge``), derives tau and the acceptance rates,
and renders as a plain dict (``as_dict``)."""

import json

import pytest

from resispec_gguf.decoding.stats import Stats


def test_tau_counts_the_end_token_a_target_call_produced():
    assert Stats().tau is None  # before any target call
    assert Stats(tokens=9, eos_tokens=1, target_calls=4).tau == 2.5
    assert Stats(tokens=7, target_calls=7).tau == 1.0  # plain decoding


def test_rates_and_derived_times():
    st = Stats(tokens=30, total_time=3.0, draft_time=0.5, target_time=2.0, steps=10, tree_nodes=45)
    assert st.tokens_per_s == 10.0 and st.overhead_time == pytest.approx(0.5) and st.nodes_per_step == 4.5
    assert Stats(total_time=1.0, draft_time=0.7, target_time=0.6).overhead_time == 0.0  # never negative
    assert Stats(tokens=5).tokens_per_s == 0.0 and Stats().nodes_per_step == 0.0
    assert st.acceptance_rate is None and st.acceptance_by_depth == []  # nothing speculated
    st.count_node(1, True)
    st.count_node(1, False)
    st.count_node(3, True)  # depths grow as deep nodes are verified
    assert st.accepted_by_depth == [1, 0, 1] and st.reached_by_depth == [2, 0, 1]
    assert st.acceptance_by_depth == [0.5, None, 1.0] and st.acceptance_rate == pytest.approx(2 / 3)


def test_merge_adds_counts_and_times_and_keeps_the_latest_method_and_auto_note():
    a = Stats(method="auto", prompt_tokens=10, prompt_reused=4, prompt_time=0.5, tokens=20, eos_tokens=1, steps=8,
              target_calls=8, draft_calls=16, tree_nodes=30, accepted_by_depth=[5], reached_by_depth=[8],
              draft_time=0.25, target_time=1.0, total_time=1.5, steps_by_kind={"draft": 6, "none": 2},
              tokens_by_kind={"draft": 18, "none": 2}, mask_seconds=[0.001], auto="wide trees")
    b = Stats(method="resispec", prompt_tokens=3, tokens=6, steps=3, target_calls=3, draft_calls=3, tree_nodes=9,
              accepted_by_depth=[2, 1], reached_by_depth=[3, 2], total_time=0.5, steps_by_kind={"lookup": 3},
              tokens_by_kind={"lookup": 6}, mask_seconds=[0.002, 0.003])
    a.merge(b)
    assert (a.prompt_tokens, a.prompt_reused, a.tokens, a.eos_tokens, a.steps, a.target_calls, a.draft_calls,
            a.tree_nodes) == (13, 4, 26, 1, 11, 11, 19, 39)
    assert (a.prompt_time, a.draft_time, a.target_time, a.total_time) == (0.5, 0.25, 1.0, 2.0)
    assert a.accepted_by_depth == [7, 1] and a.reached_by_depth == [11, 2]
    assert a.steps_by_kind == {"draft": 6, "none": 2, "lookup": 3}
    assert a.tokens_by_kind == {"draft": 18, "none": 2, "lookup": 6}
    assert a.mask_seconds == [0.001, 0.002, 0.003]
    assert a.method == "resispec" and a.auto == "wide trees"  # b had no note: the last one stays
    a.merge(Stats(auto="short chains"))
    assert a.auto == "short chains" and a.method == "none"
    assert b.accepted_by_depth == [2, 1] and b.steps_by_kind == {"lookup": 3}  # the merged one is untouched


def test_merging_into_an_empty_stats_reproduces_the_other():
    b = Stats(method="chain", tokens=4, target_calls=2, accepted_by_depth=[1, 1], reached_by_depth=[2, 1],
              total_time=2.0, steps_by_kind={"draft": 2})
    total = Stats()
    total.merge(b)
    assert total.as_dict() == b.as_dict()


def test_as_dict_is_plain_json_with_the_derived_values():
    st = Stats(method="resispec", tokens=12, eos_tokens=0, steps=4, target_calls=4, tree_nodes=10,
               accepted_by_depth=[3, 1], reached_by_depth=[4, 2], draft_time=0.5, target_time=1.0, total_time=2.0,
               prompt_time=0.25, steps_by_kind={"draft": 4}, mask_seconds=[0.001, 0.003, 0.002], auto="note")
    d = st.as_dict()
    assert d["tau"] == 3.0 and d["tokens_per_s"] == 6.0 and d["acceptance_rate"] == pytest.approx(4 / 6)
    assert d["nodes_per_step"] == 2.5 and d["overhead_time_s"] == 0.5 and d["prompt_time_s"] == 0.25
    assert d["accepted_by_depth"] == [3, 1] and d["reached_by_depth"] == [4, 2]
    assert d["masks"] == 3 and d["mask_ms_median"] == pytest.approx(2.0)
    assert d["method"] == "resispec" and d["auto"] == "note" and d["steps_by_kind"] == {"draft": 4}
    assert json.loads(json.dumps(d)) == d
    d["accepted_by_depth"].append(9)
    d["steps_by_kind"]["none"] = 1
    assert st.accepted_by_depth == [3, 1] and st.steps_by_kind == {"draft": 4}  # copies, not the live lists
    empty = Stats().as_dict()
    assert empty["tau"] is None and empty["acceptance_rate"] is None and empty["mask_ms_median"] is None
