"""Chat templates rendered as Hugging Face's ``apply_chat_template`` renders them, the text the
models were trained on: its ``tojson`` (keys in their given order, no HTML escaping, non-ASCII
kept, ``indent``/``separators``/``sort_keys``), ``raise_exception``, ``strftime_now``, loop
controls, ``{% generation %}``, ``trim_blocks``/``lstrip_blocks``.  Every tool family's
template (tests/tool_formats.py) is rendered with tools, calls and results whose JSON is not
in sorted order and holds ``'``, ``<``, ``&`` and non-ASCII text, against the text written
out from the reference's rules; a request's tools reach the template exactly as the client
sent them (``tools.Function``, ``tools.as_sent``); without tools, templates render as they
always did."""

import datetime
import json

import pytest

import tiny_gguf
import tool_formats as tf
from resispec_gguf.assist import chat_format as cf
from resispec_gguf.assist import formats, plan, tools as _tools
from resispec_gguf.errors import UserError

# keys out of sorted order at every level, and text Jinja's own tojson would escape
LOOK_UP = {"type": "function", "function": {
    "name": "look_up", "description": "it's <b>&amp; café — 東京",
    "parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}},
                   "required": ["zeta", "alpha"]}}}
RATE = {"function": {"parameters": {"type": "object", "properties": {}}, "name": "rate"}, "type": "function"}
TOOLS = [LOOK_UP, RATE]
ARGS = {"zeta": "<x> & 'y' ü", "alpha": 1}
RESULT = "it's <20> & ü"
HISTORY = [{"role": "user", "content": "Look up Tōkyō"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "abcDEF123", "type": "function", "function": {"name": "look_up", "arguments": ARGS}}]},
           {"role": "tool", "tool_call_id": "abcDEF123", "content": RESULT},
           {"role": "user", "content": "And in °F?"}]


def _json(x) -> str:
    """``x | tojson`` as the reference writes it."""
    return json.dumps(x, ensure_ascii=False)


J1, J2, A = _json(LOOK_UP), _json(RATE), _json(ARGS)

# each family's template (tests/tool_formats.py) applied to HISTORY and TOOLS, written out
# from the reference's rules: ``trim_blocks`` drops the newline after each block tag
EXPECTED = {
    "hermes": (
        "<|im_start|>system\n# Tools\n<tools>" + J1 + J2 + "</tools>\n"
        "Call a function inside <tool_call></tool_call> tags.<|im_end|>\n"
        "<|im_start|>user\nLook up Tōkyō<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "look_up", "arguments": ' + A + "}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n" + RESULT + "\n</tool_response><|im_end|>\n"
        "<|im_start|>user\nAnd in °F?<|im_end|>\n"
        "<|im_start|>assistant\n"),
    "llama3": (
        "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nFunctions:" + J1 + J2
        + 'Reply with {"name": function name, "parameters": its arguments}.<|eot_id|>'
        "<|start_header_id|>user<|end_header_id|>\n\nLook up Tōkyō<|eot_id|>"
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "look_up", "parameters": ' + A + "}<|eom_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n" + RESULT + "<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd in °F?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "mistral": (
        "<s>[INST]Look up Tōkyō[/INST]"
        '[TOOL_CALLS][{"name": "look_up", "arguments": ' + A + ', "id": "abcDEF123"}]</s>'
        '[TOOL_RESULTS]{"content": ' + _json(RESULT) + ', "call_id": "abcDEF123"}[/TOOL_RESULTS]'
        "[AVAILABLE_TOOLS]" + _json(TOOLS) + "[/AVAILABLE_TOOLS][INST]And in °F?[/INST]"),
    "deepseek_r1": (
        "<s>Tools:" + J1 + J2 + "<｜User｜>Look up Tōkyō"
        "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>look_up\n```json\n" + A
        + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" + RESULT + "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
        "<｜User｜>And in °F?<｜Assistant｜>"),
}
# Qwen3's: Hermes' with an empty thinking block closed when thinking is off
EXPECTED["qwen3"] = EXPECTED["hermes"] + "<think>\n\n</think>\n\n"
EXTRA = {"qwen3": {"enable_thinking": False}}


def _render(template, messages, **kw):
    return cf.render(template, messages, bos_token="<s>", eos_token="</s>", **kw)


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_each_familys_tools_calls_and_results_render_as_the_reference(family):
    got = _render(tf.FAMILIES[family][0], HISTORY, tools=TOOLS, extra=EXTRA.get(family))
    assert got == EXPECTED[family]
    # what Jinja's own tojson would have written is nowhere
    assert "\\u0027" not in got and "\\u003c" not in got and '"alpha": 1, "zeta"' not in got


def test_a_template_without_tools_ignores_them_as_the_reference_does():
    """The generic family's template has no ``tools`` variable: tools change nothing (the
    generic format puts them in a system message itself)."""
    msgs = [{"role": "user", "content": "Hi"}]
    assert _render(tiny_gguf.CHAT_TEMPLATE, msgs, tools=TOOLS) == _render(tiny_gguf.CHAT_TEMPLATE, msgs)


@pytest.mark.parametrize("family", ["hermes", "deepseek_r1"])
def test_a_requests_tools_reach_the_template_in_the_clients_order(family):
    """Through the request path (``check_tools``, the format's ``prepare_messages``) the
    template sees each tool as the client sent it, as the reference does."""
    functions = _tools.check_tools([LOOK_UP])
    req = _tools.check_tool_choice(None, functions)
    fmt = formats.FORMATS[family](native=True)
    msgs, shown = fmt.prepare_messages(cf.check_messages([{"role": "user", "content": "Hi"}]), req)
    assert J1 in _render(tf.FAMILIES[family][0], msgs, tools=shown)


# a function sent without parameters, with a key the server does not use, keys out of order
PING = {"type": "function", "function": {"strict": False, "name": "ping", "x-note": "it's <ok>"}}


class _Engine:
    """What ``plan.chat_text`` reads of a model (``chatmodel.ChatModel``): a family's format
    (``chat_formats``) and template (``prompts``)."""

    def __init__(self, family, native=True):
        self.fmt = formats.FORMATS[family](native=native)
        self.template = tf.FAMILIES[family][0]
        self.prompts = self.chat_formats = self

    def tool_format(self):
        return self.fmt

    def render_chat(self, messages, tools=None, template_kwargs=None):
        return _render(self.template, messages, tools=tools, extra=template_kwargs)


def test_a_plan_shows_the_template_each_tool_exactly_as_sent():
    """``check_chat_options`` then ``chat_text`` (the rendering ``plan_chat`` tokenizes): each
    tool object as the client sent it, its top-level keys' order (RATE's ``function`` first),
    keys this server does not use and a missing ``parameters`` included; the checked copy
    still reads the parameters (the empty object schema) and builds the call grammar."""
    sent = [LOOK_UP, RATE, PING]
    options = plan.check_chat_options(sent)
    got = plan.chat_text(_Engine("hermes"), [{"role": "user", "content": "Hi"}], options)
    assert "<tools>" + "".join(_json(t) for t in sent) + "</tools>" in got
    assert "\\u0027" not in got
    ping = options.tools.functions[2]
    assert ping["parameters"] == {"type": "object", "properties": {}} and "parameters" not in ping
    assert ping.get("parameters") is None and ping.tool is PING and dict(ping) == PING["function"]
    assert _tools.call_schema(options.tools.functions, ["ping"])["properties"]["name"] == {"const": "ping"}
    assert "ping" in formats.FORMATS["hermes"]().grammar(options.tools)
    # under a named tool_choice only that tool is shown, still as sent
    named = plan.check_chat_options(sent, {"type": "function", "function": {"name": "rate"}})
    got = plan.chat_text(_Engine("hermes"), [{"role": "user", "content": "Hi"}], named)
    assert "<tools>" + _json(RATE) + "</tools>" in got


def test_legacy_functions_are_shown_as_openai_tool_objects():
    fn = {"description": "it's late", "name": "now"}
    options = plan.check_chat_options(functions=[fn])
    got = plan.chat_text(_Engine("hermes"), [{"role": "user", "content": "Hi"}], options)
    assert "<tools>" + _json({"type": "function", "function": fn}) + "</tools>" in got


def test_a_template_without_tools_gets_the_clients_functions_in_the_system_text():
    """The generic format writes the tools into a system message itself: each function as sent."""
    got = plan.chat_text(_Engine("generic", native=False), [{"role": "user", "content": "Hi"}],
                         plan.check_chat_options([LOOK_UP, PING]))
    assert J1 + "\n" + _json(PING) in got


def test_checked_functions_copy_with_their_tool():
    import copy
    import pickle

    f = _tools.check_tools([PING])[0]
    for c in (copy.copy(f), copy.deepcopy(f), pickle.loads(pickle.dumps(f))):
        assert isinstance(c, _tools.Function) and c == f and c.tool == PING and c["parameters"]["type"] == "object"
    with pytest.raises(KeyError):
        f["description"]
    assert _tools.as_sent(None) is None
    made = {"type": "function", "function": {"name": "x"}}
    assert _tools.as_sent([{"type": "function", "function": f}, made]) == [PING, made]


# -------------------------------------------------------------- the environment's filters


def _one(template: str, **variables) -> str:
    return cf.render(template, [{"role": "user", "content": "x"}], extra=variables)


def test_tojson_keeps_order_and_text_unescaped():
    x = {"b": 1, "a": ["it's <b>&</b>", "é 東京 😀"]}
    assert _one("{{ x | tojson }}", x=x) == '{"b": 1, "a": ["it\'s <b>&</b>", "é 東京 😀"]}' == _json(x)


def test_tojson_takes_the_references_options():
    x = {"b": 1, "a": [1, "é"]}
    assert _one("{{ x | tojson(indent=2) }}", x=x) == json.dumps(x, ensure_ascii=False, indent=2)
    assert _one("{{ x | tojson(indent=2) }}", x=x).startswith('{\n  "b": 1,\n  "a": [\n    1,')
    assert _one("{{ x | tojson(sort_keys=True) }}", x=x) == '{"a": [1, "é"], "b": 1}'
    assert _one("{{ x | tojson(separators=(',', ':')) }}", x=x) == '{"b":1,"a":[1,"é"]}'
    assert _one("{{ x | tojson(ensure_ascii=True) }}", x=x) == '{"b": 1, "a": [1, "\\u00e9"]}'
    assert _one("{{ 'a\"b\\n' | tojson }}|{{ none | tojson }}|{{ true | tojson }}") == '"a\\"b\\n"|null|true'


def test_tojson_of_what_json_cannot_write_is_a_template_error():
    with pytest.raises(UserError, match="template failed: tojson"):
        _one("{{ nowhere | tojson }}")


def test_raise_exception_and_strftime_now_exist():
    with pytest.raises(UserError, match="template failed: no tools here"):
        _one("{{ raise_exception('no tools here') }}")
    assert _one("{{ raise_exception is defined }}") == "True"
    days = {datetime.date.today().isoformat()}
    got = _one("{{ strftime_now('%Y-%m-%d') }}")
    days.add(datetime.date.today().isoformat())  # across midnight either day is right
    assert got in days
    # Llama 3.2's way: today's date where the renderer offers it
    guarded = "{% if strftime_now is defined %}{{ strftime_now('%d %b %Y') }}{% else %}26 Jul 2024{% endif %}"
    assert _one(guarded) != "26 Jul 2024"


def test_loop_controls_and_generation_blocks():
    msgs = [{"role": r, "content": c} for r, c in [("user", "a"), ("assistant", "b"), ("user", "c"), ("user", "d")]]
    loop = ("{% for m in messages %}{% if m.role == 'assistant' %}{% continue %}{% endif %}"
            "{% if loop.index > 3 %}{% break %}{% endif %}{{ m.content }}{% endfor %}")
    assert cf.render(loop, msgs) == "ac"
    marked = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}{{ loop.index }}]"
              "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
    assert cf.render(marked, msgs) == "a[b2]cd"


def test_blocks_are_trimmed_and_left_stripped():
    template = "  {% if true %}\nx\n    {% endif %}\ny{{ '\n' }}"
    assert _one(template) == "x\ny\n"


# ---------------------------------------------------------------- without tools, unchanged


NO_TOOLS = [{"role": "system", "content": "Be <b>brief</b> & kind, it's é"},
            {"role": "user", "content": "Hi \"there\"\n'x' <y> 😀"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "More"}]


def test_chatml_without_tools_renders_as_before():
    assert _render(None, NO_TOOLS) == (
        "<|im_start|>system\nBe <b>brief</b> & kind, it's é<|im_end|>\n"
        "<|im_start|>user\nHi \"there\"\n'x' <y> 😀<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n"
        "<|im_start|>user\nMore<|im_end|>\n"
        "<|im_start|>assistant\n")


def test_family_templates_without_tools_render_as_before():
    assert _render(tf.LLAMA3, NO_TOOLS) == (
        "<s><|start_header_id|>system<|end_header_id|>\n\nBe <b>brief</b> & kind, it's é<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi \"there\"\n'x' <y> 😀<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nMore<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert _render(tf.QWEN3, NO_TOOLS, add_generation_prompt=False) == _render(None, NO_TOOLS,
                                                                               add_generation_prompt=False)
    assert _render(tf.DEEPSEEK_R1, NO_TOOLS) == (
        "<s>Be <b>brief</b> & kind, it's é<｜User｜>Hi \"there\"\n'x' <y> 😀<｜Assistant｜>Hello<｜end▁of▁sentence｜>"
        "<｜User｜>More<｜Assistant｜>")
