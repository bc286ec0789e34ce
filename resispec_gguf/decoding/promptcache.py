"""A host-memory prompt cache across slots: saved slot states keyed by the tokens they hold.

When a new prompt evicts what a slot held (``batch.Batch.admit``), the slot's committed
state is saved here first (``SlotBackend.save_slot``: opaque, for a llama.cpp model its
KV cells copied to RAM); a later prompt that shares a longer prefix with an entry than with
any free slot gets that entry restored into its slot (``load_slot``), trimmed to the common
prefix, and prefills only the rest.  Editors resending nearly the same prompt, chat
front-ends alternating conversations and benchmarks repeating prompts then skip most of
their prefill even when their prompt lands in a slot that held another one.

Entries belong to a *role* (``"target"`` or ``"draft"``: each model's states restore only
into that model).  The total of the states' bytes stays within ``max_bytes``, least recently
used first out; an entry shorter than ``min_tokens`` is not kept (its prefill is cheap), nor
one whose tokens another entry of its role already starts with (that one restores them
too); a new entry replaces those of its role that it starts with.

Exactness: a restored state is the very keys and values the same tokens had when saved, so
what follows is evaluated as after a prefill (to float round-off where the cells sit
elsewhere in the cache).  ``reuse_slot`` is the one place that saves and restores (for
``batch``'s slots and ``loop``'s one sequence alike), through the model's ``save_slot`` /
``load_slot``; the cache itself holds states and never calls a model.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["MIN_GAIN", "MIN_TOKENS", "PromptCache", "common_prefix", "reuse_slot"]

# shorter prompts are not worth a save: their prefill is about as cheap as the copy
MIN_TOKENS = 32
# the fewest tokens a save or a restore must spare: a restore copies the whole entry back
# (under a millisecond for 300 tokens of the default target) and a save the whole slot
# (~30 ms for 300), where one token of prefill costs milliseconds on a CPU; below this the
# copy is not worth making (a chat's next turn drops the one or two tokens after its reply)
MIN_GAIN = 8


@dataclass(eq=False)
class Entry:
    """A saved state: ``tokens`` (int64 array) that ``state`` holds, ``nbytes`` its size."""

    role: str
    tokens: np.ndarray
    state: object
    nbytes: int


class PromptCache:
    """Saved slot states, least recently used first out (module docstring)."""

    def __init__(self, max_bytes: int, min_tokens: int = MIN_TOKENS, min_gain: int = MIN_GAIN):
        if max_bytes < 0 or min_tokens < 1 or min_gain < 1:
            raise ValueError(f"max_bytes must be >= 0, min_tokens and min_gain >= 1, got {max_bytes}, {min_tokens}, "
                             f"{min_gain}")
        self.max_bytes = int(max_bytes)
        self.min_tokens = int(min_tokens)
        self.min_gain = int(min_gain)
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # oldest first
        self._next = 0
        self.used_bytes = 0
        self.hits = 0  # restores made (``took``), one per model
        self.hit_tokens = 0  # tokens they spared

    def __len__(self) -> int:
        return len(self._entries)

    def wants(self, role: str, tokens: Sequence[int]) -> bool:
        """Whether ``put`` would keep ``tokens`` (so that the caller saves a state only then):
        long enough, and no entry of ``role`` starts with them (that one is refreshed)."""
        if self.max_bytes == 0 or len(tokens) < self.min_tokens:
            return False
        toks = np.asarray(tokens, np.int64)
        for key, e in self._entries.items():
            if e.role == role and len(e.tokens) >= len(toks) and common_prefix(e.tokens, toks) == len(toks):
                self._entries.move_to_end(key)
                return False
        return True

    def put(self, role: str, tokens: Sequence[int], state, nbytes: int) -> None:
        """Keep ``state`` (``nbytes`` bytes, holding ``tokens``) for ``role``; drops the
        entries of ``role`` it starts with, then the least recently used until all fit.  A
        state larger than the whole cache is not kept."""
        if not self.wants(role, tokens) or nbytes > self.max_bytes:
            return
        toks = np.asarray(tokens, np.int64)
        for key in [k for k, e in self._entries.items()
                    if e.role == role and len(e.tokens) < len(toks) and common_prefix(e.tokens, toks) == len(e.tokens)]:
            self._drop(key)
        while self._entries and self.used_bytes + nbytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[self._next] = Entry(role, toks, state, int(nbytes))
        self._next += 1
        self.used_bytes += int(nbytes)

    def best(self, role: str, tokens: Sequence[int]) -> tuple[Entry | None, int]:
        """The entry of ``role`` sharing the longest prefix with ``tokens`` (the most recent
        on ties) and that prefix's length; ``(None, 0)`` when none shares any."""
        toks = np.asarray(tokens, np.int64)
        best, best_common = None, 0
        for e in reversed(self._entries.values()):
            if e.role == role:
                common = common_prefix(e.tokens, toks)
                if common > best_common:
                    best, best_common = e, common
        return best, best_common

    def took(self, entry: Entry, tokens: int) -> None:
        """``entry`` was restored, sparing ``tokens`` of prefill: it is the most recently used."""
        for key, e in self._entries.items():
            if e is entry:
                self._entries.move_to_end(key)
                break
        self.hits += 1
        self.hit_tokens += int(tokens)

    def clear(self) -> None:
        """Drop every saved state (its counters stay)."""
        self._entries.clear()
        self.used_bytes = 0

    def _drop(self, key: int) -> None:
        self.used_bytes -= self._entries.pop(key).nbytes


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token sequences (lists or int64 arrays)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def reuse_slot(ram: PromptCache | None, model, role: str, slot: int, want: Sequence[int]) -> int:
    """The tokens of ``want`` that ``model``'s ``slot`` will hold before its prefill: its own
    common prefix, or a longer one restored from the RAM prompt cache ``ram``, by at least
    ``ram.min_gain``.  What the slot held is saved there first when ``want`` evicts at least
    ``ram.min_gain`` of it (a chat's next turn, which drops only the token or two after
    the last reply, saves nothing: copying a long history costs more than their
    prefill).  ``role``: the model's name in ``ram`` ("target" or "draft").  ``model``: a
    ``protocol.SlotBackend``; the cache is used only where it is a ``SlotStates``."""
    held = model.slot_tokens(slot)
    own = common_prefix(held, want)
    if ram is None or not hasattr(model, "save_slot"):
        return own
    if len(held) - own >= ram.min_gain and ram.wants(role, held):
        state = model.save_slot(slot)
        ram.put(role, held, state, state.nbytes)
    entry, common = ram.best(role, want)
    if entry is None or common < own + ram.min_gain:
        return own
    if not model.load_slot(slot, entry.state, entry.tokens, common):
        return 0
    ram.took(entry, common - own)
    return common
