"""The counted suffix trie's kernels: node table, child hash, top-k caches, insert, remove,
and the cursor walks (match, advance, shorten, top).

The trie holds every substring of length ``<= depth`` of every held sequence; a node's count
is the number of occurrences of its substring.  A substring that occurs once (count 1) is
left *implicit*: the first node of such a chain is a **tail** node, which records where its
one occurrence lies (``SEQ``, ``POS``: the sequence slot and the position of the tail's own
token) and stands for itself and every longer path of that occurrence, up to ``depth`` or the
end of the sequence (which may still grow).  Every node of count >= 2 is explicit (a tail
turns into an explicit node when a second occurrence walks into it), so the explicit nodes
are the repeated substrings and there is at most one tail per start position: the memory is
O(tokens x typical repeated depth), not O(tokens x depth).  Explicit nodes keep their suffix
link (the node of their substring less its first token, always explicit); the cursor walks
follow them (amortised O(1) per token, Aho-Corasick style).

Arrays (the wrapper ``decoding.suffix_index`` owns and grows them):

* ``nodes`` — int32 ``[capacity, NF]``, one row per node, fields below; row 0 is the root
  (count = tokens held).  A free row has count 0 and sits on a free list through ``NEXT``.
* ``table`` — int32 ``[2**b, 2]``, open addressing with linear probing: the node ids (-1:
  empty), keyed by their ``(PARENT, TOK)``, each beside its token (so that a probe past other
  keys rarely reads their nodes: a query is bound by cache misses).  At most half full.
* ``caches`` — int64 ``[capacity, 2 + TOP_CACHED]``: for nodes with many children, the
  ``TOP_CACHED`` best children (``[2:]``, by key, best first; ``[0]`` how many), exact, and
  ``[1]`` an upper bound on the key of every child not in the cache.  The leading entries above
  that bound are the node's true top; when a query wants more, the cache is rebuilt by a scan.
* ``meta`` — int64 counters (``M_*``).
* ``seqs`` — int32 ``[slots, 3 + depth]``: each sequence's start in ``arena``, its length,
  its room there, then its *ring*: for each of its last ``depth`` start positions (slot
  ``start % depth``), the explicit node its path ends at, or -1 when the path is in its own
  tail (it then grows with the sequence at no cost).
* ``arena`` — int32 tokens of every sequence.

A child's key is ``count * 2**31 + (2**31 - 1 - token)``: higher count first, then the
smaller token.  Kernels take arrays and scalars only and return -1 / early counts instead of
raising; ``decoding.suffix_index`` validates and grows.  May import ``config``, ``errors``, ``paths``,
``progress`` and other kernel modules (it needs none); never the engine or a model.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# node fields
COUNT, TOK, PARENT, LINK, FIRST, NEXT, PREV, DEG, CACHE, SEQ, POS = range(11)
NF = 11
# meta counters
M_USED, M_FREE, M_NFREE, M_HCOUNT, M_CUSED, M_CFREE, M_NCFREE = range(7)
NMETA = 7
# seqs fields; the ring follows
S_START, S_LEN, S_ROOM = range(3)
S_RING = 3
# caches: a node gets one when it has CACHE_AT children; it keeps the TOP_CACHED best
TOP_CACHED = 8
CACHE_AT = 16
C_LEN, C_BOUND = 0, 1
C_WIDTH = 2 + TOP_CACHED
NO_BOUND = -1  # no child outside the cache
UNKNOWN = 1 << 62  # a fresh cache: nothing known until it is rebuilt
IMPLICIT = -1
TOKEN_LIMIT = 1 << 31


@njit(cache=True)
def tokens_ok(tokens):
    """Every id of ``tokens`` (int64) is in ``[0, 2**31)``."""
    for t in tokens:
        if t < 0 or t >= TOKEN_LIMIT:
            return False
    return True


# --------------------------------------------------------------------------- child hash


@njit(cache=True)
def _home(parent, tok, mask):
    # products of values < 2**31 by constants < 2**32 stay below 2**63, interpreted or compiled
    h = (int(parent) * 0x9E3779B1) ^ (int(tok) * 0x85EBCA77)
    h ^= h >> 29
    return h & mask


@njit(cache=True)
def find_child(nodes, table, parent, tok):
    """The child of ``parent`` reached by ``tok``, or -1."""
    mask = table.shape[0] - 1
    h = _home(parent, tok, mask)
    while True:
        c = table[h, 0]
        if c < 0:
            return -1
        if table[h, 1] == tok and nodes[c, PARENT] == parent:
            return c
        h = (h + 1) & mask


@njit(cache=True)
def _table_put(nodes, table, c):
    mask = table.shape[0] - 1
    h = _home(nodes[c, PARENT], nodes[c, TOK], mask)
    while table[h, 0] >= 0:
        h = (h + 1) & mask
    table[h, 0] = c
    table[h, 1] = nodes[c, TOK]


@njit(cache=True)
def _table_drop(nodes, table, c):
    # backward-shift deletion: no tombstones, so probes stay as short as the load allows
    mask = table.shape[0] - 1
    i = _home(nodes[c, PARENT], nodes[c, TOK], mask)
    while table[i, 0] != c:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        e = table[j, 0]
        if e < 0:
            break
        k = _home(nodes[e, PARENT], table[j, 1], mask)
        # e may fill the hole at i when its home is not in the cyclic range (i, j]
        if (i <= j and (k <= i or k > j)) or (i > j and k <= i and k > j):
            table[i, 0] = e
            table[i, 1] = table[j, 1]
            i = j
    table[i, 0] = -1
    table[i, 1] = -1


@njit(cache=True)
def rehash(nodes, table, used):
    """Put every live node but the root into the (empty) ``table``; returns their number."""
    n = 0
    for c in range(1, used):
        if nodes[c, COUNT] > 0:
            _table_put(nodes, table, c)
            n += 1
    return n


# --------------------------------------------------------------------------- top-k caches


@njit(cache=True)
def _key(nodes, c):
    return (int(nodes[c, COUNT]) << 31) | (TOKEN_LIMIT - 1 - int(nodes[c, TOK]))


@njit(cache=True)
def _cache_find(caches, slot, c):
    for j in range(caches[slot, C_LEN]):
        if caches[slot, 2 + j] == c:
            return j
    return -1


@njit(cache=True)
def _cache_raise(nodes, caches, slot, c):
    """Child ``c`` gained one occurrence (or is new, with one)."""
    j = _cache_find(caches, slot, c)
    kc = _key(nodes, c)
    if j < 0:
        n = caches[slot, C_LEN]
        if n < TOP_CACHED:
            j = n
            caches[slot, C_LEN] = n + 1
        else:
            kl = _key(nodes, caches[slot, 2 + n - 1])
            if kc <= kl:
                caches[slot, C_BOUND] = max(caches[slot, C_BOUND], kc)
                return
            caches[slot, C_BOUND] = max(caches[slot, C_BOUND], kl)  # the last one leaves
            j = n - 1
        caches[slot, 2 + j] = c
    while j > 0 and _key(nodes, caches[slot, 2 + j - 1]) < kc:
        caches[slot, 2 + j] = caches[slot, 2 + j - 1]
        caches[slot, 2 + j - 1] = c
        j -= 1


@njit(cache=True)
def _cache_lower(nodes, caches, slot, c):
    """Child ``c`` lost one occurrence (and is still there)."""
    j = _cache_find(caches, slot, c)
    if j < 0:
        return  # the bound on the others still holds
    kc = _key(nodes, c)
    n = caches[slot, C_LEN]
    while j + 1 < n and _key(nodes, caches[slot, 2 + j + 1]) > kc:
        caches[slot, 2 + j] = caches[slot, 2 + j + 1]
        caches[slot, 2 + j + 1] = c
        j += 1


@njit(cache=True)
def _cache_forget(caches, slot, c):
    j = _cache_find(caches, slot, c)
    if j < 0:
        return
    n = caches[slot, C_LEN]
    for i in range(j, n - 1):
        caches[slot, 2 + i] = caches[slot, 2 + i + 1]
    caches[slot, C_LEN] = n - 1


@njit(cache=True)
def _cache_rebuild(nodes, caches, slot, u):
    caches[slot, C_LEN] = 0
    caches[slot, C_BOUND] = NO_BOUND
    c = nodes[u, FIRST]
    while c >= 0:
        _cache_raise(nodes, caches, slot, c)
        c = nodes[c, NEXT]


@njit(cache=True)
def cache_certain(nodes, caches, slot):
    """How many leading cached children are known to be the node's best."""
    bound = caches[slot, C_BOUND]
    n = 0
    while n < caches[slot, C_LEN] and _key(nodes, caches[slot, 2 + n]) > bound:
        n += 1
    return n


# --------------------------------------------------------------------------- nodes


@njit(cache=True)
def _alloc(nodes, meta):
    c = meta[M_FREE]
    if c >= 0:
        meta[M_FREE] = nodes[c, NEXT]
        meta[M_NFREE] -= 1
    else:
        c = meta[M_USED]
        meta[M_USED] += 1
    return c


@njit(cache=True)
def _cache_alloc(caches, meta):
    s = meta[M_CFREE]
    if s >= 0:
        meta[M_CFREE] = caches[s, C_BOUND]
        meta[M_NCFREE] -= 1
    else:
        s = meta[M_CUSED]
        meta[M_CUSED] += 1
    caches[s, C_LEN] = 0
    caches[s, C_BOUND] = UNKNOWN
    return s


@njit(cache=True)
def _new_child(nodes, table, caches, meta, u, tok, seq, pos):
    """A tail child of ``u`` for token ``tok`` at ``seq[pos]``, count 1."""
    c = _alloc(nodes, meta)
    nodes[c, COUNT] = 1
    nodes[c, TOK] = tok
    nodes[c, PARENT] = u
    nodes[c, LINK] = -1
    nodes[c, FIRST] = -1
    nodes[c, DEG] = 0
    nodes[c, CACHE] = -1
    nodes[c, SEQ] = seq
    nodes[c, POS] = pos
    first = nodes[u, FIRST]
    nodes[c, NEXT] = first
    nodes[c, PREV] = -1
    if first >= 0:
        nodes[first, PREV] = c
    nodes[u, FIRST] = c
    nodes[u, DEG] += 1
    _table_put(nodes, table, c)
    meta[M_HCOUNT] += 1
    slot = nodes[u, CACHE]
    if slot >= 0:
        _cache_raise(nodes, caches, slot, c)
    elif nodes[u, DEG] >= CACHE_AT:
        nodes[u, CACHE] = _cache_alloc(caches, meta)
    return c


@njit(cache=True)
def _free_child(nodes, table, caches, meta, u, c):
    prev, nxt = nodes[c, PREV], nodes[c, NEXT]
    if prev >= 0:
        nodes[prev, NEXT] = nxt
    else:
        nodes[u, FIRST] = nxt
    if nxt >= 0:
        nodes[nxt, PREV] = prev
    nodes[u, DEG] -= 1
    _table_drop(nodes, table, c)
    meta[M_HCOUNT] -= 1
    if nodes[u, CACHE] >= 0:
        _cache_forget(caches, nodes[u, CACHE], c)
    own = nodes[c, CACHE]
    if own >= 0:
        caches[own, C_BOUND] = meta[M_CFREE]
        meta[M_CFREE] = own
        meta[M_NCFREE] += 1
    nodes[c, COUNT] = 0
    nodes[c, NEXT] = meta[M_FREE]
    meta[M_FREE] = c
    meta[M_NFREE] += 1


@njit(cache=True)
def _bump(nodes, caches, u, c):
    nodes[c, COUNT] += 1
    if nodes[u, CACHE] >= 0:
        _cache_raise(nodes, caches, nodes[u, CACHE], c)


@njit(cache=True)
def has_room(nodes, table, caches, meta, depth):
    """``(nodes, table, caches)`` each have room for one more token (at most ``depth + 1`` new
    nodes, table entries and caches)."""
    need = depth + 1
    free_nodes = nodes.shape[0] - meta[M_USED] + meta[M_NFREE] >= need
    free_table = 2 * (meta[M_HCOUNT] + need) <= table.shape[0]
    free_caches = caches.shape[0] - meta[M_CUSED] + meta[M_NCFREE] >= need
    return free_nodes, free_table, free_caches


# --------------------------------------------------------------------------- insert and remove


@njit(cache=True)
def _split_tail(nodes, table, caches, meta, seqs, arena, u, c, link, length, depth):
    """A second occurrence walked into tail ``c`` (a child of ``u``, ``length`` tokens deep):
    it becomes explicit, and its one earlier occurrence continues in a new tail below it."""
    owner, q = nodes[c, SEQ], nodes[c, POS]
    nodes[c, SEQ] = -1
    nodes[c, POS] = -1
    nodes[c, LINK] = link
    _bump(nodes, caches, u, c)
    if length < depth:
        if q + 1 < seqs[owner, S_LEN]:
            nxt = arena[seqs[owner, S_START] + q + 1]
            _new_child(nodes, table, caches, meta, c, nxt, owner, q + 1)
        else:  # the owner's path ends here for now: its ring takes the explicit node
            seqs[owner, S_RING + (q - length + 1) % depth] = c


@njit(cache=True)
def extend(nodes, table, caches, meta, seqs, arena, s, tokens, done, depth):
    """Append ``tokens[done:]`` to sequence slot ``s`` (its room in ``arena`` suffices);
    returns how many of ``tokens`` are in, fewer than all when an array ran short of room
    (grow it and call again from there)."""
    base = seqs[s, S_START]
    for j in range(done, tokens.shape[0]):
        room_nodes, room_table, room_caches = has_room(nodes, table, caches, meta, depth)
        if not (room_nodes and room_table and room_caches):
            return j
        t = tokens[j]
        n = seqs[s, S_LEN]
        arena[base + n] = t
        seqs[s, S_LEN] = n + 1
        nodes[0, COUNT] += 1
        link = 0  # the node of the previous (one shorter) path of this token: the next one's link
        for i in range(n, max(0, n - depth + 1) - 1, -1):  # shortest path first
            length = n - i + 1
            x = 0 if i == n else seqs[s, S_RING + i % depth]
            if x == IMPLICIT:  # in its own tail, which grows with the sequence
                link = -1
                continue
            c = find_child(nodes, table, x, t)
            if c < 0:
                _new_child(nodes, table, caches, meta, x, t, s, n)
                end = IMPLICIT
            elif nodes[c, SEQ] >= 0:
                _split_tail(nodes, table, caches, meta, seqs, arena, x, c, link, length, depth)
                end = c
            else:
                _bump(nodes, caches, x, c)
                end = c
            if length < depth:
                seqs[s, S_RING + i % depth] = end
            link = end
    return tokens.shape[0]


@njit(cache=True)
def remove(nodes, table, caches, meta, seqs, arena, s, depth):
    """Take every path of sequence slot ``s`` out of the trie (counts down, nodes at zero
    freed: deepest first, so a parent outlives its children)."""
    base, size = seqs[s, S_START], seqs[s, S_LEN]
    path = np.empty(depth, np.int64)
    for i in range(size):
        u, m = 0, 0
        for d in range(min(depth, size - i)):
            c = find_child(nodes, table, u, arena[base + i + d])
            path[m] = c
            m += 1
            if nodes[c, SEQ] >= 0:
                break  # its tail: the rest of the path is implicit
            u = c
        for k in range(m - 1, -1, -1):
            c = path[k]
            u = nodes[c, PARENT]
            if nodes[c, COUNT] == 1:
                _free_child(nodes, table, caches, meta, u, c)
            else:
                nodes[c, COUNT] -= 1
                if nodes[u, CACHE] >= 0:
                    _cache_lower(nodes, caches, nodes[u, CACHE], c)
    nodes[0, COUNT] -= size
    seqs[s, S_LEN] = 0


# --------------------------------------------------------------------------- cursors
#
# A cursor is ``(node, known, seq, end, length)``: the matched substring x has ``length``
# tokens; ``node`` is the explicit node of its first ``known`` tokens (the deepest explicit
# prefix).  When ``known == length`` x is that node and ``seq = end = -1``; otherwise x is
# implicit (count 1) and lies at ``seqs`` slot ``seq``, positions ``end - length .. end - 1``.


@njit(cache=True)
def shorten(nodes, table, seqs, arena, node, known, seq, end, length):
    """The cursor of x less its first token (``length >= 1``)."""
    if known == length:
        return nodes[node, LINK], length - 1, -1, -1, length - 1
    if known > 0:
        node = nodes[node, LINK]
        known -= 1
    length -= 1
    base = seqs[seq, S_START] + end - length
    while known < length:  # walk down the rest: it ends in x's own tail or at an explicit node
        c = find_child(nodes, table, node, arena[base + known])
        if nodes[c, SEQ] >= 0:
            return node, known, seq, end, length
        node = c
        known += 1
    return node, length, -1, -1, length


@njit(cache=True)
def advance(nodes, table, seqs, arena, node, known, seq, end, length, tok, depth):
    """The cursor of the longest suffix of x + [tok] in the trie (at most ``depth`` long)."""
    while True:
        if length < depth:
            if known == length:
                c = find_child(nodes, table, node, tok)
                if c >= 0:
                    if nodes[c, SEQ] < 0:
                        return c, length + 1, -1, -1, length + 1
                    return node, known, nodes[c, SEQ], nodes[c, POS] + 1, length + 1
            elif end < seqs[seq, S_LEN] and arena[seqs[seq, S_START] + end] == tok:
                return node, known, seq, end + 1, length + 1
            if length == 0:
                return 0, 0, -1, -1, 0
        node, known, seq, end, length = shorten(nodes, table, seqs, arena, node, known, seq, end, length)


@njit(cache=True)
def match(nodes, table, seqs, arena, context, depth):
    """The cursor of the longest suffix of ``context`` in the trie (at most ``depth`` long).

    A walk over the last ``span`` tokens finds the longest suffix of those; when it is shorter
    than ``span`` it is the answer, else the walk is redone over all ``depth`` tokens.  Most
    matches of new text are short, and walking all ``depth`` tokens would pay a cache miss per
    failed lookup for nothing."""
    n = context.shape[0]
    top_span = min(depth, n)
    span = min(8, top_span)
    while True:
        node, known, seq, end, length = 0, 0, -1, -1, 0
        for j in range(n - span, n):
            node, known, seq, end, length = advance(nodes, table, seqs, arena, node, known, seq, end, length,
                                                    context[j], depth)
        if length < span or span == top_span:
            return node, known, seq, end, length
        span = top_span


@njit(cache=True)
def _scan_top(nodes, u, k, out_tok, out_cnt, keys):
    n = 0
    if k == 0:
        return 0
    c = nodes[u, FIRST]
    while c >= 0:
        kc = _key(nodes, c)
        if n < k or kc > keys[n - 1]:
            j = n if n < k else k - 1
            n = min(n + 1, k)
            while j > 0 and keys[j - 1] < kc:
                keys[j], out_tok[j], out_cnt[j] = keys[j - 1], out_tok[j - 1], out_cnt[j - 1]
                j -= 1
            keys[j], out_tok[j], out_cnt[j] = kc, nodes[c, TOK], nodes[c, COUNT]
        c = nodes[c, NEXT]
    return n


@njit(cache=True)
def top(nodes, caches, seqs, arena, node, known, seq, end, length, depth, out_tok, out_cnt):
    """Fill ``out_tok`` / ``out_cnt`` (``[k]``) with the cursor's best children (count down,
    then token up); returns ``(how many, the cursor's own count)``."""
    k = out_tok.shape[0]
    if known < length:  # implicit: the one continuation of the one occurrence, if any
        if k > 0 and length < depth and end < seqs[seq, S_LEN]:
            out_tok[0] = arena[seqs[seq, S_START] + end]
            out_cnt[0] = 1
            return 1, 1
        return 0, 1
    slot = nodes[node, CACHE]
    if slot < 0 or k > TOP_CACHED:
        return _scan_top(nodes, node, k, out_tok, out_cnt, np.empty(k, np.int64)), nodes[node, COUNT]
    want = min(k, nodes[node, DEG])
    if cache_certain(nodes, caches, slot) < want:
        _cache_rebuild(nodes, caches, slot, node)
    for j in range(want):
        c = caches[slot, 2 + j]
        out_tok[j] = nodes[c, TOK]
        out_cnt[j] = nodes[c, COUNT]
    return want, nodes[node, COUNT]
