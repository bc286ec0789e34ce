"""calibration.py: per-bin acceptance chances with a prior worth ``prior_weight``
observations, decayed counts, draft bins kept per K, lookup bins by ``lookup_bin``."""

import pytest

from resispec_gguf.decoding.calibration import Calibration, lookup_bin
from resispec_gguf.decoding.candidates import layout

LOOKUP_PRIOR = (0.3, 0.5, 0.6, 0.7, 0.15)
LONG_RUN_PRIOR = (0.8, 0.85)  # bins 14-15: copy runs of 8-15 and 16+


def test_lookup_bin_is_the_copy_run_after_a_long_match_else_the_short_match_bin():
    assert [lookup_bin(2, run) for run in range(6)] == [0, 1, 2, 3, 3, 3]
    assert lookup_bin(2, 7) == 3 and lookup_bin(2, 8) == lookup_bin(3, 15) == 13
    assert lookup_bin(2, 16) == lookup_bin(9, 400) == 14
    assert lookup_bin(7, 1) == 1
    assert lookup_bin(1, 0) == lookup_bin(1, 3) == lookup_bin(0, 2) == 4


def test_the_prior_is_the_guess_itself_and_the_lookup_prior():
    cal = Calibration()
    # a draft candidate's bin starts at its middle: the first guess, within its bin
    assert cal.draft(0.9) == pytest.approx(0.9)  # bin [0.85, 0.95)
    assert cal.draft(0.86) == pytest.approx(0.9)
    assert cal.draft(0.1) == pytest.approx(0.1)  # bin [0.05, 0.15)
    assert cal.draft(0.0) == pytest.approx(0.025) and cal.draft(1.0) == pytest.approx(0.975)
    assert [cal.lookup(b) for b in range(5)] == pytest.approx(LOOKUP_PRIOR)
    assert [cal.lookup(lookup_bin(2, r)) for r in (8, 16)] == pytest.approx(LONG_RUN_PRIOR)
    # over the leading context candidate's bins bar the long runs'
    assert cal.mean_lookup() == pytest.approx(sum(LOOKUP_PRIOR) / 5)


def test_an_observation_is_decayed_in_with_the_prior_weight():
    cal = Calibration(decay=0.9, prior_weight=2.0)
    cal.observe_draft(0.4, 1.0)  # bin [0.3, 0.5): prior 0.4 worth 2 observations
    assert cal.draft(0.4) == pytest.approx((0.4 * 2 * 0.9 + 1.0) / (2 * 0.9 + 1.0))
    cal.observe_lookup(4, 0.0)
    assert cal.lookup(4) == pytest.approx(0.15 * 2 * 0.9 / (2 * 0.9 + 1.0))
    assert [cal.lookup(b) for b in range(4)] == pytest.approx(LOOKUP_PRIOR[:4])  # other bins untouched
    # the mean is over the bins as they were seen: the observed bin now weighs more
    seen = [2.0] * 4 + [2 * 0.9 + 1.0]
    acc = [p * 2.0 for p in LOOKUP_PRIOR[:4]] + [0.15 * 2 * 0.9]
    assert cal.mean_lookup() == pytest.approx(sum(acc) / sum(seen))


def test_draft_bins_are_per_k_and_per_guess():
    cal = Calibration()
    for _ in range(5):
        cal.observe_draft(0.9, 0.0, k=4)
    assert cal.draft(0.9, k=4) < 0.5
    assert cal.draft(0.9) == pytest.approx(0.9) and cal.draft(0.9, k=2) == pytest.approx(0.9)  # other Ks
    assert cal.draft(0.8, k=4) == pytest.approx(0.775)  # another bin of the same K


def test_the_requests_own_counts_take_over_and_exact_chances_count():
    cal = Calibration()
    for _ in range(300):
        cal.observe_draft(0.6, 0.25)  # an exact chance of acceptance, not a 0/1 outcome
        cal.observe_lookup(0, 1.0)
    assert cal.draft(0.6) == pytest.approx(0.25, abs=0.01)
    assert cal.lookup(0) == pytest.approx(1.0, abs=0.01)


def test_the_grammars_forced_candidates_have_a_bin_of_their_own():
    from resispec_gguf.decoding.calibration import FORCED_BIN

    cal = Calibration()
    assert cal.lookup(FORCED_BIN) == pytest.approx(0.9)
    mean = cal.mean_lookup()
    for _ in range(50):
        cal.observe_lookup(FORCED_BIN, 1.0)
    assert cal.lookup(FORCED_BIN) > 0.97
    assert cal.mean_lookup() == mean  # the context lookup's mean is its own bins'


def test_carried_lookup_counts_are_capped_so_a_request_still_moves_them():
    old = Calibration()
    for _ in range(200):
        old.observe_lookup(4, 0.1)  # the context's one-token matches failed, many times
        old.observe_node_lookup(0.1)
    new = Calibration()
    new.carry_lookup(old.lookup_state(), weight=16.0)
    assert new.lookup(4) == pytest.approx(old.lookup(4)) and new.look_seen[4] == pytest.approx(16.0)
    assert new.node_lookup() < 0.2 and new.node_seen == pytest.approx(16.0)
    assert new.lookup(0) == pytest.approx(old.lookup(0))  # a bin seen less keeps its weight
    for _ in range(16):
        new.observe_lookup(4, 1.0)
    assert new.lookup(4) > 0.5  # this request's own observations still count
    assert old.lookup(4) < 0.11  # the state was copied, not shared


def test_the_text_drafts_acceptance_is_its_bins_as_seen():
    cal = Calibration()
    bins = list(layout().ranges["text draft"])
    assert cal.text_draft() == pytest.approx(sum(layout().priors[b] for b in bins) / len(bins))
    for _ in range(30):
        cal.observe_lookup(bins[0], 1.0)  # confident chain tokens, all taken
    cal.observe_lookup(bins[2], 0.0)
    assert cal.text_draft() > 0.85
    other = Calibration()
    other.observe_lookup(lookup_bin(8, 0), 1.0)  # another source's bin leaves it as it was
    assert other.text_draft() == pytest.approx(Calibration().text_draft())


def test_a_longer_copy_run_is_believed_at_least_as_much_as_a_shorter_one():
    from resispec_gguf.decoding.candidates import layout
    from resispec_gguf.decoding.candidates.context import anchor_bin

    cal = Calibration()
    lay = layout()
    short, longer, longest = (lay.bin("context", anchor_bin(r)) for r in (2, 8, 16))
    assert lay.below[longer] == short and lay.below[longest] == longer and lay.below[lay.bin("context", 4)] == -1
    before = cal.lookup(longest)
    for _ in range(40):  # runs of 2-7 tokens, every one went on
        cal.observe_lookup(short, 1.0)
    assert cal.lookup(short) > 0.95
    assert cal.lookup(longer) == cal.lookup(longest) == cal.lookup(short) > before  # never seen, lifted
    for _ in range(40):  # the longest runs, seen, do better still: their own rate
        cal.observe_lookup(longest, 1.0)
        cal.observe_lookup(short, 0.5)
    assert cal.lookup(longest) > cal.lookup(longer) >= cal.lookup(short)
    # a bin on no ladder, and the raw counts, are untouched
    assert cal.look_acc[longer] / cal.look_seen[longer] == pytest.approx(lay.priors[longer])
