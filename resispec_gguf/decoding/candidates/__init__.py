"""Candidate sources: tokens a tree node checks before its draws, from anywhere but the draft.

``base`` holds the protocol every source implements (propose at a path; hear new steps and
commits; finish with the answer; the calibration bins it needs) and the registry that orders
the sources and lays out their bins (``base.layout``; ``calibration.Calibration`` allocates from
it).  One module per source: ``context`` (the request's prompt and output, and the engine's
memory of past answers), ``views`` (the prompt's text as JSON strings quote it), ``forced`` (the
grammar's forced tokens).  ``frame`` is what a generation holds: the request's sources built
through the registry, merged at each node, with their statistics; ``scores`` how the fixed
methods score candidates and the law a node's draws come from beside them.

A new source: one module here with a class that implements ``base.CandidateSource`` and a
``@register`` on it, and one import below (its place in the list is its place in the order
candidates are checked in).  docs/architecture.md shows it with ``views``.

May import: the rest of ``decoding`` below ``generation`` (``protocol``, ``suffix_index``,
``memory``), ``kernels``, ``config``.  Never the generation, ``auto`` or the models.
"""

from . import base, context, views, forced, textdraft  # noqa: F401  (registration order: context, views, forced, textdraft)
from .base import Candidate, CandidateSource, Layout, Request, layout, register, registered
from .frame import Sources
from .scores import FixedScores, without

__all__ = ["Candidate", "CandidateSource", "FixedScores", "Layout", "Request", "Sources", "layout", "register",
           "registered", "without"]
