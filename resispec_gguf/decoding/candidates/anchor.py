"""Where a reply is copying from: ``CopyAnchor``, a place in the request's fixed sequences
(the prompt and its views) that the committed tokens have been following, held as a byte
offset into the sequence's text.

Why.  The request's suffix index (``context``) proposes, at a node, the token that most often
followed the longest matched suffix anywhere in its sequences.  When a reply copies one of
several near-identical texts, that is not always the text it is copying: a file in the prompt
sits there raw and, in its JSON-string view, escaped; both share every stretch without a quote
or a line break, and after such a stretch the suffix index may continue in the raw text (a
real newline) while the reply writes the escaped one (``\\n``).  Repeated lines of code are the
same case.  The anchor knows which text and where: it follows the reply, and its next token
is the one after the anchor.

Why bytes.  A reply that copies a text does not always cut it into the tokens the text was
cut into: the view may hold ``\\`` then ``ndef`` where the reply writes ``\\n`` then
``def``, or ``):\\`` then ``n`` where it writes ``):`` then ``\\n``.  Matched token by token
every such spot is a break (on the default pair's JSON edits, about half of them).  The anchor
therefore follows the *bytes*: a committed token follows when its bytes are the sequence's
next bytes, however the two split them; where that leaves the anchor inside one of the
sequence's tokens, its next token is the first token of the rest of the text there,
tokenized on demand (a few tokens' worth, cached).  And where the reply has written a token
of its own in place of the text's (``\\n`` where the text cut ``\\``), that token is proposed
the next time the text has the same token, if its bytes come next (a *habit*: a reply cuts
its escapes one way throughout).  Without a tokenizer (the test fakes) every token is a
marker piece of its own and the anchor follows tokens as they are.

How it moves, at each committed token (``commit``):

* following: the token's bytes are the anchor's next bytes: the anchor moves past them;
* a break (the reply wrote something else: an edit): it looks for where to go on, among the
  occurrences of the tail of the committed tokens (up to ``BACK`` tokens) in every sequence:
  the one whose tail agrees longest, in the same sequence at or after the break point
  (within ``WINDOW`` tokens) with at least one token of agreement, in another sequence with
  at least ``MIN_SYNC``; ties go to the same sequence, then to the nearest.  (Tokens, not
  bytes: matching the tail's bytes found false resyncs in replies that copy nothing, and no
  more copy in those that do, in the replays of ``scripts/copy_replay.py``.)  The break point
  stays where the copy broke until the anchor has followed ``SETTLED`` tokens again, so that
  a false resync (a common token found just after the break) does not carry it away from the
  text the reply will come back to;
* no anchor yet (or none found): the same search over every sequence with ``MIN_SYNC``; the
  first search, when the request starts, matches the prompt's own last tokens (an occurrence
  at a sequence's very end, such as the prompt's own, continues with nothing and is skipped).

Below the committed tokens, along a path of the tree (``follow``), it only follows: a path
token whose bytes are not the anchor's leaves no anchor there (no search on speculative paths).

Everything is a function of the fixed sequences, the committed tokens and the path (and of
the tokenizer, fixed), fixed before a node draws: its candidate is a deterministic candidate
like the context's own.  NumPy; no model.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["Anchor", "BACK", "CopyAnchor", "MIN_SYNC", "Pieces", "RESPLIT", "SETTLED", "WINDOW"]

BACK = 16  # committed tokens a search matches backwards at most
MIN_SYNC = 4  # tokens of agreement a sync needs outside the broken sequence's window (3: chat replies
# met chance 3-token matches with their prompt; the agent edits' replays were the same at 3 and 4)
WINDOW = 400  # how far after a break point the copy is looked for in its own sequence
SETTLED = 3  # tokens followed before a break point moves with the anchor
RESPLIT = 4  # the sequence's tokens tokenized again from inside one of them (their first token proposed)


class Anchor(NamedTuple):
    """``seq``: which fixed sequence; ``off``: the byte offset of the next byte in its text;
    ``broke``: the token where the copy broke last (a search starts there); ``run``: tokens
    followed since the anchor was (re)found, -1 while none was found after a break."""

    seq: int
    off: int
    broke: int
    run: int


class Pieces:
    """Tokens as bytes: each token's piece through ``codec`` (the target's tokenizer), a token
    with none (a control token) a marker of its own (0xFF, its id, ``;``), and so every token
    without a codec: there bytes follow, break and agree exactly as tokens do."""

    def __init__(self, codec=None):
        self.codec = codec
        self._cache: dict[int, bytes] = {}

    def __call__(self, token: int) -> bytes:
        got = self._cache.get(token)
        if got is None:
            got = self.codec.token_piece(token) if self.codec is not None else b""
            if not got:  # no text of its own (or no codec): a piece of its own, 0xFF only at its start
                got = b"\xff%d;" % int(token)
            self._cache[token] = got
        return got

    def first_token(self, data: bytes) -> int | None:
        """The first token of ``data`` tokenized as plain text; None without a codec, or where
        ``data`` does not start with a whole UTF-8 character."""
        if self.codec is None:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:  # a character cut at the window's start or end, or a marker
            if e.start == 0:
                return None
            text = data[:e.start].decode("utf-8")  # the whole characters before it
        toks = self.codec.tokenize(text, add_special=False, parse_special=False) if text else []
        return int(toks[0]) if toks else None


class CopyAnchor:
    """The anchor of one request (module docstring) over ``sequences`` (the prompt, then its
    views), which never change; ``codec``: the target's tokenizer (None: tokens as they are)."""

    def __init__(self, sequences: Sequence[Sequence[int]], before: Sequence[int] = (), codec=None):
        """``before``: the tokens the reply follows (the prompt): a prompt that ends inside a
        text it holds (a completion, an infill) is followed from the first token."""
        self.pieces = Pieces(codec)
        self.seqs = [np.asarray(s, np.int64) for s in sequences]
        self.texts: list[bytes] = []
        self.starts: list[np.ndarray] = []  # each token's first byte, then the text's length
        for seq in self.seqs:
            parts = [self.pieces(int(t)) for t in seq.tolist()]
            self.texts.append(b"".join(parts))
            self.starts.append(np.cumsum([0] + [len(p) for p in parts], dtype=np.int64))
        self._resplit: dict[tuple[int, int], int | None] = {}
        self.habits: dict[int, int] = {}  # the text's own token -> what the reply last wrote in its place
        self.tail: list[int] = [int(t) for t in before[-BACK:]]  # the last BACK tokens of the context
        self._paths: dict[tuple, Anchor | None] = {}
        self.state: Anchor | None = None
        if self.tail:
            self.state = self._found(self._search(None, -1), None)

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
        found, lost on a path, or at the end of its sequence).  The token is the text's own
        (``_own``), or the one the reply wrote there before in its place (a habit) where that
        one's bytes come next too."""
        a = self._at(path)
        t = self._own(a)
        if t is None:
            return None
        habit = self.habits.get(t, t)
        if habit != t and self.texts[a.seq].startswith(self.pieces(habit), a.off):
            t = habit
        return t, a.run

    def _own(self, a: Anchor | None) -> int | None:
        """The text's own next token at ``a``: the sequence's token starting there, or, inside
        one, the first token of the rest tokenized again; None where there is none."""
        if a is None or a.run < 0 or a.off >= len(self.texts[a.seq]):
            return None
        starts = self.starts[a.seq]
        i = int(np.searchsorted(starts, a.off, "right")) - 1  # the sequence's token holding the offset
        if starts[i] == a.off:
            return int(self.seqs[a.seq][i])
        key = (a.seq, a.off)
        if key not in self._resplit:
            end = int(starts[min(i + RESPLIT, len(starts) - 1)])
            t = self.pieces.first_token(self.texts[a.seq][a.off:end])
            ok = t is not None and self.texts[a.seq].startswith(self.pieces(t), a.off)
            self._resplit[key] = t if ok else None
        return self._resplit[key]

    def _at(self, path: tuple) -> Anchor | None:
        if not path:
            return self.state
        got = self._paths.get(path, False)
        if got is False:
            got = self._paths[path] = self.follow(self._at(path[:-1]), path[-1])
        return got

    def follow(self, a: Anchor | None, token: int) -> Anchor | None:
        """The anchor after ``token`` on a path: past its bytes where they are the anchor's
        next bytes, else none."""
        if a is None or a.run < 0:
            return None
        piece = self.pieces(token)
        if not self.texts[a.seq].startswith(piece, a.off):
            return None
        off = a.off + len(piece)
        broke = self._token_at(a.seq, off) if a.run + 1 >= SETTLED else a.broke
        return Anchor(a.seq, off, broke, a.run + 1)

    def _token_at(self, seq: int, off: int) -> int:
        """The first of ``seq``'s tokens that starts at or after byte ``off``."""
        return int(np.searchsorted(self.starts[seq], off, "left"))

    def _found(self, found: tuple[int, int] | None, broke: int | None, cur: int = -1) -> Anchor | None:
        """The anchor at ``found`` (a search's ``(seq, offset)``), its break point ``broke``
        where it is in the sequence ``cur`` that broke, its own position elsewhere."""
        if found is None:
            return None
        s, off = found
        return Anchor(s, off, broke if s == cur and broke is not None else self._token_at(s, off), 0)

    def _step(self, a: Anchor | None, token: int) -> Anchor | None:
        on = self.follow(a, token)
        if on is not None:
            own = self._own(a)
            if own is not None:  # the reply's habit there: its token where the text has ``own``
                self.habits[own] = token
            return on
        if a is None:
            return self._found(self._search(None, -1), None)
        broke = a.broke if a.run < SETTLED else self._token_at(a.seq, a.off)
        got = self._found(self._search(broke, a.seq), broke, a.seq)
        return Anchor(a.seq, int(self.starts[a.seq][broke]), broke, -1) if got is None else got

    def _search(self, broke: int | None, cur: int) -> tuple[int, int] | None:
        """``(seq, offset)`` after the best occurrence of the tail (module docstring), None
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
        return None if best is None else (best[0], int(self.starts[best[0]][best[1]]))


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
