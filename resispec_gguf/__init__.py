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
]
__version__ = "0.1.0"
