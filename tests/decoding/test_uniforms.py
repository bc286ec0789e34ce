"""Tests for resispec_gguf.decoding.uniforms: a block-drawn stream hands out exactly the uniforms
that one ``Generator.random`` call per need gives (so no draw of the engine changes)."""

from __future__ import annotations

import numpy as np

from resispec_gguf.decoding.uniforms import Uniforms


def test_blocks_hand_out_the_generators_own_uniforms_in_order():
    needs = np.random.default_rng(5).integers(1, 9, 400).tolist() + [0, 1, 150, 3, 64, 65, 1]
    for block in (1, 7, 64):
        u = Uniforms(np.random.default_rng(11), block=block)
        ref = np.random.default_rng(11)
        for i, n in enumerate(needs):
            if i % 5 == 4:
                assert u.one() == ref.random()
            else:
                got, want = u.take(n), ref.random(n)
                assert got.dtype == np.float64 and got.shape == (n,) and got.flags.c_contiguous
                np.testing.assert_array_equal(got, want)


def test_a_view_handed_out_keeps_its_values_when_later_blocks_come():
    u = Uniforms(np.random.default_rng(2), block=4)
    first = u.take(3)
    kept = first.copy()
    for _ in range(10):
        u.take(3)
    np.testing.assert_array_equal(first, kept)


def test_nothing_is_drawn_before_the_first_uniform_is_asked_for():
    rng = np.random.default_rng(3)
    u = Uniforms(rng)
    assert rng.bit_generator.state == np.random.default_rng(3).bit_generator.state
    u.take(2)
    assert rng.bit_generator.state != np.random.default_rng(3).bit_generator.state
