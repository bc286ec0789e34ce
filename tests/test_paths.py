"""paths.py: the cache directory is ``$RESISPEC_CACHE``, else under ``$XDG_CACHE_HOME``, else
under ``~/.cache``; it is not created."""

from pathlib import Path

import pytest

from resispec_gguf.paths import cache_dir


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RESISPEC_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return tmp_path / "home"


def test_home_cache_when_nothing_is_set(home):
    assert cache_dir() == home / ".cache" / "resispec-gguf" / "models"
    assert not cache_dir().exists()  # not created


def test_xdg_cache_home_comes_before_home(home, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "resispec-gguf" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")  # expanded
    assert cache_dir() == home / "xdg" / "resispec-gguf" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty: unset
    assert cache_dir() == home / ".cache" / "resispec-gguf" / "models"


def test_resispec_cache_comes_first_and_is_the_directory_itself(home, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("RESISPEC_CACHE", "~/models")
    assert cache_dir() == home / "models"
    monkeypatch.setenv("RESISPEC_CACHE", "")  # empty: unset
    assert cache_dir() == tmp_path / "xdg" / "resispec-gguf" / "models"
    assert isinstance(cache_dir(), Path)


def test_json_caches_read_what_was_written_and_nothing_when_damaged(tmp_path):
    from resispec_gguf.paths import read_json_dict, write_json_atomic

    path = tmp_path / "sub" / "cache.json"
    assert read_json_dict(path) == {}  # missing
    write_json_atomic(path, {"a": [1, 2]})
    assert read_json_dict(path) == {"a": [1, 2]} and [p.name for p in path.parent.iterdir()] == ["cache.json"]
    path.write_text("[1, 2]")  # not an object
    assert read_json_dict(path) == {}
    path.write_text("{broken")
    assert read_json_dict(path) == {}
