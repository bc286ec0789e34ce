"""Batches and decodes: the ``llama_batch`` over NumPy buffers, one ``llama_decode`` of a
forest of uncommitted nodes (and other slots' prefills), decoding a sequence in batch-sized
chunks, and the logits rows a decode gives (``LogitsRows``, read-only views of llama.cpp's
buffer).  ``Batches`` is a mixin of ``model.LlamaModel``; the KV bookkeeping it relies on
(``_forget_nodes``, ``_overfull``, ``reset``) is ``kv``'s."""

from __future__ import annotations

import ctypes

import numpy as np

import llama_cpp as _ll

from ...errors import ContextFullError
from .native import _logits_address, _readonly_floats


class LogitsRows:
    """Logits of one decode, row by row on demand (float32 ``[V]`` each, read-only views of
    llama.cpp's own buffer: nothing is copied).

    Valid until the model's next decode; asking for a row later raises instead of returning
    garbage, and a row taken earlier must not be read after the next decode.
    """

    def __init__(self, model, generation, batch_index):
        self._model = model
        self._generation = generation
        self._index = batch_index  # [n_out] batch positions of the rows (a range when every node has one)

    def __len__(self):
        return len(self._index)

    def __getitem__(self, i: int) -> np.ndarray:
        m = self._model
        if self._generation == m._rows_of == m._generation:  # this decode's view is made already
            return m._rows[i]
        return m._row(self._generation, i, len(self._index))


class Batches:
    """``LlamaModel``'s batch building, decodes and logits rows."""

    def _new_batch(self):
        """A ``llama_batch`` of ``n_batch`` tokens pointing into buffers owned by NumPy."""
        n, s = self.n_batch, self.n_seq_max
        self._tok = np.zeros(n, np.int32)
        self._pos = np.zeros(n, np.int32)
        self._nseq = np.zeros(n, np.int32)
        self._seq = np.zeros((n, s), np.int32)
        self._out = np.zeros(n, np.int8)
        self._seq_ptrs = (self._seq.ctypes.data + np.arange(n, dtype=np.uint64) * self._seq.strides[0]).astype(np.uint64)
        batch = _ll.llama_batch()
        batch.token = self._tok.ctypes.data_as(ctypes.POINTER(_ll.llama_token))
        batch.embd = ctypes.POINTER(ctypes.c_float)()
        batch.pos = self._pos.ctypes.data_as(ctypes.POINTER(_ll.llama_pos))
        batch.n_seq_id = self._nseq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        batch.seq_id = self._seq_ptrs.ctypes.data_as(ctypes.POINTER(ctypes.POINTER(_ll.llama_seq_id)))
        batch.logits = self._out.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        return batch

    def _decode_batch(self, n: int) -> None:
        """One ``llama_decode`` of the batch's first ``n`` tokens, waited for: on a GPU
        llama.cpp returns once the work is queued and waits at the first logits read, which
        would put the device's time into the host work after every decode (``bench``'s
        overhead per step, and the cost curves ``auto`` measures); every caller reads the
        rows next anyway."""
        self._batch.n_tokens = n
        self._generation += 1
        rc = _ll.llama_decode(self._ctx, self._batch)
        if rc == 1:
            raise ContextFullError(f"the context ({self.n_ctx} tokens) is full")
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc}")
        _ll.llama_synchronize(self._ctx)

    def _logits(self, n_out: int) -> np.ndarray:
        ptr = _ll.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab)).copy()  # [n_out, V]

    def _row(self, generation: int, i: int, n_out: int) -> np.ndarray:
        """Output row ``i`` of the decode ``generation`` (of ``n_out`` rows): a read-only view
        of llama.cpp's buffer, which holds the rows in batch order.  One view of the whole
        buffer per decode: viewing each row on its own costs ~5 us at 152k tokens."""
        if generation != self._generation:
            raise RuntimeError("logits rows are only readable until the next decode")
        if self._rows_of != generation:
            self._rows, self._rows_of = self._logits_view(n_out), generation
        return self._rows[i]

    def _logits_view(self, n_out: int) -> np.ndarray:
        """llama.cpp's logits buffer as a read-only ``[n_out, V]`` view, kept per ``n_out``
        while the buffer stays at the same address (a view is its address and shape, nothing
        more): a step's few row counts recur, and a new view costs ~10 us after a decode."""
        address = _logits_address(self._ctx)
        if address != self._views_at:
            self._views, self._views_at = {}, address
        rows = self._views.get(n_out)
        if rows is None:
            rows = self._views[n_out] = _readonly_floats(address, (n_out, self.n_vocab))  # [n_out, V]
        return rows

    def decode(self, tokens, parents, want_logits=None) -> "LogitsRows":
        """Decode new uncommitted nodes in one ``llama_decode``; returns their logits.

        Returns lazily copied rows (see ``LogitsRows``).  ``tokens``: ``[n]`` token ids.
        ``parents``: ``[n]`` for each node the index of its parent among this step's nodes
        (earlier calls first, then this call's, in order), or -1 for a node that follows the
        committed sequence directly.  Parents must come before their children.
        ``want_logits``: ``[n]`` bools (default all); rows are indexed by position among the
        nodes that want logits.  Node indices continue across calls until ``commit`` or
        ``drop_uncommitted``.
        """
        return self.decode_slots(tokens, parents, None, want_logits)

    def decode_slots(self, tokens, parents, slots, want_logits=None, prefill=None) -> "LogitsRows":
        """``decode`` of nodes of several slots (``slots[j]``: node j's; None: all slot 0).
        ``prefill``: ``{slot: tokens}`` appended to those slots' committed sequences in the
        same ``llama_decode`` (no rows; a slot with nodes of this step may not prefill)."""
        prefill = {int(s): list(p) for s, p in (prefill or {}).items() if len(p)}
        n = len(tokens)
        m = n + sum(len(p) for p in prefill.values())
        base = len(self._nodes)
        if n:
            pasts = [len(seq) for seq in self._seqs]
            depth_end = self._nodes.add(tokens, parents, pasts, n_batch=self.n_batch - (m - n),
                                        n_seq_max=self.n_seq_max, slots=slots)
            if depth_end > self.n_ctx or self._overfull():
                self._forget_nodes(base)
                raise ContextFullError(f"the context ({self.n_ctx} tokens) is full")
            if self.recurrent:
                self._rs_check(base)
        try:
            self._check_prefill(prefill, m)
        except Exception:
            self._forget_nodes(base)
            raise
        if n:
            if self.recurrent:
                self._rs_before(base)
            ids, counts, copies = self._nodes.cells(base)
            for src, dst, end in copies:
                _ll.llama_memory_seq_cp(self._mem, src, dst, -1, end)
            self._tok[:n] = tokens
            self._pos[:n] = self._nodes.pos[base:]
            self._nseq[:n] = counts
            self._seq[:n, : ids.shape[1]] = ids
        if want_logits is None:
            self._out[:n] = 1
            rows = range(n)
        else:
            out = np.asarray(want_logits, bool)
            self._out[:n] = out
            rows = np.flatnonzero(out)
        at = n
        for slot, chunk in prefill.items():  # after the nodes: their rows stay first in the buffer
            k, past = len(chunk), len(self._seqs[slot])
            self._tok[at:at + k] = chunk
            self._pos[at:at + k] = np.arange(past, past + k)
            self._nseq[at:at + k] = 1
            self._seq[at:at + k, 0] = slot
            self._out[at:at + k] = 0
            at += k
        try:
            self._decode_batch(m)
        except Exception:
            self._forget_nodes(base)
            for slot in prefill:
                _ll.llama_memory_seq_rm(self._mem, slot, len(self._seqs[slot]), -1)
            raise
        for slot, chunk in prefill.items():
            self._seqs[slot].extend(int(t) for t in chunk)
        return LogitsRows(self, self._generation, rows)

    def _check_prefill(self, prefill: dict, m: int) -> None:
        """``decode_slots``'s ``prefill`` fits: one batch of ``m`` tokens in all, each slot's
        context, and no slot that has nodes of this step."""
        if m == 0:
            raise ValueError("nothing to decode")
        if m > self.n_batch:
            raise ValueError(f"{m} tokens exceed the batch size {self.n_batch}")
        busy = set(self._nodes.slot)
        for slot, chunk in prefill.items():
            if not 0 <= slot < self.n_slots or slot in busy:
                raise ValueError(f"slot {slot} cannot prefill in this decode")
            if len(self._seqs[slot]) + len(chunk) > self.n_ctx:
                raise ContextFullError(f"the context ({self.n_ctx} tokens) is full")

    def logits_of_sequence(self, tokens) -> np.ndarray:
        """Logits after each token of ``tokens`` from a clean cache (test/analysis helper).

        Clears the cache first; afterwards the cache holds ``tokens``.  Returns ``[n, V]``.
        """
        self.reset()
        rows = self._append_seq(list(tokens), logits=True)
        return np.concatenate(rows) if rows else np.zeros((0, self.n_vocab), np.float32)

    def _append_seq(self, tokens: list[int], logits: bool, slot: int = 0) -> list[np.ndarray]:
        """Decode ``tokens`` onto ``slot``'s committed sequence in batch-sized chunks;
        returns the logits blocks ``[n, V]`` when ``logits``."""
        rows = []
        seq = self._seqs[slot]
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            n = len(chunk)
            self._tok[:n] = chunk
            self._pos[:n] = np.arange(len(seq), len(seq) + n)
            self._nseq[:n] = 1
            self._seq[:n, 0] = slot
            self._out[:n] = int(logits)
            self._decode_batch(n)
            if logits:
                rows.append(self._logits(n))
            seq.extend(chunk)
        return rows
