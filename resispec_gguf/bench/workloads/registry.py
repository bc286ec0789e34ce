"""The registry of the benchmark workloads: each is a name, a function that builds its items,
and whether it runs in sequence.

A sequential workload (the agent's tool loop) runs each method's whole sequence of items in
turn, started cold, so that every method sees the same history; the others run item by item,
every method in turn (``inputs.run_order``).  Items carry the ``kind`` of the workload they
belong to, so a list of items read back from a ``--prompts`` file runs as its workload
would (``is_sequential``).  The items are built once, when first asked for: importing the
package reads no file.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

__all__ = ["Workload", "register", "lookup", "names", "all_items", "is_sequential"]


@dataclasses.dataclass(frozen=True)
class Workload:
    """A built-in workload: ``items()`` builds its items (``{"prompt"}``, ``{"messages"}`` or
    ``{"infill"}`` dicts, as a ``--prompts`` file's); ``sequential``: its items run in
    sequence per method, with the history of the ones before."""

    name: str
    items: Callable[[], list[dict]]
    sequential: bool = False


_REGISTERED: dict[str, Workload] = {}
_ITEMS: dict[str, list[dict]] | None = None


def register(workload: Workload) -> Workload:
    """Add a workload under its name (listed in the order registered); returns it."""
    if workload.name in _REGISTERED:
        raise ValueError(f"workload {workload.name!r} is registered already")
    _REGISTERED[workload.name] = workload
    if _ITEMS is not None:
        _ITEMS[workload.name] = workload.items()
    return workload


def lookup(name: str) -> Workload | None:
    """The workload registered as ``name``; None for an unknown name."""
    return _REGISTERED.get(name)


def names() -> list[str]:
    """The registered workloads' names, in the order they were registered."""
    return list(_REGISTERED)


def all_items() -> dict[str, list[dict]]:
    """``{name: items}`` of every registered workload, built on the first call; later calls
    return the same dict."""
    global _ITEMS
    if _ITEMS is None:
        _ITEMS = {name: w.items() for name, w in _REGISTERED.items()}
    return _ITEMS


def is_sequential(items) -> bool:
    """Whether a list of items runs in sequence: every item's ``kind`` names a sequential
    workload (the agent's items, whichever of its workloads or a prompt file they came from)."""
    return bool(items) and all(getattr(lookup(item.get("kind")), "sequential", False) for item in items)
