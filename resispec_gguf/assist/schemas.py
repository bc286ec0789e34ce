"""JSON schemas as clients write them: walking a schema's subschemas (``$defs``, ``properties``,
``anyOf``...) and finding where a fault is, so that a schema the grammar engine cannot honour
is refused naming the feature and its place in the schema (``fault``), never ignored silently
and never with the grammar engine's text for our own grammars.

Pure Python on dicts: the grammar engine comes in as ``first_error``, a function giving its
first complaint about a schema (``grammar.check_schema`` hands it in).  May import nothing
of the package.
"""

from __future__ import annotations

import json
import re

__all__ = ["subschemas", "fault"]

# keywords whose values are schemas: a map of them, a list of them, or one (``items`` may be
# either, in older drafts)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalItems", "additionalProperties", "unevaluatedProperties", "unevaluatedItems",
               "contains", "propertyNames", "not", "if", "then", "else")
_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[([^\]]*)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")
_MISSING_POINTER = re.compile(r"Pointer '([^']*)' does not exist")
_REMOTE = re.compile(r"Resource '([^']*)' is not present")
# how many formats the engine does not know one schema may use (each costs a try)
MAX_UNKNOWN_FORMATS = 64


def subschemas(schema, path=()):
    """``(path, subschema)`` for ``schema`` and every schema inside it, depth first in the
    schema's own order (the first found is the first written); ``path``: keys and indices
    from the root, ``("properties", "tags")``."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                yield from subschemas(sub, path + (key, name))
        elif (key in _SCHEMA_LISTS or key in _SCHEMA_ONE) and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from subschemas(sub, path + (key, i))
        elif key in _SCHEMA_ONE:
            yield from subschemas(value, path + (key,))


def _without_formats(schema, names: set):
    """A copy of ``schema`` without the ``format`` annotations naming ``names``."""
    schema = json.loads(json.dumps(schema))
    for _, sub in subschemas(schema):
        if isinstance(sub.get("format"), str) and sub["format"] in names:
            del sub["format"]
    return schema


def _first(schema, test) -> tuple:
    """The path of the first subschema for which ``test`` holds, or ``()``."""
    return next((path for path, sub in subschemas(schema) if test(sub)), ())


def _at(schema, path):
    for key in path:
        schema = schema[key]
    return schema


def _regex_fault(pattern: str, first_error) -> str | None:
    """Why the grammar engine cannot read ``pattern`` (its last line: the cause), or None."""
    message = first_error({"type": "string", "pattern": pattern})
    if message is None:
        return None
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return (lines[-1].removeprefix("error: ") if lines else "unknown error")[:200]


def _located(schema, message: str, first_error) -> tuple[str, tuple | None]:
    """``(what is wrong, where)`` for the grammar engine's complaint ``message`` about ``schema``;
    ``(message, None)`` when it is about no feature found here (the caller words it)."""
    unimplemented = _UNIMPLEMENTED.search(message)
    if unimplemented:
        keys = re.findall(r'"([^"]+)"', unimplemented.group(1)) or [unimplemented.group(1)]
        path = _first(schema, lambda sub: any(k in sub for k in keys))
        key = next((k for k in keys if k in _at(schema, path)), keys[0])
        return (f"the JSON schema keyword {key!r} is not supported by the grammar engine, so replies could not be "
                "held to it; remove it, or add \"x-guidance\": {\"lenient\": true} at the schema's top level to "
                "have such keywords ignored"), path
    for pattern, why in ((_MISSING_POINTER, "points to nothing in the schema"),
                         (_REMOTE, "is not a reference within the schema (remote schemas are not fetched)")):
        found = pattern.search(message)
        if found:
            ref = found.group(1)
            path = _first(schema, lambda sub: sub.get("$ref") in (ref, "#" + ref))
            if "$ref" in _at(schema, path):
                ref, path = _at(schema, path)["$ref"], path + ("$ref",)  # as the user wrote it
            return f"$ref {ref!r} {why}", path
    if "regex parse error" in message:
        for path, sub in subschemas(schema):
            why = _regex_fault(sub["pattern"], first_error) if isinstance(sub.get("pattern"), str) else None
            if why:
                return (f"the pattern {sub['pattern'][:100]!r} is not a regular expression the grammar engine "
                        f"supports: {why}"), path + ("pattern",)
    return message, None


def fault(schema, first_error) -> tuple[str, tuple | None] | None:
    """``(what is wrong, its path in the schema)`` when the grammar engine cannot honour all
    of ``schema``, else None; the path is None when the fault is not one placed here (then
    the first item is the engine's own message).  ``first_error(schema)``: the engine's first complaint about a
    schema when it may ignore nothing (None: none).  A ``format`` it does not know is an
    annotation, as JSON Schema reads unknown formats (Pydantic writes ``binary``,
    ``password``, ``path``...): it is left out, and the schema tried again."""
    if not isinstance(schema, dict):
        return None
    ignored: set = set()
    tried = schema
    for _ in range(MAX_UNKNOWN_FORMATS):
        message = first_error(tried)
        if message is None:
            return None
        unknown = _UNKNOWN_FORMAT.search(message)
        if not unknown or unknown.group(1) in ignored:
            return _located(schema, message, first_error)
        ignored.add(unknown.group(1))
        tried = _without_formats(schema, ignored)
    return f"the JSON schema uses more than {MAX_UNKNOWN_FORMATS} formats the grammar engine does not know", ()
