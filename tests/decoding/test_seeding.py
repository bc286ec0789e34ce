"""The seed ledger (``decoding.seeding``): keys never repeat for one seed, a saved memory moves
the chain on, and the streams it makes are the seed's alone or unrelated to it.  The law
with shared seeds is tested in test_shared_seed_law.py."""

from __future__ import annotations

import numpy as np

from resispec_gguf.decoding.memory import Memory
from resispec_gguf.decoding.seeding import Ledger, side_stream, stream


def test_the_ledger_never_gives_one_key_twice_and_a_saved_file_moves_it_on(tmp_path, monkeypatch):
    ledger = Ledger()
    keys = [ledger.key(seed) for seed in (7, 7, 7, 8, 8)]
    assert keys[0] is None and keys[3] is None  # first uses: the seed alone
    assert keys[1] != keys[2] and all(len(k) == 8 for k in (keys[1], keys[2]))
    assert Ledger().key(7) is None
    memory = Memory()
    memory.remember([1, 2, 3, 4, 5])
    assert memory.ledger.key(7) is None
    memory.save(tmp_path / "m.npz")
    again, warning = Memory.open(str(tmp_path / "m.npz"), "")
    assert warning is None
    loaded = [again.ledger.key(7), again.ledger.key(7)]
    assert None not in loaded and loaded[0] != loaded[1]  # no stream of the process that saved it
    assert loaded[0] not in keys
    # a ledger that has counted too many seeds moves to a new stamp: no key comes back
    monkeypatch.setattr("resispec_gguf.decoding.seeding.MAX_SEEDS", 3)
    small = Ledger()
    seen = {small.key(s) for s in (1, 2, 3, 1)}
    assert None in seen and small.key(1) not in seen
    # streams under two keys, or under a key and none, are unrelated
    a, b, c = (stream(7, k).random(4) for k in (keys[1], keys[2], None))
    assert not (np.allclose(a, b) or np.allclose(a, c))
    assert np.array_equal(c, np.random.default_rng(7).random(4))


def test_the_side_stream_is_apart_from_the_stream():
    assert np.array_equal(side_stream(7, None).random(3), np.random.default_rng([7, 1]).random(3))
    key = Ledger("ab" * 32).key(7)
    assert not np.allclose(side_stream(7, key).random(3), stream(7, key).random(3))
