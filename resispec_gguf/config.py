"""Settings: a few frozen, validated dataclasses.  The CLI, the server and ``/set`` are built
from these field lists; nothing else redefines their defaults or bounds.

No model, no I/O, no llama_cpp here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

SPEC_METHODS = ("chain", "specinfer", "rrs", "resispec")
METHODS = ("none",) + SPEC_METHODS + ("auto",)
TREE_POLICIES = ("budget", "static")

# The widest tree a step may build (target rows per verification call).  It also sizes the
# backend's sequence-id table.
MAX_TREE_NODES = 96

# The smallest context a model can be opened with.  ``Engine.load`` gives each context
# MAX_TREE_NODES + 2 sequences (the committed one, the tree's root and its nodes), and
# llama.cpp needs one output row per sequence in a batch, which never exceeds the context;
# below this it aborts the whole process.  (llama.cpp then rounds the context up to a
# multiple of 256 cells anyway.)
MIN_CTX = MAX_TREE_NODES + 2


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are sampled: identical for plain and speculative decoding.

    ``temperature`` 0 is greedy.  ``top_k`` 0 and ``top_p`` 1 and ``min_p`` 0 disable those
    filters.  ``seed`` None draws a fresh seed per request.  ``stop``: strings that end the
    generation (not included in the output).
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    max_tokens: int = 512
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop or ()))
        _check(all(isinstance(s, str) and s for s in self.stop), "stop must be non-empty strings")
        _check(0.0 <= float(self.temperature) <= 100.0, f"temperature must be in [0, 100], got {self.temperature}")
        _check(int(self.top_k) >= 0, f"top_k must be >= 0, got {self.top_k}")
        _check(0.0 < float(self.top_p) <= 1.0, f"top_p must be in (0, 1], got {self.top_p}")
        _check(0.0 <= float(self.min_p) < 1.0, f"min_p must be in [0, 1), got {self.min_p}")
        _check(int(self.max_tokens) >= 1, f"max_tokens must be >= 1, got {self.max_tokens}")
        _check(self.seed is None or int(self.seed) >= 0, f"seed must be >= 0, got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def replace(self, **changes) -> "SamplingParams":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DraftParams:
    """How the draft tree is built and verified.

    ``method``: none (plain target decoding), chain, specinfer, rrs, resispec, or auto (the
    engine's cost model picks a tree shape or plain decoding per step, see ``autotune``).  ``draws``: K candidates drawn at each expanded node
    (chain uses 1).  ``depth``: maximum tree depth.  ``budget``: maximum tree nodes per step
    (the ``budget`` policy).  ``draft_support``: the draft distribution's support cap.
    ``policy``: ``budget`` (best-first by estimated reach) or ``static`` (every distinct child
    expanded to ``depth``).  ``lookup``: every expanded node also gets a context-lookup
    candidate (the token that followed the longest earlier match of its context), checked
    before the draws; with no draft model the tree is lookup chains alone.  ``auto`` always
    considers lookup, and treats ``draws``, ``depth`` and ``budget`` as upper bounds.
    """

    method: str = "auto"
    draws: int = 4
    depth: int = 5
    budget: int = 12
    draft_support: int = 64
    policy: str = "budget"
    lookup: bool = False

    def __post_init__(self):
        _check(self.method in METHODS, f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        object.__setattr__(self, "lookup", bool(self.lookup))
        _check(self.policy in TREE_POLICIES, f"policy must be one of {', '.join(TREE_POLICIES)}, got {self.policy!r}")
        _check(1 <= int(self.draws) <= 64, f"draws must be in [1, 64], got {self.draws}")
        _check(1 <= int(self.depth) <= 32, f"depth must be in [1, 32], got {self.depth}")
        _check(1 <= int(self.budget) <= MAX_TREE_NODES, f"budget must be in [1, {MAX_TREE_NODES}], got {self.budget}")
        _check(1 <= int(self.draft_support) <= 4096, f"draft_support must be in [1, 4096], got {self.draft_support}")
        _check(
            self.method != "rrs" or int(self.draws) <= int(self.draft_support),
            "rrs draws without replacement: draws must not exceed draft_support",
        )

    @property
    def k(self) -> int:
        """Draws per expanded node for this method."""
        return 1 if self.method == "chain" else int(self.draws)

    def replace(self, **changes) -> "DraftParams":
        return dataclasses.replace(self, **changes)
