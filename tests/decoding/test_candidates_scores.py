"""candidates/scores.py: q without a node's deterministic candidates, and the fixed methods' scores."""

import numpy as np

from resispec_gguf.decoding.candidates import FixedScores, without


def test_q_without_the_candidates_is_renormalised_on_the_rest():
    ids, probs = np.array([4, 7, 9, 2]), np.array([0.4, 0.3, 0.2, 0.1])
    got_ids, got = without(ids, probs, [7, 5])
    assert got_ids.tolist() == [4, 9, 2]
    assert np.allclose(got, [0.4 / 0.7, 0.2 / 0.7, 0.1 / 0.7]) and abs(got.sum() - 1.0) < 1e-15
    same = without(ids, probs, [5])
    assert same[0] is ids and same[1] is probs  # nothing to remove: q itself
    empty = without(np.array([3]), np.array([1.0]), [3])
    assert empty[0].shape == (0,) and empty[1].shape == (0,)
    # mass only on the candidates (q's other entries underflowed to 0): no draws
    assert without(np.array([3, 8]), np.array([1.0, 0.0]), [3])[0].shape == (0,)


def test_fixed_scores_lift_the_first_candidate_most_and_keep_every_one():
    w, guess = FixedScores.weights({1: 0.6, 2: 0.2}, [(2, 0), (5, 8)], k=2)
    assert guess is None
    assert w[1] == 0.6 and w[2] == 1.0 - 0.5 * 0.8 and w[5] == 0.25
    assert FixedScores.lookup_worth([(2, 0), (5, 8)], np.array([0.5])) == [(2, 0), (5, 8)]
