"""lookup.py: ``NgramIndex`` proposes the token that followed the latest earlier occurrence of
the longest suffix of the context (n <= max_n), and keeps up as tokens are appended."""

import random

import pytest

from resispec_gguf.decoding.lookup import NgramIndex


def _naive(tokens, suffix, max_n):
    """The proposal by a scan of the whole history."""
    for n in range(min(max_n, len(suffix)), 0, -1):
        gram = list(suffix[len(suffix) - n:])
        for i in range(len(tokens) - n - 1, -1, -1):  # latest occurrence that has a follower
            if tokens[i:i + n] == gram:
                return tokens[i + n], n
    return -1, 0


def test_longest_match_then_latest_occurrence():
    idx = NgramIndex([5, 1, 2, 3, 7, 1, 2, 4, 9])
    assert len(idx) == 9
    assert idx.propose([1, 2]) == (4, 2)  # the latest "1 2" was followed by 4
    assert idx.propose([3, 1, 2]) == (4, 2)  # "3 1 2" never occurred: the longest suffix that did
    assert idx.propose([5, 1, 2]) == (3, 3)  # a longer match wins over a later one
    assert idx.propose([8, 7]) == (1, 1)
    assert idx.propose([8]) == (-1, 0) and idx.propose([]) == (-1, 0)
    assert idx.propose([9]) == (-1, 0)  # the last token has no follower yet


def test_max_n_caps_the_match():
    tokens = [1, 2, 3, 4, 0, 2, 3, 4, 6, 0, 3, 4, 8]
    assert NgramIndex(tokens, max_n=4).propose([1, 2, 3, 4]) == (0, 4)
    assert NgramIndex(tokens, max_n=2).propose([1, 2, 3, 4]) == (8, 2)  # "3 4", latest
    assert NgramIndex(tokens, max_n=1).propose([1, 2, 3, 4]) == (8, 1)


def test_extend_adds_the_output_as_it_is_committed():
    idx = NgramIndex([1, 2, 3])
    assert idx.propose([3]) == (-1, 0)
    idx.extend([1, 2, 6])
    assert idx.tokens == [1, 2, 3, 1, 2, 6] and len(idx) == 6
    assert idx.propose([3]) == (1, 1) and idx.propose([1, 2]) == (6, 2)
    idx.extend(t for t in [1, 2])  # any iterable
    assert idx.propose([6, 1, 2]) == (6, 2)  # "6 1 2" ends the context: no follower yet
    assert idx.propose([2, 6]) == (1, 2)


@pytest.mark.parametrize("max_n", [1, 3, 4])
def test_agrees_with_a_scan_of_the_history(max_n):
    rng = random.Random(max_n)
    idx = NgramIndex(max_n=max_n)
    history = []
    for _ in range(40):
        chunk = [rng.randrange(6) for _ in range(rng.randint(1, 5))]
        idx.extend(chunk)
        history += chunk
        for _ in range(10):
            suffix = [rng.randrange(7) for _ in range(rng.randint(0, 6))]
            assert idx.propose(suffix) == _naive(history, suffix, max_n), (history, suffix)
        assert idx.propose(history) == _naive(history, history, max_n)
