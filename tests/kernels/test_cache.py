"""Where the compiled kernels go (``kernels.cache``): every kernel is cached on disk, and
``configure`` points Numba at the user's cache only when the package directory is read-only
and the user has not chosen a directory.  (``cache_dir_for``'s choices, and a read-only
install end to end, are tested in ``test_first_reply``.)"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from numba.core import config as numba_config
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher

import resispec_gguf.kernels as package
from resispec_gguf.kernels import cache


def _kernels():
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, Dispatcher) and value.__module__ == module.__name__:
                yield f"{info.name}.{name}", value


def test_every_kernel_is_cached_on_disk():
    """``@njit(cache=True)`` everywhere: a kernel without it compiles again at every start."""
    kernels = dict(_kernels())
    modules = {name.rsplit(".", 2)[1] for name in kernels}  # the scan found every kernel module
    assert modules == {"acceptance", "draws", "masks", "sampling", "stages", "suffix_trie", "topk",
                       "verify"}, modules
    # Numba keeps no record of cache=True but the dispatcher's disk cache (a NullCache without it)
    assert sorted(name for name, d in kernels.items() if not isinstance(d._cache, FunctionCache)) == []


@pytest.fixture
def numba_env(monkeypatch, tmp_path):
    """No user setting, the user cache under ``tmp_path``, and Numba's config restored after."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path / "user"))
    monkeypatch.setattr(numba_config, "CACHE_DIR", numba_config.CACHE_DIR)
    return monkeypatch, tmp_path


def test_configure_leaves_a_writable_package_alone(numba_env):
    monkeypatch, tmp_path = numba_env
    monkeypatch.setattr(cache, "_PACKAGE_DIR", tmp_path / "pkg")
    before = numba_config.CACHE_DIR
    assert cache.configure() is None
    assert "NUMBA_CACHE_DIR" not in cache.os.environ and numba_config.CACHE_DIR == before


def test_configure_points_numba_at_the_user_cache_for_a_read_only_package(numba_env):
    monkeypatch, tmp_path = numba_env
    blocked = tmp_path / "a-file"  # __pycache__ cannot be made under a file, even by root
    blocked.write_text("")
    monkeypatch.setattr(cache, "_PACKAGE_DIR", blocked)
    want = tmp_path / "user" / "numba"
    assert cache.configure() == want
    assert want.is_dir()
    # the environment for a later import of numba, its config for one already imported
    assert cache.os.environ["NUMBA_CACHE_DIR"] == str(want) and numba_config.CACHE_DIR == str(want)


def test_configure_keeps_the_users_numba_cache_dir(numba_env):
    monkeypatch, tmp_path = numba_env
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(cache, "_PACKAGE_DIR", blocked)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "own"))
    before = numba_config.CACHE_DIR
    assert cache.configure() is None
    assert cache.os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "own") and numba_config.CACHE_DIR == before


def test_location_is_numba_cache_dir_when_set_else_beside_the_kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert cache.location() == tmp_path
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    assert cache.location() == cache._PACKAGE_DIR / "__pycache__"
