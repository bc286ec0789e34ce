"""Free draft candidates from the context: longest-suffix n-gram lookup.

Answers copy from their context (identifiers, edited code, quoted text).  ``NgramIndex``
holds the request's tokens (prompt, then output as it is committed) and, for a context
ending in some tokens, proposes the token that followed the most recent earlier occurrence
of the longest matching suffix (n <= ``max_n``).  The proposal is a deterministic function of
the context, fixed before the node it belongs to draws anything, so it can sit in the tree
next to the draft model's draws and be verified exactly (``verify.verify_checked``).

Pure Python, O(max_n) dictionary work per appended token and per query.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["NgramIndex"]


class NgramIndex:
    def __init__(self, tokens: Sequence[int] = (), max_n: int = 4):
        self.max_n = int(max_n)
        self.tokens: list[int] = []
        # n-gram -> position of the token that followed its most recent occurrence
        self._next: dict[tuple, int] = {}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        toks, nxt = self.tokens, self._next
        for t in tokens:
            i = len(toks)  # position of t: every n-gram ending just before it now has a follower
            for n in range(1, min(self.max_n, i) + 1):
                nxt[tuple(toks[i - n : i])] = i
            toks.append(int(t))

    def propose(self, suffix: Sequence[int]) -> tuple[int, int]:
        """``(token, n)``: the token that followed the latest earlier occurrence of the
        longest suffix of ``suffix`` (the context's last tokens, most recent last) of length
        ``n <= max_n``; ``(-1, 0)`` when not even its last token occurred before."""
        m = min(self.max_n, len(suffix))
        for n in range(m, 0, -1):
            pos = self._next.get(tuple(suffix[len(suffix) - n :]))
            if pos is not None:
                return self.tokens[pos], n
        return -1, 0
