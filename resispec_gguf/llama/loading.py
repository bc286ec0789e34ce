"""Open the models a ``ModelParams`` names: resolve each spec (path, ``hf:`` spec or preset,
downloading a preset when needed), then open both with llama.cpp, checked as a pair.

``backend`` (and with it llama_cpp) is imported on the first ``open_pair``, not with this
module: the engine imports this module, and importing the package stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import MAX_TREE_NODES, ModelParams
from . import models

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
    # a tree of MAX_TREE_NODES nodes, its root and the committed sequence
    return backend.open_models(target_path, draft_path, params, n_seq_max=MAX_TREE_NODES + 2)
