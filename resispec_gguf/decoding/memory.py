"""The engine's memory of past answers: a store that outlives requests.

``Memory`` is one ``suffix_index.SuffixIndex`` of the answers the engine gave, shared by every
request and slot, bounded (FIFO by answers and tokens) and, with a file, kept across runs
(``Memory.open``/``save``).  The engine builds it once and hands it to each request as the
store ``"memory"`` (``candidates.base.Request.stores``); the context source
(``candidates.context``) proposes from it, and when a reply is over ``finish`` keeps the answer
and what ``auto`` learnt of its candidates' bins.

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
from .seeding import Ledger
from .suffix_index import DEFAULT_DEPTH, GLOBAL_MAX_SEQUENCES, SuffixIndex

__all__ = ["Memory", "vocab_key"]
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

    def finish(self, answer: Sequence[int], learnt=None) -> None:
        """A reply that read or fills the memory is over: keep its ``answer`` and, under
        ``auto``, what it ``learnt`` of its candidates (``Calibration.lookup_state``; None:
        nothing learnt)."""
        self.remember(answer)
        if learnt is not None:
            self.learn(learnt)

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


def vocab_key(vocab) -> str:
    """A key of a model's vocabulary (``n_vocab`` and every token's piece, specials
    spelled): a memory file written under another vocabulary is refused."""
    h = hashlib.sha256(str(vocab.n_vocab).encode())
    for t in range(vocab.n_vocab):
        piece = vocab.token_piece(t)
        h.update(len(piece).to_bytes(2, "little"))
        h.update(piece)
    return h.hexdigest()[:32]
