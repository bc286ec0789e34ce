"""Recurrent and hybrid memory: what a model's memory is, and how a step on it is undone.

A recurrent layer (Mamba's state space, a short convolution, a gated delta-net) keeps one
state per sequence instead of one cell per token, so llama.cpp cannot erase the tail of a
sequence the way it drops KV cells.  Two facts of the vendored llama.cpp make speculation on
such memory exact all the same:

* ``n_rs_seq`` snapshots (an experimental context parameter, honoured by the architectures
  llama.cpp lists as able to roll back: lfm2, qwen35, nemotron_h and a few more; others get
  0): a decode writes, per sequence, the state after each of its last ``n_rs_seq`` tokens, so
  ``llama_memory_seq_rm`` may cut a sequence back by up to ``n_rs_seq`` tokens, once between
  two decodes.  The snapshots come from the last decode only: a cut must keep at least one
  of that decode's tokens (asking for more is accepted by llama.cpp and gives a wrong state).
* ``llama_memory_seq_cp`` of a recurrent sequence shares its state cell, and the next decode
  of either sequence copies the state out first: a checkpoint costs no copy unless it is
  used.  Copying the position range [0, 0) copies no attention cell of a hybrid.

So on such memory the uncommitted nodes of a step form one chain per slot, on the slot's own
sequence (``forest``'s root chain; a batch may hold several slots' chains, each a sequence);
before a slot's first node the backend checkpoints the slot into sequence ``n_slots + slot``;
``commit`` keeps a prefix of the chain by a snapshot cut where the snapshots reach, and else
restores the checkpoint and decodes the kept tokens again (the draft's case: it decodes a
step's chain one level per call).  Either way the sequence ends exactly as a plain decode of
the kept tokens would leave it.  The planner asks for chains only (``max_chain``).

``RecurrentState`` is a mixin of ``model.LlamaModel``, beside ``kv.KVCache``.
"""

from __future__ import annotations

import llama_cpp as _ll

__all__ = ["RS_SNAPSHOTS", "RecurrentState", "memory_kind"]

# per-token snapshots asked for on recurrent and hybrid memory: a target's chain is at most
# this long (auto's deepest tree is 8 levels)
RS_SNAPSHOTS = 8


def memory_kind(model) -> str:
    """"recurrent", "hybrid" or "attention" for a loaded ``llama_model``."""
    if _ll.llama_model_is_hybrid(model):
        return "hybrid"
    if _ll.llama_model_is_recurrent(model):
        return "recurrent"
    return "attention"


class RecurrentState:
    """``LlamaModel``'s recurrent bookkeeping: ``memory`` (the kind), ``rollback`` (the
    snapshots the context keeps: tokens a chain may be cut back by without decoding again),
    ``max_chain`` (the planner's limit, ``protocol.ModelBackend``), and per slot the step's
    checkpoint and the tokens of its last decode."""

    memory: str = "attention"
    rollback: int = 0

    @property
    def recurrent(self) -> bool:
        return self.memory != "attention"

    @property
    def max_chain(self) -> int | None:
        """None: any tree; else the uncommitted nodes form a chain per slot, at most this many
        of them undone by snapshots (0: none, so speculating costs a second decode of the
        kept tokens)."""
        return None if not self.recurrent else self.rollback

    def state_bytes(self) -> int:
        """Bytes of the recurrent states (every sequence's, and their snapshots), as llama.cpp
        reported them when the context was made (``memory_mib``); 0 on attention memory."""
        return int(getattr(self, "memory_mib", {}).get("recurrent", 0.0) * 2**20)

    def memory_text(self) -> str:
        """The memory in words, for the start-up line: its kind and what a step may undo."""
        if not self.recurrent:
            return "attention KV"
        if self.rollback:
            return f"{self.memory} memory, chains of up to {self.rollback} by snapshot rollback"
        return f"{self.memory} memory, no snapshot rollback (plain decoding)"

    def _rs_init(self) -> None:
        self._rs_base: dict[int, int] = {}  # slot -> committed length when its first node came
        self._rs_last: dict[int, int] = {}  # slot -> its nodes in the last decode
        self._rs_pending: set[int] = set()  # slots cut back by a snapshot that no decode has read yet
        self._rs_stale: set[int] = set()  # slots whose checkpoint holds the state before such a cut

    def _rs_check(self, base: int) -> None:
        """``ValueError`` unless the nodes from ``base`` on lie on their slots' root chains."""
        if any(sid >= self.n_slots for sid in self._nodes.seq[base:]):
            self._forget_nodes(base)
            raise ValueError(f"a {self.memory} model's memory holds one chain of nodes per slot, not a tree")

    def _rs_before(self, base: int) -> None:
        """Checkpoint each slot that gets its first node in this decode; count each slot's
        nodes in it."""
        last: dict[int, int] = {}
        for slot in self._nodes.slot[base:]:
            last[slot] = last.get(slot, 0) + 1
        for slot in last:
            if slot not in self._rs_base:
                self._rs_base[slot] = len(self._seqs[slot])
                # a pending cut is llama.cpp's to apply at this decode, to the slot alone: the
                # checkpoint shares the state from before it
                if slot in self._rs_pending:
                    self._rs_stale.add(slot)
                _ll.llama_memory_seq_cp(self._mem, slot, self.n_slots + slot, 0, 0)
        self._rs_pending.difference_update(last)
        self._rs_last.update(last)
        self._rs_last.update({s: 0 for s in self._rs_base if s not in last})

    def _rs_commit(self, paths: dict[int, list[int]]) -> None:
        """Keep ``paths[slot]`` (a prefix of the slot's chain) in each slot, every other node
        gone; the checkpoints go too."""
        nodes = self._nodes
        for slot, base in self._rs_base.items():
            path = paths.get(slot, [])
            decoded = sum(1 for s in nodes.slot if s == slot)
            tokens = [nodes.tok[i] for i in path]
            cut = decoded - len(path)
            if not cut:
                self._seqs[slot].extend(tokens)
            elif (cut <= self.rollback and cut < self._rs_last.get(slot, 0)
                  and _ll.llama_memory_seq_rm(self._mem, slot, base + len(path), -1)):
                self._seqs[slot].extend(tokens)
                self._rs_pending.add(slot)
            else:
                self._rs_restore(slot, base, tokens)
            _ll.llama_memory_seq_rm(self._mem, self.n_slots + slot, -1, -1)
        nodes.clear()
        self._rs_base.clear()
        self._rs_last.clear()
        self._rs_stale.clear()

    def _rs_restore(self, slot: int, base: int, tokens: list[int]) -> None:
        """Put the checkpoint back into ``slot`` (its state, and no attention cell past
        ``base``) and decode ``tokens`` onto it; with a stale checkpoint, evaluate the slot's
        whole sequence again instead (exact, and slow: a step that both follows a snapshot
        cut and decodes its chain in several calls)."""
        seq = self._seqs[slot]
        if slot in self._rs_stale:
            tokens = seq[:base] + tokens
            base = 0
        _ll.llama_memory_seq_cp(self._mem, self.n_slots + slot, slot, 0, 0)
        _ll.llama_memory_seq_rm(self._mem, slot, base if base else -1, -1)
        del seq[base:]
        if tokens:
            self._append_seq(tokens, logits=False, slot=slot)

    def _rs_trim(self, slot: int, keep: int) -> int:
        """Cut ``slot``'s committed sequence to its first ``keep`` tokens; returns the tokens
        it keeps: ``keep``, or 0 on recurrent memory, whose state cannot go back past the
        last decode (the slot is emptied, to be evaluated again)."""
        seq = self._seqs[slot]
        if keep >= len(seq):
            return len(seq)
        if self.recurrent:
            keep = 0
            self._rs_pending.discard(slot)
        _ll.llama_memory_seq_rm(self._mem, slot, keep, -1)
        del seq[keep:]
        return keep
