"""kernels/suffix_trie.py below the index: the child hash and the top-k cache, against dicts and
sorts; then tests/decoding/test_suffix_index.py rerun with ``NUMBA_DISABLE_JIT=1`` (the kernels as
plain Python, where an overflow or an integer-division slip would show).

The trie itself (insert, remove, cursors) is tested through ``decoding.suffix_index.SuffixIndex``
against a brute-force count in tests/decoding/test_suffix_index.py.
"""

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from resispec_gguf.kernels import suffix_trie as k

ROOT = Path(__file__).resolve().parents[2]


def _nodes(keys):
    """A node table whose rows 1.. carry ``(parent, token)`` keys, counts 1."""
    nodes = np.zeros((len(keys) + 1, k.NF), np.int32)
    for c, (parent, tok) in enumerate(keys, start=1):
        nodes[c, [k.COUNT, k.PARENT, k.TOK]] = 1, parent, tok
    return nodes


def test_the_child_hash_finds_what_was_put_and_forgets_what_was_dropped():
    rng = random.Random(0)
    # few parents and tokens in a small table: long probe runs that wrap past the end
    keys = sorted({(rng.randrange(5), rng.randrange(40)) for _ in range(60)})
    nodes, table = _nodes(keys), np.full((128, 2), -1, np.int32)
    assert k.rehash(nodes, table, nodes.shape[0]) == len(keys)
    live = dict(zip(keys, range(1, len(keys) + 1)))
    for step in range(len(keys)):
        for (parent, tok), c in live.items():
            assert k.find_child(nodes, table, parent, tok) == c
        for parent, tok in [(7, 1), (0, 41)]:
            assert k.find_child(nodes, table, parent, tok) == -1
        gone = rng.choice(sorted(live))
        k._table_drop(nodes, table, live.pop(gone))
        assert k.find_child(nodes, table, *gone) == -1
    assert (table == -1).all()


def test_the_hash_spreads_large_ids():
    homes = {k._home(p, t, (1 << 20) - 1) for p in (0, 1 << 30, (1 << 31) - 1) for t in range(0, 1 << 31, 1 << 24)}
    assert len(homes) > 300  # of 384 keys
    assert all(0 <= h < 1 << 20 for h in homes)


def _children(nodes, u, ids, counts, toks):
    """Make ``ids`` the children of ``u`` (a list), with these counts and tokens."""
    nodes[u, k.FIRST] = ids[0]
    for j, c in enumerate(ids):
        nodes[c, [k.COUNT, k.TOK, k.PARENT]] = counts[j], toks[j], u
        nodes[c, k.NEXT] = ids[j + 1] if j + 1 < len(ids) else -1
    nodes[u, k.DEG] = len(ids)


def test_the_top_k_cache_stays_exact_through_count_changes():
    """Random raises and lowers of a wide node's children: the entries the cache vouches for
    are always the true best, and a rebuild vouches for all it holds."""
    rng = random.Random(1)
    n = 40
    nodes = np.zeros((n + 1, k.NF), np.int32)
    ids = list(range(1, n + 1))
    _children(nodes, 0, ids, [1] * n, rng.sample(range(100), n))
    caches = np.zeros((1, k.C_WIDTH), np.int64)
    k._cache_rebuild(nodes, caches, 0, 0)
    assert k.cache_certain(nodes, caches, 0) == k.TOP_CACHED
    for _ in range(3000):
        c = rng.choice(ids)
        if rng.random() < 0.55:
            nodes[c, k.COUNT] += 1
            k._cache_raise(nodes, caches, 0, c)
        elif nodes[c, k.COUNT] > 1:
            nodes[c, k.COUNT] -= 1
            k._cache_lower(nodes, caches, 0, c)
        best = sorted(ids, key=lambda i: (-nodes[i, k.COUNT], nodes[i, k.TOK]))
        sure = k.cache_certain(nodes, caches, 0)
        assert list(caches[0, 2:2 + sure]) == best[:sure]
        if sure < 3:
            k._cache_rebuild(nodes, caches, 0, 0)
            assert list(caches[0, 2:2 + k.TOP_CACHED]) == best[:k.TOP_CACHED]


CHILD = """
import sys
import pytest
from resispec_gguf.kernels import suffix_trie as suffix
assert not hasattr(suffix.extend, "py_func")  # NUMBA_DISABLE_JIT: the kernels are the Python functions
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_the_index_tests_pass_with_the_kernels_as_python():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    args = ["-q", "-p", "no:cacheprovider", "tests/decoding/test_suffix_index.py", "tests/kernels/test_suffix_trie.py",
            "-k", "not as_python"]
    r = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = re.search(r"(\d+) passed", r.stdout)
    assert passed and int(passed.group(1)) >= 30, r.stdout[-2000:]
