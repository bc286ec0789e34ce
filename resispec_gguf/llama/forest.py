"""The uncommitted nodes of one decoding step, and which KV sequences each one's cell joins.

``backend.LlamaModel.decode`` evaluates a *forest* of new nodes: each hangs off the committed
sequence or off a node decoded earlier in the same step; ``commit`` keeps one root-to-node
chain of them.  ``Forest`` keeps those nodes (sequence id, parent, position, token) and works
out the layout below; ``backend`` makes the llama.cpp calls it implies.

KV layout.  Sequences ``0 .. n_slots - 1`` hold the committed tokens, one per slot (one
request each; a single request uses slot 0).  Every uncommitted node gets its own sequence id
``s`` above those; its cell carries ``s`` plus the ids of all its descendants decoded in the
same batch, and before the decode the node's *anchor* (its nearest ancestor already in the
cache, or its slot's committed sequence) is copied to ``s``.  llama.cpp masks attention by a token's first
sequence id, so each node sees exactly the committed prefix and its own ancestors.  This needs
``kv_unified=True`` (tokens carrying several sequence ids fail to decode otherwise).

Python and NumPy: imports nothing from the package, never llama_cpp.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Forest"]


class Forest:
    """This step's uncommitted nodes in the order they were decoded: node ``i`` has sequence
    id ``seq[i]`` (``i + n_slots``), parent ``parent[i]`` (an earlier node, or -1 for its
    slot's committed sequence), position ``pos[i]``, token ``tok[i]`` and slot ``slot[i]``."""

    def __init__(self, n_slots: int = 1):
        self.n_slots = int(n_slots)
        self.seq: list[int] = []
        self.parent: list[int] = []
        self.pos: list[int] = []
        self.tok: list[int] = []
        self.slot: list[int] = []

    def __len__(self) -> int:
        return len(self.seq)

    def add(self, tokens, parents, n_past, *, n_batch: int, n_seq_max: int, slots=None) -> int:
        """Append one node per token, hanging off ``parents`` (indices among all nodes so far,
        this call's included; -1: the committed sequence of its slot, ``slots[j]``, default 0,
        which holds ``n_past[slot]`` tokens, or ``n_past`` when it is an int), in one batch of at
        most ``n_batch`` tokens and with a sequence id each below ``n_seq_max``.  Returns the
        context the deepest new node needs (its position + 1).  ``ValueError`` for too few or
        too many nodes, or for a parent that is not an earlier node of the same slot (the nodes
        before it stay added)."""
        n = len(tokens)
        if n == 0:
            raise ValueError("nothing to decode")
        if n > n_batch:
            raise ValueError(f"{n} nodes exceed the batch size {n_batch}")
        base = len(self.seq)
        if base + n + self.n_slots > n_seq_max:
            raise ValueError(f"{base + n} uncommitted nodes exceed n_seq_max - {self.n_slots} = {n_seq_max - self.n_slots}")
        depth_end = 0
        for j in range(n):
            par = int(parents[j])
            slot = 0 if slots is None else int(slots[j])
            if not (-1 <= par < base + j):
                raise ValueError(f"node {base + j} has parent {par}, which is not an earlier node")
            if not 0 <= slot < self.n_slots or (par >= 0 and self.slot[par] != slot):
                raise ValueError(f"node {base + j} of slot {slot} has a parent outside that slot")
            pos = (n_past if isinstance(n_past, int) else n_past[slot]) if par < 0 else self.pos[par] + 1
            self.parent.append(par)
            self.pos.append(pos)
            self.seq.append(base + j + self.n_slots)
            self.tok.append(int(tokens[j]))
            self.slot.append(slot)
            depth_end = max(depth_end, pos + 1)
        return depth_end

    def cells(self, base: int) -> tuple[np.ndarray, list[int], list[int]]:
        """The batch of the nodes from ``base`` on: ``(ids, counts, anchors)``, per node the
        sequence ids its cell carries (``ids[j, :counts[j]]``: its own first, then every
        descendant's in the batch; int32, zero-padded) and its anchor's sequence id (the
        nearest ancestor decoded before ``base``, or its slot's committed sequence)."""
        n = len(self.seq) - base
        seqs = [[self.seq[base + j]] for j in range(n)]
        anchors = []
        for j in range(n):
            a = self.parent[base + j]
            sid = self.seq[base + j]
            while a >= base:
                seqs[a - base].append(sid)
                a = self.parent[a]
            anchors.append(self.slot[base + j] if a < 0 else self.seq[a])
        ids = np.zeros((n, max(len(s) for s in seqs)), np.int32)
        for j, s in enumerate(seqs):
            ids[j, : len(s)] = s
        return ids, [len(s) for s in seqs], anchors

    def forget(self, keep: int) -> list[int]:
        """Drop the nodes from ``keep`` on; returns their sequence ids."""
        gone = self.seq[keep:]
        for lst in (self.seq, self.parent, self.pos, self.tok, self.slot):
            del lst[keep:]
        return gone

    def chain(self, path, slot: int = 0) -> list[int]:
        """``path`` as ints, checked to be a chain of ``slot``'s nodes from its committed
        sequence (``ValueError`` otherwise)."""
        path = [int(i) for i in path]
        prev = -1
        for i in path:
            if self.parent[i] != prev or self.slot[i] != slot:
                raise ValueError(f"commit path is not a chain from the committed sequence: {path}")
            prev = i
        return path

    def clear(self) -> None:
        for lst in (self.seq, self.parent, self.pos, self.tok, self.slot):
            lst.clear()
