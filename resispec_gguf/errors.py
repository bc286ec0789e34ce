"""User-facing errors.

A ``UserError`` is a problem with what the user asked for or supplied (a missing model file, an
incompatible vocabulary, a full context).  Surfaces print its message on one line and exit with
code 2; they never show a traceback for it.  Nothing here may import llama_cpp.
"""


class UserError(Exception):
    """An error whose message is complete, one line, and meant for the user."""


class ContextFullError(UserError):
    """The model's context window cannot hold the request."""
