"""grammar.py on the tiny GGUF vocabulary (bytes as tokens, see tiny_gguf.py): ``Grammars``
compiles once per schema or grammar and keeps the 32 most recent, a schema that cannot be
compiled is a one-line ``GrammarError``, and a JSON-schema constraint's masks allow exactly
the bytes JSON valid under it may continue with (the end tokens where it is complete)."""

import pytest

from resispec_gguf.assist.grammar import (FLEXIBLE_LAYOUT, JSON_DEFAULTS, Grammars, GrammarError, check_schema,
                                          json_options, json_schema_grammar, laid_out, lark_grammar)
from resispec_gguf.errors import UserError
from resispec_gguf.kernels.sampling import mask_allows
from tiny_gguf import BYTE0_ID, EOS_ID, IM_END_ID, N_VOCAB, SPACE_ID


def _bytes(text: str) -> list[int]:
    """``text`` as the tiny vocabulary's byte tokens."""
    return [BYTE0_ID + b for b in text.encode()]


def _spelt(text: str) -> list[int]:
    """``text`` as the grammar engine spells it in the tiny vocabulary: bytes, a blank as
    the vocabulary's space token."""
    return [SPACE_ID if t == BYTE0_ID + 32 else t for t in _bytes(text)]


def _allowed(mask) -> set:
    """What ``mask`` allows: a byte's character (the space token's too), or a special
    token's id."""
    ids = [t for t in range(N_VOCAB) if mask_allows(mask, t)]
    return {chr(t - BYTE0_ID) if BYTE0_ID <= t < BYTE0_ID + 256 else " " if t == SPACE_ID else t for t in ids}


class _Vocab:
    """The tiny target's vocabulary, counting how often the grammar engine's view is built."""

    def __init__(self, model):
        self.model = model
        self.n_vocab = model.n_vocab
        self.built = 0

    def grammar_tokenizer(self):
        self.built += 1
        return self.model.grammar_tokenizer()


@pytest.fixture(scope="module")
def vocab(engine):
    return _Vocab(engine.grammars.vocab)


@pytest.fixture
def grammars(vocab):
    return Grammars(vocab)


def _schema(i: int) -> dict:
    return {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}


def test_a_schema_is_compiled_once_and_the_vocabulary_read_once(grammars, vocab):
    built = vocab.built
    first = grammars.compile(json_schema=_schema(0))
    assert grammars.compile(json_schema=_schema(0)) is first
    assert grammars.compile(json_schema='{"type": "object", "properties": {"k0": {"type": "integer"}}, '
                                        '"required": ["k0"]}') is first  # its JSON text: the same grammar
    assert grammars.compile(json_schema=_schema(1)) is not first
    lark = grammars.compile(grammar='start: "yes" | "no"')
    assert grammars.compile(grammar='start: "yes" | "no"') is lark
    assert vocab.built == built + 1 and grammars.tokenizer() is grammars.tokenizer()


def test_the_32_most_recently_used_are_kept(grammars):
    kept = [grammars.compile(json_schema=_schema(i)) for i in range(32)]
    assert grammars.compile(json_schema=_schema(0)) is kept[0]  # used again: now the most recent
    grammars.compile(json_schema=_schema(32))  # a 33rd: the least recently used (1) goes
    assert len(grammars._compiled) == 32
    assert grammars.compile(json_schema=_schema(0)) is kept[0]
    assert all(grammars.compile(json_schema=_schema(i)) is kept[i] for i in range(3, 32))
    assert grammars.compile(json_schema=_schema(1)) is not kept[1]  # compiled anew


@pytest.mark.parametrize("kw,needle", [
    (dict(json_schema={"type": "nonsense"}), "invalid JSON schema: Invalid type: nonsense"),
    (dict(json_schema={"type": "integer", "minimum": 5, "maximum": 1}), "minimum (5) is greater than maximum (1)"),
    (dict(json_schema={"$ref": "#/nope"}), "/nope"),
    (dict(json_schema="{nope"), "the JSON schema is not valid JSON"),
    (dict(json_schema=False), "allows no value"),
    (dict(json_schema=[1]), "a JSON schema is an object or a boolean, got list"),
    (dict(json_schema="[" * (300 * 1024)), "larger than 256 KiB"),
    (dict(grammar="   "), "the grammar is empty"),
])
def test_a_bad_schema_or_grammar_is_a_one_line_grammar_error(grammars, kw, needle):
    with pytest.raises(GrammarError) as e:
        grammars.compile(**kw)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, UserError)
    assert not grammars._compiled  # nothing half-compiled is kept


# schemas as clients write them (Pydantic's nested models, unions, bounds): each compiles
ITEM = {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                                         "size": {"anyOf": [{"enum": ["S", "M"]}, {"type": "null"}]}},
        "required": ["sku"], "additionalProperties": False}
SUPPORTED = {
    "$defs": {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"},
                                                         "minItems": 1, "maxItems": 3}}, "$defs": {"Item": ITEM}},
    "definitions": {"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}},
                    "definitions": {"A": {"$ref": "#/definitions/B"}, "B": {"const": 3}}},
    "recursive": {"$ref": "#/$defs/N", "$defs": {"N": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/N"}, "maxItems": 2}}}}},
    "recursive root": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}},
    "discriminated oneOf": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}, "n": {"type": "integer", "minimum": 0}},
         "required": ["kind"]}], "discriminator": {"propertyName": "kind", "mapping": {"a": "#/oneOf/0"}}},
    "additionalProperties schema": {"type": "object", "additionalProperties": {"type": "integer"}},
    "formats and bounds": {"type": "object", "properties": {
        "when": {"type": "string", "format": "date-time"}, "mail": {"type": "string", "format": "email"},
        "blob": {"type": "string", "format": "binary"},  # Pydantic's bytes: unknown to the engine, an annotation
        "name": {"type": "string", "minLength": 1, "maxLength": 8, "title": "Name", "description": "who"},
        "n": {"type": ["integer", "null"], "exclusiveMaximum": 10, "default": None}}},
}


@pytest.mark.parametrize("schema", SUPPORTED.values(), ids=SUPPORTED.keys())
def test_schemas_as_clients_write_them_compile(grammars, schema):
    grammars.compile(json_schema=schema)
    grammars.check(schema)


# (schema, the keyword or value named, where in the schema)
UNHONOURED = [
    ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}, "'uniqueItems'",
     ("properties", "tags")),
    ({"$defs": {"A": {"not": {"type": "string"}}}, "$ref": "#/$defs/A"}, "'not'", ("$defs", "A")),
    ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}, "'if'", ()),
    ({"anyOf": [{"type": "string"}, {"type": "array", "contains": {"const": 1}}]}, "'contains'", ("anyOf", 1)),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}, "'#/$defs/Missing' points to nothing",
     ("properties", "a", "$ref")),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}, "remote schemas are not fetched",
     ("properties", "a", "$ref")),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a$"},
                                       "b": {"items": {"type": "string", "pattern": "(?<=x)y"}}}},
     "'(?<=x)y' is not a regular expression the grammar engine supports: look-around", ("properties", "b", "items",
                                                                                          "pattern")),
]


@pytest.mark.parametrize("schema,named,path", UNHONOURED)
def test_a_schema_feature_the_engine_cannot_honour_is_named_with_its_place(grammars, schema, named, path):
    """Never silently ignored (the reply could break the schema), never our grammar text."""
    for attempt in (lambda: grammars.compile(json_schema=schema), lambda: grammars.check(schema)):
        with pytest.raises(GrammarError) as e:
            attempt()
        assert named in str(e.value) and e.value.path == path and "\n" not in str(e.value)
        assert "%json" not in str(e.value) and "start:" not in str(e.value)
    named_error = e.value.naming("tools[2].function.parameters")
    where = "tools[2].function.parameters" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)
    assert named_error.param == where and str(named_error).startswith(where + ": ")
    assert not grammars._compiled


def test_a_schema_may_ask_for_unsupported_keywords_to_be_ignored(grammars):
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "x-guidance": {"lenient": True}}
    check_schema(grammars.tokenizer(), schema)
    grammars.compile(json_schema=schema)


def test_exactly_one_of_a_schema_and_a_grammar(grammars):
    with pytest.raises(TypeError):
        grammars.compile()
    with pytest.raises(TypeError):
        grammars.compile(json_schema=True, grammar='start: "x"')


def test_json_schema_text_and_a_dict_are_the_same_grammar_and_true_is_any_object():
    assert json_schema_grammar({"type": "integer"}) == json_schema_grammar('{"type":  "integer"}')
    assert json_schema_grammar(True) == json_schema_grammar({"type": "object"})
    assert lark_grammar('root ::= "a"') != lark_grammar('root ::= "b"')


def test_masks_allow_what_may_continue_json_valid_under_the_schema(grammars):
    ends = {EOS_ID, IM_END_ID}
    boolean = grammars.compile(json_schema={"type": "boolean"})
    assert set(boolean.end_tokens) == ends
    state = boolean.start()
    assert _allowed(state.mask(())) == {"t", "f"}
    assert _allowed(state.mask(_bytes("tr"))) == {"u"}
    assert _allowed(state.mask(_bytes("f"))) == {"a"}
    assert _allowed(state.mask(_bytes("true"))) == ends  # complete: only the end
    assert _allowed(state.mask(_bytes("true") + [EOS_ID])) == ends  # nothing after an end token
    assert _allowed(state.mask(())) == {"t", "f"}  # a path's question leaves the state where it was

    integer = grammars.compile(json_schema={"type": "integer"}).start()
    assert _allowed(integer.mask(())) == set("-0123456789")
    assert _allowed(integer.mask(_bytes("-"))) == set("0123456789")
    assert set("0123456789") | ends <= _allowed(integer.mask(_bytes("12")))
    integer.advance(_bytes("-4"))  # committed: later paths start after it
    assert set("0123456789") | ends <= _allowed(integer.mask(()))
    assert "-" not in _allowed(integer.mask(()))


def test_forced_tokens_spell_the_bytes_the_schema_forces(grammars):
    """``GrammarState.forced`` (the engine's free candidates): the tokens of the bytes that
    must come next after a path, nothing where there is a choice, nothing after an end
    token; asking leaves the state where it was.  In the default layout (one line, ", " and
    ": ") an object's opening through its first key's quote is forced."""
    person = grammars.compile(json_schema={"type": "object", "properties": {"name": {"type": "string"}},
                                           "required": ["name"]})
    state = person.start()
    assert state.forced(()) == _spelt('{"name": "')
    assert state.forced(_bytes("{")) == _spelt('"name": "')
    assert state.forced(_bytes('{"na')) == _spelt('me": "')
    assert state.forced(_bytes('{"name": "x')) == []  # the string goes on or ends
    assert _allowed(state.mask(_bytes('{"name": "x"'))) == {"}", ","}  # other keys may follow
    assert state.forced(_bytes('{"name"') + [EOS_ID]) == []
    assert state.forced(()) == _spelt('{"name": "') and _allowed(state.mask(())) == {"{"}
    state.advance(_bytes('{"n'))
    assert state.forced(()) == _spelt('ame": "')
    choice = grammars.compile(json_schema={"enum": ["yes", "no"]}).start()
    assert choice.forced(()) == _bytes('"') and choice.forced(_bytes('"')) == []
    assert choice.forced(_bytes('"y')) == _bytes('es"')


PAIR = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": False}


def test_the_default_layout_forces_the_separators_and_the_next_key(grammars):
    """After a value, the bytes up to the next value (`, "age": `) are forced: no whitespace
    but the separators' spaces is allowed anywhere between tokens."""
    state = grammars.compile(json_schema=PAIR).start()
    assert state.forced(_bytes('{"name": "Al"')) == _spelt(', "age": ')
    assert _allowed(state.mask(_bytes('{"name": "Al", "age": 4'))) >= {"}", "0"}
    assert " " not in _allowed(state.mask(_bytes('{"name": "Al", "age": 4')))
    assert _allowed(state.mask(_bytes('{"name":'))) == {" "}
    for items in ({"type": "array", "items": {"type": "integer"}},  # arrays: ", " between items
                  {"type": "object", "additionalProperties": {"type": "integer"}}):  # free keys too
        text, then = ("[1, 2", " ") if items["type"] == "array" else ('{"a": 1, "b": 2', ' "')
        state = grammars.compile(json_schema=items).start()
        assert state.forced(_bytes(text + ",")) == _spelt(then)
        assert " " not in _allowed(state.mask(_bytes(text + ", ")))


@pytest.mark.parametrize("own", [{"whitespace_flexible": True},
                                 {"whitespace_pattern": r"[\x20\x09]{0,4}|\x0D?\x0A[\x20\x09]{0,32}"}])
def test_a_schemas_own_x_guidance_restores_flexible_whitespace(grammars, own):
    """A schema whose top-level "x-guidance" asks for whitespace gets the flexible layout
    (bare separators, a few blanks or one line break and an indentation between tokens),
    still bounded; its other options are kept (the lenient and oneOf defaults)."""
    state = grammars.compile(json_schema={"x-guidance": own, **PAIR}).start()
    assert state.forced(()) == _bytes("{") and state.forced(_bytes("{")) == []
    assert {" ", "\n", '"'} <= _allowed(state.mask(_bytes("{")))
    assert {":", " "} <= _allowed(state.mask(_bytes('{"name"')))
    assert state.forced(_bytes('{"name":"Al"')) == []  # a comma or blanks first
    assert " " not in _allowed(state.mask(_bytes('{"name":"Al"    ')))  # four blanks at most
    assert _allowed(state.mask(_bytes('{\n  "name": "Al",\n'))) == {"\t", " ", '"'}  # one line break
    options = json_options({"x-guidance": own})
    assert options["key_separator"] == ":" and options["lenient"] and options["coerce_one_of"]
    assert json_options({"x-guidance": {"lenient": False}}) == {**JSON_DEFAULTS, "lenient": False}
    assert laid_out({"x-guidance": own, "type": "object"})["x-guidance"] == options


@pytest.mark.parametrize("schema", [True, {"type": "object"}, {"type": "object", "title": "any", "description": "x"}])
def test_a_schema_taking_any_object_gets_the_flexible_layout(grammars, schema):
    """json_object (and a schema saying only "an object") names no key the one-line layout
    could force; it would only mask the model's own layout (a line break after "{")."""
    state = grammars.compile(json_schema=schema).start()
    assert {" ", "\n", '"', "}"} <= _allowed(state.mask(_bytes("{")))
    assert _allowed(state.mask(_bytes('{\n  "a": 1,\n'))) == {"\t", " ", '"'}  # still one line break at most
    assert json_options(schema if isinstance(schema, dict) else {}) == {**JSON_DEFAULTS, **FLEXIBLE_LAYOUT}
    # a key, a bound or an "x-guidance" of its own: the one-line layout, as for every schema
    for named in ({"type": "object", "properties": {"a": {}}}, {"type": "object", "minProperties": 1},
                  {"type": "object", "x-guidance": {"lenient": True}}):
        assert json_options(named)["whitespace_flexible"] is False and "whitespace_pattern" not in json_options(named)
        assert "\n" not in _allowed(grammars.compile(json_schema=named).start().mask(_bytes("{")))


def test_a_constrained_reply_is_laid_out_as_json_dumps_writes(engine):
    """Whatever the model draws under a schema, its text is the compact-with-spaces layout
    of its value (``json.dumps``'s), every method alike (the forced chains are candidates)."""
    import json

    from resispec_gguf.config import DraftParams, SamplingParams

    schema = {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "string", "pattern": "^[a-z]{1,6}$"},
        "c": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        "d": {"type": "object", "properties": {"e": {"type": "null"}}, "required": ["e"],
              "additionalProperties": False}},
        "required": ["a", "b", "c", "d"], "additionalProperties": False}
    constraint = engine.compile_constraint(json_schema=schema)
    for seed in range(6):
        for method in ("none", "chain", "resispec"):
            res = engine.generate("Data:", SamplingParams(temperature=1.0, max_tokens=120, seed=seed),
                                  DraftParams(method=method), constraint=constraint)
            assert res.finish_reason == "eos", res.text
            assert res.text == json.dumps(json.loads(res.text)), res.text


def test_where_the_grammar_allows_nothing_more_the_end_tokens_are_allowed(grammars):
    assert _allowed(grammars.compile(grammar='start: "ok"').start().mask(_bytes("ok"))) == {EOS_ID, IM_END_ID}
    assert _allowed(grammars.compile(grammar='start: ""').start().mask(())) == {EOS_ID, IM_END_ID}


# ------------------------------------------------------------------ limits and the time budget

from resispec_gguf.assist import grammar as grammar_mod  # noqa: E402
from resispec_gguf.errors import ConstraintError  # noqa: E402

LIMIT_CASES = [
    ("anyOf", dict(json_schema={"anyOf": [{"type": "object", "properties": {f"k{i}": {"const": i}},
                                           "required": [f"k{i}"]} for i in range(2100)]})),
    ("optional properties", dict(json_schema={"type": "object",
                                              "properties": {f"p{i}": {"type": "string"} for i in range(600)}})),
    ("alternation", dict(grammar="start: " + " | ".join(f'"w{i}x"' for i in range(21800)) + "\n")),
]


@pytest.mark.parametrize("kw", [c[1] for c in LIMIT_CASES], ids=[c[0] for c in LIMIT_CASES])
def test_limits_met_at_the_first_tokens_are_refused_when_compiling(grammars, kw):
    # llguidance meets its row limit only once a token is consumed: compiling tries a few
    with pytest.raises(GrammarError) as e:
        grammars.compile(**kw)
    msg = str(e.value)
    assert "\n" not in msg and "max is 2000" in msg and "<state>" not in msg and len(msg) < 300


def test_a_bad_tool_grammar_never_echoes_our_grammar_text(grammars):
    from resispec_gguf.assist import formats, tools

    fns = tools.check_tools([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "integer", "minimum": 5, "maximum": 1}}}])
    text = formats.HermesFormat().grammar(tools.check_tool_choice("required", fns))
    with pytest.raises(GrammarError) as e:
        grammars.compile(grammar=text)
    msg = str(e.value)
    for ours in ("start:", "call_body", "<tool_call>", "x-guidance", "whitespace_pattern", "%json"):
        assert ours not in msg
    assert "unsatisfiable" in msg.lower()


def test_the_schema_limit_is_the_utf8_size_as_sent():
    cjk = {"type": "string", "description": "説明" * 30_000}  # 180 KB as UTF-8, 360 KB as \\u escapes
    assert json_schema_grammar(cjk)
    with pytest.raises(GrammarError, match="256 KiB"):
        json_schema_grammar({"type": "string", "description": "説明" * 45_000})  # 270 KB


class _Clock:
    """A fake mask timer: each reading is ``step`` seconds after the previous one."""

    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_a_constraint_slower_than_one_mask_may_be_is_refused_when_compiling(engine):
    tok = engine.grammar_tokenizer()
    text = json_schema_grammar({"type": "string"})
    with pytest.raises(GrammarError, match=r"too slow: one token mask took .* per mask"):
        grammar_mod.Grammar(tok, text, engine.grammars.vocab.n_vocab, clock=_Clock(grammar_mod.MASK_SECONDS * 2))


def test_a_request_past_its_mask_budget_ends_with_finish_reason_error(engine):
    from resispec_gguf.config import DraftParams, SamplingParams

    tok = engine.grammar_tokenizer()
    text = json_schema_grammar({"type": "string", "minLength": 150})  # more masks than the budget allows
    g = grammar_mod.Grammar(tok, text, engine.grammars.vocab.n_vocab, clock=_Clock(grammar_mod.MASK_SECONDS / 4))
    state = g.start()
    with pytest.raises(ConstraintError, match="per request"):
        for _ in range(int(grammar_mod.MASK_BUDGET_SECONDS / (grammar_mod.MASK_SECONDS / 4)) + 2):
            state.mask(())
    for method in ("none", "resispec"):
        res = engine.generate("q", SamplingParams(max_tokens=400, temperature=1.0, seed=3),
                              DraftParams(method=method), constraint=g)
        assert res.finish_reason == "error" and "per request" in res.error and "\n" not in res.error
        assert 0 < len(res.tokens) < 400
        ok = engine.generate("q", SamplingParams(max_tokens=4, seed=3), DraftParams(method=method))
        assert ok.finish_reason in ("eos", "length", "stop")  # the engine moved on


def test_the_budget_grows_with_the_reply(engine):
    tok = engine.grammar_tokenizer()
    text = json_schema_grammar({"type": "string"})
    step = grammar_mod.MASK_SECONDS_PER_TOKEN / 2  # a mask per token, half the allowance per token
    g = grammar_mod.Grammar(tok, text, engine.grammars.vocab.n_vocab, clock=_Clock(step))
    n = int(grammar_mod.MASK_BUDGET_SECONDS / step) + 10  # more than the fixed part alone allows
    long_reply = g.start()
    long_reply.advance(_bytes('"'))
    for _ in range(n):
        long_reply.mask(())
        long_reply.advance(_bytes("a"))  # a long string: one token a mask, never past the budget
    idle = g.start()
    with pytest.raises(ConstraintError, match="per token"):
        for _ in range(n):
            idle.mask(())
