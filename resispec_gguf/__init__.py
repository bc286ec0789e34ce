"""resispec-gguf: exact multi-candidate speculative sampling for GGUF models on llama.cpp.

The layers, lowest first (each package's docstring says what it may import):
``config``/``errors``/``paths`` (settings, error types, cache paths) ← ``kernels`` (Numba on
arrays) ← ``decoding`` (the speculative loop on the ``ModelBackend`` seam) ← ``llama``
(llama.cpp behind that seam) and ``assist`` (prompts, constraints, tools) ← ``engine`` (the
public ``Engine``, which joins them) ← ``surfaces`` (CLI, chat, server, API, bench).
"""

from . import kernels  # noqa: F401  (first: it points Numba at its cache before any kernel loads)
from .config import ConfigError, DraftParams, ModelParams, SamplingParams
from .engine import Engine, Result, Stats
from .errors import ContextFullError, UserError
from .surfaces.api import create_chat_completion

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
    # LlamaDraft loads llama_cpp: only on first use, so that importing the package stays light
    if name == "LlamaDraft":
        from .llama.llama_draft import LlamaDraft

        return LlamaDraft
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
