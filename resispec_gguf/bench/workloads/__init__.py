"""Built-in benchmark workloads: what people ask a local model to do, in six kinds.

* ``code`` — code completion: raw source text the model continues (no chat template).
* ``edit`` — rewrite or modify given code: the answer copies much of its context.
* ``chat`` — general questions in the chat template.
* ``infill`` — editor completion: code files held back from the other sets, each cut at two
  random points (seeded): the model fills in the lines between a prefix and a suffix, as
  through ``/infill`` (needs a model with fill-in-the-middle tokens).
* ``agent`` — a coding agent's requests: chat requests with tools, each holding a source file
  of the running Python's standard library read by a tool call, an edit answered as JSON
  with the whole file in a string (``agent``); they run in sequence
  (``inputs.run_order``).  ``agent-tools``: the same, edits answered by a
  ``write_file`` call (for targets that call tools).

Each item is ``{"prompt": str}``, ``{"messages": [...]}`` or ``{"infill": {"input_prefix": str,
"input_suffix": str}}``, as in a ``--prompts`` file.  The texts live in ``workloads.json``
beside these modules (package data: ``text``, ``infill``), the agent's files in the standard
library (``agent``); the modules only shape them into items.  ``registry`` holds what each
workload is (its items, whether it runs in sequence); the registrations are below, one per
workload.  ``WORKLOADS`` (``{name: items}``) is built when first read.

A new workload: a module here with a function that returns its items, and one ``register``
line below (``sequential=True`` if its items build on one another's history).

Data only: nothing here is tuned on by the engine.  The modules import only the standard
library and one another.
"""

from __future__ import annotations

import functools

from . import agent, infill, text
from .registry import Workload, all_items, is_sequential, lookup, names, register

__all__ = ["WORKLOADS", "Workload", "all_items", "is_sequential", "lookup", "names", "register"]

register(Workload("code", text.code_items))
register(Workload("edit", text.edit_items))
register(Workload("chat", text.chat_items))
register(Workload("infill", infill.items))
register(Workload("agent", agent.agent_items, sequential=True))
register(Workload("agent-tools", functools.partial(agent.agent_items, tool_calls=True), sequential=True))


def __getattr__(name: str):
    if name == "WORKLOADS":  # {name: items}, built on first use (``registry.all_items``)
        return all_items()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
