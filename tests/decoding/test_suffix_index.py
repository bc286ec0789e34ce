"""suffix_index.py: ``SuffixIndex`` against a brute-force count over the held sequences.

1. Counts and top-k (count down, token up) of every substring up to the depth, after random
   adds, interleaved extends and removals, on small vocabularies (many repeats, deep
   explicit paths, tails split and freed) and on a wider one (nodes with a top-k cache).
2. Cursors: ``match`` is the longest suffix in the trie; ``advance`` equals ``match`` of the
   extended context, ``shorten`` that of the context less one token, cursor for cursor.
3. Bounds: FIFO eviction by sequences and tokens; freed nodes are reused.
4. Files: round trip; another vocabulary, version, a truncated, garbage or inconsistent file
   gives an empty index and one warning; the save is atomic.
5. Bad input, stale cursors, threads.
"""

import random
import threading
import zipfile

import numpy as np
import pytest

from resispec_gguf.kernels import suffix_trie as kernels
from resispec_gguf.decoding.suffix_index import FILE_VERSION, Cursor, StaleCursor, SuffixIndex, warm_up


class Naive:
    """The reference: sequences in a dict, every answer by scanning them."""

    def __init__(self, depth):
        self.depth, self.seqs = depth, {}

    def count(self, w):
        w = list(w)
        if len(w) > self.depth:
            return 0
        if not w:
            return sum(map(len, self.seqs.values()))
        return sum(s[i:i + len(w)] == w for s in self.seqs.values() for i in range(len(s) - len(w) + 1))

    def children(self, w):
        """``[(token, count)]`` of the tokens that follow ``w``, best first."""
        if len(w) >= self.depth:
            return []
        follow = {}
        for s in self.seqs.values():
            for i in range(len(s) - len(w)):
                if s[i:i + len(w)] == list(w):
                    follow[s[i + len(w)]] = follow.get(s[i + len(w)], 0) + 1
        return sorted(follow.items(), key=lambda tc: (-tc[1], tc[0]))

    def longest(self, context):
        for n in range(min(self.depth, len(context)), 0, -1):
            if self.count(context[len(context) - n:]):
                return n
        return 0

    def substrings(self):
        return {tuple(s[i:j]) for s in self.seqs.values() for i in range(len(s))
                for j in range(i + 1, min(len(s), i + self.depth) + 1)}


def _check_all(index, ref, k=None):
    """Every substring's count and top-k, and the root's."""
    for w in [(), *ref.substrings()]:
        cursor = index.match(list(w))
        assert cursor.length == len(w), w
        want = ref.children(w)
        kk = len(want) + 2 if k is None else k
        tokens, counts, count = index.top(cursor, kk)
        assert count == ref.count(w), w
        assert list(zip(tokens.tolist(), counts.tolist())) == want[:kk], (w, kk)


def _random_ops(rng, index, ref, steps, vocab, ids=6, max_len=14):
    for _ in range(steps):
        if ref.seqs and rng.random() < 0.3:
            sid = rng.choice(sorted(ref.seqs))
            index.remove(sid)
            del ref.seqs[sid]
        else:
            sid = rng.randrange(ids)
            toks = [rng.randrange(vocab) for _ in range(rng.randrange(max_len))]
            if sid in ref.seqs or rng.random() < 0.5:
                index.extend(sid, toks)
            else:
                index.add(sid, toks)
            ref.seqs.setdefault(sid, []).extend(toks)
        yield


@pytest.mark.parametrize("depth,vocab", [(1, 3), (2, 2), (3, 3), (5, 2), (6, 4), (24, 3)])
def test_counts_and_top_match_brute_force(depth, vocab):
    rng = random.Random(depth * 100 + vocab)
    index, ref = SuffixIndex(max_depth=depth), Naive(depth)
    for _ in _random_ops(rng, index, ref, 40, vocab):
        _check_all(index, ref)
    assert sorted(index.seq_ids()) == sorted(ref.seqs) and index.total_tokens == ref.count(())


def test_self_overlapping_runs():
    """A run of one token overlaps itself at every shift (tails split inside one sequence)."""
    for depth in (1, 2, 4, 7):
        index, ref = SuffixIndex(max_depth=depth), Naive(depth)
        for sid, toks in enumerate([[5] * 12, [5, 6] * 7, [6] * 3 + [5] * 9]):
            for t in toks:
                index.extend(sid, [t])
                ref.seqs.setdefault(sid, []).append(t)
                _check_all(index, ref)


def test_a_growing_sequence_overtaken_at_its_end_keeps_counting():
    """Another sequence walks into a growing one's tail up to its last token: the grower's path
    now ends at an explicit node, and its next tokens must go on from there."""
    for depth in (2, 3, 8):
        index, ref = SuffixIndex(max_depth=depth), Naive(depth)
        for sid, toks in ((0, [1, 2, 3]), (1, [1, 2, 3]), (0, [4, 1, 2]), (1, [4]), (2, [2, 3, 4, 1]), (0, [3, 4])):
            index.extend(sid, toks)
            ref.seqs.setdefault(sid, []).extend(toks)
            _check_all(index, ref)


def test_wide_nodes_keep_an_exact_top_k():
    """Nodes with many children answer top-k from a cache: it stays exact through count
    changes, new children, removals, and any k (within it, or past it by a scan)."""
    rng = random.Random(7)
    index, ref = SuffixIndex(max_depth=2), Naive(2)
    for _ in _random_ops(rng, index, ref, 120, vocab=60, ids=12, max_len=40):
        singles = sorted({w for w in ref.substrings() if len(w) == 1})
        for w in [(), *rng.sample(singles, min(3, len(singles)))]:
            cursor = index.match(list(w))
            for k in (0, 1, 3, kernels.TOP_CACHED, kernels.TOP_CACHED + 1, 70):
                tokens, counts, _ = index.top(cursor, k)
                assert list(zip(tokens.tolist(), counts.tolist())) == ref.children(w)[:k]
    assert (index._nodes[:, kernels.CACHE] >= 0).sum() > 1  # the root and some depth-1 nodes


def test_ties_go_to_the_smaller_token():
    index = SuffixIndex(max_depth=3)
    index.add(1, [9, 4, 9, 2, 9, 7, 9, 2, 9, 4])
    tokens, counts, count = index.top(index.match([9]), 5)
    assert (tokens.tolist(), counts.tolist(), count) == ([2, 4, 7], [2, 2, 1], 5)
    assert index.top(index.match([9]), 1)[0].tolist() == [2]


def test_match_advance_and_shorten_agree_with_the_longest_suffix():
    rng = random.Random(3)
    for depth, vocab in ((2, 3), (4, 2), (6, 3), (24, 4)):
        index, ref = SuffixIndex(max_depth=depth), Naive(depth)
        for _ in _random_ops(rng, index, ref, 12, vocab, max_len=30):
            pass
        for _ in range(25):
            ctx = [rng.randrange(vocab + 1) for _ in range(rng.randrange(1, 40))]  # vocab: never held
            cursor = index.match(ctx[:1])
            for j in range(1, len(ctx) + 1):
                if j > 1:
                    cursor = index.advance(cursor, ctx[j - 1])
                direct = index.match(ctx[:j])
                assert cursor == direct and cursor.length == ref.longest(ctx[:j])
                assert [a.tolist() if isinstance(a, np.ndarray) else a for a in index.top(cursor, 4)] == \
                       [a.tolist() if isinstance(a, np.ndarray) else a for a in index.top(direct, 4)]
                if cursor.length:
                    shorter = index.shorten(cursor)
                    assert shorter == index.match(ctx[j - cursor.length + 1:j]) and shorter.length == cursor.length - 1
            assert index.shorten(index.match([])).length == 0


def test_an_implicit_match_proposes_its_one_continuation():
    index = SuffixIndex(max_depth=8)
    index.add(0, [1, 2, 3, 4, 5, 6])
    index.add(1, [1, 2, 9])
    cursor = index.match([7, 2, 3])
    assert cursor.length == 2 and cursor.known < cursor.length  # "2 3" occurs once: in a tail
    tokens, counts, count = index.top(cursor, 3)
    assert (tokens.tolist(), counts.tolist(), count) == ([4], [1], 1)
    assert index.count([2, 3, 4, 5]) == 1 and index.count([1, 2]) == 2 and index.count([2, 4]) == 0
    assert index.top(index.match([1, 2, 3, 4, 5, 6]), 3)[0].tolist() == []  # the end: nothing followed
    assert index.count(list(range(9))) == 0  # longer than the depth


def test_depth_bounds_the_paths():
    index = SuffixIndex(max_depth=3)
    index.add(0, [1, 2, 3, 4, 1, 2, 3, 4])
    assert index.match([1, 2, 3]).length == 3
    assert index.top(index.match([1, 2, 3]), 4)[0].tolist() == []  # depth 3: no children
    assert index.top(index.match([2, 3]), 4)[0].tolist() == [4]
    assert index.count([1, 2, 3, 4]) == 0 and index.match([4, 1, 2, 3]).length == 3


def test_fifo_eviction_by_sequences_and_tokens():
    index = SuffixIndex(max_depth=4, max_sequences=3)
    evicted = [index.add(sid, [sid, 1, 2]) for sid in range(5)]
    assert evicted == [[], [], [], [0], [1]] and index.seq_ids() == [2, 3, 4]
    ref = Naive(4)
    ref.seqs = {sid: [sid, 1, 2] for sid in (2, 3, 4)}
    _check_all(index, ref)

    index = SuffixIndex(max_depth=4, max_tokens=10)
    assert index.add(0, [1] * 4) == [] and index.add(1, [2] * 4) == []
    assert index.add(2, [3] * 4) == [0] and index.total_tokens == 8
    assert index.extend(1, [4] * 3) == [1] and index.seq_ids() == [2] and index.total_tokens == 4  # oldest first
    assert index.add(3, [5] * 11) == [2, 3] and len(index) == 0 and index.total_tokens == 0  # alone over the bound
    assert index.count([1]) == index.count([3]) == index.count([5]) == 0


def test_removal_frees_every_node_for_reuse():
    rng = random.Random(11)
    index = SuffixIndex(max_depth=6)
    data = {sid: [rng.randrange(5) for _ in range(200)] for sid in range(6)}
    for sid, toks in data.items():
        index.add(sid, toks)
    high_water, live = int(index._meta[kernels.M_USED]), index.stats()["nodes"]
    for sid in data:
        index.remove(sid)
    assert index.stats() | {"bytes": 0} == {"sequences": 0, "tokens": 0, "nodes": 1, "bytes": 0}
    assert index._meta[kernels.M_HCOUNT] == 0 and (index._table < 0).all() and index._nodes[0, kernels.DEG] == 0
    for sid, toks in data.items():
        index.add(sid, toks)
    assert int(index._meta[kernels.M_USED]) == high_water and index.stats()["nodes"] == live


def test_growth_and_arena_compaction_keep_the_tokens():
    """Interleaved single-token extends move sequences in the arena and grow every array."""
    rng = random.Random(5)
    index, ref = SuffixIndex(max_depth=8), Naive(8)
    for step in range(6000):
        sid = rng.randrange(8)
        if step % 700 == 699 and sid in ref.seqs:
            index.remove(sid)
            del ref.seqs[sid]
            continue
        t = rng.randrange(40)
        index.extend(sid, [t])
        ref.seqs.setdefault(sid, []).append(t)
    for sid, toks in ref.seqs.items():
        assert index.tokens(sid).tolist() == toks
    for w in rng.sample(sorted(ref.substrings()), 300):
        cursor = index.match(list(w))
        assert cursor.length == len(w) and index.top(cursor, 3)[2] == ref.count(w)
        tokens, counts, _ = index.top(cursor, 3)
        assert list(zip(tokens.tolist(), counts.tolist())) == ref.children(w)[:3]


# --------------------------------------------------------------------------- files


def _filled(tmp_path, **kw):
    index = SuffixIndex(max_depth=5, max_sequences=50, max_tokens=500, vocab_key="vocab-A", **kw)
    rng = random.Random(2)
    for sid in (7, 3, 11, 5):
        index.add(sid, [rng.randrange(4) for _ in range(30)])
    path = tmp_path / "memory" / "suffix.npz"
    index.save(path)
    return index, path


def _same_answers(a, b, depth):
    ref = Naive(depth)
    ref.seqs = {sid: a.tokens(sid).tolist() for sid in a.seq_ids()}
    _check_all(b, ref)


def test_save_and_load_round_trip(tmp_path):
    index, path = _filled(tmp_path)
    loaded, warning = SuffixIndex.load(path, "vocab-A")
    assert warning is None and loaded.seq_ids() == [7, 3, 11, 5] and loaded.vocab_key == "vocab-A"
    assert (loaded.max_depth, loaded.max_sequences, loaded.max_tokens) == (5, 50, 500)
    for sid in index.seq_ids():
        assert loaded.tokens(sid).tolist() == index.tokens(sid).tolist()
    _same_answers(index, loaded, 5)
    assert sorted(p.name for p in path.parent.iterdir()) == ["suffix.npz"]  # no temporary left

    smaller, warning = SuffixIndex.load(path, "vocab-A", max_depth=3, max_sequences=2)
    assert warning is None and smaller.seq_ids() == [11, 5] and smaller.max_depth == 3  # the oldest go
    _same_answers(smaller, smaller, 3)
    empty = SuffixIndex(vocab_key="k")
    empty.save(tmp_path / "empty.npz")
    again, warning = SuffixIndex.load(tmp_path / "empty.npz", "k")
    assert warning is None and len(again) == 0 and again.max_sequences is None


def _rewrite(path, **changes):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    np.savez(path, **arrays)


@pytest.mark.parametrize("damage,reason", [
    ("vocab", "another vocabulary"), ("version", "version"), ("truncated", "unreadable"),
    ("garbage", "unreadable"), ("npy", "not a suffix index"), ("lengths", "inconsistent"),
    ("tokens", "inconsistent"), ("keys", "not a suffix index"), ("format", "not a suffix index"),
])
def test_a_bad_file_gives_an_empty_index_and_one_warning(tmp_path, damage, reason):
    _, path = _filled(tmp_path)
    key = "vocab-A"
    if damage == "vocab":
        key = "vocab-B"
    elif damage == "version":
        _rewrite(path, version=np.array(FILE_VERSION + 1))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    elif damage == "garbage":
        path.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(3000)))
    elif damage == "npy":
        np.save(open(path, "wb"), np.arange(5))
    elif damage == "lengths":
        _rewrite(path, lengths=np.array([30, 30, 30, 31]))
    elif damage == "tokens":
        with np.load(path) as z:
            tokens = z["tokens"].astype(np.int64)
        tokens[3] = -1
        _rewrite(path, tokens=tokens)
    elif damage == "keys":
        _rewrite(path, extra=np.zeros(1))
    elif damage == "format":
        _rewrite(path, format=np.array("something else"))
    index, warning = SuffixIndex.load(path, key, max_tokens=99)
    assert len(index) == 0 and index.total_tokens == 0 and index.vocab_key == key and index.max_tokens == 99
    assert isinstance(warning, str) and reason in warning and "\n" not in warning and str(path) in warning
    index.add(1, [1, 2, 1])  # and it works
    assert index.count([1]) == 2


def test_a_corrupt_member_is_caught_by_its_checksum(tmp_path):
    _, path = _filled(tmp_path)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("tokens.npy")
    raw[info.header_offset + 30 + len(info.filename) + 200] ^= 0x01  # a byte inside the tokens' data
    path.write_bytes(bytes(raw))
    index, warning = SuffixIndex.load(path, "vocab-A")
    assert len(index) == 0 and "unreadable" in warning


def test_a_missing_file_is_an_empty_index_without_warning(tmp_path):
    index, warning = SuffixIndex.load(tmp_path / "none.npz", "v", max_depth=7)
    assert warning is None and len(index) == 0 and index.max_depth == 7


def test_a_failed_save_leaves_the_old_file(tmp_path, monkeypatch):
    index, path = _filled(tmp_path)
    before = path.read_bytes()
    index.add(99, [1, 2, 3])

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        index.save(path)
    assert path.read_bytes() == before and sorted(p.name for p in path.parent.iterdir()) == ["suffix.npz"]


# --------------------------------------------------------------------------- input, cursors, threads


def test_bad_input_is_refused_with_a_clear_error():
    index = SuffixIndex(max_depth=4)
    index.add(1, [1, 2])
    for bad in ([-1], [1 << 31], [1.5], [[1, 2]], ["a"]):
        with pytest.raises(ValueError, match="token"):
            index.extend(2, bad)
        with pytest.raises(ValueError, match="context"):
            index.match(bad)
    assert 2 not in index and index.total_tokens == 2
    with pytest.raises(ValueError, match="already held"):
        index.add(1, [3])
    with pytest.raises(KeyError, match="no sequence 5"):
        index.remove(5)
    with pytest.raises(ValueError, match="sequence id"):
        index.add("x", [1])
    cursor = index.match([1])
    for bad in (-1, 1 << 31, 2.0):
        with pytest.raises(ValueError, match="token"):
            index.advance(cursor, bad)
    with pytest.raises(ValueError, match="k must be"):
        index.top(cursor, -1)
    with pytest.raises(ValueError, match="Cursor"):
        index.top((1, 0, 0, -1, -1, 0), 1)
    for kwargs in ({"max_depth": 0}, {"max_depth": 300}, {"max_sequences": 0}, {"max_tokens": -3}, {"vocab_key": 3}):
        with pytest.raises(ValueError):
            SuffixIndex(**kwargs)
    assert index.extend(1, []) == [] and index.add(4, np.array([], np.int32)) == [] and index.tokens(4).size == 0


def test_a_cursor_goes_stale_when_the_index_changes():
    index = SuffixIndex(max_depth=4)
    index.add(1, [1, 2, 3])
    cursor = index.match([1, 2])
    assert isinstance(cursor, Cursor) and index.top(cursor, 2)[0].tolist() == [3]
    index.extend(1, [1, 2, 4])
    for call in (lambda: index.top(cursor, 2), lambda: index.advance(cursor, 3), lambda: index.shorten(cursor)):
        with pytest.raises(StaleCursor, match="match the context again"):
            call()
    assert index.top(index.match([1, 2]), 2)[0].tolist() == [3, 4]


def test_threads_share_one_index():
    """Writers on their own ids and readers holding the lock across a walk, at once."""
    index, ref, errors = SuffixIndex(max_depth=5, max_sequences=1000), Naive(5), []

    def writer(w):
        rng = random.Random(w)
        try:
            for step in range(150):
                sid = w * 100 + rng.randrange(4)
                if rng.random() < 0.2 and sid in index:
                    index.remove(sid)
                else:
                    index.extend(sid, [rng.randrange(4) for _ in range(rng.randrange(1, 6))])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        rng = random.Random(99)
        try:
            for _ in range(300):
                with index.lock:
                    cursor = index.match([rng.randrange(4) for _ in range(6)])
                    for _ in range(4):
                        tokens, _, _ = index.top(cursor, 2)
                        cursor = index.advance(cursor, int(tokens[0]) if tokens.size else 0)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ref.seqs = {sid: index.tokens(sid).tolist() for sid in index.seq_ids()}
    assert index.total_tokens == ref.count(())
    _check_all(index, ref)


def test_warm_up_runs():
    warm_up()
