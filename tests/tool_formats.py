"""Shared helpers for the tool-format tests (``tests/assist/test_formats_*.py``): a tiny chat
template in each family's style (the telltale texts llama.cpp detects the family by, the tool
list rendered from the Jinja ``tools`` variable, calls and results as that family writes
them), tiny GGUF pairs carrying it with the family's markers as control tokens, and the checks
every family runs: rendering, a forced call, a lazy call, a parallel call, parsing and
streaming."""

from __future__ import annotations

import contextlib
import json

import tiny_gguf

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                                    "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                                    "b": {"type": "integer", "minimum": 0, "maximum": 99}},
                   "required": ["a", "b"], "additionalProperties": False}}}
TOOLS = [WEATHER, ADD]
MSGS = [{"role": "user", "content": "Weather in Oslo?"}]
CALLS = [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Oslo", "unit": "c"}}},
         {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]
_SENT = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}} for c in CALLS]
HISTORY = MSGS + [{"role": "assistant", "content": None, "tool_calls": _SENT[:1]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "12 C, clear"}]

_CALLS_HERMES = ('{% for c in m.tool_calls %}\n<tool_call>\n{"name": "{{ c.function.name }}", "arguments": '
                 '{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}')
HERMES = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\n"
    "Call a function inside <tool_call></tool_call> tags.<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{{ m.content or '' }}" + _CALLS_HERMES
    + "<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Qwen3's: earlier thinking rendered, and ``enable_thinking`` false closing an empty block in
# the generation prompt
QWEN3 = HERMES.replace("{{ m.content or '' }}", "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n"
                                                 "</think>\n{% endif %}{{ m.content or '' }}").replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}")
LLAMA3 = (
    "{{ bos_token }}{% if tools %}<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
    "Functions:{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n"
    'Reply with {"name": function name, "parameters": its arguments}.<|eot_id|>{% endif %}'
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    '{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}'
    "{% endfor %}<|eom_id|>"
    "{% elif m.role in ('tool', 'ipython') %}<|start_header_id|>ipython<|end_header_id|>\n\n{{ m.content }}<|eot_id|>"
    "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
MISTRAL = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role == 'user' %}{% if loop.last and tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]"
    "{% endif %}[INST]{{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS][{% for c in m.tool_calls %}"
    "{% if c.id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
    '{% endif %}{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}, "id": "{{ c.id }}"}'
    "{% if not loop.last %}, {% endif %}{% endfor %}]{{ eos_token }}"
    "{% elif m.role == 'tool' %}{% if m.tool_call_id | length != 9 %}"
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}"
    '[TOOL_RESULTS]{"content": {{ m.content | tojson }}, "call_id": "{{ m.tool_call_id }}"}[/TOOL_RESULTS]'
    "{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% else %}{{ m.content }}\n\n{% endif %}"
    "{% endfor %}")
DEEPSEEK_R1 = (
    "{{ bos_token }}{% if tools %}Tools:{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<｜User｜>{{ m.content }}"
    "{% elif m.role == 'assistant' and m.tool_calls %}<｜Assistant｜><｜tool▁calls▁begin｜>{% for c in m.tool_calls %}"
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ c.function.name }}\n```json\n{{ c.function.arguments | tojson }}"
    "\n```<｜tool▁call▁end｜>{% endfor %}<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    "{% elif m.role == 'tool' %}<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>"
    "<｜tool▁outputs▁end｜>"
    "{% elif m.role == 'assistant' %}<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>{% else %}{{ m.content }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}")

#: family -> (chat template, extra control tokens of its vocabulary); a reasoning family's
#: vocabulary also holds the thinking markers, user-defined as in Qwen3's and R1's (``THINKS``)
FAMILIES = {
    "generic": (tiny_gguf.CHAT_TEMPLATE, ()),
    "hermes": (HERMES, ("<tool_call>", "</tool_call>")),
    "qwen3": (QWEN3, ("<tool_call>", "</tool_call>")),
    "llama3": (LLAMA3, ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>")),
    "mistral": (MISTRAL, ("[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                          "[TOOL_RESULTS]", "[/TOOL_RESULTS]")),
    "deepseek_r1": (DEEPSEEK_R1, ("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<｜tool▁calls▁begin｜>",
                                  "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
                                  "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
                                  "<｜tool▁output▁end｜>")),
}
THINKS = ("qwen3", "deepseek_r1")


def write_family_pair(dirpath, family: str, special: bool = True):
    """A tiny target/draft pair whose GGUFs carry ``family``'s template and (``special``) its
    markers as control tokens; without ``special`` the markers are plain text."""
    template, extra = FAMILIES[family]
    extra = extra if special else ()
    common = dict(base_seed=0, chat_template=template, extra_tokens=extra,
                  vocab_variant="think" if family in THINKS else "default")
    target = tiny_gguf.write_tiny_llama(f"{dirpath}/target.gguf", seed=0, name="tiny-target", **common)
    draft = tiny_gguf.write_tiny_llama(f"{dirpath}/draft.gguf", seed=1, noise=tiny_gguf.DEFAULT_DRAFT_NOISE,
                                       name="tiny-draft", **common)
    return target, draft


@contextlib.contextmanager
def family_engine(tmp_path_factory, family: str, special: bool = True):
    from resispec_gguf.engine import Engine

    target, draft = write_family_pair(tmp_path_factory.mktemp(family), family, special)
    with Engine.load(str(target), str(draft), n_ctx=1024, n_threads=1, flash_attn=False, progress=False,
                     memory_size=0) as e:  # seeded replies are compared: no memory of past answers
        yield e


def prompt_text(engine, plan) -> str:
    """The prompt's text, control tokens spelled out."""
    return b"".join(engine.token_piece(t) or engine.target.token_text(t) for t in plan.prompt).decode("utf-8")


def tokens(engine, text: str) -> list[int]:
    """``text``'s tokens as the model writes them: its markers as their special tokens."""
    return engine.target.tokenize(text, add_special=False, parse_special=True)


def follows(constraint, toks) -> bool:
    """Whether the constraint allows ``toks`` one after another."""
    from resispec_gguf.kernels.sampling import mask_allows

    state = constraint.start()
    for t in toks:
        if not mask_allows(state.mask([]), t):
            return False
        state.advance([t])
    return True


def valid_call(call, functions=TOOLS) -> bool:
    """Whether a parsed call names an offered function with arguments valid under its schema."""
    import jsonschema

    schema = {f["function"]["name"]: f["function"]["parameters"] for f in functions}.get(call.name)
    if schema is None:
        return False
    try:
        jsonschema.validate(json.loads(call.arguments), schema)
    except jsonschema.ValidationError:
        return False
    return True


def forced_calls(engine, tool_choice="required", parallel=None, seeds=range(6), max_tokens=320):
    """Replies under a forced ``tool_choice`` on the tiny pair (resispec): the parsed calls of
    each that finished (the random model may ramble inside a string until max_tokens).  A
    model that thinks first (its vocabulary has the markers) thinks 4 tokens at most, and the
    calls are read from the answer after its thinking, as the surfaces read them (the end
    token is refused inside the thinking: a forced call must still come)."""
    from resispec_gguf.assist.plan import plan_chat
    from resispec_gguf.config import DraftParams, SamplingParams

    budget = {"reasoning_budget": 4} if engine.reasoning_format() is not None else {}
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=parallel, **budget)
    out = []
    for seed in seeds:
        r = engine.generate(plan.prompt, SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens),
                            DraftParams(method="resispec"), constraint=plan.constraint)
        thinking, answer = plan.split(r.text)
        if r.finish_reason != "length":
            assert thinking is None or answer, f"the reply ended inside its thinking: {r.text!r}"
            parsed = plan.tool_calls(answer)
            out.append(None if parsed is None else parsed[1])
    return out


def streamed(plan, text: str, size: int):
    """``(content, calls)`` of ``text`` streamed in pieces of ``size`` characters."""
    stream = plan.tool_stream()
    content = "".join(stream.push(text[i:i + size]) for i in range(0, len(text), size))
    rest, calls = stream.finish(text)
    return content + rest, calls


def as_pairs(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


EXPECTED = [(c["function"]["name"], c["function"]["arguments"]) for c in CALLS]


def check_parallel_grammar(engine, single_choice: str | None = "required") -> None:
    """The grammar on the calls the format writes (the tiny random model rarely ends a list of
    calls): under "auto" with parallel calls two calls follow it and read back as written;
    under ``single_choice`` (None: not checked) without parallel calls, they do not."""
    from resispec_gguf.assist.plan import plan_chat

    two = engine.tool_format().write_calls(CALLS)
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    assert follows(plan.constraint, tokens(engine, two)) and as_pairs(plan.tool_calls(two)[1]) == EXPECTED
    if single_choice is not None:
        single = plan_chat(engine, MSGS, tools=TOOLS, tool_choice=single_choice)
        assert not follows(single.constraint, tokens(engine, two))


def table_disagreements(engine, limit: int = 5) -> list:
    """Up to ``limit`` tokens on which the grammar engine's table and the engine disagree:
    a token's bytes there that are not the piece the engine commits (a special token's text
    after 0xFF), or a piece that the tokenizer it is given does not spell back."""
    model = engine.target
    tok = engine.grammars.tokenizer()
    table = [tok.decode_bytes([t]) for t in range(engine.n_vocab)]
    bad = []
    for t, got in enumerate(table):
        piece = model.token_piece(t, special=True)
        if piece == b"":  # an unused id: no text (shown by its id there)
            ok = got in (b"", f"<[{t}]>".encode())
        elif piece == b"\xff":  # the byte 0xFF reads as a nameless special token there: never text
            ok = got == b"" and tok.is_special_token(t)
        else:
            ok = got in (piece, b"\xff" + piece)
            if ok and got and not tok.is_special_token(t):
                ok = b"".join(table[i] for i in tok.tokenize_bytes(got)) == got
        if not ok:
            bad.append((t, got, piece))
            if len(bad) >= limit:
                break
    return bad
