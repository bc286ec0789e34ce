"""How often a model calls a tool when it should, and answers in text when it should, with
tools offered under ``tool_choice`` "auto" (what agent frameworks send).

    python scripts/tool_call_rates.py                 # the default pair, T 0.7, 5 tools
    python scripts/tool_call_rates.py --target t.gguf --draft d.gguf --max-tokens 96

Runs through the Python API (``create_chat_completion``): 20 prompts that need one of the
five tools and 20 that need none, one seed each.  Prints, per prompt, the outcome and how the
reply opened its call (``<tool_call>``, a fenced json block, a bare object), then the call
rate over the first group (a call naming the right function with arguments valid under its
schema) and the text rate over the second (no call).  A reply cut by ``--max-tokens`` inside a
call counts as no call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jsonschema

from resispec_gguf import Engine, create_chat_completion
from resispec_gguf.config import DraftParams

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search_code", "description": "Search the repository's files for a regular expression",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                       "required": ["pattern"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the project's test suite, or one test file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": [], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies at today's rate",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"},
                                                        "to": {"type": "string"}},
                       "required": ["amount", "from", "to"], "additionalProperties": False}}},
]

NEED_TOOL = [
    ("What's the weather in Lisbon right now?", "get_weather"),
    ("Is it raining in Tokyo at the moment?", "get_weather"),
    ("Tell me the current temperature in Nairobi.", "get_weather"),
    ("Should I take an umbrella in Vancouver today? Check the weather.", "get_weather"),
    ("Find where the function parse_config is defined in this repo.", "search_code"),
    ("Search the code for TODO comments.", "search_code"),
    ("Which files in the repository mention 'retry_limit'?", "search_code"),
    ("Look for every call to os.system in the codebase.", "search_code"),
    ("Run the test suite and tell me what fails.", "run_tests"),
    ("Please run tests/test_api.py.", "run_tests"),
    ("Can you check whether the tests pass now?", "run_tests"),
    ("Run the unit tests in tests/test_parser.py for me.", "run_tests"),
    ("Show me the contents of setup.py.", "read_file"),
    ("Open README.md and summarise it.", "read_file"),
    ("What does the file src/main.py contain?", "read_file"),
    ("Read config/settings.toml.", "read_file"),
    ("How much is 250 US dollars in euros today?", "convert_currency"),
    ("Convert 1000 yen to British pounds.", "convert_currency"),
    ("What is 75.5 Swiss francs in Canadian dollars at today's rate?", "convert_currency"),
    ("I have 40 euros; how many US dollars is that right now?", "convert_currency"),
]

NO_TOOL = [
    "Write a Python function that reverses a string.",
    "What is the difference between a list and a tuple in Python?",
    "Explain what a hash map is in two sentences.",
    "Say hello in French.",
    "What is 12 times 7?",
    "Give me a haiku about autumn.",
    "What does HTTP stand for?",
    "Write a SQL query that counts the rows of a table named users.",
    "Show me an example JSON object describing a person with a name and an age.",
    "How do I declare a constant in Rust?",
    "Explain recursion to a child.",
    "What is the capital of Australia?",
    "Suggest a name for a cat.",
    "Write a regular expression that matches an email address.",
    "What is Big-O notation?",
    "Translate 'good morning' into Spanish.",
    "Write a bash one-liner that counts the lines of all .py files.",
    "What JSON would a REST API return for an error? Give an example.",
    "Summarise the plot of Romeo and Juliet in one sentence.",
    "How do you write a for loop in JavaScript?",
]


def _opening(text: str) -> str:
    """How a reply opened its call, read from its text."""
    s = text.lstrip()
    if "<tool_call>" in text:
        return "tag"
    if "```" in text:
        return "fenced"
    return "bare" if "{" in s else "-"


def _valid(call, functions) -> bool:
    schema = {f["function"]["name"]: f["function"]["parameters"] for f in functions}[call["function"]["name"]]
    try:
        jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
    except (jsonschema.ValidationError, json.JSONDecodeError):
        return False
    return True


def run(engine, prompt: str, args, seed: int):
    reply = create_chat_completion(engine, [{"role": "user", "content": prompt}], tools=TOOLS, tool_choice="auto",
                                   temperature=args.temperature, max_tokens=args.max_tokens, seed=seed,
                                   draft=DraftParams(method=args.method))
    return reply["choices"][0], engine.last_result.text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="default")
    p.add_argument("--draft", default=None)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--method", default="auto")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    engine = Engine.load(args.target, args.draft)
    called = texted = 0
    start = time.perf_counter()
    for k, (prompt, want) in enumerate(NEED_TOOL):
        choice, raw = run(engine, prompt, args, args.seed + k)
        calls = choice["message"].get("tool_calls") or []
        ok = bool(calls) and calls[0]["function"]["name"] == want and all(_valid(c, TOOLS) for c in calls)
        called += ok
        print(f"tool  {'call' if ok else 'MISS'} {_opening(raw):6} {choice['finish_reason']:10} {prompt[:50]!r}"
              + ("" if ok else f" -> {raw[:80]!r}"), flush=True)
    for k, prompt in enumerate(NO_TOOL):
        choice, raw = run(engine, prompt, args, args.seed + 100 + k)
        ok = not choice["message"].get("tool_calls")
        texted += ok
        print(f"text  {'text' if ok else 'CALL'} {_opening(raw):6} {choice['finish_reason']:10} {prompt[:50]!r}"
              + ("" if ok else f" -> {raw[:80]!r}"), flush=True)
    print(f"call rate {called}/{len(NEED_TOOL)} = {called / len(NEED_TOOL):.2f}; text rate {texted}/{len(NO_TOOL)} = "
          f"{texted / len(NO_TOOL):.2f}  (T {args.temperature}, max_tokens {args.max_tokens}, method {args.method}, "
          f"{time.perf_counter() - start:.0f} s)")
    engine.close()
    return 0 if called == len(NEED_TOOL) and texted == len(NO_TOOL) else 1


if __name__ == "__main__":
    sys.exit(main())
