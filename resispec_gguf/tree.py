"""The draft tree of one speculative step, and which drawn children it keeps.

Node 0 is the root: the last emitted token, not yet in the target's cache.  Every other node
is a distinct token drawn at its parent.  An *expanded* node has been through the draft model:
it carries the distribution ``q`` its candidates were drawn from and the ``draws`` in draw
order (duplicates included: the verifier walks all of them).  A drawn candidate that the
budget left without a node can still be accepted; it then ends the step.

Pure Python/NumPy: no model, no randomness of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)  # [n] token per node
    parent: list[int] = field(default_factory=list)  # [n] parent node, -1 for the root
    depth: list[int] = field(default_factory=list)  # [n] root = 0
    score: list[float] = field(default_factory=list)  # [n] estimated chance of being reached
    children: list[dict] = field(default_factory=list)  # [n] token -> child node
    draws: list = field(default_factory=list)  # [n] int64 [K] candidates, None if not expanded
    q: list = field(default_factory=list)  # [n] (ids, probs) draws came from, None if greedy/not expanded

    @classmethod
    def with_root(cls, token: int) -> "DraftTree":
        t = cls()
        t._add(token, -1, 1.0)
        return t

    def _add(self, token: int, parent: int, score: float) -> int:
        i = len(self.tokens)
        self.tokens.append(int(token))
        self.parent.append(parent)
        self.depth.append(0 if parent < 0 else self.depth[parent] + 1)
        self.score.append(score)
        self.children.append({})
        self.draws.append(None)
        self.q.append(None)
        if parent >= 0:
            self.children[parent][int(token)] = i
        return i

    def __len__(self) -> int:
        return len(self.tokens)

    def set_draws(self, node: int, draws: np.ndarray, q) -> None:
        self.draws[node] = draws
        self.q[node] = q

    def candidates(self, node: int, weights) -> list[tuple[float, int, int]]:
        """(score, parent, token) for each distinct draw of an expanded node, in first-draw
        order.  ``weights(token, multiplicity)`` is the chance the token is accepted there."""
        seen: dict[int, int] = {}
        for t in self.draws[node].tolist():
            seen[t] = seen.get(t, 0) + 1
        return [(self.score[node] * weights(t, m), node, t) for t, m in seen.items()]

    def add_children(self, chosen: list[tuple[float, int, int]]) -> list[int]:
        return [self._add(t, par, s) for s, par, t in chosen]


def choose(cands: list[tuple[float, int, int]], room: int, best_first: bool) -> list[tuple[float, int, int]]:
    """Keep at most ``room`` candidates: the highest scores (budget policy, ties by draw
    order) or simply the first ones (static policy, which only caps the tree size)."""
    if room <= 0:
        return []
    if not best_first:
        return cands[:room]
    order = sorted(range(len(cands)), key=lambda i: (-cands[i][0], i))[:room]
    return [cands[i] for i in sorted(order)]
