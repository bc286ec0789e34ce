"""Where the package keeps its files on the user's machine: one function, importable from any
layer (the Numba kernel cache, the model cache and the cost-curve cache all live under it)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """The directory holding preset model files (not created here): ``$RESISPEC_CACHE``, else
    ``$XDG_CACHE_HOME/resispec-gguf/models``, else ``~/.cache/resispec-gguf/models``."""
    env = os.environ.get("RESISPEC_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "resispec-gguf" / "models"
