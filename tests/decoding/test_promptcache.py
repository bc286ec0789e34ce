"""``decoding.promptcache``: the RAM prompt cache's bookkeeping (what it keeps, finds and drops)."""

import numpy as np
import pytest

from resispec_gguf.decoding.promptcache import PromptCache


def _put(cache, role, tokens, nbytes=None):
    cache.put(role, tokens, np.asarray(tokens), 8 * len(tokens) if nbytes is None else nbytes)


def test_the_longest_common_prefix_of_the_role_is_found():
    cache = PromptCache(10_000, min_tokens=4)
    a, b = list(range(40)), list(range(20)) + [99] * 20
    _put(cache, "target", a)
    _put(cache, "target", b)
    _put(cache, "draft", list(range(30)) + [7])
    entry, common = cache.best("target", list(range(30)) + [5])
    assert entry.role == "target" and list(entry.tokens) == a and common == 30
    entry, common = cache.best("target", list(range(20)) + [99, 99, 1])
    assert list(entry.tokens) == b and common == 22
    entry, common = cache.best("draft", list(range(35)))
    assert entry.role == "draft" and common == 30
    assert cache.best("target", [500, 1, 2]) == (None, 0)


def test_short_prompts_and_prompts_an_entry_starts_with_are_not_kept():
    cache = PromptCache(10_000, min_tokens=8)
    _put(cache, "target", list(range(7)))
    assert len(cache) == 0
    _put(cache, "target", list(range(20)))
    _put(cache, "target", list(range(12)))  # the entry above restores these too
    assert len(cache) == 1 and cache.used_bytes == 160
    _put(cache, "draft", list(range(12)))  # another model's state is another entry
    assert len(cache) == 2
    _put(cache, "target", list(range(30)))  # starts with the first entry: replaces it
    assert len(cache) == 2 and cache.used_bytes == 8 * 30 + 8 * 12
    assert len(cache.best("target", list(range(20)))[0].tokens) == 30


def test_the_bound_drops_the_least_recently_used_first():
    cache = PromptCache(1000, min_tokens=4)
    prompts = [[k] * 40 for k in range(4)]  # 320 bytes each: three fit
    for p in prompts[:3]:
        _put(cache, "target", p)
    cache.took(cache.best("target", prompts[0])[0], 40)  # the oldest is used again
    _put(cache, "target", prompts[3])
    assert cache.used_bytes <= 1000 and len(cache) == 3
    assert cache.best("target", prompts[1]) == (None, 0)  # the least recently used went
    for k in (0, 2, 3):
        assert cache.best("target", prompts[k])[1] == 40
    assert cache.hits == 1 and cache.hit_tokens == 40
    _put(cache, "target", [9] * 200, nbytes=1600)  # larger than the whole cache: not kept
    assert len(cache) == 3 and cache.used_bytes == 960


def test_a_cache_of_no_bytes_keeps_nothing():
    cache = PromptCache(0)
    _put(cache, "target", list(range(100)))
    assert len(cache) == 0 and cache.best("target", list(range(100))) == (None, 0)
    with pytest.raises(ValueError):
        PromptCache(-1)


def test_clear_drops_every_state():
    cache = PromptCache(1 << 20, min_tokens=2, min_gain=1)
    cache.put("target", [1, 2, 3], b"abc", 3)
    cache.put("draft", [1, 2, 3], b"abc", 3)
    assert len(cache) == 2 and cache.used_bytes == 6
    cache.clear()
    assert len(cache) == 0 and cache.used_bytes == 0 and cache.best("target", [1, 2, 3]) == (None, 0)
