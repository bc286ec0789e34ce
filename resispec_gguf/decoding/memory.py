"""Draft candidates from memory: the request's own context and the answers the engine gave
before, several per tree node, counted.

Two ``suffix.SuffixIndex`` feed a node (the longest suffix of its context, committed tokens
then the node's path, matched in each):

* the request's own index over its prompt and output, extended as tokens are committed;
* ``Memory``, the engine's index of past answers, shared by every request and slot, bounded
  (FIFO by answers and tokens) and, with a file, kept across runs (``Memory.open``/``save``).

At a node each index gives the tokens that followed the matched context most often
(``SuffixIndex.top``), and ``MemoryDrafts.propose`` returns them as the node's deterministic
candidates with the calibration bin ``auto`` learns each under: the request's leader by its
match and copy run (``calibration.lookup_bin``), its other tokens by their share of the
node's counts, the memory's by match and share.  Everything here is a function of the held
sequences and the node's path, fixed before the node draws anything, so the candidates are
verified exactly as the verifier's docstring proves for any fixed set (``kernels.verify``).

Seeds: the memory (its answers and its learnt bins) is a function of earlier requests'
uniforms, so a seeded request that reads it or adds to it draws under a key of the memory's
``ledger`` (``seeding``) once its seed was used before: a repeated seed is a fresh draw.  A
request with ``DraftParams.use_memory`` False reads only its own context and adds nothing.

Pure Python over the index's kernels; no model, no printing (``Memory.open`` returns its
warning).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from typing import Sequence

from ..config import DEFAULT_MEMORY_TOKENS
from .calibration import alternate_bin, lookup_bin, memory_bin
from .seeding import Ledger
from .suffix import DEFAULT_DEPTH, GLOBAL_MAX_SEQUENCES, StaleCursor, SuffixIndex

__all__ = ["Memory", "MemoryDrafts", "vocab_key"]
# the shortest match each index proposes from: one token of the request's own context (its
# bins learn how little that is worth), two of the memory (a single token of another answer
# predicts nothing of this one)
_MIN_LOCAL, _MIN_MEMORY = 1, 2
_MIN_ANSWER = 4  # answers shorter than this teach the memory nothing worth its room


class Memory:
    """The engine's memory of past answers: one ``SuffixIndex`` shared by every request.

    ``max_tokens``/``max_answers``: the bounds, oldest answers evicted first.  ``path``: the
    file ``save`` writes (None: in memory only).  ``vocab_key``: the vocabulary's key, kept
    in the file so that a file of another vocabulary is refused.  ``ledger``: the seeds of
    the requests that read or fill it (``seeding.Ledger``), its stamp kept in the file."""

    def __init__(self, max_tokens: int = DEFAULT_MEMORY_TOKENS, max_answers: int = GLOBAL_MAX_SEQUENCES, *,
                 path: str | None = None, vocab_key: str = "", index: SuffixIndex | None = None):
        if max_tokens < 1 or max_answers < 1:
            raise ValueError("a memory needs room for at least one answer")
        self.path = path
        self.index = index if index is not None else SuffixIndex(DEFAULT_DEPTH, max_answers, max_tokens, vocab_key)
        self._ids = itertools.count(max(self.index.seq_ids(), default=-1) + 1)
        self._lock = threading.Lock()  # the id counter, the learnt bins
        self._bins = None  # how often its candidates were accepted, per bin (``learnt``); not saved
        self.ledger = Ledger(self.index.stamp)

    @classmethod
    def open(cls, path: str | None, vocab_key: str, max_tokens: int = DEFAULT_MEMORY_TOKENS,
             max_answers: int = GLOBAL_MAX_SEQUENCES) -> tuple["Memory", str | None]:
        """``(memory, warning)``: the memory saved at ``path`` (a new one when the file does
        not exist yet, or ``path`` is None), within the bounds given; a file of another
        vocabulary or version, or a damaged one, gives an empty memory and a one-line
        ``warning`` (the file is then overwritten by the next ``save``)."""
        if path is None:
            return cls(max_tokens, max_answers, vocab_key=vocab_key), None
        index, warning = SuffixIndex.load(path, vocab_key, DEFAULT_DEPTH, max_answers, max_tokens)
        if warning is not None:
            warning = warning.replace("suffix index", "memory file", 1)
        return cls(path=str(path), index=index), warning

    def remember(self, tokens: Sequence[int]) -> None:
        """Keep one answer (evicting the oldest beyond the bounds)."""
        if len(tokens) < _MIN_ANSWER:
            return
        with self._lock:
            sid = next(self._ids)
        self.index.add(sid, list(tokens))

    def clear(self, learnt: bool = True) -> None:
        """Forget every answer; with ``learnt``, also what ``learn`` kept."""
        self.index.clear()
        if learnt:
            with self._lock:
                self._bins = None

    def learn(self, bins) -> None:
        """Keep what a request that read this memory learnt of its candidates
        (``Calibration.lookup_state``): the next request under ``auto`` starts from it."""
        with self._lock:
            self._bins = bins

    def learnt(self):
        """The last ``learn``ed bins, None before any (or after ``clear``)."""
        with self._lock:
            return self._bins

    def save(self, path: str | None = None) -> None:
        """Write the memory to ``path`` (default: the one it was opened from) atomically;
        nothing without a path.  ``OSError`` when the file cannot be written."""
        path = path if path is not None else self.path
        if path is not None:
            self.index.stamp = self.ledger.saved_stamp()
            self.index.save(path)

    def stats(self) -> dict:
        """``answers``, ``tokens``, ``nodes``, ``bytes`` held."""
        s = self.index.stats()
        return {"answers": s["sequences"], "tokens": s["tokens"], "nodes": s["nodes"], "bytes": s["bytes"]}


def _top(index: SuffixIndex, cursor, k: int, min_length: int) -> tuple[list[int], list[float], int]:
    """``(tokens, shares, length)``: the ``k`` most frequent next tokens, with their shares of
    those counts, at the longest suffix of the cursor's match, at least ``min_length`` tokens,
    whose node has children (the context's own occurrence at the end of the sequence, or the
    depth limit, may leave the longest without any); empty lists when there is none."""
    while cursor.length >= min_length:
        tokens, counts, _count = index.top(cursor, k)
        if tokens.size:
            total = max(int(counts.sum()), 1)
            return tokens.tolist(), [c / total for c in counts.tolist()], cursor.length
        cursor = index.shorten(cursor)
    return [], [], 0


class MemoryDrafts:
    """One request's candidate source: its prompt and output, the prompt's ``views`` (token
    sequences of its text as a reply would quote it, ``decoding.views``), and the engine's
    ``memory`` (None: its own context only).  ``k``: candidates per node from each index, at
    most."""

    def __init__(self, prompt: Sequence[int], memory: Memory | None = None, k: int = 3,
                 views: Sequence[Sequence[int]] = ()):
        self.k = int(k)
        self.memory = memory
        self.local = SuffixIndex(DEFAULT_DEPTH)
        self.tokens = list(prompt)  # what the request's index holds: the prompt, then the output
        self.local.add(0, self.tokens)
        for i, view in enumerate(views, 1):  # beside it, fixed: its views
            self.local.add(i, list(view))
        self._cursors: dict[tuple, tuple] = {}  # path -> (local cursor, memory cursor), this state
        self._versions = (-1, -1)

    def extend(self, tokens: Sequence[int]) -> None:
        """The request committed ``tokens``."""
        if tokens:
            self.tokens += tokens
            self.local.extend(0, list(tokens))

    def _cursor(self, path: tuple) -> tuple:
        """The (local, memory) cursors of the context ``committed + path``, from the parent
        path's, cached until either index changes."""
        versions = (self.local.version, self.memory.index.version if self.memory is not None else -1)
        if versions != self._versions:
            self._cursors.clear()
            self._versions = versions
        got = self._cursors.get(path)
        if got is not None:
            return got
        if path:
            loc, mem = self._cursor(path[:-1])
            tok = path[-1]
            got = (self.local.advance(loc, tok), self.memory.index.advance(mem, tok) if mem is not None else None)
        else:
            tail = self.tokens[-DEFAULT_DEPTH:]
            got = (self.local.match(tail), self.memory.index.match(tail) if self.memory is not None else None)
        self._cursors[path] = got
        return got

    def propose(self, path: Sequence[int] = (), run: int = 0) -> list[tuple[int, int]]:
        """The candidates after ``committed + path``: ``[(token, bin)]``, the request's own
        context's first (its leader, then the others by count), then the memory's tokens
        not already there.  ``run``: the copy run the path continues (the leader's bin)."""
        path = tuple(path)
        try:
            return self._propose(path, run)
        except StaleCursor:  # another request's answer joined the memory mid-walk
            self._versions = (-1, -1)
            return self._propose(path, run)

    def _propose(self, path: tuple, run: int) -> list[tuple[int, int]]:
        loc, mem = self._cursor(path)
        tokens, shares, length = _top(self.local, loc, self.k, _MIN_LOCAL)
        out = [(t, lookup_bin(length, run) if i == 0 else alternate_bin(share))
               for i, (t, share) in enumerate(zip(tokens, shares))]
        if mem is not None:
            tokens, shares, length = _top(self.memory.index, mem, self.k, _MIN_MEMORY)
            seen = {t for t, _ in out}
            out += [(t, memory_bin(length, share)) for t, share in zip(tokens, shares) if t not in seen]
        return out


def vocab_key(vocab) -> str:
    """A key of a model's vocabulary (``n_vocab`` and every token's piece, specials
    spelled): a memory file written under another vocabulary is refused."""
    h = hashlib.sha256(str(vocab.n_vocab).encode())
    for t in range(vocab.n_vocab):
        piece = vocab.token_piece(t)
        h.update(len(piece).to_bytes(2, "little"))
        h.update(piece)
    return h.hexdigest()[:32]
