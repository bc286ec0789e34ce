"""The seam between the engine and a model: what the speculative loop needs from one.

``Engine(target, draft)`` drives any object with this shape.  ``backend.LlamaModel`` is the
llama.cpp implementation; the test suite drives the same engine through Markov fakes whose
exact output law is known.  Keep this interface small and stable: code outside the package
relies on it to plug in other models.

Vocabulary: a model maps token ids ``0 .. n_vocab - 1`` to logits rows.  Sequence model:
the *committed* sequence holds ``n_past`` tokens; ``decode`` adds *uncommitted* nodes, each
following either the committed sequence (parent ``-1``) or an earlier uncommitted node of the
same step; ``commit`` appends one chain of them to the committed sequence and forgets the
rest.

No llama_cpp here, no I/O: a ``typing.Protocol`` and its contract.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Constraint", "ConstraintState", "ForcingState", "ModelBackend", "SlotBackend", "SlotStates"]


@runtime_checkable
class ModelBackend(Protocol):
    """A model the engine can draft or verify with.

    Attributes (read-only for the engine):

    * ``n_vocab`` — logits row length.
    * ``n_ctx`` — committed plus uncommitted tokens may never exceed it.
    * ``n_seq_max`` — at most ``n_seq_max - 1`` uncommitted nodes at a time.
    * ``n_past`` — tokens in the committed sequence.
    * ``n_threads`` — CPU threads it decodes with (reported, and part of ``cost_key``).
    * ``max_chain`` (optional; absent means None) — None: the uncommitted nodes may form any
      tree; else they must form one chain per slot, at most ``max_chain`` nodes below its
      root (a recurrent model's memory), and 0 means none: the engine decodes plainly.

    Errors: a decode that would exceed ``n_ctx`` raises ``errors.ContextFullError`` and
    leaves the model as it was before the call; a malformed request raises ``ValueError``.
    """

    n_vocab: int
    n_ctx: int
    n_seq_max: int
    n_threads: int

    @property
    def n_past(self) -> int: ...

    def sync_prefix(self, tokens: Sequence[int]) -> int:
        """Make the committed sequence exactly ``tokens[:-1]``, reusing the longest common
        prefix already there, and drop every uncommitted node.  The last token is left out:
        it is the next step's root, decoded with the first tree.  Returns the number of
        tokens reused.  Raises ``ContextFullError`` when ``tokens`` exceed ``n_ctx``."""
        ...

    def decode(self, tokens: Sequence[int], parents: Sequence[int], want_logits=None) -> Sequence[np.ndarray]:
        """Evaluate new uncommitted nodes in one call; returns their logits rows.

        ``tokens[j]`` follows node ``parents[j]``: ``-1`` for the committed sequence, else the
        index of an uncommitted node (indices count this step's nodes across calls, in
        order, until ``commit``/``drop_uncommitted``; a parent comes before its children).
        ``want_logits``: ``[n]`` bools, default all; the result holds one float32 ``[n_vocab]``
        row per wanted node, in order.  Rows stay valid until the next ``decode``,
        ``commit``, ``drop_uncommitted``, ``sync_prefix`` or ``reset``; the caller never
        writes into them.
        """
        ...

    def commit(self, path: Sequence[int]) -> None:
        """Append the uncommitted nodes ``path`` (a chain starting at a node whose parent is
        ``-1``) to the committed sequence; forget every other uncommitted node."""
        ...

    def drop_uncommitted(self) -> None:
        """Forget every uncommitted node."""
        ...

    def reset(self) -> None:
        """Empty the committed sequence too."""
        ...

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends a generation (end of sequence, end of turn)."""
        ...

    def token_piece(self, token: int) -> bytes:
        """The bytes ``token`` adds to the text (possibly part of a UTF-8 character)."""
        ...

    def cost_key(self) -> str:
        """A stable name for this model file and its settings (threads, offload, context),
        under which ``auto`` caches the measured cost of a decode."""
        ...


@runtime_checkable
class SlotBackend(ModelBackend, Protocol):
    """A ``ModelBackend`` that holds ``n_slots`` committed sequences at once, one per request
    (``decoding.batch`` steps several requests with one decode).  The single-sequence calls above
    act on slot 0, so a model with one slot is a plain ``ModelBackend``.

    ``n_ctx`` is per slot: a slot's committed plus uncommitted tokens never exceed it.  At
    most ``n_seq_max - n_slots`` uncommitted nodes at a time, over all slots together.
    """

    n_slots: int
    n_batch: int  # the most tokens (nodes and prompt tokens) one ``decode_slots`` call holds

    def slot_past(self, slot: int) -> int:
        """Tokens in ``slot``'s committed sequence."""
        ...

    def slot_tokens(self, slot: int) -> list[int]:
        """``slot``'s committed tokens (to place a new prompt where its prefix is cached)."""
        ...

    def sync_slot(self, slot: int, tokens: Sequence[int]) -> int:
        """``sync_prefix`` for ``slot``: its committed sequence becomes ``tokens[:-1]`` (the
        other slots keep theirs); every uncommitted node is dropped.  Returns the tokens
        reused."""
        ...

    def decode_slots(self, tokens: Sequence[int], parents: Sequence[int], slots: Sequence[int],
                     want_logits=None, prefill: dict[int, Sequence[int]] | None = None) -> Sequence[np.ndarray]:
        """``decode`` of nodes of several slots in one call: node ``j`` belongs to slot
        ``slots[j]``; parent ``-1`` is that slot's committed sequence, any other parent is an
        earlier node of the same slot (indices count all slots' nodes of the step).

        ``prefill``: ``{slot: tokens}``, prompt tokens appended to those slots' committed
        sequences by the same call (they give no rows; ``tokens`` may then be empty).  A slot
        with nodes of this step may not prefill.  One call for both is what lets a prompt's
        prefill ride along with the other requests' step."""
        ...

    def commit_slots(self, paths: dict[int, Sequence[int]]) -> None:
        """``commit`` for several slots at once: ``paths[slot]`` (a chain of that slot's
        nodes from its committed sequence) is appended to the slot; every other uncommitted
        node is forgotten."""
        ...


@runtime_checkable
class SlotStates(SlotBackend, Protocol):
    """A ``SlotBackend`` that can also copy a slot's committed state out to host memory and
    back into any of its slots (optional: ``decoding.batch`` keeps a RAM prompt cache,
    ``promptcache``, only for models that have these calls)."""

    def save_slot(self, slot: int):
        """``slot``'s committed state, opaque to the caller but for ``nbytes`` (its size in
        memory); the slot keeps it.  Drops every uncommitted node."""
        ...

    def load_slot(self, slot: int, state, tokens: Sequence[int], keep: int) -> bool:
        """Make ``slot``'s committed sequence the first ``keep`` of ``tokens``, which
        ``state`` (a ``save_slot`` of this model, any slot) holds; whatever the slot held is
        gone.  False when the state could not be put back: the slot is then empty.  Drops
        every uncommitted node."""
        ...


@runtime_checkable
class ConstraintState(Protocol):
    """One request's position in a constraint (a grammar, a JSON schema, a tool-call format).

    The *committed* tokens are those generated so far; ``path`` extends them with uncommitted
    tree tokens.  The answer for a path must depend on the committed tokens and the path
    alone, never on other paths asked about before (siblings must not leak into each other).
    """

    def mask(self, path: Sequence[int]) -> np.ndarray:
        """The tokens allowed after the committed tokens + ``path``: a packed int32 bitmask
        (``sampling.mask_logits``), never empty (a finished constraint allows its end
        tokens).  ``path`` holds only tokens that earlier masks allowed."""
        ...

    def advance(self, tokens: Sequence[int]) -> None:
        """Commit ``tokens`` (each allowed by the mask before it)."""
        ...

    def is_stopped(self) -> bool:
        """True when the committed tokens complete the constraint and only an end token
        may follow: the reply is over."""
        ...


@runtime_checkable
class ForcingState(ConstraintState, Protocol):
    """A ``ConstraintState`` that can also tell the tokens it forces (optional: the engine
    uses them as free draft candidates where a state has the method, ``decoding.candidates.forced``)."""

    def forced(self, path: Sequence[int]) -> Sequence[int]:
        """Tokens that spell the bytes the constraint forces after the committed tokens +
        ``path`` (empty when the next bytes are not forced), each allowed by the mask before
        it.  A function of the path alone, like ``mask``; one tokenisation among those the
        masks may allow, so the engine verifies them and never takes them as decided."""
        ...


@runtime_checkable
class Constraint(Protocol):
    """A compiled constraint; ``start()`` gives a fresh state for one request."""

    def start(self) -> ConstraintState: ...
