"""The settings' schema: how a setting is described once and what is made of that description.

A setting is a dataclass field made by ``setting``: its default, its command-line flags, its
help text, its check (a ``Range`` or ``OneOf``, or a function) and, when a request may set
it, the name of its request field (``request``).  ``Settings``, the base of the settings
dataclasses (``config``), normalises every field to its type (``kind``) and runs its check
in ``__post_init__``; ``parse_field`` turns a setting typed as text (a flag, chat's ``/set``)
into its value; ``settings`` lists the fields with flags, ``request_fields`` those a request
may set.  A bad value raises ``ConfigError``, whose ``field`` names the setting.

This is the base layer: it imports nothing of the package but ``errors``.
"""

from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import UserError

__all__ = ["ConfigError", "number_text", "Range", "OneOf", "setting", "Kind", "kind", "settings", "request_fields",
           "request_name", "find_setting", "short_name", "parse_field", "Settings"]


class ConfigError(UserError, ValueError):
    """A setting with a value it may not take; ``field`` is the dataclass field's name."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def number_text(x) -> str:
    """A bound or a value as an error message shows it (``0.5``, ``1e+06``, ``12``)."""
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Range:
    """``lo <= value <= hi`` (either end may be open or absent); ``why`` explains the bound."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    why: str = ""

    def __call__(self, name: str, value) -> None:
        low = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
        high = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
        if not (low and high):  # NaN fails both
            why = f" ({self.why})" if self.why else ""
            raise ConfigError(name, f"{name} must be {self}{why}, got {number_text(value)}")

    def __str__(self) -> str:
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {number_text(self.lo)}"
        lo, hi = number_text(self.lo), number_text(self.hi)
        return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"


@dataclass(frozen=True)
class OneOf:
    values: tuple[str, ...]

    def __call__(self, name: str, value) -> None:
        if value not in self.values:
            raise ConfigError(name, f"{name} must be one of {', '.join(self.values)}, got {value!r}")


def setting(default, *flags: str, help: str, check=None, unset: tuple[str, ...] = ("none",),
            metavar: str | None = None, request: str | bool = False):
    """A dataclass field described for the surfaces.

    ``flags``: its command-line flags (none: not on the command line).  ``help``: one line;
    for a field whose default is None it says what None means.  ``check(name, value)``:
    raises ``ConfigError`` for a value the field may not take (for a tuple field: per item).
    ``unset``: the words that mean None when an optional setting is typed as text.
    ``request``: a request may set it, in the field named as the setting (True) or so named
    (a string); False: only the command line (or the library) sets it."""
    meta = {"flags": flags, "help": help, "check": check, "unset": unset, "metavar": metavar,
            "request": request}
    return field(default=default, metadata=meta)


class Kind(typing.NamedTuple):
    """A field's type: ``base`` (bool, int, float or str), whether None is allowed, and
    whether it is a tuple of ``base`` items."""

    base: type
    optional: bool
    many: bool


@lru_cache(maxsize=None)
def _kinds(cls) -> dict[str, Kind]:
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple:
            out[name] = Kind(args[0], False, True)
        elif typing.get_origin(hint) in (typing.Union, types.UnionType):
            out[name] = Kind(next(a for a in args if a is not type(None)), True, False)
        else:
            out[name] = Kind(hint, False, False)
    return out


def kind(cls, name: str) -> Kind:
    return _kinds(cls)[name]


def _field(cls, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    raise KeyError(name)


def settings(cls) -> list[dataclasses.Field]:
    """The fields of ``cls`` that have command-line flags, in order."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("flags")]


def find_setting(classes, name: str) -> tuple[type, str]:
    """``(class, field name)`` of the setting called ``name``: a field name or one of its
    flags, with or without dashes, ``-`` and ``_`` alike (``temp``, ``top-k``, ``K``)."""
    key = name.strip().lstrip("-").lower().replace("-", "_")
    for cls in classes:
        for f in settings(cls):
            names = {f.name} | {flag.lstrip("-").lower().replace("-", "_") for flag in f.metadata["flags"]}
            if key in names:
                return cls, f.name
    known = ", ".join(short_name(f) for cls in classes for f in settings(cls))
    raise ConfigError(name, f"unknown setting {name!r}; try one of {known}")


def short_name(f: dataclasses.Field) -> str:
    """A setting's name as a user types it: its first flag without dashes."""
    return f.metadata["flags"][0].lstrip("-")


def request_name(f: dataclasses.Field) -> str | None:
    """The request field that sets ``f``, None when a request may not set it."""
    name = f.metadata.get("request", False)
    return (f.name if name is True else name) or None


def request_fields(cls) -> list[dataclasses.Field]:
    """The fields of ``cls`` a request may set, in order."""
    return [f for f in dataclasses.fields(cls) if request_name(f)]


def _typed(name: str, k: Kind, value):
    """``value`` as the field's base type, or ConfigError."""
    if k.base is bool:
        if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
            return bool(value)
        raise ConfigError(name, f"{name} must be true or false, got {value!r}")
    if k.base is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        raise ConfigError(name, f"{name} must be an integer, got {value!r}")
    if k.base is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(name, f"{name} must be a number, got {value!r}")
    if not isinstance(value, k.base):
        raise ConfigError(name, f"{name} must be a {k.base.__name__}, got {value!r}")
    return value


def _checked(cls, name: str, value):
    """``value`` for field ``name`` normalised to the field's type and checked, or ConfigError."""
    k = kind(cls, name)
    check = _field(cls, name).metadata.get("check")
    if k.many:
        items = (value,) if isinstance(value, str) else tuple(value or ())
        items = tuple(_typed(name, k, v) for v in items)
        for v in items:
            if check:
                check(name, v)
        return items
    if value is None:
        if k.optional:
            return None
        raise ConfigError(name, f"{name} must be set, got None")
    value = _typed(name, k, value)
    if check:
        check(name, value)
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_field(cls, name: str, text: str):
    """The value ``text`` stands for as field ``name`` of ``cls`` (typed after a flag or
    ``/set``), checked by the field's own rule; ``ConfigError`` naming the field otherwise.
    For a tuple field, ``text`` is one item."""
    f = _field(cls, name)
    k = kind(cls, name)
    if k.optional and k.base is not str and text.strip().lower() in f.metadata.get("unset", ()):
        return None
    value: typing.Any = text
    if k.base is bool:
        word = text.strip().lower()
        if word not in _TRUE + _FALSE:
            raise ConfigError(name, f"{name} must be on or off, got {text!r}")
        value = word in _TRUE
    elif k.base is int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(name, f"{name} must be an integer, got {text!r}") from None
    elif k.base is float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(name, f"{name} must be a number, got {text!r}") from None
    checked = _checked(cls, name, (value,) if k.many else value)
    return checked[0] if k.many else checked


class Settings:
    """Validation and ``replace`` for the settings dataclasses."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _checked(type(self), f.name, getattr(self, f.name)))

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)
