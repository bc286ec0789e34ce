"""Open the models a ``ModelParams`` names: resolve each spec (path, ``hf:`` spec or preset,
downloading a preset when needed), then open both with llama.cpp, checked as a pair.
``ModelPool`` opens many models once each, for pairing every target with every draft.

``backend`` (and with it llama_cpp) is imported on the first ``open_pair``, not with this
module: the engine imports this module, and importing the package stays light.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..config import MAX_TREE_NODES, ModelParams
from ..errors import UserError
from . import models, vocab

if TYPE_CHECKING:  # pragma: no cover
    from .backend import LlamaModel

__all__ = ["ModelPool", "open_pair"]


def open_pair(params: ModelParams, *, progress: bool) -> tuple[LlamaModel, LlamaModel | None]:
    """``(target, draft)`` for ``params``: a preset target with no draft brings its own,
    ``draft=""`` loads none.  ``progress``: report downloads on stderr.  A model that cannot
    be found, read or paired raises ``UserError``."""
    from . import backend

    backend.set_verbose(params.verbose)
    draft_spec = models.draft_spec(params.target, params.draft)
    target_path = models.resolve_model(params.target, role="target", progress=progress)
    draft_path = models.resolve_model(draft_spec, role="draft", progress=progress) if draft_spec else None
    return _open_models(backend.LlamaModel, target_path, draft_path, params,
                        n_seq_max=seq_ids(params.n_slots, params.n_batch))


# llama.cpp's most sequences in one context (LLAMA_MAX_SEQ)
_LLAMA_MAX_SEQ = 256


def seq_ids(n_slots: int, n_batch: int) -> int:
    """Sequence ids a model needs: one per slot's committed sequence, and a tree of
    ``MAX_TREE_NODES`` nodes plus its root for every slot, within llama.cpp's limit and one
    batch (a batch holds an output row per sequence); one slot keeps the full tree."""
    if n_slots == 1:
        return MAX_TREE_NODES + 2
    return min(_LLAMA_MAX_SEQ, n_batch, n_slots * (MAX_TREE_NODES + 2))


def _settings(params: ModelParams, role: str, n_seq_max: int) -> dict:
    """The keywords ``backend.LlamaModel`` opens a ``role`` ("target" or "draft") model with:
    the target's layers may go to RPC workers, the draft's stay local."""
    common = dict(n_ctx=params.n_ctx, n_batch=params.n_batch, n_threads=params.n_threads, n_seq_max=n_seq_max,
                  flash_attn=params.flash_attn)
    if params.n_slots > 1:  # a fake opener in the tests takes no slots
        common["n_slots"] = params.n_slots
    if role == "target":
        return dict(n_gpu_layers=params.n_gpu_layers, rpc=params.rpc, **common)
    draft_layers = params.n_gpu_layers if params.draft_gpu_layers is None else params.draft_gpu_layers
    return dict(n_gpu_layers=draft_layers, **common)


def _open_models(open_model, target_path, draft_path, params, *, n_seq_max: int):
    """The target and (unless ``draft_path`` is None) the draft, opened by ``open_model``
    (``backend.LlamaModel``) with a ``config.ModelParams``'s settings and ``n_seq_max``
    sequences each, the draft read through text when its vocabulary differs (``as_route``).
    Nothing stays open on failure."""
    target = open_model(target_path, **_settings(params, "target", n_seq_max))
    draft = None
    try:
        if draft_path is not None:
            draft = open_model(draft_path, **_settings(params, "draft", n_seq_max))
            draft = as_route(draft, vocab.route(target.vocab_info(), draft.vocab_info()))
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    return target, draft


def reopen_draft(params: ModelParams, path: str):
    """The draft at ``path`` opened again as ``open_pair`` opened it (``decoding.standby``:
    a draft closed while ``auto`` did not call it); its vocabulary was checked then."""
    from . import backend

    return backend.LlamaModel(path, **_settings(params, "draft", seq_ids(params.n_slots, params.n_batch)))


def as_route(draft, route: str):
    """``draft`` as the engine takes it on ``route`` (``vocab.route``): itself on one
    vocabulary, a ``decoding.textdraft.TextDraft`` around it on the text route."""
    if route != "text":
        return draft
    from ..decoding.textdraft import TextDraft

    return TextDraft(draft, bos=draft.bos if draft.add_bos else None)


class ModelPool:
    """Models opened on demand, each file once per role, with one ``ModelParams``'s settings
    (its ``target``/``draft`` are ignored): ``bench --pairs`` pairs every target with every
    draft, and a target opened once serves all of them.  A file opened as a target and as a
    draft is two models (each needs a cache of its own); a spec asked for again, under the
    same or another spelling of the same file, gets the model already open.

    A spec that cannot be resolved or opened raises ``UserError`` on every ask, without a
    second try.  ``close()`` frees the open models; the pool can open them again after it.
    ``open_model``: the opener (``backend.LlamaModel`` unless a test passes another)."""

    def __init__(self, params: ModelParams, *, progress: bool, open_model=None):
        self.params = params
        self.progress = progress
        self._opener = open_model
        self._paths: dict[tuple[str, str], str] = {}  # (role, spec) -> resolved file
        self._open: dict[tuple[str, str], LlamaModel] = {}  # (role, file) -> model
        self._failed: dict[tuple[str, str], str] = {}  # (role, spec) -> why
        self._vocabs: dict[int, vocab.VocabInfo] = {}  # id(model) -> its vocabulary, read once
        self._texts: dict[int, object] = {}  # id(model) -> the TextDraft that reads it through text

    def path(self, spec: str, role: str) -> str:
        """The file ``decoding`` names as a ``role`` model (a preset's target or draft), resolved
        (and downloaded) once."""
        key = (role, spec)
        if key in self._failed:
            raise UserError(self._failed[key])
        if key not in self._paths:
            try:
                found = models.resolve_model(spec, role=role, progress=self.progress)
                self._paths[key] = os.path.realpath(found)  # one file, however it is spelt
            except UserError as e:
                self._failed[key] = str(e)
                raise
        return self._paths[key]

    def get(self, spec: str, role: str) -> LlamaModel:
        """The ``role`` model ``decoding`` names, opened on the first ask."""
        path = self.path(spec, role)
        key = (role, path)
        if key in self._failed:
            raise UserError(self._failed[key])
        if key not in self._open:
            opener = self._opener
            if opener is None:
                from . import backend

                backend.set_verbose(self.params.verbose)
                opener = backend.LlamaModel
            try:
                self._open[key] = opener(path, **_settings(self.params, role, seq_ids(self.params.n_slots,
                                                                                      self.params.n_batch)))
            except UserError as e:
                self._failed[key] = str(e)
                raise
        return self._open[key]

    def pair(self, target: str, draft: str | None) -> tuple[LlamaModel, LlamaModel | None]:
        """``(target, draft)`` opened (``draft`` None: none; a draft of another vocabulary
        read through text, ``as_route``), or ``UserError`` naming the model that cannot be
        opened or why the draft cannot serve the target (``vocab.route``)."""
        t = self.get(target, "target")
        if draft is None:
            return t, None
        d = self.get(draft, "draft")
        if vocab.route(self._vocab(t), self._vocab(d)) == "same":
            return t, d
        if id(d) not in self._texts:  # one per model: its cache is claimed request by request
            self._texts[id(d)] = as_route(d, "text")
        return t, self._texts[id(d)]

    def mismatch(self, target: str, other: str, role: str = "draft") -> str | None:
        """The first vocabulary mismatch between the ``target`` model and the ``role`` model
        ``other`` (opening both), or None."""
        return vocab.first_mismatch(self._vocab(self.get(target, "target")), self._vocab(self.get(other, role)))

    def _vocab(self, model) -> vocab.VocabInfo:
        if id(model) not in self._vocabs:  # a large vocabulary's texts take a while to read
            self._vocabs[id(model)] = model.vocab_info()
        return self._vocabs[id(model)]

    def close(self) -> None:
        """Free every open model (what failed stays failed)."""
        models_open, self._open, self._vocabs, self._texts = list(self._open.values()), {}, {}, {}
        for m in models_open:
            m.close()
