"""resispec-gguf: exact multi-candidate speculative sampling for GGUF models on llama.cpp."""

from . import kernel_cache

kernel_cache.configure()  # before any kernel module imports numba: see kernel_cache.py

from .api import create_chat_completion  # noqa: E402
from .config import ConfigError, DraftParams, ModelParams, SamplingParams  # noqa: E402
from .engine import Engine, Result, Stats  # noqa: E402
from .errors import ContextFullError, UserError  # noqa: E402

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
        from .llama_draft import LlamaDraft

        return LlamaDraft
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
