"""Where a reply is copying from: ``CopyAnchor``, a position in the request's fixed sequences
(the prompt and its views) that the committed tokens have been following.

Why.  The request's suffix index (``context``) proposes, at a node, the token that most often
followed the longest matched suffix anywhere in its sequences.  When a reply copies one of
several near-identical texts, that is not always the text it is copying: a file in the prompt
sits there raw and, in its JSON-string view, escaped; both share every stretch without a quote
or a line break, and after such a stretch the suffix index may continue in the raw text (a
real newline) while the reply writes the escaped one (``\\n``).  Repeated lines of code are the
same case.  The anchor knows which text and where: it follows the reply token by token, and
its next token is the one after the anchor.

How it moves, at each committed token (``commit``):

* following: the token is the anchor's: the anchor moves one on;
* a break (the reply wrote something else: an edit): it looks for where to go on, among the
  occurrences of the tail of the committed tokens (up to ``BACK`` tokens) in every sequence:
  the one whose tail agrees longest, in the same sequence at or after the break point
  (within ``WINDOW`` tokens) with at least one token of agreement, in another sequence with
  at least ``MIN_SYNC``; ties go to the same sequence, then to the nearest.  The break point
  stays where the copy broke until the anchor has followed ``SETTLED`` tokens again, so that
  a false resync (a common token found just after the break) does not carry it away from the
  text the reply will come back to;
* no anchor yet (or none found): the same search over every sequence with ``MIN_SYNC``; the
  first search, when the request starts, matches the prompt's own last tokens (an occurrence
  at a sequence's very end, such as the prompt's own, continues with nothing and is skipped).

Below the committed tokens, along a path of the tree (``follow``), it only follows: a path
token that is not the anchor's leaves no anchor there (no search on speculative paths).

Everything is a function of the fixed sequences, the committed tokens and the path, fixed
before a node draws: its candidate is a deterministic candidate like the context's own.
NumPy; no model.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["Anchor", "BACK", "CopyAnchor", "MIN_SYNC", "SETTLED", "WINDOW"]

BACK = 16  # committed tokens a search matches backwards at most
MIN_SYNC = 4  # tokens of agreement a sync needs outside the broken sequence's window (3: chat replies
# met chance 3-token matches with their prompt; the agent edits' replays were the same at 3 and 4)
WINDOW = 400  # how far after a break point the copy is looked for in its own sequence
SETTLED = 3  # tokens followed before a break point moves with the anchor


class Anchor(NamedTuple):
    """``seq``: which fixed sequence; ``pos``: the position of the next token there;
    ``broke``: where the copy broke last (a search starts there); ``run``: tokens followed
    since the anchor was (re)found, -1 while none was found after a break."""

    seq: int
    pos: int
    broke: int
    run: int


class CopyAnchor:
    """The anchor of one request (module docstring) over ``sequences`` (the prompt, then its
    views), which never change."""

    def __init__(self, sequences: Sequence[Sequence[int]], before: Sequence[int] = ()):
        """``before``: the tokens the reply follows (the prompt): a prompt that ends inside a
        text it holds (a completion, an infill) is followed from the first token."""
        self.seqs = [np.asarray(s, np.int64) for s in sequences]
        self.tail: list[int] = [int(t) for t in before[-BACK:]]  # the last BACK tokens of the context
        self._paths: dict[tuple, Anchor | None] = {}
        self.state: Anchor | None = None
        if self.tail:
            found = self._search(None, -1)
            self.state = None if found is None else Anchor(found[0], found[1], found[1], 0)

    def commit(self, tokens: Sequence[int]) -> None:
        """The request committed ``tokens``: the anchor follows, breaks or is found again."""
        for t in tokens:
            self.tail.append(int(t))
            del self.tail[:-BACK]
            self.state = self._step(self.state, int(t))
        self._paths.clear()

    def next_token(self, path: tuple = ()) -> tuple[int, int] | None:
        """``(token, run)``: the anchor's next token after the committed tokens + ``path`` and
        the tokens it has followed since it was found; None where there is no anchor (none
        found, lost on a path, or at the end of its sequence)."""
        a = self._at(path)
        if a is None or a.run < 0 or a.pos >= len(self.seqs[a.seq]):
            return None
        return int(self.seqs[a.seq][a.pos]), a.run

    def _at(self, path: tuple) -> Anchor | None:
        if not path:
            return self.state
        got = self._paths.get(path, False)
        if got is False:
            got = self._paths[path] = self.follow(self._at(path[:-1]), path[-1])
        return got

    def follow(self, a: Anchor | None, token: int) -> Anchor | None:
        """The anchor after ``token`` on a path: one on where it was the anchor's, else none."""
        if a is None or a.run < 0 or a.pos >= len(self.seqs[a.seq]) or self.seqs[a.seq][a.pos] != token:
            return None
        return Anchor(a.seq, a.pos + 1, a.pos + 1 if a.run + 1 >= SETTLED else a.broke, a.run + 1)

    def _step(self, a: Anchor | None, token: int) -> Anchor | None:
        on = self.follow(a, token)
        if on is not None:
            return on
        if a is None:
            found = self._search(None, -1)
            return None if found is None else Anchor(found[0], found[1], found[1], 0)
        broke = a.broke if a.run < SETTLED else a.pos
        found = self._search(broke, a.seq)
        if found is None:
            return Anchor(a.seq, broke, broke, -1)
        s, q = found
        return Anchor(s, q, broke if s == a.seq else q, 0)

    def _search(self, broke: int | None, cur: int) -> tuple[int, int] | None:
        """``(seq, pos)`` after the best occurrence of the tail (module docstring), None
        where none agrees enough."""
        tail = np.asarray(self.tail, np.int64)
        best, best_key = None, None
        for s, arr in enumerate(self.seqs):
            same = s == cur and broke is not None
            lo, hi = (broke, min(len(arr), broke + WINDOW)) if same else (0, len(arr))
            hits = np.flatnonzero(arr[lo:hi] == tail[-1]) + lo
            hits = hits[hits + 1 < len(arr)]  # an occurrence at the very end continues with nothing
            if hits.size == 0:
                continue
            m = _agreement(arr, hits, tail)
            ok = m >= (1 if same else MIN_SYNC)
            if not ok.any():
                continue
            m, hits = m[ok], hits[ok]
            dist = np.abs(hits + 1 - (broke if same else 0))
            i = int(np.lexsort((dist, -m))[0])  # the longest agreement, then the nearest
            key = (int(m[i]), same, -int(dist[i]))
            if best_key is None or key > best_key:
                best, best_key = (s, int(hits[i]) + 1), key
        return best


def _agreement(arr: np.ndarray, hits: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """For each position ``h`` in ``hits`` (where ``arr[h] == tail[-1]``), how many tokens
    ``arr[..h]`` and ``tail`` agree on, counted backwards."""
    m = np.ones(hits.size, np.int64)
    alive = np.ones(hits.size, bool)
    for j in range(1, tail.size):
        idx = hits - j
        alive &= (idx >= 0) & (arr[np.maximum(idx, 0)] == tail[-1 - j])
        if not alive.any():
            break
        m += alive
    return m
