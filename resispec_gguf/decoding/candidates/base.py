"""The candidate-source protocol and its registry.

A *candidate source* proposes, at a node of a step's tree, tokens that were not drawn from the
draft's q: the request's context and the engine's memory of past answers
(``candidates.context``), the prompt's views (``candidates.views``), the grammar's forced tokens
(``candidates.forced``).  Each token comes with the calibration bin ``auto`` learns its
acceptance under (a bin of the source's own, ``Candidate.bin``) and, where the source has one, a
probability ``q`` (a drafter's; the built-in sources are deterministic and give None).

The contract (``docs/verification.md``, "Deterministic candidates"): everything a source
proposes at a node is a function of the node's path and of what the source was told before the
step (the prompt, the committed tokens, the state of the stores it reads as the node is
proposed), fixed before that node draws anything; it never looks at a draw or a uniform.  Then
the verifier checks its candidates first, in order, and the output keeps exactly the target's
law.  A source never spends a uniform: the request's stream is the frame's.

A source is a class with

* ``name`` (its registry key), ``priors`` (one prior acceptance chance per calibration bin it
  needs: ``Calibration`` allocates the range, ``layout``), ``arm`` ("lookup": its candidates
  make the chains of ``auto``'s lookup arm and continue copy runs; "grammar": the grammar arm's),
  ``leading`` (its bins that make the lookup arm's prior, ``Calibration.mean_lookup``),
  ``apart`` (its bins ``auto`` keeps away from a draft's draws, ``Auto.lookup_worth``) and
  ``ladders`` (runs of its bins, each a copy run longer than the one before: ``auto`` believes
  a bin at least as much as the bins below it on its ladder, ``Calibration.lookup``);
* ``build(request)``: the request's instance, None when it has nothing to offer it;
* ``propose(path, run)``: the ``Candidate``s after the committed tokens + ``path`` (``run``:
  the tokens in a row, ending there, that a lookup source's leading candidate predicted);
* ``new_step()`` (a step begins: the committed tokens may have moved), ``commit(tokens)`` (the
  request emitted them), ``ahead()`` (how many tokens it proposes as one chain at the root
  this step: the grammar arm weighs it), ``finish(answer)`` (the reply is over).

An *indexed* source (``indexed = True``, no bins) proposes nothing itself: its
``sequences(request)``, token sequences that are functions of the prompt alone, join the
request's own index beside the prompt (``context.ContextSource``), where a node matches the
longest suffix over all of them at once (``views``: measured better than a source of its own).

A new source is one module with such a class and one ``register`` (the package's ``__init__``
imports it).  Stores that outlive a request (the memory of past answers) are built once by the
engine and handed to every request in ``Request.stores``; a source that reads or fills one
makes the request take part in the seed ledger (``decoding.seeding``, ``Engine.seed_key``).

Pure Python; imports nothing of the package but ``config`` and ``protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, NamedTuple, Protocol, Sequence

from ...config import DraftParams
from ..protocol import ConstraintState

__all__ = ["Candidate", "CandidateSource", "Layout", "Request", "TextCodec", "indexed_sequences", "layout", "register",
           "registered"]


class Candidate(NamedTuple):
    """One proposed token: ``bin``, the source's own calibration bin (0 .. len(priors) - 1);
    ``q``, its probability where the source has one (None for every built-in source: they are
    deterministic).  The frame hands ``(token, global bin)`` on to the tree and ``auto``, which
    scores a candidate by its bin's learnt rate; ``q`` is there for a drafter-like source, and
    nothing reads it yet."""

    token: int
    bin: int
    q: float | None = None


class TextCodec(Protocol):
    """The target's tokenizer, for sources that read the prompt's text (the engine)."""

    def detokenize(self, tokens) -> bytes: ...

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]: ...

    def token_piece(self, token: int) -> bytes: ...


@dataclass(frozen=True)
class Request:
    """What a source is built from: the prompt's tokens, the request's draft settings and
    constraint state, the stores spanning requests it may read (by name: ``"memory"``; empty
    when ``dp.use_memory`` is off) and the target's tokenizer (None: a backend without one)."""

    prompt: Sequence[int]
    dp: DraftParams
    constraint: ConstraintState | None = None
    stores: Mapping[str, Any] = field(default_factory=dict)
    text: TextCodec | None = None


class CandidateSource(Protocol):
    """See the module docstring.  An indexed source (``indexed = True``) has
    ``sequences(request)`` instead of ``build`` and ``propose``."""

    name: ClassVar[str]
    priors: ClassVar[tuple[float, ...]]
    arm: ClassVar[str]
    leading: ClassVar[tuple[int, ...]]
    apart: ClassVar[frozenset[int]]
    ladders: ClassVar[tuple[tuple[int, ...], ...]]

    @classmethod
    def build(cls, request: Request) -> "CandidateSource | None": ...

    def propose(self, path: tuple[int, ...], run: int) -> list[Candidate]: ...

    def new_step(self) -> None: ...

    def commit(self, tokens: Sequence[int]) -> None: ...

    def ahead(self) -> int: ...

    def finish(self, answer: Sequence[int]) -> None: ...


class SourceDefaults:
    """What a source that needs nothing more does (a base class to inherit, not required)."""

    arm: ClassVar[str] = "lookup"
    indexed: ClassVar[bool] = False
    leading: ClassVar[tuple[int, ...]] = ()
    apart: ClassVar[frozenset[int]] = frozenset()
    ladders: ClassVar[tuple[tuple[int, ...], ...]] = ()

    def new_step(self) -> None:
        pass

    def commit(self, tokens: Sequence[int]) -> None:
        pass

    def ahead(self) -> int:
        return 0

    def finish(self, answer: Sequence[int]) -> None:
        pass


def indexed_sequences(request: Request) -> list[list[int]]:
    """The token sequences the registered indexed sources add to ``request``'s own index, in
    registration order."""
    out: list[list[int]] = []
    for cls in registered():
        if getattr(cls, "indexed", False):
            out += [list(s) for s in cls.sequences(request)]
    return out


_REGISTRY: dict[str, type] = {}
_LAYOUT: list = [None]


def register(cls: type) -> type:
    """Register a source class (a decorator): requests build it in registration order, which
    is also the order their candidates are checked in, and ``layout`` gives it its bins."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"a candidate source named {cls.name!r} is registered already")
    if cls.arm not in ("lookup", "grammar"):
        raise ValueError(f"source {cls.name!r}: arm must be 'lookup' or 'grammar', not {cls.arm!r}")
    _REGISTRY[cls.name] = cls
    _LAYOUT[0] = None
    return cls


def registered() -> list[type]:
    """The registered source classes, in order."""
    return list(_REGISTRY.values())


class Layout:
    """The calibration bins of every registered source, one contiguous range each in
    registration order: ``offset[name]``, ``priors`` (all bins'), ``leading`` and ``apart``
    (global bin numbers), ``copies[b]`` (bin ``b`` is a lookup source's: its candidate continues
    a copy run), ``below[b]`` (the bin under ``b`` on its source's ladder, -1 for none)."""

    def __init__(self, classes: Sequence[type]):
        self.offset: dict[str, int] = {}
        self.ranges: dict[str, range] = {}
        priors: list[float] = []
        leading: list[int] = []
        apart: set[int] = set()
        copies: list[bool] = []
        below: dict[int, int] = {}
        for cls in classes:
            base = self.offset[cls.name] = len(priors)
            priors += [float(p) for p in cls.priors]
            leading += [base + b for b in cls.leading]
            apart |= {base + b for b in cls.apart}
            copies += [cls.arm == "lookup"] * len(cls.priors)
            self.ranges[cls.name] = range(base, len(priors))
            for ladder in getattr(cls, "ladders", ()):
                below.update({base + hi: base + lo for lo, hi in zip(ladder, ladder[1:])})
        self.priors = tuple(priors)
        self.leading = tuple(leading)
        self.apart = frozenset(apart)
        self.copies = tuple(copies)
        self.below = tuple(below.get(b, -1) for b in range(len(priors)))

    def bin(self, name: str, own: int) -> int:
        """The global bin of source ``name``'s bin ``own``."""
        return self.offset[name] + own

    def source_of(self, b: int) -> str:
        """The name of the source whose range holds global bin ``b``."""
        return next(name for name, r in self.ranges.items() if b in r)


def layout() -> Layout:
    """The bins of the sources registered now (made once per registry state)."""
    if _LAYOUT[0] is None:
        _LAYOUT[0] = Layout(registered())
    return _LAYOUT[0]
