"""The messages one step passes between a generation and the engine that drives it.

``Generation.plan`` is given a ``Room`` (what the models hold), yields the draft's calls (a
``DraftSync`` re-sync or a ``Decode`` of the frontier) and returns the target's ``Decode``;
``Generation.absorb`` returns a ``Commit`` (which nodes each model keeps).  ``loop`` and
``batch`` turn them into ``ModelBackend`` calls.  Plain frozen records: no logic here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..config import MAX_TREE_NODES

__all__ = ["Commit", "Decode", "DraftSync", "Room", "room_of"]


@dataclass(frozen=True)
class Room:
    """What the models hold when a step is planned (``ModelBackend``'s ``n_ctx``,
    ``n_past`` and ``n_seq_max - 1``); the draft's fields are 0 without a draft.
    ``tree_nodes``: the most non-root nodes the target may evaluate for this request (a
    share of a step that serves several, ``batch``).  ``target_chain`` / ``draft_chain``:
    that model's ``max_chain`` (``protocol.ModelBackend``): None for any tree, else its nodes
    must form one chain (the target's, of at most that many nodes)."""

    target_ctx: int
    target_past: int
    draft_ctx: int = 0
    draft_past: int = 0
    draft_nodes: int = 0
    tree_nodes: int = MAX_TREE_NODES
    target_chain: int | None = None
    draft_chain: int | None = None


def room_of(target, draft, **fields) -> Room:
    """A ``Room`` with the two models' ``max_chain`` (absent: None) besides ``fields``."""
    return Room(target_chain=getattr(target, "max_chain", None),
                draft_chain=getattr(draft, "max_chain", None) if draft is not None else None, **fields)


@dataclass(frozen=True)
class Decode:
    """One decode of uncommitted nodes, as ``ModelBackend.decode`` takes it."""

    tokens: Sequence[int]
    parents: Sequence[int]
    want: np.ndarray | None = None


@dataclass(frozen=True)
class DraftSync:
    """Re-sync the draft's committed sequence to ``tokens`` (``ModelBackend.sync_prefix``)."""

    tokens: list[int]


@dataclass(frozen=True)
class Commit:
    """Which of the step's nodes each model keeps (``ModelBackend.commit``); ``draft`` None:
    the draft evaluated nothing this step and keeps its state."""

    target: list[int]
    draft: list[int] | None = None
