"""Calls written as JSON alone (``formats.json_calls``): reading them (which key names the
arguments, only at the reply's start or at any line's, separators between calls), telling
while streaming whether text may still become one, and the lazy grammar rules' openings."""

from __future__ import annotations

import json

from resispec_gguf.assist.formats.json_calls import json_calls, json_pending, lazy_json_rules
from resispec_gguf.assist.tools import check_tool_choice, check_tools

FN = check_tools([{"type": "function", "function": {"name": "add.v2", "parameters": {"type": "object"}}}])
CALL = '{"name": "add.v2", "parameters": {"a": 1}}'


def _read(found):
    return found and (found[0], [(c.name, json.loads(c.arguments)) for c in found[1]])


def test_the_arguments_key_is_the_formats():
    assert json_calls(CALL, ["add.v2"]) is None  # "arguments" by default
    assert _read(json_calls(CALL, ["add.v2"], keys=("parameters",))) == (0, [("add.v2", {"a": 1})])
    assert json_calls('{"parameters": {}, "name": "add.v2"}', ["add.v2"], keys=("parameters",)) is None


def test_only_at_the_start_or_at_any_line():
    text = "Sure.\n" + CALL
    assert _read(json_calls(text, ["add.v2"], keys=("parameters",))) == (6, [("add.v2", {"a": 1})])
    assert json_calls(text, ["add.v2"], keys=("parameters",), anywhere=False) is None
    assert _read(json_calls("  " + CALL, ["add.v2"], keys=("parameters",), anywhere=False))[0] == 2


def test_separators_between_calls():
    two = f"{CALL}; {CALL}"
    assert json_calls(two, ["add.v2"], keys=("parameters",)) is None
    assert len(json_calls(two, ["add.v2"], keys=("parameters",), separators=";")[1]) == 2


def test_streamed_text_is_held_only_while_it_may_become_a_call():
    assert json_pending('Hi.\n{"na', ["add.v2"]) == 4
    assert json_pending('Hi.\n{"name": "sub', ["add.v2"]) == len('Hi.\n{"name": "sub')
    assert json_pending('{"name": "a', ["add.v2"], anywhere=False) == 0
    assert json_pending('x {"name": "a', ["add.v2"], anywhere=False) == len('x {"name": "a')


def test_each_opening_ends_at_an_offered_name_escaped_as_a_regex():
    alternatives, rules = lazy_json_rules(check_tool_choice("auto", FN), "t", "arguments", "")
    assert alternatives == ["t_0"]
    head = next(r for r in rules if r.startswith("t_head_0[lazy]:"))
    assert head.endswith('"add\\.v2"/') and any(r.startswith("t_args_0: %json") for r in rules)


def test_a_call_in_doubled_braces_is_read_only_where_asked_and_only_whole():
    doubled = "Sure.\n{" + CALL + "}"
    assert json_calls(doubled, ["add.v2"], keys=("parameters",)) is None
    assert _read(json_calls(doubled, ["add.v2"], keys=("parameters",), doubled=True)) == (6, [("add.v2", {"a": 1})])
    for text in (doubled[:-1], "{" + CALL + "} and more", "{{" + CALL + "}}", '{{"name": "sub", "parameters": {}}}'):
        assert json_calls(text, ["add.v2"], keys=("parameters",), doubled=True) is None
    for cut in range(len("Sure.\n{"), len(doubled)):  # held back while it may become the call
        assert json_pending(doubled[:cut], ["add.v2"], keys=("parameters",), doubled=True) == 6
    assert json_pending(doubled[:8], ["add.v2"], keys=("parameters",)) == 8
    other = 'Hi.\n{{"name": "sub'
    assert json_pending(other, ["add.v2"], keys=("parameters",), doubled=True) == len(other)
