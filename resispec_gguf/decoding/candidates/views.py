"""Views of a prompt's text as a reply would quote it: the same texts escaped into a JSON
string, and JSON strings of the prompt unescaped.

Why.  A tool call's arguments and a JSON-mode answer are JSON: a file the prompt holds comes
back with every newline, quote and backslash escaped (``\\n``, ``\\"``, ``\\\\``), so a lookup
that matches the prompt's tokens as they are loses the copy at every line break.  Tokenized
as the reply will write it, the prompt's text offers the whole copy.  The other way round,
a file the agent wrote before sits in the history as a JSON string, and a reply that quotes
it as code writes it raw.

Each view is a text, tokenized with the target's tokenizer (``prompt_views``).  ``ViewsSource``
is the candidate source over them (``candidates.base``: this module and its ``register`` are
all a new source takes), an *indexed* one: its token sequences join the request's own index
beside the prompt (``context.ContextSource``), so a node matches the longest suffix over the
prompt, the output and the views at once.  Measured against a source of its own (its own
index and bins, its candidates after the context's): on a Markov target that copies a view
which the prompt holds with every sixth token changed (the line breaks of a raw file against
its JSON string), tau 3.57 / 4.11 (auto, T 0 / 0.8) and 4.17 / 4.32 (chain with lookup)
in the request's index against 2.44 / 2.66 and 2.78 / 3.14 on its own: the context's
shorter match at each break led the node there (``scripts/views_tau.py``; on the default pair
the difference is small, docs/architecture.md).  A view is a function of the prompt alone,
fixed before any draw, so its candidates are deterministic candidates like the prompt's own
and verification stays exact.

Pure Python (``json``, ``re``); no model.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

from .base import Request, SourceDefaults, TextCodec, register
from .context import uses_lookup

__all__ = ["MIN_QUOTED", "ViewsSource", "prompt_views", "views_of"]

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


def prompt_views(text: TextCodec | None, tokens: Sequence[int]) -> list[list[int]]:
    """The views of the prompt ``tokens``' text, each tokenized as plain text with ``text``
    (the target's tokenizer); none without a tokenizer (the test fakes)."""
    if text is None:
        return []
    prompt = text.detokenize(tokens).decode("utf-8", "replace")
    return [text.tokenize(v, add_special=False, parse_special=False) for v in views_of(prompt)]


@register
class ViewsSource(SourceDefaults):
    """The prompt's views as a candidate source (module docstring): an *indexed* source, whose
    token sequences join the request's own index (``context.ContextSource``), so a node's
    match is the longest over the prompt, the output and the views, and its candidates are
    the context's, in the context's bins."""

    name = "views"
    priors = ()
    indexed = True

    @classmethod
    def sequences(cls, request: Request) -> list[list[int]]:
        """The views of ``request``'s prompt (none with ``views`` off or no lookup)."""
        if not (uses_lookup(request.dp) and request.dp.views):
            return []
        return [v for v in prompt_views(request.text, request.prompt) if v]
