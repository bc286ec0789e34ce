"""Tool calls, JSON schemas and grammars: the llguidance adapter on the tiny GGUF pair
(outputs parse and validate under every method; greedy is plain constrained greedy; bad
constraints are one-line errors; the bytes a tool grammar forces)."""

from __future__ import annotations

import json

import pytest

from resispec_gguf.assist import formats, tools
from resispec_gguf.config import DraftParams, SamplingParams

from tool_cases import ADD, METHODS, ORDER, PERSON

jsonschema = pytest.importorskip("jsonschema")


# ---------------------------------------------------------------------------------- the engine


def _valid(text, schema):
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("method", METHODS)
def test_schema_outputs_parse_and_validate(engine, method):
    c = engine.compile_constraint(json_schema=PERSON)
    lookup = method in ("chain", "resispec")
    for seed in range(4):
        res = engine.generate("Describe someone:", SamplingParams(temperature=1.0, seed=seed, max_tokens=120),
                              DraftParams(method=method, lookup=lookup), constraint=c)
        if res.finish_reason == "eos":
            _valid(res.text, PERSON)
        else:  # cut by max_tokens: a prefix of valid JSON, never anything else
            assert res.finish_reason == "length" and res.text.startswith("{")


def test_constrained_greedy_is_identical_across_methods(engine):
    c = engine.compile_constraint(json_schema=PERSON)
    texts = {m: engine.generate("Describe someone:", SamplingParams(temperature=0.0, max_tokens=60),
                                DraftParams(method=m), constraint=c).text for m in METHODS}
    assert len(set(texts.values())) == 1, texts


def test_gbnf_and_lark_grammars(engine):
    gbnf = 'root ::= "yes" | "no" | "maybe"'
    lark = 'start: ("ab" | "cd")+ "!"'
    for seed in range(5):
        sp = SamplingParams(temperature=1.0, seed=seed, max_tokens=40)
        assert engine.generate("q", sp, DraftParams(method="resispec"), grammar=gbnf).text in ("yes", "no", "maybe")
        text = engine.generate("q", sp, DraftParams(method="chain"), grammar=lark).text
        assert text.endswith("!") or len(text) >= 39
        assert set(text.rstrip("!").replace("ab", "").replace("cd", "")) <= {"a", "c"}


def test_bad_constraints_are_one_line_errors(engine):
    from resispec_gguf.assist.grammar import GrammarError

    for kw in [dict(grammar="start: ("), dict(json_schema="{nope"), dict(json_schema={"type": "integer", "minimum": 5,
                                                                                       "maximum": 1}),
               dict(json_schema=[1]), dict(grammar=""), dict(json_schema="x" * 300_000)]:
        with pytest.raises(GrammarError) as e:
            engine.generate("q", SamplingParams(max_tokens=4), DraftParams(method="none"),
                            constraint=engine.compile_constraint(**kw))
        assert "\n" not in str(e.value)


def test_a_tool_schema_is_measured_as_utf8_as_sent(engine):
    # 150 KB of CJK text as UTF-8; 300 KB once written as \\u escapes
    big = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "description": "説明" * 25_000, "properties": {"x": {"type": "integer"}}}}}
    fns = tools.check_tools([big])
    req = tools.check_tool_choice("required", fns)
    constraint = engine.compile_constraint(grammar=formats.HermesFormat().grammar(req))
    assert constraint.start() is not None


def _spelt(engine, tokens) -> str:
    return b"".join(engine.target.token_piece(t) for t in tokens).decode()


def _forced_after(engine, grammar: str, text: str) -> str:
    """The text the tool grammar forces after ``text`` (the tiny vocabulary's bytes)."""
    state = engine.compile_constraint(grammar=grammar).start()
    return _spelt(engine, state.forced(engine.target.tokenize(text, add_special=False)))


@pytest.mark.parametrize("fmt,opening", [("hermes", "<tool_call>\n"), ("mistral", "[TOOL_CALLS]")])
def test_a_forced_call_is_laid_out_on_one_line_unless_its_parameters_ask(engine, fmt, opening):
    """A call object is laid out as JSON under a schema is (one line, ", " and ": "), so
    the grammar forces the bytes from the name to the first argument's value; a function
    whose parameters carry their own "x-guidance" asking for whitespace gets the flexible
    layout for its whole call (``tools.own_guidance``)."""
    f = formats.FORMATS[fmt]()
    head = opening + ('[{"name": "add"' if fmt == "mistral" else '{"name": "add"')
    req = tools.check_tool_choice("required", tools.check_tools([ADD]))
    assert _forced_after(engine, f.grammar(req), head) == ', "arguments": {"a": '
    flexible = json.loads(json.dumps(ADD))
    flexible["function"]["parameters"]["x-guidance"] = {"whitespace_flexible": True}
    fns = tools.check_tools([flexible])
    assert tools.own_guidance(fns) == {"whitespace_flexible": True}
    assert tools.own_guidance(tools.check_tools([ADD])) is None
    assert _forced_after(engine, f.grammar(tools.check_tool_choice("required", fns)), head) == ""


def test_a_response_format_with_defs_compiles(engine):
    grammar = engine.compile_constraint(json_schema=ORDER["function"]["parameters"])
    assert grammar.start().mask(()).any()
