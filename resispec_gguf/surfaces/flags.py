"""Command-line flags made from the settings dataclasses, and settings made back from them.

``add_settings`` turns each field that declares flags (``config.setting``) into an argparse
option with the field's type, check, help and default, and records which fields it added;
``from_args`` builds the dataclass from those fields of the parsed namespace alone, so a
command's own option that shares a field's name (bench's list-valued ``--temperature``) is
never read as the setting.  A bad value is one argparse error naming the flag.  Only the CLI
uses this module; it imports nothing but ``config``.
"""

from __future__ import annotations

import argparse

from .. import config

__all__ = ["add_settings", "field_type", "from_args", "list_type", "offered"]


def field_type(cls, name: str):
    """An argparse ``type`` that parses one value of ``cls``'s field ``name``."""

    def parse(text: str):
        try:
            return config.parse_field(cls, name, text)
        except config.ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name
    return parse


def list_type(cls, name: str):
    """An argparse ``type`` for a comma-separated list of values of field ``name``."""
    item = field_type(cls, name)

    def parse(text: str) -> list:
        values = [item(t) for t in text.split(",") if t.strip()]
        if not values:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        return values

    parse.__name__ = name
    return parse


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value == () else str(value)


def _added(cls) -> str:
    """The namespace attribute listing the fields of ``cls`` that ``add_settings`` added."""
    return f"_settings_{cls.__name__}"


def add_settings(parser, cls, title: str, *, skip=(), defaults=None, helps=None) -> None:
    """Add a group ``title`` with a flag for every setting of ``cls`` not in ``skip``;
    ``defaults`` overrides field defaults for this command, ``helps`` their help texts (which
    then say the default themselves)."""
    group = parser.add_argument_group(title)
    added = list(offered(parser, cls))
    for f in config.settings(cls):
        if f.name in skip:
            continue
        added.append(f.name)
        meta = f.metadata
        overridden = f.name in (defaults or {})
        default = defaults[f.name] if overridden else f.default
        k = config.kind(cls, f.name)
        help_text = meta["help"]
        if overridden or "default:" not in help_text:  # else the help says what None means
            help_text = help_text.split(" (default:")[0] + f" (default: {_shown(default)})"
        kw = dict(dest=f.name, help=(helps or {}).get(f.name, help_text))
        if k.base is bool:
            kw.update(action=argparse.BooleanOptionalAction, default=default)
        else:
            kw.update(type=field_type(cls, f.name), default=None if k.many else default)
            if k.many:
                kw["action"] = "append"
            check = meta.get("check")
            if isinstance(check, config.OneOf):
                kw["metavar"] = "{" + ",".join(check.values) + "}"
            else:
                long = next((x for x in meta["flags"] if x.startswith("--")), meta["flags"][0])
                kw["metavar"] = meta.get("metavar") or long.lstrip("-").upper().replace("-", "_")
        group.add_argument(*meta["flags"], **kw)
    parser.set_defaults(**{_added(cls): tuple(added)})


def offered(parser, cls) -> tuple[str, ...]:
    """The fields of ``cls`` that ``add_settings`` gave ``parser`` flags for."""
    return parser.get_default(_added(cls)) or ()


def from_args(cls, args, **overrides):
    """``cls`` from the flags ``add_settings`` added for it (``ConfigError``, a ``UserError``,
    for a bad combination).  A flag left at None, or not offered, keeps the field's default."""
    names = getattr(args, _added(cls), ())
    values = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    return cls(**{**values, **overrides})
