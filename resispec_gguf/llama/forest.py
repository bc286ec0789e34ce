"""The uncommitted nodes of one decoding step, and which KV sequences each one's cell joins.

``backend.LlamaModel.decode`` evaluates a *forest* of new nodes: each hangs off the committed
sequence or off a node decoded earlier in the same step; ``commit`` keeps one root-to-node
chain of them.  ``Forest`` keeps those nodes (sequence id, parent, position, token) and works
out the layout below; ``backend`` makes the llama.cpp calls it implies.

KV layout.  Sequences ``0 .. n_slots - 1`` hold the committed tokens, one per slot (one
request each; a single request uses slot 0).  An uncommitted node's first child takes over
its parent's sequence id (so a chain of nodes is one sequence), and so does a slot's first
node hanging off its committed sequence: it takes the slot's own id, which carries the
committed prefix already (the step's *root chain*; ``commit`` takes the slot id off the
chain's cells that the committed path leaves).  Every other node opens a new id ``s`` above
the slots'.  A node's cell carries its id plus the ids that its descendants decoded in the
same batch open, and before the decode each new id gets a copy of the node's *anchor* (its
nearest ancestor already in the cache, or its slot's committed sequence) up to the anchor's
position (up to the committed length for the committed sequence: the root chain is not
part of it).  llama.cpp masks attention by a token's first sequence id and by position, and
the nodes sharing an id form one root-to-leaf chain, so each node sees exactly the committed
prefix and its own ancestors.  Sharing ids saves copies: each copy adds the id to every
committed cell and dropping it takes it off every one (a cost that grows with the context),
and a chain needs one instead of one per node, the root chain none.  This needs
``kv_unified=True`` (tokens carrying several sequence ids fail to decode otherwise).

Python and NumPy: imports nothing from the package, never llama_cpp.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Forest"]


class Forest:
    """This step's uncommitted nodes in the order they were decoded: node ``i`` has sequence
    id ``seq[i]`` (its parent's for the parent's first child, else a new one, counting from
    ``n_slots``), parent ``parent[i]`` (an earlier node, or -1 for its slot's committed
    sequence), position ``pos[i]``, token ``tok[i]`` and slot ``slot[i]``."""

    def __init__(self, n_slots: int = 1):
        self.n_slots = int(n_slots)
        self.seq: list[int] = []
        self.parent: list[int] = []
        self.pos: list[int] = []
        self.tok: list[int] = []
        self.slot: list[int] = []
        self._opens: list[bool] = []  # node i opened its id (else took over its parent's)
        self._handed: list[bool] = []  # node i's id went to a child already
        self._rooted = [False] * self.n_slots  # a node holds the slot's id (its root chain's first)
        self._next_id = self.n_slots

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
        n_slots, single = self.n_slots, isinstance(n_past, int)
        seq, parent, pos_of, tok, slot_of, opens_of, handed = (self.seq, self.parent, self.pos, self.tok, self.slot,
                                                               self._opens, self._handed)
        for j in range(n):
            par = int(parents[j])
            slot = 0 if slots is None else int(slots[j])
            if not (-1 <= par < base + j):
                raise ValueError(f"node {base + j} has parent {par}, which is not an earlier node")
            if not 0 <= slot < n_slots or (par >= 0 and slot_of[par] != slot):
                raise ValueError(f"node {base + j} of slot {slot} has a parent outside that slot")
            if par < 0:
                pos, opens = (n_past if single else n_past[slot]), self._rooted[slot]
            else:
                pos, opens = pos_of[par] + 1, handed[par]
            if opens:
                sid, self._next_id = self._next_id, self._next_id + 1
            elif par < 0:  # the slot's root chain starts: its id is the slot's
                sid, self._rooted[slot] = slot, True
            else:
                sid, handed[par] = seq[par], True
            parent.append(par)
            pos_of.append(pos)
            seq.append(sid)
            tok.append(int(tokens[j]))
            slot_of.append(slot)
            opens_of.append(opens)
            handed.append(False)
            if pos >= depth_end:
                depth_end = pos + 1
        return depth_end

    def cells(self, base: int) -> tuple[np.ndarray, list[int], list[tuple[int, int, int]]]:
        """The batch of the nodes from ``base`` on: ``(ids, counts, copies)``.  Per node, the
        sequence ids its cell carries (``ids[j, :counts[j]]``: its own first, then every id
        its descendants in the batch open; int32, zero-padded).  ``copies``: per id a node of
        the batch opens, ``(src, dst, end)``: copy sequence ``src`` (the node's anchor's: the
        nearest ancestor decoded before ``base``, or its slot's committed sequence) to ``dst``
        at positions below ``end`` (the anchor's own position + 1, which leaves out the
        anchor's descendants that share its id; the committed length for the committed
        sequence, which leaves out its root chain)."""
        seq, parent, pos, opens = self.seq, self.parent, self.pos, self._opens
        own = seq[base:]
        seqs = [[sid] for sid in own]
        copies = []
        for i in range(base, len(seq)):
            if not opens[i]:  # the parent's id: its ancestors in the batch carry it already
                continue
            sid = seq[i]
            top, a = i, parent[i]
            while a >= base:
                seqs[a - base].append(sid)
                top, a = a, parent[a]
            # a < 0: ``top`` hangs off the committed sequence, at the committed length
            copies.append((self.slot[i], sid, pos[top]) if a < 0 else (seq[a], sid, pos[a] + 1))
        counts = [len(s) for s in seqs]
        width = max(counts)
        if width == 1:  # every node carries its own id alone
            return np.array(own, np.int32).reshape(-1, 1), counts, copies
        ids = np.array([s + [0] * (width - len(s)) for s in seqs], np.int32)  # one conversion, not one per row
        return ids, counts, copies

    def forget(self, keep: int) -> list[tuple[int, int]]:
        """Drop the nodes from ``keep`` on; returns what leaves the cache with them: ``(id,
        from)`` per sequence id, ``from`` -1 for an id one of them opened (all of it), else
        the first dropped position of an id a kept node opened or of a slot's id (its root
        chain's)."""
        gone, seen = [], set()
        seq, opens, pos = self.seq, self._opens, self.pos
        for i in range(keep, len(seq)):
            if seq[i] not in seen:
                seen.add(seq[i])
                gone.append((seq[i], -1 if opens[i] else pos[i]))
        if keep == 0:  # the whole step (every drop): nothing is left
            self.clear()
            return gone
        for i in range(keep, len(seq)):  # the ids the dropped nodes took over go back
            if not opens[i]:
                if self.parent[i] < 0:  # the root chain's first node
                    self._rooted[self.slot[i]] = False
                elif self.parent[i] < keep:
                    self._handed[self.parent[i]] = False
        for lst in (self.seq, self.parent, self.pos, self.tok, self.slot, self._opens, self._handed):
            del lst[keep:]
        self._next_id = 1 + max((s for s, o in zip(self.seq, self._opens) if o), default=self.n_slots - 1)
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
        for lst in (self.seq, self.parent, self.pos, self.tok, self.slot, self._opens, self._handed):
            lst.clear()
        self._rooted = [False] * self.n_slots
        self._next_id = self.n_slots
