"""resispec-gguf: exact multi-candidate speculative sampling for GGUF models on llama.cpp.

The layers, lowest first (each package's docstring says what it may import):
``config``/``errors``/``paths`` (settings, error types, cache paths) ← ``kernels`` (Numba on
arrays) ← ``decoding`` (the speculative loop on the ``ModelBackend`` seam) ← ``llama``
(llama.cpp behind that seam) and ``assist`` (prompts, constraints, tools) ← ``engine`` (the
public ``Engine``, which joins them) ← ``surfaces`` (CLI, chat, server, API, bench).
"""

from . import kernels  # noqa: F401  (first: it points Numba at its cache before any kernel loads)
from .config import ConfigError, DraftParams, ModelParams, SamplingParams
from .errors import ContextFullError, UserError

__all__ = [
    "Engine",
    "Result",
    "Stats",
    "SamplingParams",
    "DraftParams",
    "ModelParams",
    "create_chat_completion",
    "UserError",
    "ConfigError",
    "ContextFullError",
    "LlamaDraft",
]
__version__ = "0.1.0"


def __getattr__(name):
    # loaded on first use, so that importing the package stays light: the engine brings Numba
    # and the kernels (about 0.5 s, more on a busy machine), LlamaDraft llama_cpp; the command
    # line says what it is doing before either loads
    if name in ("Engine", "Result", "Stats"):
        from . import engine

        return getattr(engine, name)
    if name == "create_chat_completion":
        from .surfaces.api import create_chat_completion

        return create_chat_completion
    if name == "LlamaDraft":
        from .llama.llama_draft import LlamaDraft

        return LlamaDraft
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
