"""The Anthropic Messages and OpenAI Responses routes through the official clients, against a
running ``serve`` (by hand, on a real model: the suite runs the same clients on the tiny pair).

    python -m resispec_gguf serve --port 8000 --threads 2 &      # the default pair
    python scripts/api_clients_check.py http://127.0.0.1:8000

Twelve checks, each printed PASS/FAIL with its time and what came back: Messages text,
streamed text, a forced tool call (``tool_choice`` any) streamed and not, a tool round trip,
``count_tokens``; Responses text, streamed text, a required function call streamed and not,
``responses.parse`` with a Pydantic ``text_format``, ``previous_response_id``.  A reply cut by
its token limit fails its check.  Needs ``anthropic``, ``openai`` and ``pydantic`` (the test
extra).  Exit code 1 when anything failed.
"""

import json
import sys
import time

import anthropic, openai
from pydantic import BaseModel
base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
A = anthropic.Anthropic(base_url=base, api_key="k")
O = openai.OpenAI(base_url=base + "/v1", api_key="k")
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}}, "required": ["city", "unit"]}}
class City(BaseModel):
    name: str
    country: str
    population_millions: float
results = []
def check(name, fn):
    t = time.time()
    try:
        ok, info = fn()
    except Exception as e:  # noqa: BLE001 - a client error is a failed check
        ok, info = False, f"{type(e).__name__}: {e}"[:200]
    results.append((name, ok, round(time.time() - t, 1), info))
    print(f"{'PASS' if ok else 'FAIL'} {name} ({time.time()-t:.1f}s): {info}", flush=True)

def a_text():
    m = A.messages.create(model="default", max_tokens=60, system="Be brief.", messages=[{"role": "user", "content": "Name three prime numbers."}])
    return m.stop_reason in ("end_turn", "max_tokens") and m.content[0].type == "text", repr(m.content[0].text[:60])
def a_stream():
    with A.messages.stream(model="default", max_tokens=60, messages=[{"role": "user", "content": "Say hello in French."}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    return bool(text) and final.content[0].text == text, repr(text[:60])
def a_tool(stream=False):
    kw = dict(model="default", max_tokens=120, tools=[WEATHER], tool_choice={"type": "any"},
              messages=[{"role": "user", "content": "What's the weather in Paris in celsius?"}])
    if stream:
        with A.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = A.messages.create(**kw)
    use = [b for b in m.content if b.type == "tool_use"]
    return bool(use) and m.stop_reason == "tool_use" and set(use[0].input) == {"city", "unit"}, json.dumps(use[0].input if use else None)
def a_roundtrip():
    m = A.messages.create(model="default", max_tokens=120, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"},
                          messages=[{"role": "user", "content": "Weather in Oslo, celsius?"}])
    use = [b for b in m.content if b.type == "tool_use"][0]
    m2 = A.messages.create(model="default", max_tokens=60, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Oslo, celsius?"}, {"role": "assistant", "content": m.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "-3 C, snow"}]}])
    return m2.content and m2.content[0].type == "text", repr(m2.content[0].text[:60])
def a_count():
    c = A.messages.count_tokens(model="default", messages=[{"role": "user", "content": "Hello"}], tools=[WEATHER])
    return c.input_tokens > 0, c.input_tokens
def r_text():
    r = O.responses.create(model="default", input="Name a colour.", max_output_tokens=40)
    return r.status in ("completed", "incomplete") and bool(r.output_text), repr(r.output_text[:60])
def r_stream():
    types, text = set(), ""
    with O.responses.stream(model="default", input="Count to five.", max_output_tokens=40) as s:
        for ev in s:
            types.add(ev.type)
            if ev.type == "response.output_text.delta":
                text += ev.delta
        final = s.get_final_response()
    return final.output_text == text and "response.completed" in types | {"response.incomplete"}, repr(text[:60])
FN = {"type": "function", "name": "get_weather", "description": "Current weather", "parameters": WEATHER["input_schema"]}
def r_tool(stream=False):
    kw = dict(model="default", input="Weather in Rome in F?", tools=[FN], tool_choice="required", max_output_tokens=120)
    if stream:
        with O.responses.stream(**kw) as s:
            r = s.get_final_response()
    else:
        r = O.responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    return bool(calls) and set(json.loads(calls[0].arguments)) == {"city", "unit"}, calls[0].arguments if calls else None
def r_parse():
    r = O.responses.parse(model="default", input="Describe Tokyo as JSON.", text_format=City, max_output_tokens=120)
    return isinstance(r.output_parsed, City), repr(r.output_parsed)
def r_prev():
    r1 = O.responses.create(model="default", input="My name is Ada. Reply OK.", max_output_tokens=20)
    r2 = O.responses.create(model="default", input="What is my name?", previous_response_id=r1.id, max_output_tokens=20)
    return "Ada" in r2.output_text, repr(r2.output_text[:60])
for name, fn in [("anthropic text", a_text), ("anthropic stream", a_stream), ("anthropic tool any", a_tool),
                 ("anthropic tool any streamed", lambda: a_tool(True)), ("anthropic tool round trip", a_roundtrip),
                 ("anthropic count_tokens", a_count), ("responses text", r_text), ("responses stream", r_stream),
                 ("responses tool required", r_tool), ("responses tool streamed", lambda: r_tool(True)),
                 ("responses parse (text.format)", r_parse), ("responses previous_response_id", r_prev)]:
    check(name, fn)
print(sum(ok for _, ok, _, _ in results), "of", len(results), "passed")
sys.exit(0 if all(ok for _, ok, _, _ in results) else 1)
