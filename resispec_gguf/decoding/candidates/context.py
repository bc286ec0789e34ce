"""The context source: the request's own prompt and output, and the engine's memory of past
answers (``decoding.memory.Memory``), several candidates per tree node, counted.

Two ``suffix_index.SuffixIndex`` feed a node (the longest suffix of its context, committed
tokens then the node's path, matched in each):

* the request's own index over its prompt and output, extended as tokens are committed, and
  beside them the sequences of the indexed sources (the prompt's views, ``candidates.views``);
* ``Memory``, the engine's index of past answers, shared by every request and slot (the store
  ``"memory"`` of ``Request.stores``: absent when the request does not read it).

At a node each index gives the tokens that followed the matched context most often
(``SuffixIndex.top``), and ``ContextSource.propose`` returns them with the bin ``auto`` learns
each under: the request's leader by its match and copy run (``leading_bin``), its other tokens
by their share of the node's counts (``alternate_bin``), the memory's by match and share
(``memory_bin``).  Everything here is a function of the held sequences and the node's path,
fixed before the node draws anything.

Before them, where the reply is following one of the request's fixed sequences (the prompt or
a view: ``anchor.CopyAnchor``), the token after the anchor leads the node: it knows which of
two texts sharing a suffix (a file raw and as a JSON string) the reply is copying, where the
index's counts do not.  Measured on the default pair's agent edits (replies recorded at T 0,
chains replayed): tau 3.71 -> 5.17 and 4.03 -> 5.33 on the second file's edits, the same on
the others.

Its bins (20; priors as learnt acceptance chances): 0-4 a leading candidate (copy run 0, 1, 2,
3-7 after a match of 2 tokens or more; 4: a 1-token match), 5-6 the others (share >= 1/3,
less), 7-12 the memory's (match < 4 tokens or more, by share < 1/3, < 2/3, more), 13-14 a
leading candidate on a copy run of 8-15 and of 16 or more (the chance climbs along a long
copy, and a step's chain is only as deep as it is believed), 15-19 the anchor's (``anchor_bin``:
followed 0, 1, 2-7, 8-15, 16 or more tokens since it was found).  The memory's bins are kept
away from a draft's draws (``apart``).
"""

from __future__ import annotations

from typing import Sequence

from ..memory import Memory
from ..suffix_index import DEFAULT_DEPTH, StaleCursor, SuffixIndex
from .anchor import CopyAnchor
from .base import Candidate, Request, SourceDefaults, indexed_sequences, register

__all__ = ["ContextSource", "alternate_bin", "anchor_bin", "leading_bin", "memory_bin", "uses_lookup"]

# the shortest match each index proposes from: one token of the request's own context (its
# bins learn how little that is worth), two of the memory (a single token of another answer
# predicts nothing of this one)
_MIN_LOCAL, _MIN_MEMORY = 1, 2
_ALTERNATE = 5
_MEMORY = 7  # the memory's first bin
_LONG_RUN = 13  # copy runs of 8-15; 14: 16 and more
_ANCHOR = 15  # the anchor's first bin


def leading_bin(match: int, run: int) -> int:
    """The bin of a context candidate that leads its node: ``match`` tokens of context
    matched, and the ``run`` tokens before it were each what the context predicted."""
    if match < 2:
        return 4
    if run < 8:
        return min(run, 3)
    return _LONG_RUN + (run >= 16)


def anchor_bin(run: int) -> int:
    """The bin of the anchor's token, which leads its node: the anchor has followed ``run``
    tokens since it was found."""
    return _ANCHOR + (run >= 1) + (run >= 2) + (run >= 8) + (run >= 16)


def alternate_bin(share: float) -> int:
    """The bin of a context candidate that does not lead its node, by its share of the
    node's counts."""
    return _ALTERNATE if share >= 1 / 3 else _ALTERNATE + 1


def memory_bin(match: int, share: float) -> int:
    """The bin of a candidate from the memory of past answers: ``match`` tokens matched, its
    ``share`` of the node's counts."""
    return _MEMORY + 3 * (match >= 4) + (share >= 1 / 3) + (share >= 2 / 3)


def uses_lookup(dp) -> bool:
    """Whether a request under ``dp`` reads candidates from its context (``auto`` always; a
    fixed method with ``lookup``)."""
    return dp.method == "auto" or (dp.lookup and dp.method != "none")


def top(index: SuffixIndex, cursor, k: int, min_length: int) -> tuple[list[int], list[float], int]:
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


@register
class ContextSource(SourceDefaults):
    """One request's context source (module docstring): its prompt and output, the token
    sequences of the indexed sources (``sequences``: the prompt's views) beside them in its
    own index, and the engine's ``memory`` (None: its own context only).  ``k``: candidates per
    node from each index, at most.  ``anchored``: the copy anchor leads (off only to measure
    what it adds, ``scripts/copy_replay.py``); ``codec``: the target's tokenizer, with which the
    anchor follows a copy's bytes however the reply splits them (``anchor``)."""

    name = "context"
    # the anchor's: found again (0.5) to followed 16 tokens (0.9); measured on the default pair's
    # agent edits after a request: 0.77, 0.79, 0.96, 0.96, 0.98
    priors = (0.3, 0.5, 0.6, 0.7, 0.15, 0.25, 0.08, 0.08, 0.2, 0.35, 0.15, 0.4, 0.7, 0.8, 0.85,
              0.5, 0.6, 0.8, 0.85, 0.9)
    arm = "lookup"
    leading = (0, 1, 2, 3, 4)  # the lookup arm's prior: the index's leaders, not the anchor's
    apart = frozenset(range(_MEMORY, _LONG_RUN))
    # the leader's bins by copy run (after a match of 2 or more), and the anchor's by run
    ladders = ((0, 1, 2, 3, _LONG_RUN, _LONG_RUN + 1), tuple(range(_ANCHOR, _ANCHOR + 5)))

    def __init__(self, prompt: Sequence[int], memory: Memory | None = None, k: int = 3,
                 sequences: Sequence[Sequence[int]] = (), anchored: bool = True, codec=None):
        self.k = int(k)
        self.memory = memory
        self.local = SuffixIndex(DEFAULT_DEPTH)
        self.tokens = list(prompt)  # what the request's index holds: the prompt, then the output
        self.local.add(0, self.tokens)
        for i, seq in enumerate(sequences, 1):  # beside it, fixed: the indexed sources' (the views)
            self.local.add(i, list(seq))
        # the copy anchor over the prompt and the views (``anchored`` False: none, for comparisons)
        self.anchor = CopyAnchor([self.tokens[:], *sequences] if anchored else [], self.tokens, codec)
        self._cursors: dict[tuple, tuple] = {}  # path -> (local cursor, memory cursor), this state
        self._proposed: dict[tuple, list] = {}  # (path, run) -> candidates, this state (a step asks twice)
        self._versions = (-1, -1)

    @classmethod
    def build(cls, request: Request) -> "ContextSource | None":
        if not uses_lookup(request.dp):
            return None
        return cls(request.prompt, request.stores.get("memory"), request.dp.lookup_k, indexed_sequences(request),
                   codec=request.text)

    def commit(self, tokens: Sequence[int]) -> None:
        """The request committed ``tokens``."""
        if tokens:
            self.tokens += tokens
            self.local.extend(0, list(tokens))
            self.anchor.commit(tokens)

    def _cursor(self, path: tuple) -> tuple:
        """The (local, memory) cursors of the context ``committed + path``, from the parent
        path's, cached until either index changes."""
        versions = (self.local.version, self.memory.index.version if self.memory is not None else -1)
        if versions != self._versions:
            self._cursors.clear()
            self._proposed.clear()
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

    def propose(self, path: Sequence[int] = (), run: int = 0) -> list[Candidate]:
        """The candidates after ``committed + path``: the anchor's token where there is one,
        then the request's own context's (its leader, then the others by count), then the
        memory's tokens not already there.  ``run``: the copy run the path continues (the
        context leader's bin)."""
        path = tuple(path)
        try:
            return self._propose(path, run)
        except StaleCursor:  # another request's answer joined the memory mid-walk
            self._versions = (-1, -1)
            return self._propose(path, run)

    def _propose(self, path: tuple, run: int) -> list[Candidate]:
        loc, mem = self._cursor(path)  # first: it forgets what was proposed if an index changed
        done = self._proposed.get((path, run))
        if done is not None:
            return list(done)
        tokens, shares, length = top(self.local, loc, self.k, _MIN_LOCAL)
        out = [Candidate(t, leading_bin(length, run) if i == 0 else alternate_bin(share))
               for i, (t, share) in enumerate(zip(tokens, shares))]
        anchored = self.anchor.next_token(path)
        if anchored is not None:
            out = [Candidate(anchored[0], anchor_bin(anchored[1]))] + [c for c in out if c.token != anchored[0]]
        if mem is not None:
            tokens, shares, length = top(self.memory.index, mem, self.k, _MIN_MEMORY)
            seen = {c.token for c in out}
            out += [Candidate(t, memory_bin(length, share)) for t, share in zip(tokens, shares) if t not in seen]
        self._proposed[(path, run)] = out
        return list(out)
