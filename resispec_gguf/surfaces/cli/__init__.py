"""Command line: ``python -m resispec_gguf {chat,generate,serve,bench,analyze,models,rpc-worker,doctor}``.

A thin layer: the settings' flags come from the config dataclasses (``flags.py``), which also
validate them; each command turns its flags into settings, loads the engine and hands both to
a library function.  Every user error becomes one line on stderr with exit code 2.  The
commands that load models first ask ``llama.buildcheck`` whether this llama.cpp build can load
and decode a quantized model here (a child process; cached per build).

The modules: ``parser`` (``build_parser``: the sub-commands and their flags), ``commands``
(the commands but bench, and the helpers they share) and ``bench_cmd`` (bench's modes,
``--against llama.cpp DIR`` among them, which ``bench.compare`` runs).  They may import
every other layer and surface; nothing in the package imports the command line but its own
modules (and ``__main__``), and only they import ``flags``.
"""

from __future__ import annotations

import os
import sys

from ...errors import UserError
from .parser import build_parser

__all__ = ["build_parser", "main"]


def _text(value):
    """A text argument as valid Unicode: bytes that do not decode (which Python keeps as lone
    surrogates) become U+FFFD, as they would in any text editor."""
    if isinstance(value, str):
        return os.fsencode(value).decode(sys.getfilesystemencoding(), "replace")
    if isinstance(value, list):
        return [_text(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_text(v) for v in value)
    return value


_TEXT_ARGS = ("prompt", "stop", "system", "model_name")


def main(argv=None) -> int:
    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:  # undecodable input becomes U+FFFD instead of an exception
        reconfigure(errors="replace")
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in _TEXT_ARGS:
        if hasattr(args, name):
            setattr(args, name, _text(getattr(args, name)))
    if not args.command:
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except UserError as e:
        print(f"resispec-gguf: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # the environment, not a bug: an unreadable/unwritable file or directory
        print(f"resispec-gguf: error: {e}", file=sys.stderr)
        return 2
