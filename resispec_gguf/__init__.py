"""resispec-gguf: exact multi-candidate speculative sampling for GGUF models on llama.cpp."""

from .api import create_chat_completion
from .config import ConfigError, DraftParams, ModelParams, SamplingParams
from .engine import Engine, Result, Stats
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


def __getattr__(name):
    # LlamaDraft loads llama_cpp: only on first use, so that importing the package stays light
    if name == "LlamaDraft":
        from .llama_draft import LlamaDraft

        return LlamaDraft
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
__version__ = "0.1.0"
