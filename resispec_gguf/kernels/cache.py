"""Where Numba keeps the compiled kernels (every ``@njit(cache=True)`` in this package).

Numba caches a ``cache=True`` kernel in the ``__pycache__`` beside its source.  An install
the user cannot write to (system site-packages, a shared virtual environment, a container
image) would compile every kernel again at each start, or use a cache that is not the user's
choice, so there the kernels go to ``numba/`` in the model cache (``paths.cache_dir()``:
``$RESISPEC_CACHE``, else ``$XDG_CACHE_HOME/resispec-gguf/models``, else
``~/.cache/resispec-gguf/models``).  A ``NUMBA_CACHE_DIR`` the user set is left alone.

Numba picks a kernel's cache directory when the kernel is defined (``@njit(cache=True)``
runs at import of its module), from ``numba.core.config.CACHE_DIR``, which it reads from
``NUMBA_CACHE_DIR`` when ``numba`` is imported and again before each compilation when a
``NUMBA_*`` variable changed.  So ``configure()`` runs from ``kernels/__init__``,
before any kernel module is imported; it sets the variable and, when ``numba`` is already
imported, the config value too.  This module imports no kernel and no model (only ``paths``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

from ..paths import cache_dir

__all__ = ["cache_dir_for", "configure", "location"]

_PACKAGE_DIR = Path(__file__).resolve().parent


def _writable(directory: Path) -> bool:
    """Whether Numba could cache there: the test Numba itself makes (create the directory,
    write a temporary file in it)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def cache_dir_for(package_dir: Path, environ, user_cache: Callable[[], Path] = cache_dir) -> Path | None:
    """The directory to give Numba, or None to leave its choice alone: None when
    ``environ`` sets ``NUMBA_CACHE_DIR`` or Numba can write beside the sources in
    ``package_dir``; else ``user_cache() / "numba"`` when that is writable (else None, and
    Numba falls back to its own user-wide cache)."""
    if environ.get("NUMBA_CACHE_DIR") or _writable(package_dir / "__pycache__"):
        return None
    target = user_cache() / "numba"
    return target if _writable(target) else None


def configure() -> Path | None:
    """Point Numba at the user's cache when the package directory is read-only; returns the
    directory chosen, None when Numba's default (or the user's setting) stands."""
    target = cache_dir_for(_PACKAGE_DIR, os.environ)
    if target is None:
        return None
    os.environ["NUMBA_CACHE_DIR"] = str(target)
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba was imported before us: its config already read the env
        config.CACHE_DIR = str(target)
    return target


def location() -> Path:
    """Where Numba keeps this package's kernels now: ``NUMBA_CACHE_DIR`` when set (by the user
    or by ``configure``), else the ``__pycache__`` beside the kernels."""
    env = os.environ.get("NUMBA_CACHE_DIR")
    return Path(env) if env else _PACKAGE_DIR / "__pycache__"
