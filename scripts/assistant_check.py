"""Check the assistant surfaces against a running ``serve`` with the official ``openai`` client.

    python -m resispec_gguf serve --port 8000 &        # the default pair
    python scripts/assistant_check.py --base-url http://127.0.0.1:8000/v1 --seeds 5

Held-out style prompts, several schemas and tools, several seeds.  It counts, and prints:

* forced tool calls (``tool_choice`` "required" and a named function): how many name an
  offered function (the named one) with arguments valid under its schema;
* streamed forced calls: how many reassemble to exactly the non-streamed call (same seed);
* the tool round trip: a tool result sent back gives a text answer;
* ``chat.completions.parse(response_format=PydanticModel)``: how many return the parsed
  object (schemas x seeds);
* ``json_object``: how many replies parse as a JSON object.

A reply cut by ``max_tokens`` counts as a failure.  Exit code 1 when anything failed.
Needs ``openai``, ``pydantic`` and ``jsonschema`` (the test extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Literal

import jsonschema
from openai import OpenAI
from pydantic import BaseModel, Field

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search_code", "description": "Search the repository for a regular expression",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string"}, "path": {"type": "string"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 100}},
            "required": ["pattern"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "create_event", "description": "Add an event to the calendar",
        "parameters": {"type": "object", "properties": {
            "title": {"type": "string"}, "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
            "attendees": {"type": "array", "items": {"type": "string"}}},
            "required": ["title", "date"], "additionalProperties": False}}},
]
TOOL_PROMPTS = [
    ("Is it raining in Lisbon right now?", "get_weather"),
    ("Find where the function parse_config is defined in src/.", "search_code"),
    ("Put a design review with Ana and Bo on my calendar for 2025-03-14.", "create_event"),
]


class Person(BaseModel):
    name: str
    age: int
    email: str


class Review(BaseModel):
    sentiment: Literal["positive", "negative", "mixed"]
    score: int = Field(ge=1, le=5)
    summary: str


class Step(BaseModel):
    command: str
    explanation: str


class Plan(BaseModel):
    goal: str
    steps: list[Step]


class Bug(BaseModel):
    file: str
    line: int
    severity: Literal["low", "medium", "high"]
    fix: str


PARSE_CASES = [
    (Person, "Extract the person: 'Dr. Maria Lopez, 44, can be reached at mlopez@example.org.'"),
    (Review, "Classify this review: 'Fast shipping, but the handle broke after a week.'"),
    (Plan, "Plan how to set up a Python virtual environment and install requests."),
    (Bug, "In utils.py line 12, `return a / b` crashes when b is 0. Report the bug."),
]


def _schema(name):
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


class Tally:
    """Passes and tries per check, printed as they come."""

    def __init__(self):
        self.counts: dict[str, list[int]] = {}

    def __call__(self, name, ok):
        entry = self.counts.setdefault(name, [0, 0])
        entry[0] += bool(ok)
        entry[1] += 1
        print(f"  {name}: {'ok' if ok else 'FAILED'}", flush=True)

    def report(self) -> bool:
        """Print the totals; True when anything failed."""
        failed = False
        for name, (good, total) in self.counts.items():
            print(f"{name:<32} {good}/{total}")
            failed |= good < total
        return failed


def _valid_call(message, expected: str | None) -> bool:
    """A finished reply's first call names an offered function (``expected``, if given) with
    arguments valid under its schema."""
    call = message.tool_calls[0]
    try:
        jsonschema.validate(json.loads(call.function.arguments), _schema(call.function.name))
    except (jsonschema.ValidationError, KeyError, StopIteration, json.JSONDecodeError):
        return False
    return expected is None or call.function.name == expected


def check_forced_calls(client, kw, seed, count, prompt, expected):
    """Forced calls (required and named) on one prompt; the first valid reply, for the round trip."""
    msgs = [{"role": "user", "content": prompt}]
    first = None
    for choice in ("required", {"type": "function", "function": {"name": expected}}):
        named = isinstance(choice, dict)
        ch = client.chat.completions.create(messages=msgs, tools=TOOLS, tool_choice=choice, seed=seed, **kw).choices[0]
        ok = ch.finish_reason == "tool_calls" and ch.message.tool_calls
        if ok:
            ok = _valid_call(ch.message, expected if named else None)
            first = first or (msgs, ch.message)
        count("forced tool call valid" + (" (named)" if named else " (required)"), ok)
    return first


def check_streamed_call(client, kw, seed, count, prompt):
    """A streamed forced call reassembles to exactly the non-streamed one (same seed)."""
    msgs = [{"role": "user", "content": prompt}]
    chunks = list(client.chat.completions.create(messages=msgs, tools=TOOLS, tool_choice="required",
                                                 seed=seed, stream=True, **kw))
    whole = client.chat.completions.create(messages=msgs, tools=TOOLS, tool_choice="required", seed=seed,
                                           **kw).choices[0]
    calls: dict[int, list[str]] = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(d.index, ["", ""])
            entry[0] += d.function.name or ""
            entry[1] += d.function.arguments or ""
    expected_calls = [[t.function.name, t.function.arguments] for t in whole.message.tool_calls or []]
    count("streamed call reassembles", expected_calls and [calls[i] for i in sorted(calls)] == expected_calls)


def check_round_trip(client, kw, seed, count, first_call):
    """A tool result sent back gives a text answer."""
    msgs, message = first_call
    call = message.tool_calls[0]
    back = msgs + [message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"result": "ok, 21"})}]
    r = client.chat.completions.create(messages=back, tools=TOOLS, seed=seed, **kw).choices[0]
    count("tool result -> text answer", r.finish_reason == "stop" and (r.message.content or "").strip()
          and not r.message.tool_calls)


def check_parse(client, kw, seed, count):
    """``parse(response_format=PydanticModel)`` returns the parsed object."""
    for model, prompt in PARSE_CASES:
        try:
            r = client.chat.completions.parse(messages=[{"role": "user", "content": prompt}], response_format=model,
                                              seed=seed, **kw)
            ok = isinstance(r.choices[0].message.parsed, model)
        except Exception as e:  # a length cut raises in parse(): a failure
            print(f"parse {model.__name__} seed {seed}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
            ok = False
        count("parse(PydanticModel)", ok)


def check_json_object(client, kw, seed, count):
    """A ``json_object`` reply parses as a JSON object."""
    r = client.chat.completions.create(messages=[{"role": "user", "content": "List three fruits and their colours "
                                                                             "as a JSON object."}],
                                       response_format={"type": "json_object"}, seed=seed, **kw).choices[0]
    try:
        ok = r.finish_reason == "stop" and isinstance(json.loads(r.message.content), dict)
    except json.JSONDecodeError:
        ok = False
    count("json_object parses", ok)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--model", default="default")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=600)
    ap.add_argument("--only", default="tools,parse,json", help="comma-separated: tools, parse, json")
    args = ap.parse_args(argv)
    client = OpenAI(base_url=args.base_url, api_key=args.api_key, timeout=600, max_retries=0)
    kw = dict(model=args.model, temperature=args.temperature, max_tokens=args.max_tokens)
    only = set(args.only.split(","))
    count = Tally()
    first_call = None
    for seed in range(args.seeds):
        for prompt, expected in TOOL_PROMPTS if "tools" in only else ():
            found = check_forced_calls(client, kw, seed, count, prompt, expected)
            first_call = first_call or found
            check_streamed_call(client, kw, seed, count, prompt)
        if first_call is not None and "tools" in only:
            check_round_trip(client, kw, seed, count, first_call)
        if "parse" in only:
            check_parse(client, kw, seed, count)
        if "json" in only:
            check_json_object(client, kw, seed, count)
    return 1 if count.report() else 0


if __name__ == "__main__":
    sys.exit(main())
