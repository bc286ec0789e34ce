"""The grammar engine's adapter: JSON schemas, Lark and GBNF grammars -> token masks.

The engine sees only ``protocol.Constraint``: a compiled constraint whose ``start()`` gives a
per-request state answering "which tokens may follow this path" as a packed bitmask.  This
module implements it on llguidance (its Earley parser, its JSON-schema compiler, its token
trie built from the model's own vocabulary).  What it may not do: sample, touch a model, or
know about requests and tool formats (``formats`` writes the grammars for tool calls).

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

from ..errors import ConstraintError, ConstraintFault, UserError
from ..kernels.sampling import bitmask_from_ids, mask_allows
from . import schemas

__all__ = ["Grammar", "GrammarError", "json_schema_grammar", "json_options", "laid_out", "lark_grammar", "check_schema",
           "ANY_JSON_OBJECT"]

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

# How JSON-schema text is laid out: on one line, as Python's json.dumps writes it and models
# write tool calls (", " between items, ": " after a key, no other whitespace between tokens;
# pretty-printing, which a model may prefer elsewhere, is not allowed), so that the grammar
# forces the bytes from a value's end to the next key's name (`, "email": "`), which the
# engine proposes as free candidates (decoding/forced.py); a schema that takes any object
# (json_object) has no key to force, and gets the flexible layout below.  Compiling is lenient
# (a format the engine does not know is ignored), but every schema is first held to
# ``check_schema``, which refuses the keywords the engine would ignore; oneOf is read as
# anyOf.  A schema's own top-level "x-guidance" object overrides these (``json_options``).
JSON_DEFAULTS = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": True,
    "coerce_one_of": True,
}
# The layout a schema's own "x-guidance" gets when it asks for whitespace (whitespace_flexible
# true, or a whitespace_pattern of its own): bare separators and, between tokens, a few
# blanks or one line break and an indentation (pretty-printed JSON), never an unbounded run
# (a model that drifts into whitespace would otherwise fill max_tokens with it).
FLEXIBLE_LAYOUT = {
    "whitespace_pattern": r"[\x20\x09]{0,4}|\x0D?\x0A[\x20\x09]{0,32}",
    "item_separator": ",",
    "key_separator": ":",
}


# keywords that say nothing about a value (with no others, a schema takes any object)
_ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "$comment", "examples"})


def _any_object(schema) -> bool:
    """Whether ``schema`` takes any JSON object and says nothing more (``json_object``'s, or
    ``{"type": "object"}``): no key is known, so the one-line layout forces nothing, and it
    only masks the layout the model would write.  Measured on the default pair (an instructor
    JSON-mode prompt, 8 seeds): one line, 5 of 8 replies gave keys such as ``"/customer"``
    (after ``{`` the model's line break is masked, and the token ``"/`` is allowed) and 3 were
    valid; the flexible layout, 8 of 8 valid."""
    if not isinstance(schema, dict):
        return False
    return {k: v for k, v in schema.items() if k not in _ANNOTATIONS} in ({}, {"type": "object"})


def json_options(schema) -> dict:
    """The JSON compiler's options for ``schema`` (a dict): ``JSON_DEFAULTS``, then
    ``FLEXIBLE_LAYOUT`` where the schema's own top-level "x-guidance" asks for whitespace
    or, with no "x-guidance", where the schema takes any object (``_any_object``), then that
    object's own options."""
    own = schema.get("x-guidance") if isinstance(schema, dict) else None
    if not isinstance(own, dict):  # none, or not an object (llguidance refuses that)
        return {**JSON_DEFAULTS, **FLEXIBLE_LAYOUT} if _any_object(schema) else dict(JSON_DEFAULTS)
    flexible = bool(own.get("whitespace_flexible")) or bool(own.get("whitespace_pattern"))
    return {**JSON_DEFAULTS, **(FLEXIBLE_LAYOUT if flexible else {}), **own}


def laid_out(schema: dict, guidance=None) -> dict:
    """``schema`` with its "x-guidance" set to ``json_options`` (a schema inside a Lark
    grammar's ``%json``, where no defaults apply): of ``guidance`` where given (a client's
    own "x-guidance" object, for a schema around the client's, such as a call object around
    a function's parameters: an "x-guidance" below the top level is not read), else of the
    schema's own."""
    options = json_options(schema if guidance is None else {"x-guidance": guidance})
    return {"x-guidance": options, **{k: v for k, v in schema.items() if k != "x-guidance"}}


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
    any JSON object), laid out as ``json_options`` says: on one line by default."""
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
        return _llg().LLMatcher.grammar_from_json_schema(text, defaults=json_options(schema))
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


def _strict_error(tokenizer, schema) -> str | None:
    """llguidance's first complaint about ``schema`` when it may ignore no keyword, or None."""
    llg = _llg()
    try:
        strict = {**json_options(schema), "lenient": False}  # the schema's own "lenient" still wins
        text = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=strict)
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(text, tokenizer)
    except ValueError as e:
        return str(e) or "unknown error"
    return (messages[0] if messages else "unknown error") if is_error else None


def check_schema(tokenizer, schema) -> None:
    """Refuse a JSON schema with a feature the grammar engine cannot honour (``schemas.fault``:
    an unsupported keyword, a ``$ref`` to nothing, a ``pattern`` it cannot read), as a
    ``GrammarError`` naming it and its ``path`` in the schema.  Compiled grammars are lenient
    (``JSON_DEFAULTS``): this check comes first.  A ``format`` the engine does not know is an
    annotation and is ignored; a schema whose own ``"x-guidance"`` says ``"lenient": true``
    asks for unsupported keywords to be ignored too."""
    try:
        found = schemas.fault(schema, lambda s: _strict_error(tokenizer, s))
    except RecursionError:
        raise GrammarError("the JSON schema is nested too deeply") from None
    if found is not None:
        message, path = found
        if path is None:
            raise GrammarError(f"invalid JSON schema: {_reason(message)}")
        raise GrammarError(message, path=path)


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
    than a failure in the middle of a reply.  ``clock``: the mask timer (a test's fake).  It
    is the calling thread's CPU time: the limits are on the grammar's cost, and a mask that
    waited for a core on a busy machine (other slots decoding) did not cost more.
    """

    def __init__(self, tokenizer, grammar: str, n_vocab: int, clock=time.thread_time):
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
        except ConstraintFault:  # ours: never the schema's fault
            raise
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

    def _failed(self, what: str, matcher=None) -> ConstraintError:
        m = self.m if matcher is None else matcher
        return ConstraintError(f"the constraint is too complex for the grammar engine ({what}): "
                               f"{_reason(m.get_error())}")

    def _at(self, path: list[int]):
        """The matcher after the committed tokens + ``path``: the committed matcher itself
        for an empty path, else a copy of it that took ``path`` (a copy costs under a
        microsecond).  Never the committed matcher rolled back: llguidance's matcher, asked
        for a mask after drafted tokens and rolled back, later answered another path with the
        mask of the one it had been asked about (an agent's ``read_file`` call's arguments
        for its ``write_file`` call's), so a path's answer would depend on the paths asked
        about before it (tests/test_realmodel.py)."""
        if not path:
            return self.m
        m = self.m.deep_copy()
        if not m.consume_tokens(path):
            raise self._failed("at a drafted token", m)
        return m

    def _timed_mask(self, out: np.ndarray, m) -> None:
        t = self.g.clock()
        m.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)
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
        m = self._at(path)
        if not m.is_stopped():
            self._timed_mask(out, m)
            if m.is_error():
                raise self._failed("computing a token mask", m)
        if not out.any():
            out[:] = self.g._end_mask
        return out

    def forced(self, path: Sequence[int]) -> list[int]:
        """The tokens llguidance spells the bytes the grammar forces after ``path`` with
        (``protocol.ForcingState``; its canonical tokenisation, dropping a last token that
        the next bytes could extend), within the vocabulary; empty when nothing is forced."""
        path = [int(t) for t in path]
        if any(t in self._end for t in path):
            return []
        m = self._at(path)
        out = [] if m.is_stopped() else m.compute_ff_tokens()
        keep = []
        for t in out:  # an end token or one the model lacks ends the candidate chain
            if not 0 <= t < self.g.n_vocab or t in self._end:
                break
            keep.append(int(t))
        return keep

    def advance(self, tokens: Sequence[int]) -> None:
        """Commit ``tokens`` (end tokens are skipped).  A token the grammar engine refuses is
        a ``ConstraintError`` when it met one of its limits there, and a ``ConstraintFault``
        (ours) when the mask at that point allowed the token, or refused it (the engine
        should never have committed it)."""
        tokens = [int(t) for t in tokens if int(t) not in self._end]
        taken = self.m.try_consume_tokens(tokens) if tokens else 0
        self.tokens += taken
        if taken == len(tokens):
            return
        if self.m.is_error():
            raise self._failed("at a generated token")
        t = tokens[taken]
        allowed = mask_allows(self.mask(()), t)  # a limit met here raises ConstraintError
        piece = self.g.tokenizer.decode_bytes([t])
        raise ConstraintFault(f"the grammar engine refused token {t} ({piece!r}) that its mask "
                              f"{'allowed' if allowed else 'refused, yet it was committed'}")

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
