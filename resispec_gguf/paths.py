"""Where the package keeps its files on the user's machine, importable from any layer (the
Numba kernel cache, the model cache, the cost-curve and build-check caches all live under
``cache_dir``), and how its small JSON caches are read and written."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["cache_dir", "read_json_dict", "write_json_atomic"]


def cache_dir() -> Path:
    """The directory holding preset model files (not created here): ``$RESISPEC_CACHE``, else
    ``$XDG_CACHE_HOME/resispec-gguf/models``, else ``~/.cache/resispec-gguf/models``."""
    env = os.environ.get("RESISPEC_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "resispec-gguf" / "models"


def read_json_dict(path) -> dict:
    """A small JSON cache file's object; ``{}`` when it is missing, unreadable, damaged or not
    an object (a cache is only ever a shortcut)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json_atomic(path, data: dict) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so that a reader (or
    another process writing at the same time) never sees half a file.  Raises ``OSError``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
