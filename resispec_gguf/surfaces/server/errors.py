"""What goes wrong, as the server answers it: ``ApiError`` (an OpenAI-shaped JSON error,
``{"error": {"message", "type", "param", "code"}}``) and the one mapping from an error
(``user_error``) or a job's final event (``event_error``) to it.

May import ``errors``, ``config`` and ``assist`` (the error types it maps); never the engine or
``llama``, nor the other server modules.
"""

from __future__ import annotations

import re

from starlette.responses import JSONResponse

from ...assist.grammar import GrammarError
from ...config import ConfigError
from ...errors import ConstraintError, ContextFullError, FieldError, UserError

__all__ = ["ApiError", "bad", "internal", "cancelled", "user_error", "event_error", "failure_error", "failure_body",
           "renamed"]


class ApiError(Exception):
    """Becomes an OpenAI-shaped JSON error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def internal() -> ApiError:
    """The details go to the log, never to the client."""
    return ApiError(500, "internal server error (see the server's log)", code="internal_error")


def cancelled() -> ApiError:
    return ApiError(503, "the request was cancelled (the server is shutting down)", code="cancelled",
                    headers={"Retry-After": "1"})


def user_error(exc: UserError, req) -> ApiError:
    """A 400 for what was wrong with request ``req`` (``fields.Request``): a full context names
    its prompt field, a constraint that cannot be compiled or started the field it came
    from, a bad field itself (``FieldError.param``)."""
    if isinstance(exc, ContextFullError):
        return bad(str(exc), req.prompt_param, "context_length_exceeded")
    if isinstance(exc, ConstraintError):  # failed while generating: name the field it came from
        return bad(f"{req.constraint_param}: {exc}", req.constraint_param, "constraint_failed")
    if isinstance(exc, GrammarError):
        return bad(str(exc), exc.param or req.constraint_param, "invalid_value")
    if isinstance(exc, FieldError):
        return bad(str(exc), exc.param, exc.code)
    if isinstance(exc, ConfigError):  # a setting the engine checks (logit_bias against the vocabulary)
        return bad(str(exc), exc.field, "invalid_value")
    return bad(str(exc))


def event_error(kind: str, value, req) -> ApiError:
    """The answer to a job's final event that is not "done": "user_error", "error" (logged
    where it happened) or "cancelled"."""
    if kind == "user_error":
        return user_error(value, req)
    if kind == "error":
        return internal()
    return cancelled()


def failure_error(result, req) -> ApiError | None:
    """The error that follows a streamed reply whose constraint failed after its first piece
    (its finish_reason is "error"; by our fault, ``Result.fault``: an internal error); None
    for any other reply."""
    if getattr(result, "finish_reason", None) != "error":
        return None
    if getattr(result, "fault", False):
        return internal()
    return user_error(ConstraintError(result.error or "the constraint failed"), req)


def failure_body(result, req) -> dict | None:
    """``failure_error``'s error object (OpenAI's shape), or None."""
    err = failure_error(result, req)
    return None if err is None else err.body()


def renamed(err: ApiError, names) -> ApiError:
    """``err`` naming its field as the request spelled it, for a route whose body was
    translated into a chat request: ``names`` holds ``(pattern, replacement)`` regular
    expressions tried in order on the chat field (``re.match``; the first that matches wins;
    a replacement may be a function of the match).  The message's mention of the field changes
    alike."""
    if err.param is None:
        return err
    for pattern, repl in names:
        m = re.match(pattern, err.param)
        if m is None:
            continue
        old = m.group(0)
        new = repl(m) if callable(repl) else m.expand(repl)
        message = err.message.replace(old, new, 1) if old in err.message else err.message
        return ApiError(err.status, message, param=new + err.param[len(old):], code=err.code, type=err.type,
                        headers=err.headers)
    return err
