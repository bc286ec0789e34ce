"""The server's API key: where it comes from (``api_key``, ``api_key_file`` or the
``RESISPEC_API_KEY`` environment variable, in that order) and the check every route but
``/health`` makes (``Authorization: Bearer KEY``, as OpenAI clients send it, or
``x-api-key: KEY``, as Anthropic's do; compared in constant time).

May import ``config``, ``errors`` and ``server.errors``; never the engine, the app or
``llama``.
"""

from __future__ import annotations

import hmac
import os

from ...config import ConfigError, ServerParams
from ...errors import UserError
from .errors import ApiError

__all__ = ["ENV_VAR", "api_key", "check"]

ENV_VAR = "RESISPEC_API_KEY"


def api_key(params: ServerParams, environ=os.environ) -> str | None:
    """The key requests must carry (None: no auth): ``params.api_key``, else the first line of
    ``params.api_key_file``, else ``environ[ENV_VAR]``.  ``UserError`` for a file that cannot
    be read and ``ConfigError`` for a key no client can send (empty, not printable ASCII)."""
    if params.api_key is not None:
        return params.api_key
    if params.api_key_file is not None:
        try:
            with open(params.api_key_file, encoding="utf-8") as f:
                key = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read the API key file {params.api_key_file}: "
                            f"{getattr(e, 'strerror', None) or e}") from None
        return _checked("api_key_file", key, f"the first line of {params.api_key_file}")
    key = environ.get(ENV_VAR)
    if key is None:
        return None
    return _checked(ENV_VAR, key.strip(), ENV_VAR)


def _checked(field: str, key: str, where: str) -> str:
    """``key`` if ``ServerParams`` takes it as ``api_key``; else ``ConfigError`` naming ``where``."""
    try:
        ServerParams(api_key=key)
    except ConfigError as e:
        raise ConfigError(field, str(e).replace("api_key", where, 1)) from None
    return key


def check(headers, key: str | None) -> None:
    """Nothing when ``key`` is None or ``headers`` carry it; a 401 ``ApiError`` otherwise."""
    if not key:
        return
    scheme, _, token = headers.get("authorization", "").partition(" ")
    sent = [token.strip() if scheme.lower() == "bearer" else "", headers.get("x-api-key", "").strip()]
    if not any(s and hmac.compare_digest(s.encode(), key.encode()) for s in sent):
        raise ApiError(401, "invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key: <key>')",
                       code="invalid_api_key")
