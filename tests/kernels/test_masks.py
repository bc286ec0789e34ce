"""Token masks (masks.py): the packed layout (token i allowed iff bit i % 32 of int32 word
i // 32 is set), ``bitmask_from_ids`` and ``mask_allows`` against it, and ``mask_logits``
leaving allowed logits untouched and every other one at -inf, before any sampling filter;
``bias_logits`` against a naive loop."""

import numpy as np
import pytest

from resispec_gguf.kernels.masks import bias_arrays, bias_logits, bitmask_from_ids, mask_allows, mask_logits
from resispec_gguf.kernels.sampling import probs_dense


def test_bitmask_layout_is_bit_i_mod_32_of_word_i_div_32():
    assert bitmask_from_ids([0], 1).tolist() == [1]
    assert bitmask_from_ids([0, 33], 64).tolist() == [1, 2]
    assert bitmask_from_ids([31], 32).tolist() == [-(2**31)]  # the sign bit of word 0
    assert bitmask_from_ids([5, 40, 95], 96).tolist() == [1 << 5, 1 << 8, -(2**31)]
    assert bitmask_from_ids([], 70).tolist() == [0, 0, 0]


@pytest.mark.parametrize("n_vocab", [1, 31, 32, 33, 100, 1000])
def test_bitmask_from_ids_allows_exactly_those_ids(n_vocab):
    rng = np.random.default_rng(n_vocab)
    for share in (0.0, 0.1, 0.5, 1.0):
        ids = np.flatnonzero(rng.random(n_vocab) < share)
        mask = bitmask_from_ids(ids, n_vocab)
        assert mask.dtype == np.int32 and mask.shape == (-(-n_vocab // 32),)
        allowed = {t for t in range(-3, 32 * mask.shape[0] + 40) if mask_allows(mask, t)}
        assert allowed == set(ids.tolist())
        # the same bits as the layout, word by word
        bits = np.zeros(32 * mask.shape[0], np.int64)
        bits[ids] = 1
        words = (bits.reshape(-1, 32) << np.arange(32)).sum(axis=1)
        assert ((mask.astype(np.int64) & 0xFFFFFFFF) == words).all()
    # any iterable of ids, duplicates included
    assert bitmask_from_ids(iter([3, 3, 7]), 10).tolist() == bitmask_from_ids([3, 7], 10).tolist() == [136]


def test_mask_allows_reads_lists_and_refuses_tokens_outside_the_mask():
    mask = [0b101, 1 << 4]
    assert [t for t in range(64) if mask_allows(mask, t)] == [0, 2, 36]
    assert not mask_allows(mask, -1) and not mask_allows(mask, 64) and not mask_allows(mask, 10**6)
    assert not mask_allows(np.zeros(0, np.int32), 0)
    assert mask_allows(np.array([-(2**31)], np.int32), 31)


def test_mask_logits_puts_every_disallowed_token_at_minus_inf():
    rng = np.random.default_rng(3)
    for v, dtype in ((1, np.float64), (5, np.float32), (32, np.float64), (33, np.float32), (1000, np.float32)):
        row = rng.normal(0, 3, v).astype(dtype)  # float32 or float64 in: a float32 copy out
        ids = np.flatnonzero(rng.random(v) < 0.4)
        before = row.copy()
        out = mask_logits(row, bitmask_from_ids(ids, v))
        assert out.dtype == np.float32 and out.shape == (v,) and not np.shares_memory(out, row)
        np.testing.assert_array_equal(row, before)  # the input is not touched
        keep = np.zeros(v, bool)
        keep[ids] = True
        np.testing.assert_array_equal(out[keep], row[keep].astype(np.float32))
        assert np.isneginf(out[~keep]).all()
    # a mask shorter than the row disallows the tokens past its end; a longer one is cut
    row = np.arange(40, dtype=np.float32)
    out = mask_logits(row, bitmask_from_ids(range(32), 32))
    np.testing.assert_array_equal(out[:32], row[:32])
    assert np.isneginf(out[32:]).all()
    out = mask_logits(row[:10], bitmask_from_ids([2, 9, 50], 64))
    assert out.shape == (10,) and np.flatnonzero(np.isfinite(out)).tolist() == [2, 9]


def test_mask_logits_reads_whole_words_empty_words_and_a_tail():
    """Words with every bit set, none set and some set, at a vocabulary that ends mid-word
    (as Qwen2.5's 151,936 does not, and a 151,937 one would), read-only rows as the backend
    gives them: the same as keeping exactly the allowed ids."""
    rng = np.random.default_rng(5)
    for v in (151_936, 151_937, 70):
        row = rng.normal(0, 3, v).astype(np.float32)
        row.flags.writeable = False
        words = rng.integers(-(2**31), 2**31 - 1, (v + 31) // 32, dtype=np.int64).astype(np.int32)
        words[::3] = -1
        words[1::3] = 0
        keep = np.unpackbits(words.view(np.uint8), bitorder="little")[:v].astype(bool)
        out = mask_logits(row, words)
        np.testing.assert_array_equal(out[keep], row[keep])
        assert np.isneginf(out[~keep]).all() and 0 < keep.sum() < v


def test_masking_comes_before_the_sampling_filters():
    """Top-k of a masked row picks among the allowed tokens only: the k best allowed, even
    where the row's overall top k are all disallowed."""
    row = np.array([9.0, 8.0, 7.0, 1.0, 0.5, 0.0, -1.0], np.float32)
    allowed = [3, 5, 6]
    p = probs_dense(mask_logits(row, bitmask_from_ids(allowed, len(row))), 1.0, 2)
    assert np.flatnonzero(p).tolist() == [3, 5]
    np.testing.assert_allclose(p[[3, 5]], np.exp([1.0, 0.0]) / np.exp([1.0, 0.0]).sum(), rtol=1e-6)


def test_bias_logits_adds_each_bias_at_its_id_on_a_copy():
    rng = np.random.default_rng(0)
    row = rng.standard_normal(50).astype(np.float32)
    row.flags.writeable = False  # as the backend's rows are
    pairs = ((0, -np.inf), (7, 2.5), (49, -100.0), (60, 3.0))  # 60: past this (draft's) vocabulary
    out = bias_logits(row, *bias_arrays(pairs))
    want = row.copy()
    for tid, bias in pairs:
        if tid < len(want):
            want[tid] = np.float32(want[tid] + np.float32(bias))
    assert out.dtype == np.float32 and out.shape == row.shape and out.flags.writeable
    np.testing.assert_array_equal(out, want)
    assert out[0] == -np.inf and not np.shares_memory(out, row)
    assert bias_arrays(()) is None
