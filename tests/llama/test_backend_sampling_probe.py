"""The findings of scripts/backend_sampling_probe.py part 1 (issue #18) on the tiny models:
why resispec-gguf does not take p or q from llama.cpp's backend sampling in llama-cpp-python
0.3.36 (docs/backend_sampling.md).  A failure here means the installed llama.cpp behaves
differently: read the probe's output and revisit the decision."""

from __future__ import annotations


import pytest

from script_loader import load_script
probe = load_script("backend_sampling_probe")

pytestmark = pytest.mark.skipif(not all(hasattr(probe._ll, n) for n in probe.API),
                                reason="llama-cpp-python without backend sampling")


@pytest.fixture(scope="module")
def findings(tiny_pair):
    report = {}
    probe.probe_build(report, tiny_pair[0])
    return report["1"]


def test_a_forest_needs_more_than_one_output_per_sequence(findings):
    assert findings["a_api_bound"]
    assert findings["b_default_refuses_forest"]


def test_every_forest_row_gets_its_filtered_row_on_a_first_decode(findings):
    for how in ("c_later", "c_at creation"):
        c = findings[how]
        assert c["set_ok"] and c["rows"] == 6 and c["counts"] == [5] * 6
        assert c["rows_right"] == 6 and c["support_as_ours"] == 6


def test_probabilities_only_with_a_draw_and_no_whole_rows(findings):
    assert not findings["d_probs_without_dist"]
    assert findings["d_with_dist"]["probs_counts"] == [5] * 6
    assert findings["e_logits_ith_is_sampled_row"]


def test_later_decodes_return_wrong_rows_unless_the_graph_is_planned_again(findings):
    wrong = findings["f_wrong_rows"]
    plain = {k: v for k, v in wrong.items() if "re-planned" not in k}
    replanned = {k: v for k, v in wrong.items() if "re-planned" in k}
    assert len(plain) == len(replanned) == 5
    # a pattern whose later outputs land on other sequences than the earlier ones' (fresh
    # roots) gets wrong rows; children that take over their parent's sequence id do not
    assert plain["1 then 3 then 3 roots"]["bad"] > 0, plain
    assert all(v["bad"] == 0 for v in replanned.values()), replanned
