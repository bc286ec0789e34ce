"""``LlamaDraft``: a GGUF draft *model* for llama-cpp-python's own speculative decoding.

``llama_cpp.Llama(model_path=target, draft_model=LlamaDraft(draft_path))``: at every step
llama-cpp-python hands its ``draft_model`` the tokens so far, evaluates the continuation it
returns in one batch with the target, and keeps the drafted tokens while its own samples match
them.  That sample-and-match check is exact for a deterministic draft, and this one is: a
function of the tokens it is given (``draft_chain``):

* **context lookup** first: while the context's last tokens occurred earlier with at least
  ``lookup_min`` tokens matching (``lookup.NgramIndex``), propose what followed them then; no
  model call;
* else a **greedy chain** from the draft model, token after token while the draft's own
  probability of its choice is at least ``p_min``.

The draft model's KV cache follows the input ids: each call keeps the longest common prefix
with what it holds, drops the rest (drafted tokens the target refused) and decodes only the new
tokens, so a step costs the accepted tokens plus the chain, never the whole context.

The draft must share the target's vocabulary.  At the first call the ``Llama`` calling it is
found on the call stack and the two vocabularies are compared as llama.cpp's speculative tools
do (``vocab.check_compatible``): a mismatch raises one ``UserError`` naming it instead of
drafting garbage.

Models only through ``backend`` (``LlamaModel``, and the base class it re-exports); never
imports llama_cpp itself.
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

import numpy as np

from . import backend, vocab
from ..errors import UserError
from ..decoding.lookup import NgramIndex

__all__ = ["LlamaDraft", "draft_chain"]


def draft_chain(context: Sequence[int], index: NgramIndex | None, next_token: Callable[[int], tuple[int, float]] | None,
                *, n_max: int, p_min: float, lookup_min: int) -> list[int]:
    """The draft after ``context`` (at most ``n_max`` tokens, possibly none).

    ``index``: an ``NgramIndex`` holding ``context`` (None: no lookup); while the context
    plus the chain so far ends in at least ``lookup_min`` tokens that occurred earlier, the
    token that followed them is proposed.  If lookup proposes nothing, ``next_token(t)`` (the
    draft model: feed ``t``, get its greedy choice and that choice's probability) is called
    first with the context's last token, then with each drafted token, and the chain grows
    while the probability is at least ``p_min``.
    """
    chain: list[int] = []
    if index is not None and context:
        tail = list(context[-index.max_n:])
        while len(chain) < n_max:
            tok, n = index.propose(tail)
            if n < lookup_min:
                break
            chain.append(tok)
            tail = (tail + [tok])[-index.max_n:]
        if chain:
            return chain
    if next_token is None or not context:
        return chain
    tok, p = next_token(int(context[-1]))
    while p >= p_min:
        chain.append(tok)
        if len(chain) >= n_max:
            break
        tok, p = next_token(tok)
    return chain


def _calling_llama(draft) -> object | None:
    """The ``llama_cpp.Llama`` whose ``draft_model`` is ``draft``, found among the callers."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if obj is not None and getattr(obj, "draft_model", None) is draft:
            return obj
        frame = frame.f_back
    return None


class LlamaDraft(backend.LlamaDraftModel):
    """A draft model for ``llama_cpp.Llama(draft_model=...)`` (see the module docstring).

    ``num_pred_tokens``: the longest draft; ``p_min``: the greedy chain stops before a token
    the draft gives less probability; ``lookup``: try context lookup first, trusting matches
    of ``lookup_min`` tokens or more (1-4).  ``n_ctx`` (give the target's), ``n_batch``,
    ``n_threads``, ``n_gpu_layers``, ``flash_attn``: the draft model's llama.cpp settings.
    Beyond ``n_ctx`` tokens it drafts by lookup only.  ``stats`` counts calls, drafted
    tokens, lookup drafts and draft-model decodes."""

    def __init__(self, model_path, *, num_pred_tokens: int = 8, p_min: float = 0.75, lookup: bool = True,
                 lookup_min: int = 3, n_ctx: int = 4096, n_batch: int = 512, n_threads: int | None = None,
                 n_gpu_layers: int = 0, flash_attn: bool | None = None):
        if not (isinstance(num_pred_tokens, int) and num_pred_tokens >= 1):
            raise ValueError(f"num_pred_tokens must be a positive integer, got {num_pred_tokens!r}")
        if not 0.0 <= float(p_min) <= 1.0:
            raise ValueError(f"p_min must be within [0, 1], got {p_min!r}")
        if not (isinstance(lookup_min, int) and 1 <= lookup_min <= 4):
            raise ValueError(f"lookup_min must be 1 to 4 (the longest n-gram looked up), got {lookup_min!r}")
        self.num_pred_tokens = num_pred_tokens
        self.p_min = float(p_min)
        self.lookup = bool(lookup)
        self.lookup_min = lookup_min
        self.model = backend.LlamaModel(model_path, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads,
                                        n_gpu_layers=n_gpu_layers, n_seq_max=2, flash_attn=flash_attn)
        self._index: NgramIndex | None = None
        self._n_target = self.model.n_vocab  # ids the target can take (known after the first call)
        self._checked = False
        self.stats = {"calls": 0, "drafted": 0, "lookup_drafts": 0, "model_decodes": 0}

    def close(self) -> None:
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, input_ids, /, **kwargs) -> np.ndarray:
        ids = np.asarray(input_ids).tolist()  # [n] the tokens so far, the last one not evaluated
        if not self._checked:
            self._check_target(ids)
        self.stats["calls"] += 1
        index = self._follow(ids) if self.lookup else None
        synced = []

        def next_token(token: int) -> tuple[int, float]:
            if not synced:  # only now: a lookup draft leaves the new tokens for a later batch
                self.model.sync_prefix(ids)
                synced.append(True)
            return self._next_token(token)

        fits = len(ids) + self.num_pred_tokens + 1 <= self.model.n_ctx
        chain = draft_chain(ids, index, next_token if fits else None, n_max=self.num_pred_tokens, p_min=self.p_min,
                            lookup_min=self.lookup_min)
        self.stats["drafted"] += len(chain)
        self.stats["lookup_drafts"] += bool(chain) and not synced
        return np.asarray(chain, dtype=np.intc)

    def _check_target(self, ids: list[int]) -> None:
        """Once: the calling ``Llama``'s vocabulary must match the draft's."""
        llama = _calling_llama(self)
        if llama is not None:
            target = backend.llama_vocab_info(llama)
            why = vocab.first_mismatch(target, self.model.vocab_info())
            if why is not None:
                raise UserError(f"LlamaDraft: the draft model's vocabulary does not match the target's: {why}")
            self._n_target = min(target.n_vocab, self.model.n_vocab)
        elif ids and max(ids) >= self.model.n_vocab:
            raise UserError(f"LlamaDraft: token {max(ids)} is outside the draft model's vocabulary "
                            f"(0..{self.model.n_vocab - 1}); the target's vocabulary does not match")
        self._checked = True

    def _follow(self, ids: list[int]) -> NgramIndex:
        """The n-gram index of ``ids``, extended when they continue what it holds."""
        index = self._index
        if index is None or len(index) > len(ids) or index.tokens != ids[: len(index)]:
            index = self._index = NgramIndex(ids)
        else:
            index.extend(ids[len(index):])
        return index

    def _next_token(self, token: int) -> tuple[int, float]:
        """Feed ``token`` to the draft model; its greedy next token and that token's probability."""
        self.stats["model_decodes"] += 1
        row = self.model.decode([token], [-1])[0][: self._n_target]  # [V] a view, read before the next decode
        best = int(np.argmax(row))
        z = np.exp(row - row[best], dtype=np.float64).sum()
        self.model.commit([0])
        return best, 1.0 / z
