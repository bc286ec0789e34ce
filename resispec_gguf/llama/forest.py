"""The uncommitted nodes of one decoding step, and which KV sequences each one's cell joins.

``backend.LlamaModel.decode`` evaluates a *forest* of new nodes: each hangs off the committed
sequence or off a node decoded earlier in the same step; ``commit`` keeps one root-to-node
chain of them.  ``Forest`` keeps those nodes (sequence id, parent, position, token) and works
out the layout below; ``backend`` makes the llama.cpp calls it implies.

KV layout.  Sequence 0 holds the committed tokens.  Every uncommitted node gets its own
sequence id ``s``; its cell carries ``s`` plus the ids of all its descendants decoded in the
same batch, and before the decode the node's *anchor* (its nearest ancestor already in the
cache, or sequence 0) is copied to ``s``.  llama.cpp masks attention by a token's first
sequence id, so each node sees exactly the committed prefix and its own ancestors.  This needs
``kv_unified=True`` (tokens carrying several sequence ids fail to decode otherwise).

Python and NumPy: imports nothing from the package, never llama_cpp.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Forest"]


class Forest:
    """This step's uncommitted nodes in the order they were decoded: node ``i`` has sequence
    id ``seq[i]`` (``i + 1``), parent ``parent[i]`` (an earlier node, or -1 for the committed
    sequence), position ``pos[i]`` and token ``tok[i]``."""

    def __init__(self):
        self.seq: list[int] = []
        self.parent: list[int] = []
        self.pos: list[int] = []
        self.tok: list[int] = []

    def __len__(self) -> int:
        return len(self.seq)

    def add(self, tokens, parents, n_past: int, *, n_batch: int, n_seq_max: int) -> int:
        """Append one node per token, hanging off ``parents`` (indices among all nodes so far,
        this call's included; -1: the committed sequence of ``n_past`` tokens), in one batch of
        at most ``n_batch`` tokens and with a sequence id each below ``n_seq_max``.  Returns the
        context the deepest new node needs (its position + 1).  ``ValueError`` for too few or
        too many nodes, or for a parent that is not an earlier node (the nodes before it stay
        added)."""
        n = len(tokens)
        if n == 0:
            raise ValueError("nothing to decode")
        if n > n_batch:
            raise ValueError(f"{n} nodes exceed the batch size {n_batch}")
        base = len(self.seq)
        if base + n + 1 > n_seq_max:
            raise ValueError(f"{base + n} uncommitted nodes exceed n_seq_max - 1 = {n_seq_max - 1}")
        depth_end = 0
        for j in range(n):
            par = int(parents[j])
            if not (-1 <= par < base + j):
                raise ValueError(f"node {base + j} has parent {par}, which is not an earlier node")
            pos = n_past if par < 0 else self.pos[par] + 1
            self.parent.append(par)
            self.pos.append(pos)
            self.seq.append(base + j + 1)
            self.tok.append(int(tokens[j]))
            depth_end = max(depth_end, pos + 1)
        return depth_end

    def cells(self, base: int) -> tuple[np.ndarray, list[int], list[int]]:
        """The batch of the nodes from ``base`` on: ``(ids, counts, anchors)``, per node the
        sequence ids its cell carries (``ids[j, :counts[j]]``: its own first, then every
        descendant's in the batch; int32, zero-padded) and its anchor's sequence id (the
        nearest ancestor decoded before ``base``, or 0: the committed sequence)."""
        n = len(self.seq) - base
        seqs = [[base + j + 1] for j in range(n)]
        anchors = []
        for j in range(n):
            a = self.parent[base + j]
            sid = base + j + 1
            while a >= base:
                seqs[a - base].append(sid)
                a = self.parent[a]
            anchors.append(0 if a < 0 else self.seq[a])
        ids = np.zeros((n, max(len(s) for s in seqs)), np.int32)
        for j, s in enumerate(seqs):
            ids[j, : len(s)] = s
        return ids, [len(s) for s in seqs], anchors

    def forget(self, keep: int) -> list[int]:
        """Drop the nodes from ``keep`` on; returns their sequence ids."""
        gone = self.seq[keep:]
        for lst in (self.seq, self.parent, self.pos, self.tok):
            del lst[keep:]
        return gone

    def chain(self, path) -> list[int]:
        """``path`` as ints, checked to be a chain of nodes from the committed sequence
        (``ValueError`` otherwise)."""
        path = [int(i) for i in path]
        prev = -1
        for i in path:
            if self.parent[i] != prev:
                raise ValueError(f"commit path is not a chain from the committed sequence: {path}")
            prev = i
        return path

    def clear(self) -> None:
        for lst in (self.seq, self.parent, self.pos, self.tok):
            lst.clear()
