"""User-facing errors.

A ``UserError`` is a problem with what the user asked for or supplied (a missing model file, an
incompatible vocabulary, a full context).  Surfaces print its message on one line and exit with
code 2; they never show a traceback for it.  Nothing here may import llama_cpp.
"""


class UserError(Exception):
    """An error whose message is complete, one line, and meant for the user."""


class ContextFullError(UserError):
    """The model's context window cannot hold the request."""


class FieldError(UserError):
    """A request field that cannot be honoured; ``param`` names it (``messages[0].content``,
    ``tools[1].function.name``): the server's 400 carries it, and ``code`` (``invalid_value``,
    or ``unsupported_value`` for something valid this server does not do)."""

    def __init__(self, message: str, param: str, code: str = "invalid_value"):
        super().__init__(message)
        self.param = param
        self.code = code


class ConstraintError(UserError):
    """A constraint (a grammar or JSON schema) that failed while a reply was being generated:
    a limit of the grammar engine met only at a later token, or the request's time budget for
    token masks spent.  The reply ends there with finish_reason "error"."""


class ConstraintFault(ConstraintError):
    """A constraint failure that is ours, not the request's: the grammar engine refused to
    commit a token its own mask allowed (or the engine committed one the mask refused).  The
    reply ends as for any ``ConstraintError``, but a server answers it as an internal error
    and logs it, never as a 400 blaming the schema."""
