"""The text-draft source: a draft with another vocabulary, its chain re-tokenized for the target.

Where the draft's vocabulary is not the target's, the engine hands every request the store
``"text_draft"`` (``decoding.textdraft.TextDraft``).  ``TextDraftSource`` follows the request
with it: the prompt's text at the start, each emitted token's text as it is committed.  At a
step's first proposal it asks the draft for its greedy chain after the committed text
(``Follower.chain``), tokenizes the chain's text with the target's tokenizer (plain text, no
BOS, special texts not parsed; an unfinished UTF-8 character at its end left out) and proposes
that chain: at a node whose path from the root is the chain's first ``i`` tokens, its token
``i``; elsewhere nothing.  A candidate's bin is the draft's probability of the draft token
its text ends in (the chain's confidence there): ``>= 0.8``, ``>= 0.5``, less.

Law: the chain is a function of the committed text alone (greedy, no draw, the draft's cache
the request's own: ``TextDraft.claim``), fixed before any node of the step draws, so its
tokens are deterministic candidates (docs/verification.md, "Drafts with another vocabulary").

A lookup-arm source (``arm = "lookup"``): ``auto`` grows chains of its candidates and learns
their acceptance in its three bins; they are not among the bins of the lookup arm's prior
(``leading`` empty), so a request without such a draft plans as before.  Under ``auto`` the
draft writes only at the steps of its "text" arm, a chain of the length auto asks for
(``ask``: from its cost curve and those bins, fixed before the step); at every other step,
plain ones included, it is not called.
"""

from __future__ import annotations

from typing import Sequence

from .base import Candidate, Request, SourceDefaults, register
from ..textdraft import complete_utf8

__all__ = ["CHAIN_MAX", "TextDraftSource", "confidence_bin"]

CHAIN_MAX = 16  # draft tokens per chain at most (the step's depth bounds it first)


def confidence_bin(p: float) -> int:
    """The bin of a candidate whose text ends in a draft token of probability ``p``."""
    return 0 if p >= 0.8 else 1 if p >= 0.5 else 2


@register
class TextDraftSource(SourceDefaults):
    """The draft of another vocabulary as a candidate source (module docstring)."""

    name = "text draft"
    priors = (0.7, 0.45, 0.25)
    arm = "lookup"

    def __init__(self, store, text: bytes, depth: int):
        self.store = store
        self.codec = store.target
        self.follower = store.follower(text)
        self.text = bytearray(text)
        self.depth = max(1, min(depth, CHAIN_MAX))
        self._chain: list[tuple[int, int]] | None = None
        self._moved = False
        self._ask: int | None = None  # auto's chain length for this step (None: ``depth``; 0: no call)

    @classmethod
    def build(cls, request: Request) -> "TextDraftSource | None":
        store = request.stores.get("text_draft")
        dp = request.dp
        if store is None or store.target is None or dp.method == "none" or not dp.use_draft:
            return None
        return cls(store, store.target.detokenize(request.prompt), dp.max_depth)

    def new_step(self) -> None:
        self._chain = None

    def ask(self, n: int) -> None:
        """``auto`` asks for a chain of at most ``n`` draft tokens this step (0: the draft
        is not called); told after ``new_step``, before anything is proposed."""
        self._ask = max(0, int(n))
        self._chain = None

    def commit(self, tokens: Sequence[int]) -> None:
        if len(tokens):
            self.text += self.codec.detokenize(tokens)
            self._moved = True
            self._chain = None

    def propose(self, path: tuple[int, ...], run: int) -> list[Candidate]:
        chain = self._chain
        if chain is None:
            chain = self._chain = self._draft()
        i = len(path)
        if i >= len(chain) or any(path[j] != chain[j][0] for j in range(i)):
            return []
        return [Candidate(chain[i][0], chain[i][1])]

    def ahead(self) -> int:
        return 0

    def _draft(self) -> list[tuple[int, int]]:
        """The step's chain in the target's tokens, ``[(token, bin)]`` (module docstring)."""
        n = self.depth if self._ask is None else min(self.depth, self._ask)
        if n <= 0:  # not asked: the draft catches up on the text at the next step that asks
            return []
        if self._moved:
            self.follower.follow(bytes(self.text))
            self._moved = False
        text, spans = self.follower.chain(n)
        end = complete_utf8(text)
        if end == 0:
            return []
        try:
            words = text[:end].decode("utf-8")
        except UnicodeDecodeError:  # the committed text ends inside a character the chain does not finish
            return []
        tokens = self.codec.tokenize(words, add_special=False, parse_special=False)
        out, at, s = [], 0, 0
        for t in tokens:
            at += len(self.codec.detokenize([t]))
            while s < len(spans) - 1 and spans[s][0] < at:
                s += 1
            out.append((int(t), confidence_bin(spans[s][1]) if spans else 2))
        return out
