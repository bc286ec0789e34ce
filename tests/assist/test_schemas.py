"""schemas.py on its own: the walk over a schema's subschemas, and where a fault is, with a
fake grammar engine (``first_error``); test_grammar.py checks the same against llguidance."""

from resispec_gguf.assist import schemas

SCHEMA = {
    "type": "object",
    "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"type": "array", "items": {"type": "string", "format": "x"}},
                   "format": {"type": "string", "format": "date"}},  # a property named "format"
    "$defs": {"A": {"anyOf": [{"const": {"not": 1}}, {"not": {"type": "string"}}]}},
}


def test_subschemas_walks_schemas_not_data_in_the_order_written():
    paths = [p for p, _ in schemas.subschemas(SCHEMA)]
    assert paths == [(), ("properties", "a"), ("properties", "b"), ("properties", "b", "items"),
                     ("properties", "format"), ("$defs", "A"), ("$defs", "A", "anyOf", 0), ("$defs", "A", "anyOf", 1),
                     ("$defs", "A", "anyOf", 1, "not")]  # a const's value is data: not walked


def _engine(unknown_formats=(), unimplemented=(), patterns=()):
    """A fake engine: complains about the first unknown format, then the first unimplemented
    keyword, then the first pattern in ``patterns`` (as llguidance words them)."""

    def first_error(schema):
        subs = [s for _, s in schemas.subschemas(schema)]
        for s in subs:
            if s.get("format") in unknown_formats:
                return f"Unknown format: {s['format']}"
        found = [k for s in subs for k in unimplemented if k in s]
        if found:
            return f'Unimplemented keys: ["{found[0]}"]'
        for s in subs:
            if s.get("pattern") in patterns:
                return f"regex parse error:\n    {s['pattern']}\n    ^\nerror: unclosed group"
        return None

    return first_error


def test_unknown_formats_are_annotations_and_the_schema_is_tried_without_them():
    tried = []
    engine = _engine(unknown_formats=("x",))
    assert schemas.fault(SCHEMA, lambda s: tried.append(s) or engine(s)) is None
    assert len(tried) == 2 and tried[1]["properties"]["b"]["items"] == {"type": "string"}
    assert tried[1]["properties"]["format"] == {"type": "string", "format": "date"}
    assert SCHEMA["properties"]["b"]["items"]["format"] == "x"  # the caller's schema is not changed
    odd = {"type": "object", "format": {"not": "a string"}, "properties": {"s": {"format": "x"}}}
    assert schemas.fault(odd, _engine(unknown_formats=("x",))) is None


def test_an_unimplemented_keyword_is_named_where_it_is_first_written():
    message, path = schemas.fault(SCHEMA, _engine(unknown_formats=("x",), unimplemented=("not",)))
    assert path == ("$defs", "A", "anyOf", 1) and "keyword 'not' is not supported" in message


def test_a_pattern_the_engine_cannot_read_is_named_with_its_cause():
    schema = {"type": "object", "properties": {"ok": {"type": "string", "pattern": "a"},
                                               "bad": {"type": "string", "pattern": "(a"}}}
    message, path = schemas.fault(schema, _engine(patterns=("(a",)))
    assert path == ("properties", "bad", "pattern") and message.endswith("supports: unclosed group")


def test_a_reference_to_nothing_is_named_as_written():
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/Gone"}}}
    message, path = schemas.fault(schema, lambda s: "Pointer '/$defs/Gone' does not exist")
    assert (message, path) == ("$ref '#/$defs/Gone' points to nothing in the schema", ("properties", "a", "$ref"))


def test_another_fault_is_the_engines_own_message_without_a_place():
    assert schemas.fault(SCHEMA, lambda s: "Unsatisfiable schema") == ("Unsatisfiable schema", None)
    assert schemas.fault(True, lambda s: "never asked") is None
