"""The frame around a request's candidate sources: ``Sources``, what a generation holds.

It builds the request's sources through the registry (``base.registered``, in order), and at a
tree node merges what they propose: each source's candidates in order, a token already
proposed dropped, and under a constraint the tokens its mask forbids there (a function of the
path) dropped; each kept candidate carries its global calibration bin (``base.layout``).  It
tells every source of a new step and of the committed tokens, learns a plain step's candidates
for ``auto``, ends the request (its sources, then the stores spanning requests it read) and
counts, per source, the candidates offered at verified nodes and those accepted
(``stats.Stats.candidates``).  The sources themselves keep no statistics.

Nothing here draws or takes a uniform: the candidates are functions of the paths, the
committed tokens and the stores as they stand, fixed before a node draws.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ...kernels import sampling
from .base import Request, layout, registered

__all__ = ["Sources"]


class Sources:
    """One request's candidate sources, in registry order (module docstring).

    ``built``: ``(source, its first global bin)`` pairs; ``stores``: the stores spanning
    requests the request reads and fills (``finish`` ends them); ``counts``: where the
    per-source counts go (``{name: [offered, accepted]}``)."""

    def __init__(self, built: list, stores: dict | None = None, counts: dict | None = None):
        self.built = built
        self.stores = dict(stores or {})
        self.counts = counts if counts is not None else {}
        self.layout = layout()
        self._lookup = [(s, b) for s, b in built if s.arm == "lookup"]
        self._grammar = [(s, b) for s, b in built if s.arm == "grammar"]
        # the lookup sources that copy (not a drafter asked per step, ``ask``): a copy under way
        self._copying = [(s, b) for s, b in self._lookup if not hasattr(s, "ask")]

    @classmethod
    def build(cls, request: Request, counts: dict | None = None) -> "Sources":
        """The request's sources: every registered source that has something for it."""
        lay = layout()
        built = []
        for source in registered():
            if getattr(source, "indexed", False):  # read by the context source's index
                continue
            made = source.build(request)
            if made is not None:
                built.append((made, lay.offset[source.name]))
        return cls(built, request.stores, counts)

    def __bool__(self) -> bool:
        return bool(self.built)

    def source(self, name: str):
        """The request's source named ``name``, None when it has none."""
        return next((s for s, _ in self.built if s.name == name), None)

    # ------------------------------------------------------------------ proposals

    def propose(self, path: tuple, run: int, mask_of: Callable | None) -> list[tuple[int, int]]:
        """The node's candidates after ``path`` ``[(token, global bin)]``, in order (module
        docstring); ``mask_of(path)`` gives the constraint's mask (None: unconstrained),
        asked only when some source proposed a token."""
        return _merge(self.built, path, run, mask_of)

    def copies(self, b: int) -> bool:
        """Whether global bin ``b`` is a lookup source's (its candidate continues a copy run)."""
        return self.layout.copies[b]

    def leader(self, path: tuple, run: int, mask) -> list[tuple[int, int]]:
        """The lookup sources' candidates after ``path`` (``mask``: the constraint's there,
        or None), merged as ``propose`` merges them: what a copy run is counted against."""
        return _merge(self._lookup, path, run, None if mask is None else (lambda _path: mask))

    def leading_chain(self, run: int, mask_of: Callable | None, depth: int, chance: Callable,
                      sure: float) -> list[float]:
        """The chances (``chance(global bin)``) of the copying lookup sources' leading
        candidates (not a drafter's: it is asked before it proposes) along the chain that
        follows them from the root, at most ``depth`` of them; empty unless the root's is at
        least ``sure``.  ``mask_of(path)``: the constraint's mask
        (None: unconstrained).  What ``auto`` weighs a copy step on (``AutoTuner.choose``)."""
        path: list[int] = []
        out: list[float] = []
        while len(out) < depth:
            got = _merge(self._copying, tuple(path), run + len(path), mask_of)
            if not got:
                break
            c = chance(got[0][1])
            if not out and c < sure:
                return []
            out.append(c)
            path.append(got[0][0])
        return out

    def plain_step(self, mask, sure: int, p_of, tok: int, run: int, auto) -> int:
        """A plain step emitted ``tok`` at the root (``sure``: the token its mask leaves
        alone, else -1): ``auto`` learns what its candidates would have been accepted with
        (the grammar's by bin; the lookup sources' by bin and as a node's set), and the copy
        run it returns goes on where the lookup sources' leader was ``tok``."""
        if auto is not None and sure < 0:
            for source, base in self._grammar:
                for c in source.propose((), run):
                    auto.observe_lookup(base + c.bin, p_of(c.token))
        if not self._lookup:
            return run
        fixed = self.leader((), run, mask)
        if fixed and auto is not None:
            auto.observe_fixed(fixed, p_of)
        return run + 1 if fixed and tok == fixed[0][0] else 0

    def ask(self, n: int) -> None:
        """Tell each source that drafts (has ``ask``: ``textdraft``) how long a chain ``auto``
        asks of it this step (0: none)."""
        for source, _ in self.built:
            if hasattr(source, "ask"):
                source.ask(n)

    def ahead(self) -> int:
        """The longest chain a grammar source proposes at the root this step."""
        return max((s.ahead() for s, _ in self._grammar), default=0)

    # ------------------------------------------------------------------ the request's course

    def new_step(self) -> None:
        for source, _ in self.built:
            source.new_step()

    def commit(self, tokens: Sequence[int]) -> None:
        for source, _ in self.built:
            source.commit(tokens)

    def finish(self, answer: Sequence[int], learnt=None) -> None:
        """The reply is over: each source's ``finish``, then each store's (the memory keeps
        the answer and ``learnt``, auto's bins; None without auto)."""
        for source, _ in self.built:
            source.finish(answer)
        for store in self.stores.values():
            store.finish(answer, learnt)

    def count(self, kept: Sequence[tuple[int, int]], idx: int) -> None:
        """A verified node offered ``kept`` (``[(token, global bin)]``, checked in order) and
        accepted candidate ``idx`` (-1 or a draw: none of them)."""
        for i, (_, b) in enumerate(kept):
            got = self.counts.setdefault(self.layout.source_of(b), [0, 0])
            got[0] += 1
            got[1] += int(i == idx)


def _merge(built, path, run, mask_of) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    mask, asked = None, False
    for source, base in built:
        got = [(c.token, base + c.bin) for c in source.propose(path, run)]
        if out:
            seen = {x for x, _ in out}
            got = [(x, b) for x, b in got if x not in seen]
        if got and mask_of is not None:
            if not asked:
                mask, asked = mask_of(path), True
            if mask is not None:
                got = [(x, b) for x, b in got if sampling.mask_allows(mask, x)]
        out += got
    return out
