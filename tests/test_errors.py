"""``errors``: what the surfaces catch to print one line and exit 2 (or answer a 400)."""

import pytest

from resispec_gguf.config import ConfigError
from resispec_gguf.errors import ContextFullError, FieldError, UserError


def test_every_user_facing_error_is_a_user_error():
    for cls in (ContextFullError, FieldError, ConfigError):
        assert issubclass(cls, UserError)
    assert not issubclass(UserError, (ValueError, RuntimeError))  # a bug is never taken for one


def test_a_field_error_names_its_field():
    e = FieldError("must be a string", "messages[0].content")
    assert str(e) == "must be a string" and e.param == "messages[0].content"
    with pytest.raises(UserError):
        raise e
