"""Views of a prompt's text as a reply would quote it: the same texts escaped into a JSON
string, and JSON strings of the prompt unescaped.

Why.  A tool call's arguments and a JSON-mode answer are JSON: a file the prompt holds comes
back with every newline, quote and backslash escaped (``\\n``, ``\\"``, ``\\\\``), so a lookup
that matches the prompt's tokens as they are loses the copy at every line break.  Tokenized
as the reply will write it, the prompt's text offers the whole copy.  The other way round,
a file the agent wrote before sits in the history as a JSON string, and a reply that quotes
it as code writes it raw.

Each view is a text; the engine tokenizes it with the target's tokenizer and adds it to the
request's own index beside the prompt (``memory.MemoryDrafts``).  A view is a function of the
prompt alone, fixed before any draw, so its candidates are deterministic candidates like the
prompt's own and verification stays exact.

Pure Python (``json``, ``re``); no model, no decoding.
"""

from __future__ import annotations

import json
import re

__all__ = ["MIN_QUOTED", "views_of"]

# JSON escapes a character of these (a text without any reads the same inside a string)
_ESCAPED = re.compile(r'["\\\x00-\x1f]')
# a JSON string literal: quotes around non-quote, non-backslash characters and escapes
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
MIN_QUOTED = 24  # shorter JSON strings of the prompt (keys, names) are not worth a view


def json_string_view(text: str) -> str | None:
    """``text`` as it reads inside a JSON string (``json.dumps`` without its quotes, non-ASCII
    kept as most models write it); None when that is ``text`` itself."""
    if not _ESCAPED.search(text):
        return None
    return json.dumps(text, ensure_ascii=False)[1:-1]


def raw_view(text: str) -> str | None:
    """The JSON strings in ``text`` that hold an escape and at least ``MIN_QUOTED``
    characters, unescaped and joined by newlines; None when there is none."""
    out = []
    for m in _STRING.finditer(text):
        body = m.group(1)
        if len(body) < MIN_QUOTED or "\\" not in body:
            continue
        try:
            out.append(json.loads('"' + body + '"'))
        except ValueError:  # not valid JSON after all (a lone escape in prose)
            continue
    return "\n".join(out) if out else None


def views_of(text: str) -> list[str]:
    """The views of a prompt's ``text`` worth indexing (module docstring), in a fixed order."""
    return [v for v in (json_string_view(text), raw_view(text)) if v]
