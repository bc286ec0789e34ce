"""KV-cache bookkeeping: each slot's committed sequence, reusing a cached prefix, committing a
step's path and dropping the rest, saving a slot's state to RAM and loading it back, the
cache's size.  ``KVCache`` is a mixin of ``model.LlamaModel``; the decodes it makes
(``_append_seq``) are ``batches``'s."""

from __future__ import annotations

import ctypes

import numpy as np

import llama_cpp as _ll

from ...errors import ContextFullError


class KVCache:
    """``LlamaModel``'s committed sequences per slot (``_seqs``) and this step's uncommitted
    nodes (``_nodes``, a ``forest.Forest``) in llama.cpp's memory (``_mem``)."""

    @property
    def cached(self) -> list[int]:
        """Slot 0's committed tokens."""
        return self._seqs[0]

    @property
    def n_past(self) -> int:
        return len(self._seqs[0])

    def slot_past(self, slot: int) -> int:
        return len(self._seqs[slot])

    def slot_tokens(self, slot: int) -> list[int]:
        return list(self._seqs[slot])

    def kv_bytes(self) -> int:
        """Bytes of the KV cache as llama.cpp reported it when the context was made (its
        attention layers alone on a hybrid model, 0 on a recurrent one: ``memory_mib``); else
        keys and values (F16, llama.cpp's default) of every layer for every cell of the
        context (``n_slots * n_ctx`` cells)."""
        logged = getattr(self, "memory_mib", {})
        if "kv" in logged or self.recurrent:
            return int(logged.get("kv", 0.0) * 2**20)
        layers = int(_ll.llama_model_n_layer(self._model))
        head_dim = int(_ll.llama_model_n_embd(self._model)) // max(1, int(_ll.llama_model_n_head(self._model)))
        cells = int(_ll.llama_n_ctx(self._ctx))
        return 2 * layers * int(_ll.llama_model_n_head_kv(self._model)) * head_dim * 2 * cells

    def sync_prefix(self, tokens: list[int]) -> int:
        """Make sequence 0 hold ``tokens[:-1]`` plus nothing else; returns tokens reused.

        The last token is left out on purpose: it is the next step's root, decoded together
        with the first tree so that its logits come from that call.
        """
        return self.sync_slot(0, tokens)

    def sync_slot(self, slot: int, tokens: list[int]) -> int:
        """``sync_prefix`` for slot ``slot``'s sequence; the other slots keep theirs."""
        self.drop_uncommitted()
        cached = self._seqs[slot]
        _ll.llama_memory_seq_rm(self._mem, slot, len(cached), -1)  # anything an interrupt left behind
        want = list(tokens[:-1])
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"the prompt ({len(tokens)} tokens) does not fit the context ({self.n_ctx} tokens)")
        common = 0
        for a, b in zip(cached, want):
            if a != b:
                break
            common += 1
        common = self._rs_trim(slot, common)  # recurrent memory keeps all or nothing
        try:
            self._append_seq(want[common:], logits=False, slot=slot)
        except ContextFullError:
            _ll.llama_memory_seq_rm(self._mem, slot, len(cached), -1)
            raise
        return common

    def save_slot(self, slot: int) -> np.ndarray:
        """``slot``'s committed KV state copied to host memory (llama.cpp's sequence state:
        each cell's position and keys/values, uint8 bytes), for ``load_slot`` into any slot of
        this model later.  Drops the uncommitted nodes first."""
        self.drop_uncommitted()
        _ll.llama_memory_seq_rm(self._mem, slot, len(self._seqs[slot]), -1)  # anything an interrupt left behind
        size = int(_ll.llama_state_seq_get_size_ext(self._ctx, slot, _ll.LLAMA_STATE_SEQ_FLAGS_NONE))
        state = np.empty(size, np.uint8)
        n = _ll.llama_state_seq_get_data_ext(self._ctx, state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size,
                                             slot, _ll.LLAMA_STATE_SEQ_FLAGS_NONE)
        return state[:n]

    def load_slot(self, slot: int, state: np.ndarray, tokens, keep: int) -> bool:
        """Put a ``save_slot`` state holding ``tokens`` into ``slot`` (whatever it held is
        gone) and keep its first ``keep`` tokens.  False when llama.cpp finds no room for its
        cells, or when recurrent memory would have to go back (the slot is then empty:
        prefill it as usual)."""
        self.drop_uncommitted()
        seq = self._seqs[slot]
        seq.clear()
        _ll.llama_memory_seq_rm(self._mem, slot, -1, -1)
        ok = _ll.llama_state_seq_set_data_ext(self._ctx, state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                              state.nbytes, slot, _ll.LLAMA_STATE_SEQ_FLAGS_NONE)
        if not ok:
            _ll.llama_memory_seq_rm(self._mem, slot, -1, -1)
            return False
        seq.extend(int(t) for t in tokens)
        return self._rs_trim(slot, keep) == keep

    def _overfull(self) -> bool:
        """Whether a slot's committed plus uncommitted tokens exceed its context."""
        if self.n_slots == 1:
            return self.n_past + len(self._nodes) > self.n_ctx
        held = [len(seq) for seq in self._seqs]
        for slot in self._nodes.slot:
            held[slot] += 1
        return max(held) > self.n_ctx

    def _forget_nodes(self, keep: int) -> None:
        for sid, start in self._nodes.forget(keep):
            if sid < self.n_slots:  # a slot's root chain: its committed cells stay
                start = max(start, len(self._seqs[sid]))
            _ll.llama_memory_seq_rm(self._mem, sid, start, -1)

    def commit(self, path) -> None:
        """Append the uncommitted nodes ``path`` (a chain from a -1-parent node) to sequence
        0 and drop every other uncommitted node."""
        self.commit_slots({0: path})

    def commit_slots(self, paths) -> None:
        """``commit`` for several slots: ``paths[slot]`` joins that slot's sequence."""
        paths = {int(slot): self._nodes.chain(path, int(slot)) for slot, path in paths.items()}
        if self.recurrent:  # a chain per slot, cut back by snapshot or restored (``recurrent``)
            return self._rs_commit(paths)
        ids = self._nodes.seq
        for slot, path in paths.items():
            if path:
                seq = self._seqs[slot]
                on = 0  # the path's nodes on the slot's root chain (they carry its id already)
                while on < len(path) and ids[path[on]] == slot:
                    on += 1
                if on < len(path):  # the rest of the root chain leaves the slot, the rest of the path joins
                    _ll.llama_memory_seq_rm(self._mem, slot, len(seq) + on, -1)
                    _ll.llama_memory_seq_cp(self._mem, ids[path[-1]], slot, len(seq) + on, len(seq) + len(path))
                seq.extend(self._nodes.tok[i] for i in path)
        self.drop_uncommitted()  # and the root chain past a path that ends on it leaves the slot here

    def drop_uncommitted(self) -> None:
        # Every id in the cache but the slots' is one of this step's nodes', so removing those
        # ids is llama_memory_seq_keep of the slots; it is also several times cheaper than
        # seq_keep(0) for one slot, which re-indexes every committed cell (a cost that grows
        # with the context), where seq_rm touches only the cells that carry the id.
        if len(self._nodes):
            if self.recurrent:
                return self._rs_commit({})
            self._forget_nodes(0)

    def reset(self) -> None:
        self.drop_uncommitted()
        _ll.llama_memory_clear(self._mem, True)
        for seq in self._seqs:
            seq.clear()
