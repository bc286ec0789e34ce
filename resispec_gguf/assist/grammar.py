"""The grammar engine's adapter: JSON schemas, Lark and GBNF grammars -> token masks.

The engine sees only ``protocol.Constraint``: a compiled constraint whose ``start()`` gives a
per-request state answering "which tokens may follow this path" as a packed bitmask.  This
module implements it on llguidance (its Earley parser, its JSON-schema compiler, its token
trie built from the model's own vocabulary).  What it may not do: sample, touch a model, or
know about requests and tool formats (``tools.py`` writes the grammars for tool calls).

A state's answer depends on its path alone: the matcher holds the committed tokens, and a
question about a tree path consumes the path, computes the mask and rolls the path back, so
no sibling's tokens can leak into another node's mask.  Masks are never empty: where the
grammar allows nothing more (after an end token, or past its end), the end tokens are
allowed, and the reply ends there.
"""

from __future__ import annotations

import json
import re
import time
from typing import Sequence

import numpy as np

from ..errors import ConstraintError, UserError
from ..kernels.sampling import bitmask_from_ids

__all__ = ["Grammar", "GrammarError", "json_schema_grammar", "lark_grammar", "check_schema", "ANY_JSON_OBJECT"]

# A schema or grammar larger than this is refused before compiling (the server's limit too).
MAX_GRAMMAR_BYTES = 256 * 1024

# The time a constraint may take computing token masks: one mask at most MASK_SECONDS, a
# request's masks MASK_BUDGET_SECONDS in all plus MASK_SECONDS_PER_TOKEN for each token the
# reply has (a long reply under a normal constraint, a fraction of a millisecond per mask and
# a few masks per token with speculation, stays far inside it).  Past either the reply ends
# with an error; a constraint whose first masks (computed when it is compiled) are slower
# than one mask may be is refused then.
MASK_SECONDS = 0.2
MASK_BUDGET_SECONDS = 2.0
MASK_SECONDS_PER_TOKEN = 0.01
# How many tokens deep a new constraint is tried when it is compiled (llguidance meets some of
# its limits, such as the items in a parser row, only once a token is consumed).
PROBE_DEPTH = 3

ANY_JSON_OBJECT = {"type": "object"}

# How JSON-schema text may be laid out.  Between tokens: a few blanks, or one line break and
# an indentation (pretty-printed JSON), never an unbounded run (a model that drifts into
# whitespace would otherwise fill max_tokens with it).  Compiling is lenient (a format the
# engine does not know is ignored), but every schema is first held to ``check_schema``, which
# refuses the keywords the engine would ignore; oneOf is read as anyOf.  A schema's own
# top-level "x-guidance" object overrides these.
JSON_DEFAULTS = {
    "whitespace_pattern": r"[\x20\x09]{0,4}|\x0D?\x0A[\x20\x09]{0,32}",
    "lenient": True,
    "coerce_one_of": True,
}


class GrammarError(UserError):
    """A schema or grammar that cannot be compiled, or that allows no first token; ``param``,
    when known, names the request field it came from; ``path``, where a JSON schema's fault
    was found in it (keys and indices from the schema's root: ``("properties", "tags")``)."""

    def __init__(self, message: str, param: str | None = None, path: tuple = ()):
        super().__init__(message)
        self.param = param
        self.path = tuple(path)

    def naming(self, field: str) -> "GrammarError":
        """The same error, its message and ``param`` naming ``field`` and the place in it
        (``tools[0].function.parameters.properties.tags``)."""
        where = field + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in self.path)
        return GrammarError(f"{where}: {self}", where)


def _llg():
    try:
        import llguidance
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise UserError(f"constrained generation needs llguidance: pip install llguidance ({e})") from None
    return llguidance


def _check_size(text: str, what: str) -> None:
    if len(text) > MAX_GRAMMAR_BYTES or len(text.encode("utf-8", "replace")) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"the {what} is larger than {MAX_GRAMMAR_BYTES // 1024} KiB")


def json_schema_grammar(schema) -> str:
    """The grammar for JSON text valid under ``schema`` (a dict, its JSON text, or True for
    any JSON object).  Whitespace between tokens is free, as in most JSON-mode servers."""
    if schema is True:
        schema = ANY_JSON_OBJECT
    if isinstance(schema, str):
        _check_size(schema, "JSON schema")
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"a JSON schema is an object or a boolean, got {type(schema).__name__}")
    if schema is False:
        raise GrammarError("the JSON schema false allows no value")
    if schema is True:
        schema = {}
    _check_size(json.dumps(schema, ensure_ascii=False), "JSON schema")  # its UTF-8 size, as sent
    text = json.dumps(schema)
    try:
        return _llg().LLMatcher.grammar_from_json_schema(text, defaults=JSON_DEFAULTS)
    except ValueError as e:
        raise GrammarError(f"invalid JSON schema: {e}") from None


def _as_schema(json_schema):
    """A schema as ``json_schema_grammar`` takes it (a dict, its JSON text, True) as an object
    (``json_schema_grammar`` has checked the text)."""
    return json.loads(json_schema) if isinstance(json_schema, str) else json_schema


def lark_grammar(text: str) -> str:
    """The grammar for ``text``: a Lark grammar as llguidance reads it (``start: ...``), or
    llama.cpp's GBNF (``root ::= ...``), which is converted."""
    if not isinstance(text, str) or not text.strip():
        raise GrammarError("the grammar is empty")
    _check_size(text, "grammar")
    llg = _llg()
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        lark = any_to_lark(text)
    except Exception as e:  # the converter raises its own error types and ValueError
        raise GrammarError(f"cannot read the grammar as GBNF or Lark: {e}") from None
    return llg.LLMatcher.grammar_from_lark(lark)


# -- what in a JSON schema the grammar engine cannot honour, and where

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


def _subschemas(schema, path=()):
    """``(path, subschema)`` for ``schema`` and every schema inside it, depth first in the
    schema's own order (so the first one found is the first one written)."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                yield from _subschemas(sub, path + (key, name))
        elif (key in _SCHEMA_LISTS or key in _SCHEMA_ONE) and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from _subschemas(sub, path + (key, i))
        elif key in _SCHEMA_ONE:
            yield from _subschemas(value, path + (key,))


def _without_formats(schema, names: set):
    """A copy of ``schema`` without the ``format`` annotations naming ``names``."""
    schema = json.loads(json.dumps(schema))
    for _, sub in _subschemas(schema):
        if sub.get("format") in names:
            del sub["format"]
    return schema


def _first(schema, test):
    """The path of the first subschema for which ``test`` holds, or ``()``."""
    return next((path for path, sub in _subschemas(schema) if test(sub)), ())


def _regex_fault(tokenizer, pattern: str) -> str | None:
    """Why the grammar engine cannot read ``pattern`` (its last line: the cause), or None."""
    text = _llg().LLMatcher.grammar_from_json_schema(json.dumps({"type": "string", "pattern": pattern}))
    is_error, messages = _llg().LLMatcher.validate_grammar_with_warnings(text, tokenizer)
    if not is_error:
        return None
    lines = [ln.strip() for ln in (messages[0] if messages else "").splitlines() if ln.strip()]
    return (lines[-1].removeprefix("error: ") if lines else "unknown error")[:200]


def _schema_fault(tokenizer, schema, message: str) -> GrammarError:
    """The grammar engine's complaint ``message`` about ``schema`` as a ``GrammarError`` that
    names the feature and where in the schema it is (what the user wrote, never our grammar)."""
    unimplemented = _UNIMPLEMENTED.search(message)
    if unimplemented:
        keys = re.findall(r'"([^"]+)"', unimplemented.group(1)) or [unimplemented.group(1)]
        path = _first(schema, lambda sub: any(k in sub for k in keys))
        found = next((k for k in keys if k in _dig(schema, path)), keys[0])
        return GrammarError(f"the JSON schema keyword {found!r} is not supported by the grammar engine, so replies "
                            "could not be held to it; remove it, or add \"x-guidance\": {\"lenient\": true} at the "
                            "schema's top level to have such keywords ignored", path=path)
    for pattern, why in ((_MISSING_POINTER, "points to nothing in the schema"),
                         (_REMOTE, "is not a reference within the schema (remote schemas are not fetched)")):
        found = pattern.search(message)
        if found:
            ref = found.group(1)
            path = _first(schema, lambda sub: sub.get("$ref") in (ref, "#" + ref))
            if "$ref" in _dig(schema, path):
                ref, path = _dig(schema, path)["$ref"], path + ("$ref",)  # as the user wrote it
            return GrammarError(f"$ref {ref!r} {why}", path=path)
    if "regex parse error" in message:
        for path, sub in _subschemas(schema):
            if isinstance(sub.get("pattern"), str):
                why = _regex_fault(tokenizer, sub["pattern"])
                if why:
                    return GrammarError(f"the pattern {sub['pattern'][:100]!r} is not a regular expression the "
                                        f"grammar engine supports: {why}", path=path + ("pattern",))
    return GrammarError(f"invalid JSON schema: {_reason(message)}")


def _dig(schema, path):
    for key in path:
        schema = schema[key]
    return schema


def check_schema(tokenizer, schema) -> None:
    """Refuse a JSON schema whose every keyword the grammar engine cannot honour: an
    unsupported keyword (``uniqueItems``, ``not``, ``if``...), a ``$ref`` that resolves to
    nothing, a ``pattern`` it cannot read.  A ``GrammarError`` names the feature and its
    ``path`` in the schema.  (Compiled grammars are lenient, ``JSON_DEFAULTS``: this check
    comes first.)  A ``format`` the engine does not know is an annotation, as JSON Schema
    reads unknown formats, and is ignored (Pydantic writes ``binary``, ``password``,
    ``path``...); a schema whose own ``"x-guidance"`` says ``"lenient": true`` asks for
    unsupported keywords to be ignored too."""
    if schema is True or not isinstance(schema, dict):
        return
    llg = _llg()
    strict = {**JSON_DEFAULTS, "lenient": False}
    ignored: set = set()
    checked = schema
    for _ in range(64):  # each round ignores one more unknown format
        try:
            text = llg.LLMatcher.grammar_from_json_schema(json.dumps(checked), defaults=strict)
            is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(text, tokenizer)
        except ValueError as e:
            is_error, messages = True, [str(e)]
        if not is_error:
            return
        message = messages[0] if messages else "unknown error"
        unknown = _UNKNOWN_FORMAT.search(message)
        if not unknown or unknown.group(1) in ignored:
            raise _schema_fault(tokenizer, schema, message)
        ignored.add(unknown.group(1))
        checked = _without_formats(schema, ignored)


_LOCATION = re.compile(r"^(at )?\d+\(\d+\):\s*")


def _reason(message: str) -> str:
    """The first line of llguidance's message, without where in our grammar text it was met,
    the grammar text itself or the parser's state dump (what the user sent is theirs; our
    grammar text is never echoed)."""
    line = (message or "").strip().split("\n", 1)[0].split("<state>", 1)[0]
    line = _LOCATION.sub("", line.strip())
    line = re.sub(r"^(Parser|Lexer) Error:\s*", "", line)
    line = line.replace("; consider making your grammar left-recursive if it's right-recursive", "")
    return " ".join(line.split())[:200] or "unknown error"


class Grammar:
    """A compiled grammar for one vocabulary: a ``protocol.Constraint``.

    ``tokenizer``: the vocabulary as llguidance reads it (``Engine.grammar_tokenizer``);
    ``grammar``: llguidance's grammar text (``json_schema_grammar``, ``lark_grammar``);
    ``n_vocab``: the model's vocabulary size (the logits row length).  Compiling tries the
    grammar a few tokens deep (``PROBE_DEPTH``) and times those masks, so that a limit of the
    grammar engine or a constraint too slow for the budget is a ``GrammarError`` now rather
    than a failure in the middle of a reply.  ``clock``: the mask timer (a test's fake).
    """

    def __init__(self, tokenizer, grammar: str, n_vocab: int, clock=time.perf_counter):
        llg = _llg()
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
        if is_error:
            raise GrammarError(f"invalid grammar: {_reason(messages[0]) if messages else 'unknown error'}")
        # compiled once; each request starts from a copy (compiling a large schema takes ms)
        self._matcher = llg.LLMatcher(tokenizer, grammar, log_level=0)
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.n_vocab = int(n_vocab)
        self.words = (max(self.n_vocab, tokenizer.vocab_size) + 31) // 32
        self.end_tokens = [int(t) for t in tokenizer.eos_tokens if 0 <= t < self.n_vocab]
        self._end_mask = bitmask_from_ids(self.end_tokens, 32 * self.words)
        self.clock = clock
        self._probe()

    def _probe(self) -> None:
        """Walk into the grammar: through the text it forces (a tool call's opening marker),
        then ``PROBE_DEPTH`` tokens (each time the lowest allowed token that is not an end
        token), computing each mask under the time limit of one mask."""
        try:
            state = self.start()
            for _ in range(PROBE_DEPTH):
                forced = state.m.compute_ff_tokens()[:256]
                if forced:
                    state.advance(forced)
                mask = state.mask(())
                bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: self.n_vocab]
                allowed = [int(t) for t in np.flatnonzero(bits)[:64] if int(t) not in state._end]
                if not allowed or state.is_stopped():
                    return
                state.advance(allowed[:1])
        except ConstraintError as e:
            raise GrammarError(str(e)) from None

    def start(self) -> "GrammarState":
        """A fresh state at the start of a reply; ``GrammarError`` when nothing may come first."""
        matcher = self._matcher.deep_copy()
        if matcher.is_error():
            raise GrammarError(f"invalid grammar: {_reason(matcher.get_error())}")
        state = GrammarState(self, matcher)
        try:
            first = state.mask(())
        except ConstraintError as e:
            raise GrammarError(str(e)) from None
        if not first.any() or (np.array_equal(first, self._end_mask) and not matcher.is_accepting()):
            raise GrammarError("the constraint allows no token at the first position")
        return state


class GrammarState:
    """One request's position in a ``Grammar`` (``protocol.ConstraintState``).  Its masks
    together may take ``MASK_BUDGET_SECONDS`` plus ``MASK_SECONDS_PER_TOKEN`` per token of the
    reply, one mask ``MASK_SECONDS``; past either, and when the grammar engine meets one of
    its limits, ``ConstraintError``."""

    def __init__(self, grammar: Grammar, matcher):
        self.g = grammar
        self.m = matcher
        self._end = frozenset(grammar.end_tokens)
        self.spent = 0.0  # seconds spent computing masks
        self.tokens = 0  # tokens the reply has (advanced past)

    def _failed(self, what: str) -> ConstraintError:
        return ConstraintError(f"the constraint is too complex for the grammar engine ({what}): "
                               f"{_reason(self.m.get_error())}")

    def _timed_mask(self, out: np.ndarray) -> None:
        t = self.g.clock()
        self.m.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)
        took = self.g.clock() - t
        self.spent += took
        if took > MASK_SECONDS:
            raise ConstraintError(f"the constraint is too slow: one token mask took {took:.2f} s; the limit is "
                                  f"{MASK_SECONDS} s per mask")
        if self.spent > MASK_BUDGET_SECONDS + MASK_SECONDS_PER_TOKEN * self.tokens:
            raise ConstraintError(f"the constraint is too slow: its token masks took {self.spent:.2f} s for "
                                  f"{self.tokens} tokens; the limit is {MASK_BUDGET_SECONDS} s per request plus "
                                  f"{MASK_SECONDS_PER_TOKEN} s per token")

    def mask(self, path: Sequence[int]) -> np.ndarray:
        path = [int(t) for t in path]
        if any(t in self._end for t in path):  # nothing after an end token is ever emitted
            return self.g._end_mask.copy()
        out = np.zeros(self.g.words, np.int32)
        if path and not self.m.consume_tokens(path):
            raise self._failed("at a drafted token")
        try:
            if not self.m.is_stopped():
                self._timed_mask(out)
                if self.m.is_error():
                    raise self._failed("computing a token mask")
        finally:
            if path:
                self.m.rollback(len(path))
        if not out.any():
            out[:] = self.g._end_mask
        return out

    def advance(self, tokens: Sequence[int]) -> None:
        tokens = [int(t) for t in tokens if int(t) not in self._end]
        if tokens and not self.m.consume_tokens(tokens):
            raise self._failed("at a generated token")
        self.tokens += len(tokens)

    def is_stopped(self) -> bool:
        return bool(self.m.is_stopped())


class Grammars:
    """Constraints compiled against one model's vocabulary (``vocab``: its ``n_vocab`` and
    ``grammar_tokenizer()``, any ``backend.LlamaModel``): the grammar engine's view of the
    vocabulary is built on the first constrained request (about a second at 152k tokens),
    and the 32 most recent compiled grammars are kept."""

    def __init__(self, vocab):
        self.vocab = vocab
        self._tokenizer = None
        self._compiled: dict[str, Grammar] = {}  # most recent last
        self._checked: dict[str, None] = {}  # schemas ``check`` passed, most recent last

    def tokenizer(self):
        """The vocabulary as llguidance reads it (built once, then cached)."""
        if self._tokenizer is None:
            self._tokenizer = self.vocab.grammar_tokenizer()
        return self._tokenizer

    def compile(self, *, json_schema=None, grammar: str | None = None) -> Grammar:
        """A constraint from a JSON schema (a dict, its JSON text, or True for any JSON
        object) or a grammar (Lark as llguidance reads it, or llama.cpp's GBNF, converted).
        A schema or grammar that cannot be compiled raises ``GrammarError`` saying why."""
        if (json_schema is None) == (grammar is None):
            raise TypeError("give exactly one of json_schema and grammar")
        text = json_schema_grammar(json_schema) if json_schema is not None else lark_grammar(grammar)
        compiled = self._compiled.pop(text, None)
        if compiled is None:
            if json_schema is not None:
                check_schema(self.tokenizer(), _as_schema(json_schema))
            compiled = Grammar(self.tokenizer(), text, self.vocab.n_vocab)
        self._compiled[text] = compiled
        while len(self._compiled) > 32:
            self._compiled.pop(next(iter(self._compiled)))
        return compiled

    def check(self, json_schema) -> None:
        """Compile ``json_schema`` (as ``compile``) only to see that it works, without keeping
        it among the compiled ones (a tool's parameters, checked on their own: a lazily
        started call's limits are not met when its whole grammar is compiled).  The 1024
        most recent schemas that passed are remembered and not compiled again."""
        text = json_schema_grammar(json_schema)
        if text in self._checked:
            self._checked[text] = self._checked.pop(text)
            return
        if text not in self._compiled:
            check_schema(self.tokenizer(), _as_schema(json_schema))
            Grammar(self.tokenizer(), text, self.vocab.n_vocab)
        self._checked[text] = None
        while len(self._checked) > 1024:
            self._checked.pop(next(iter(self._checked)))
