"""Draft candidates from memory: a counted suffix index over many token sequences.

``SuffixIndex`` holds token sequences (each under an id of the caller's) in a depth-limited
suffix trie with counts, the structure behind SuffixDecoding-style drafts: every substring of
length <= ``max_depth`` of every held sequence is a path from the root, and a node's count is
the number of occurrences of its substring.  A request's own index grows with its prompt and
output (``extend``); a global index of past answers (``add`` whole, FIFO-bounded by
``max_sequences`` and ``max_tokens``) persists across runs (``save`` / ``load``).

Queries walk a ``Cursor``: ``match(context)`` finds the longest suffix of the context that is a
path (at most ``max_depth`` tokens), ``advance(cursor, token)`` extends it by one token in O(1)
amortised (suffix links), ``shorten`` drops its oldest token, and ``top(cursor, k)`` gives the
``k`` children with the highest counts (ties: the smaller token first) and the node's own
count.  Every answer is a function of the held sequences and the arguments alone (not of the
order they came in, nor of the memory layout), so a draft built from it is fixed before the
draws that verify it.  A cursor is valid until the next write (``add``, ``extend``,
``remove``, ``clear``); using an older one raises ``StaleCursor``.

Threads: every method takes ``lock`` (a re-entrant lock).  A walk of several queries that must
see one state (match, then advances and tops) holds ``with index.lock:`` around it when other
threads may write; a write in between only makes the next query raise ``StaleCursor``.

The trie and its walks are the kernels of ``kernels.suffix_trie``: a node per repeated substring
plus one per start position (2 to 2.6 nodes per token on code and prose at depth 24, at most
``max_depth`` when every sequence is held twice), 44 bytes a node, 16 a node in the hash, 4 a
token: about 170 bytes of arrays per token held (docs/memory.md).  No model, no file format but
this module's own, no printing: ``load`` returns its warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import os
import tempfile
import threading
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from ..kernels import suffix_trie as _k

__all__ = ["Cursor", "DEFAULT_DEPTH", "FILE_VERSION", "GLOBAL_MAX_SEQUENCES", "GLOBAL_MAX_TOKENS", "StaleCursor",
           "SuffixIndex", "warm_up"]

DEFAULT_DEPTH = 24  # SuffixDecoding's and arctic-inference's default tree depth
MAX_DEPTH = 256
GLOBAL_MAX_SEQUENCES = 10_000  # past answers a global index keeps (arctic-inference's default)
GLOBAL_MAX_TOKENS = 1_000_000  # ... and tokens held: about 170 MB of arrays (docs/memory.md)
FILE_FORMAT = "resispec-suffix-index"
FILE_VERSION = 1
_FILE_KEYS = ("format", "version", "vocab_key", "bounds", "ids", "lengths", "tokens")
_OPTIONAL_KEYS = ("stamp",)  # absent from files written before it was kept


class StaleCursor(ValueError):
    """A cursor from before the index last changed."""


class Cursor(NamedTuple):
    """Where a walk stands.  ``length``: tokens matched (0: the root, nothing matched).  The
    other fields are the index's (``kernels.suffix_trie``); ``version`` is the index state it
    belongs to."""

    length: int
    node: int
    known: int
    seq: int
    end: int
    version: int


def _as_tokens(tokens, what: str = "tokens") -> np.ndarray:
    """``tokens`` as a 1-D int64 array of ids in ``[0, 2**31)`` (the caller's own array when it
    is one already), else ValueError."""
    if type(tokens) is list and len(tokens) <= 8:  # a step's committed tokens: checked as Python ints
        for t in tokens:
            if type(t) is not int or not 0 <= t < _k.TOKEN_LIMIT:
                break
        else:
            return np.array(tokens, np.int64)
    arr = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a flat sequence of token ids, got shape {arr.shape}")
    if arr.dtype != np.int64 or not arr.flags.c_contiguous or not arr.flags.writeable:
        if arr.size == 0:
            return np.empty(0, np.int64)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{what} must be integer token ids, got {arr.dtype}")
        arr = arr.astype(np.int64)  # a uint64 over 2**63 turns negative: refused below
    if not _k.tokens_ok(arr):
        raise ValueError(f"{what} must be token ids in [0, 2**31)")
    return arr


def _as_token(token) -> int:
    try:
        t = operator.index(token)
    except TypeError:
        raise ValueError(f"a token must be an integer id, got {type(token).__name__}") from None
    if not 0 <= t < _k.TOKEN_LIMIT:
        raise ValueError(f"a token must be an id in [0, 2**31), got {t}")
    return t


def _bound(value, name: str) -> int | None:
    if value is None:
        return None
    v = operator.index(value)
    if v < 1:
        raise ValueError(f"{name} must be at least 1 (or None for no bound), got {v}")
    return v


def _seq_id(seq_id) -> int:
    try:
        s = operator.index(seq_id)
    except TypeError:
        raise ValueError(f"a sequence id must be an integer, got {type(seq_id).__name__}") from None
    if not -(1 << 63) <= s < 1 << 63:
        raise ValueError(f"a sequence id must fit in 64 bits, got {s}")
    return s


class SuffixIndex:
    """A counted suffix trie over sequences; see the module docstring."""

    def __init__(self, max_depth: int = DEFAULT_DEPTH, max_sequences: int | None = None,
                 max_tokens: int | None = None, vocab_key: str = ""):
        depth = operator.index(max_depth)
        if not 1 <= depth <= MAX_DEPTH:
            raise ValueError(f"max_depth must be in [1, {MAX_DEPTH}], got {depth}")
        if not isinstance(vocab_key, str):
            raise ValueError("vocab_key must be a string")
        self.max_depth = depth
        self.max_sequences = _bound(max_sequences, "max_sequences")
        self.max_tokens = _bound(max_tokens, "max_tokens")
        self.vocab_key = vocab_key
        self.stamp = ""  # a note its owner keeps in the file (``Memory``: the seed ledger's stamp)
        self.lock = threading.RLock()
        self._empty()

    def _empty(self) -> None:
        self._nodes = np.zeros((1024, _k.NF), np.int32)
        self._nodes[0] = -1
        self._nodes[0, [_k.COUNT, _k.DEG]] = 0
        self._table = np.full((2048, 2), -1, np.int32)
        self._caches = np.zeros((16, _k.C_WIDTH), np.int64)
        self._meta = np.zeros(_k.NMETA, np.int64)
        self._meta[[_k.M_USED, _k.M_FREE, _k.M_CFREE]] = 1, -1, -1
        self._seqs = np.zeros((16, _k.S_RING + self.max_depth), np.int32)
        self._arena = np.zeros(4096, np.int32)
        self._arena_used = 0
        self._slots: dict[int, int] = {}  # seq id -> slot, oldest first
        self._free_slots: list[int] = []
        self._tokens = 0
        self._version = getattr(self, "_version", -1) + 1

    # ------------------------------------------------------------------ what it holds

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._slots

    @property
    def total_tokens(self) -> int:
        return self._tokens

    @property
    def version(self) -> int:
        """Bumped by every write: a cursor of another version is stale."""
        return self._version

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays behind the index (their capacity, not just what is used)."""
        return sum(a.nbytes for a in (self._nodes, self._table, self._caches, self._seqs, self._arena))

    def seq_ids(self) -> list[int]:
        """The held sequence ids, oldest first (the order eviction follows)."""
        with self.lock:
            return list(self._slots)

    def tokens(self, seq_id) -> np.ndarray:
        """A copy of sequence ``seq_id``'s tokens (int32)."""
        with self.lock:
            slot = self._slot_of(seq_id)
            start, size = self._seqs[slot, _k.S_START], self._seqs[slot, _k.S_LEN]
            return self._arena[start:start + size].copy()

    def stats(self) -> dict:
        """``sequences``, ``tokens``, live ``nodes`` (the root included) and ``bytes``."""
        with self.lock:
            nodes = int(self._meta[_k.M_USED] - self._meta[_k.M_NFREE])
            return {"sequences": len(self._slots), "tokens": self._tokens, "nodes": nodes, "bytes": self.nbytes}

    # ------------------------------------------------------------------ writes

    def add(self, seq_id, tokens: Sequence[int]) -> list[int]:
        """Hold a new sequence; returns the ids evicted to keep within the bounds, oldest
        first (``seq_id`` itself when it alone is over ``max_tokens``)."""
        sid, toks = _seq_id(seq_id), _as_tokens(tokens)
        with self.lock:
            if sid in self._slots:
                raise ValueError(f"sequence {sid} is already held: extend or remove it")
            self._append(self._open(sid), toks)
            return self._enforce()

    def extend(self, seq_id, tokens: Sequence[int]) -> list[int]:
        """Append ``tokens`` to sequence ``seq_id`` (a new one if not held); returns the ids
        evicted, as ``add``.  Eviction follows the order sequences were first written."""
        sid, toks = _seq_id(seq_id), _as_tokens(tokens)
        with self.lock:
            slot = self._slots.get(sid)
            self._append(self._open(sid) if slot is None else slot, toks)
            return self._enforce()

    def remove(self, seq_id) -> None:
        """Forget sequence ``seq_id``: its counts come off, its nodes are freed for reuse."""
        with self.lock:
            self._remove(self._slot_of(seq_id), _seq_id(seq_id))

    def clear(self) -> None:
        with self.lock:
            self._empty()

    def _slot_of(self, seq_id) -> int:
        slot = self._slots.get(seq_id)
        if slot is None:
            raise KeyError(f"no sequence {seq_id!r} in the index")
        return slot

    def _open(self, sid: int) -> int:
        if self._free_slots:
            slot = self._free_slots.pop()
        else:
            slot = len(self._slots)
            if slot == self._seqs.shape[0]:
                self._seqs = _grown(self._seqs)
        self._seqs[slot, :_k.S_RING] = 0
        self._slots[sid] = slot
        self._version += 1
        return slot

    def _append(self, slot: int, toks: np.ndarray) -> None:
        if toks.size == 0:
            return
        self._room(slot, toks.size)
        done = 0
        while True:
            done = _k.extend(self._nodes, self._table, self._caches, self._meta, self._seqs, self._arena, slot, toks,
                             done, self.max_depth)
            if done == toks.size:
                break
            self._grow()
        self._tokens += toks.size
        self._version += 1

    def _grow(self) -> None:
        nodes, table, caches = _k.has_room(self._nodes, self._table, self._caches, self._meta, self.max_depth)
        if not nodes:
            self._nodes = _grown(self._nodes)
        if not table:
            self._table = np.full((2 * self._table.shape[0], 2), -1, np.int32)
            self._meta[_k.M_HCOUNT] = _k.rehash(self._nodes, self._table, self._meta[_k.M_USED])
        if not caches:
            self._caches = _grown(self._caches)

    def _room(self, slot: int, extra: int) -> None:
        """Make room in the arena for ``extra`` more tokens of ``slot``."""
        row = self._seqs[slot]
        start, size, room = int(row[_k.S_START]), int(row[_k.S_LEN]), int(row[_k.S_ROOM])
        if size + extra <= room:
            return
        new_room = max(size + extra, 2 * room)
        if self._arena_used + new_room > self._arena.shape[0]:
            self._compact(new_room)
            start = int(row[_k.S_START])
        used = self._arena_used
        self._arena[used:used + size] = self._arena[start:start + size]
        row[_k.S_START], row[_k.S_ROOM] = used, new_room
        self._arena_used = used + new_room

    def _compact(self, extra: int) -> None:
        """Pack the held sequences at the front of an arena with ``extra`` free tokens at least."""
        live = [(slot, int(self._seqs[slot, _k.S_START]), int(self._seqs[slot, _k.S_LEN]),
                 int(self._seqs[slot, _k.S_ROOM])) for slot in self._slots.values()]
        need = sum(r for *_, r in live) + extra
        size = self._arena.shape[0]
        while size < 2 * need:
            size *= 2
        arena, used = np.zeros(size, np.int32), 0
        for slot, start, length, room in live:
            arena[used:used + length] = self._arena[start:start + length]
            self._seqs[slot, _k.S_START] = used
            used += room
        self._arena, self._arena_used = arena, used

    def _remove(self, slot: int, sid: int) -> None:
        self._tokens -= int(self._seqs[slot, _k.S_LEN])
        _k.remove(self._nodes, self._table, self._caches, self._meta, self._seqs, self._arena, slot, self.max_depth)
        self._seqs[slot, :_k.S_RING] = 0
        del self._slots[sid]
        self._free_slots.append(slot)
        self._version += 1

    def _enforce(self) -> list[int]:
        evicted = []
        while self._slots and ((self.max_sequences is not None and len(self._slots) > self.max_sequences)
                               or (self.max_tokens is not None and self._tokens > self.max_tokens)):
            oldest = next(iter(self._slots))
            self._remove(self._slots[oldest], oldest)
            evicted.append(oldest)
        return evicted

    # ------------------------------------------------------------------ queries

    def match(self, context: Sequence[int]) -> Cursor:
        """The cursor of the longest suffix of ``context`` (most recent token last) that is a
        path in the trie, at most ``max_depth`` tokens; ``length`` 0 when none is."""
        ctx = _as_tokens(context[-self.max_depth:] if len(context) > self.max_depth else context, "context")
        with self.lock:
            r = _k.match(self._nodes, self._table, self._seqs, self._arena, ctx, self.max_depth)
            return Cursor(r[4], r[0], r[1], r[2], r[3], self._version)

    def advance(self, cursor: Cursor, token: int) -> Cursor:
        """``match(context + [token])`` for the context ``cursor`` was matched on, in O(1)
        amortised."""
        tok = _as_token(token)
        with self.lock:
            self._check(cursor)
            r = _k.advance(self._nodes, self._table, self._seqs, self._arena, cursor.node, cursor.known, cursor.seq,
                           cursor.end, cursor.length, tok, self.max_depth)
            return Cursor(r[4], r[0], r[1], r[2], r[3], self._version)

    def shorten(self, cursor: Cursor) -> Cursor:
        """The cursor of the matched suffix less its oldest token (the root stays the root):
        a shorter match has more occurrences behind its counts."""
        with self.lock:
            self._check(cursor)
            if cursor.length == 0:
                return cursor
            r = _k.shorten(self._nodes, self._table, self._seqs, self._arena, cursor.node, cursor.known, cursor.seq,
                           cursor.end, cursor.length)
            return Cursor(r[4], r[0], r[1], r[2], r[3], self._version)

    def top(self, cursor: Cursor, k: int) -> tuple[np.ndarray, np.ndarray, int]:
        """``(tokens, counts, count)``: the (at most) ``k`` tokens that followed the matched
        substring most often, with how often (int64 ``[m]``, count down then token up), and
        how often the substring occurs (``count``; the root's is the tokens held).  A node
        ``max_depth`` deep has no children."""
        k = operator.index(k)
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        tokens, counts = np.empty(k, np.int64), np.empty(k, np.int64)
        with self.lock:
            self._check(cursor)
            m, count = _k.top(self._nodes, self._caches, self._seqs, self._arena, cursor.node, cursor.known,
                              cursor.seq, cursor.end, cursor.length, self.max_depth, tokens, counts)
        return tokens[:m], counts[:m], int(count)

    def count(self, tokens: Sequence[int]) -> int:
        """Occurrences of ``tokens`` in the held sequences (0 when longer than ``max_depth``)."""
        toks = _as_tokens(tokens)
        if toks.size > self.max_depth:
            return 0
        with self.lock:
            cursor = self.match(toks)
            return self.top(cursor, 0)[2] if cursor.length == toks.size else 0

    def _check(self, cursor: Cursor) -> None:
        if not isinstance(cursor, Cursor):
            raise ValueError(f"expected a Cursor from this index, got {type(cursor).__name__}")
        if cursor.version != self._version:
            raise StaleCursor("the index changed since this cursor was made: match the context again")

    # ------------------------------------------------------------------ files

    def save(self, path) -> None:
        """Write the held sequences (oldest first), the bounds, ``vocab_key`` and ``stamp`` to ``path``
        (an ``.npz``), atomically: a temporary file in the same folder, then a rename."""
        with self.lock:
            ids = np.array(list(self._slots), np.int64)
            lengths = np.array([self._seqs[s, _k.S_LEN] for s in self._slots.values()], np.int64)
            parts = [self._arena[self._seqs[s, _k.S_START]:self._seqs[s, _k.S_START] + self._seqs[s, _k.S_LEN]]
                     for s in self._slots.values()]
            tokens = np.concatenate(parts) if parts else np.empty(0, np.int32)
            bounds = np.array([self.max_depth, self.max_sequences or 0, self.max_tokens or 0], np.int64)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, format=np.array(FILE_FORMAT), version=np.array(FILE_VERSION, np.int64),
                         vocab_key=np.array(self.vocab_key), bounds=bounds, ids=ids, lengths=lengths, tokens=tokens,
                         stamp=np.array(self.stamp))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path, vocab_key: str, max_depth: int | None = None, max_sequences: int | None = None,
             max_tokens: int | None = None) -> tuple["SuffixIndex", str | None]:
        """``(index, warning)``: the index ``save`` wrote to ``path``, under the bounds given
        (None: the file's), the oldest sequences evicted if they no longer fit; ``warning`` is
        None.  A missing file gives an empty index and no warning; a file of another
        vocabulary (``vocab_key`` differs) or version, or one that is not such a file, is
        truncated or corrupt, gives an empty index and a one-line ``warning`` saying why."""
        try:
            saved = _read(Path(path), vocab_key)
        except FileNotFoundError:
            saved, warning = None, None
        except Exception as e:  # whatever a damaged file makes numpy or zipfile raise: start empty
            reason = e.args[0] if isinstance(e, _BadFile) else f"unreadable ({type(e).__name__}: {e})"
            saved, warning = None, f"suffix index {path}: {reason}; starting empty".replace("\n", " ")
        else:
            warning = None
        file_bounds = saved["bounds"] if saved else (DEFAULT_DEPTH, None, None)
        index = cls(max_depth if max_depth is not None else file_bounds[0],
                    max_sequences if max_sequences is not None else file_bounds[1],
                    max_tokens if max_tokens is not None else file_bounds[2], vocab_key)
        if saved:
            index.stamp = saved["stamp"]
            offsets = np.concatenate([[0], np.cumsum(saved["lengths"])])
            for j, sid in enumerate(saved["ids"].tolist()):
                index.add(sid, saved["tokens"][offsets[j]:offsets[j + 1]])
        return index, warning


class _BadFile(Exception):
    """Why a file is not a usable index (the message is the warning's reason)."""


def _read(path: Path, vocab_key: str) -> dict:
    """The validated contents of an index file; ``_BadFile`` (or numpy's error) otherwise."""
    z = np.load(path, allow_pickle=False)
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise _BadFile("not a suffix index file")
    with z:
        if not set(_FILE_KEYS) <= set(z.files) <= set(_FILE_KEYS + _OPTIONAL_KEYS):
            raise _BadFile("not a suffix index file")
        arrays = {key: z[key] for key in z.files}
    if arrays["format"].shape != () or str(arrays["format"]) != FILE_FORMAT:
        raise _BadFile("not a suffix index file")
    version = int(arrays["version"])
    if version != FILE_VERSION:
        raise _BadFile(f"file format version {version}, this version reads {FILE_VERSION}")
    if str(arrays["vocab_key"]) != vocab_key:
        raise _BadFile("written for another vocabulary")
    bounds, ids, lengths, tokens = (arrays[k] for k in ("bounds", "ids", "lengths", "tokens"))
    ok = (bounds.shape == (3,) and bounds.dtype.kind == "i" and 1 <= bounds[0] <= MAX_DEPTH and bounds.min() >= 0
          and ids.ndim == 1 and ids.dtype.kind == "i" and np.unique(ids).size == ids.size
          and lengths.shape == ids.shape and lengths.dtype.kind == "i" and (lengths >= 0).all()
          and tokens.ndim == 1 and tokens.dtype.kind in "iu" and int(lengths.sum()) == tokens.size
          and (tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < _k.TOKEN_LIMIT)))
    if not ok:
        raise _BadFile("inconsistent contents")
    # a file saved before stamps were kept: its bytes stand for the history it holds
    stamp = arrays.get("stamp", np.array(hashlib.sha256(path.read_bytes()).hexdigest()))
    if stamp.shape != () or stamp.dtype.kind != "U":
        raise _BadFile("inconsistent contents")
    depth, max_sequences, max_tokens = (int(b) for b in bounds)
    return {"bounds": (depth, max_sequences or None, max_tokens or None), "ids": ids, "lengths": lengths,
            "tokens": tokens, "stamp": str(stamp)}


def _grown(a: np.ndarray) -> np.ndarray:
    out = np.zeros((2 * a.shape[0],) + a.shape[1:], a.dtype)
    out[:a.shape[0]] = a
    return out


def warm_up() -> None:
    """Compile (or load from Numba's cache) every kernel entry the index calls."""
    index = SuffixIndex(max_depth=4, max_sequences=2)
    for sid in range(3):
        index.add(sid, [1, 2, 1, 2, 3] * 8)
    index.extend(2, [7])
    cursor = index.shorten(index.advance(index.match([1, 2]), 1))
    index.top(cursor, 2)
    index.top(cursor, _k.TOP_CACHED + 1)
    index.remove(2)
    # a long sequence makes the node table, the hash and the arena grow (rehash, has_room)
    grown = SuffixIndex(max_depth=8)
    grown.add(0, (np.arange(6000) * 7919 % 5003).tolist())
    grown.extend(0, [1, 2, 3])
    grown.top(grown.match([1, 2]), 3)
