"""Open the models a ``ModelParams`` names: resolve each spec (path, ``hf:`` spec or preset,
downloading a preset when needed), then open both with llama.cpp, checked as a pair.

``backend`` (and with it llama_cpp) is imported on the first ``open_pair``, not with this
module: the engine imports this module, and importing the package stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import MAX_TREE_NODES, ModelParams
from . import models, vocab

if TYPE_CHECKING:  # pragma: no cover
    from .backend import LlamaModel

__all__ = ["open_pair"]


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


def _open_models(open_model, target_path, draft_path, params, *, n_seq_max: int):
    """The target and (unless ``draft_path`` is None) the draft, opened by ``open_model``
    (``backend.LlamaModel``) with a ``config.ModelParams``'s settings and ``n_seq_max``
    sequences each, after checking that they share a vocabulary (``vocab.check_compatible``).
    Nothing stays open on failure."""
    common = dict(n_ctx=params.n_ctx, n_batch=params.n_batch, n_threads=params.n_threads, n_seq_max=n_seq_max,
                  flash_attn=params.flash_attn)
    if params.n_slots > 1:  # a fake opener in the tests takes no slots
        common["n_slots"] = params.n_slots
    draft_layers = params.n_gpu_layers if params.draft_gpu_layers is None else params.draft_gpu_layers
    target = open_model(target_path, n_gpu_layers=params.n_gpu_layers, rpc=params.rpc, **common)
    draft = None
    try:
        if draft_path is not None:
            draft = open_model(draft_path, n_gpu_layers=draft_layers, **common)
            vocab.check_compatible(target.vocab_info(), draft.vocab_info())
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    return target, draft
