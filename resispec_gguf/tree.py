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

    def add_children(self, node: int, weight: dict) -> list[int]:
        """One child per distinct draw of an expanded node, in first-draw order, scored
        ``score(node) * weight[token]``; returns the new node indices."""
        new = []
        for t in dict.fromkeys(self.draws[node].tolist()):
            new.append(self._add(t, node, self.score[node] * weight[t]))
        return new

    def keep_best(self, n: int) -> tuple["DraftTree", dict[int, int]]:
        """The root plus the ``n`` best-scored nodes (ties: shallower, then earlier), as a new
        tree with the same root; returns it and the old -> new index map.  Scores never grow
        along a path, so the kept set contains every kept node's ancestors."""
        order = sorted(range(1, len(self)), key=lambda i: (-self.score[i], self.depth[i], i))
        keep = sorted([0] + order[:n])
        out = DraftTree()
        old_to_new: dict[int, int] = {}
        for i in keep:
            par = self.parent[i]
            if par >= 0 and par not in old_to_new:
                continue  # unreachable when scores are monotone; kept for safety
            j = out._add(self.tokens[i], old_to_new.get(par, -1), self.score[i])
            out.draws[j] = self.draws[i]
            out.q[j] = self.q[i]
            old_to_new[i] = j
        return out, old_to_new
