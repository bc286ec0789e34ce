"""The ``agent`` benchmark workloads: a coding agent's requests, run in sequence.

Each item is one chat request as an agent framework sends it: a coding agent's system
prompt and the user's task with the file it is about.  In ``agent`` the file comes inline in
the user's message, fenced with its path (as an editor integration or an agent that attaches
the open file sends it), and the model answers an edit with JSON under a ``{"path",
"content"}`` schema, the whole edited file in a JSON string: the copy a ``write_file``
argument is, in the form the default 1.5B target does copy in.  Measured on
the default pair at T 0: given the file inline it quotes it whole (620 tokens, the file to
the character); given it as a ``read_file`` result it stopped after the module docstring
(114 tokens), and under a forced ``write_file`` call it wrote a placeholder.  In
``agent-tools`` (``tool_calls``) the file comes back from the assistant's ``read_file`` call
as a ``tool`` message, four function tools are offered (``read_file``, ``write_file``,
``list_dir``, ``run_tests``) and the model answers with a ``write_file`` call carrying the
whole edited file (``tool_choice`` "required"), for targets that call tools.  An extraction item
answers with JSON under its own schema in both.

The files are real source files of the running Python's standard library (``FILES``: the
first three found), each cut at a top-level statement to at most ``MAX_CHARS`` characters,
so a prompt is 1-2k tokens.  Several requests work on the same file (an edit, a second
edit, an extraction), so that a candidate source that remembers earlier answers has
something to learn from: the items are meant to run in order (``bench`` runs each method's
whole sequence in turn, its memory cleared first).  Each item reads the file as it was: the
answers are not applied.

Deterministic for a given Python version (the files are that version's).  Data only: nothing
here is tuned on by the engine.
"""

from __future__ import annotations

import ast
import json
import os
import sysconfig

__all__ = ["EDIT_SCHEMA", "FILES", "file_of", "MAX_CHARS", "EDIT_TOKENS", "EXTRACT_TOKENS", "TOOLS", "SYSTEM", "agent_items",
           "trim_source", "stdlib_sources"]

# candidates in order of preference: small, self-contained modules
FILES = ("fnmatch.py", "colorsys.py", "shlex.py", "glob.py", "textwrap.py", "bisect.py")
MAX_CHARS = 4000
# the reply's budget: a write_file call quoting the whole file (as JSON text) is cut at it
# on the biggest files; an extraction is short
EDIT_TOKENS = 512
EXTRACT_TOKENS = 256

SYSTEM = ("You are a coding agent working in a Python repository. Use the tools to read, list, change and test "
          "files. To change a file, call write_file with the file's complete new content. Change only what the "
          "task asks for and keep every other line exactly as it was.")


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


_PATH = {"type": "string", "description": "path relative to the repository root"}
TOOLS = [
    _tool("read_file", "Read a file of the repository.", {"path": _PATH}, ["path"]),
    _tool("write_file", "Replace a file's whole content.",
          {"path": _PATH, "content": {"type": "string", "description": "the complete new content"}},
          ["path", "content"]),
    _tool("list_dir", "List the entries of a directory.", {"path": _PATH}, ["path"]),
    _tool("run_tests", "Run the test suite, or the tests matching a pattern, and report failures.",
          {"pattern": {"type": "string", "description": "a pytest -k expression"}}, []),
]

# an edit answered as JSON: the file's path and its whole new content
EDIT_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"], "additionalProperties": False,
}
_FUNCTIONS_SCHEMA = {
    "type": "object",
    "properties": {"functions": {"type": "array", "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "args"], "additionalProperties": False}}},
    "required": ["functions"], "additionalProperties": False,
}
_SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"module": {"type": "string"}, "purpose": {"type": "string"},
                   "public_names": {"type": "array", "items": {"type": "string"}}},
    "required": ["module", "purpose", "public_names"], "additionalProperties": False,
}

# a one-token change that breaks a function, tried in order on the function bodies
_BUGS = ((" == ", " != "), (" < ", " <= "), (" + 1", " - 1"), (" and ", " or "), (" is None", " is not None"))


def stdlib_sources(names=FILES) -> list[tuple[str, str]]:
    """``(name, text)`` of those of ``names`` found as source files in the running Python's
    standard library, in order."""
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for name in names:
        try:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                out.append((name, f.read()))
        except OSError:
            continue
    return out


def trim_source(text: str, max_chars: int = MAX_CHARS) -> str:
    """``text`` cut before the last top-level statement that keeps it within ``max_chars``
    (the whole text when it fits), with the comments right above that statement, so that
    what is left still parses; at least its first statement."""
    if len(text) <= max_chars:
        return text
    lines = text.splitlines(keepends=True)
    starts = [_first_line(node) - 1 for node in ast.parse(text).body[1:]]  # 0-based, each statement after the first
    kept = [_before(lines, start) for start in starts] or [text]
    return next((k for k in reversed(kept) if len(k) <= max_chars), kept[0])


def _before(lines: list[str], cut: int) -> str:
    """The lines before ``cut``, less the blank and comment lines that end them (the comments
    above the statement cut off go with it)."""
    while cut > 1 and (not lines[cut - 1].strip() or lines[cut - 1].lstrip().startswith("#")):
        cut -= 1
    return "".join(lines[:cut])


def _first_line(node) -> int:
    """The first line of a statement, its decorators and comments right above it aside."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _functions(text: str) -> list[ast.FunctionDef]:
    """The functions of ``text``: top-level ones, then the methods of top-level classes."""
    tree = ast.parse(text)
    top = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    methods = [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body if isinstance(m, ast.FunctionDef)]
    return top + methods


def _with_bug(text: str) -> tuple[str, str] | None:
    """``(text with one comparison or increment broken, the function it is in)``; None when no
    function body has one."""
    lines = text.splitlines(keepends=True)
    for old, new in _BUGS:
        for fn in _functions(text):
            for i in range(fn.body[0].lineno - 1, fn.end_lineno):
                if old in lines[i] and not lines[i].lstrip().startswith("#"):
                    broken = lines[:i] + [lines[i].replace(old, new, 1)] + lines[i + 1:]
                    return "".join(broken), fn.name
    return None


def _request(path: str, task: str, answer: str, content: str, *, tool_choice: str, response_format=None,
             max_tokens: int, inline: bool) -> dict:
    """One request on ``content``, the file at ``path``: inline in the user's message between the
    task and how to ``answer`` (``inline``; no tools: ``tool_choice`` "none" would leave them out
    of our prompt but not of llama-server's), else read by the assistant's ``read_file`` call
    with the four tools."""
    if inline:
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"{task}\n\n{path}:\n```python\n{content}```\n\n{answer}"}]
    else:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{task} {answer}"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": content},
        ]
    item = {"kind": "agent", "messages": messages, "max_tokens": max_tokens}
    if not inline:  # an inline request calls no tool: without them its prompt is the same on every server
        item |= {"tools": TOOLS, "tool_choice": tool_choice}
    if response_format is not None:
        item["response_format"] = response_format
    return item


def file_of(item: dict) -> tuple[str, str]:
    """``(path, file text)`` of an item of either workload."""
    last = item["messages"][-1]
    if last["role"] == "tool":
        call = item["messages"][-2]["tool_calls"][0]["function"]
        return json.loads(call["arguments"])["path"], last["content"]
    head, _, rest = last["content"].partition(":\n```python\n")
    return head.rsplit("\n\n", 1)[-1], rest.rpartition("```")[0]


def _edit(path, task, content, tool_calls: bool):
    if tool_calls:
        return _request(path, task, "Write the whole file back with write_file.", content,
                        tool_choice="required", max_tokens=EDIT_TOKENS, inline=False)
    return _request(path, task, "Answer with JSON only: the file's path and its whole updated content, every line of "
                    "it.", content,
                    tool_choice="none", max_tokens=EDIT_TOKENS, inline=True,
                    response_format={"type": "json_schema", "json_schema": {"name": "file_edit", "schema": EDIT_SCHEMA,
                                                                            "strict": True}})


def _extract(path, task, content, name, schema, tool_calls: bool):
    return _request(path, task, "Answer with JSON only.", content, tool_choice="none", max_tokens=EXTRACT_TOKENS,
                    inline=not tool_calls,
                    response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                                            "strict": True}})


def _file_items(k: int, name: str, text: str, tool_calls: bool) -> list[dict]:
    """The requests on one file: an edit, a second edit, then (first two files) an extraction."""
    path = "src/" + name
    fns = _functions(text)
    first = fns[0].name
    bare = next((f.name for f in fns if ast.get_docstring(f) is None), first)
    rename = _edit(path, f"Rename the function `{first}` to `{first}_impl` in {path}, updating every use of it in "
                         "the file.", text, tool_calls)
    if k == 1 and _with_bug(text) is not None:
        broken, where = _with_bug(text)
        edits = [_edit(path, f"The tests of `{where}` in {path} fail since the last change. Find the bug and fix it.",
                       broken, tool_calls),
                 _edit(path, f"Add type hints to the parameters and the return value of `{bare}` in {path}.", text,
                       tool_calls)]
    else:
        edits = [rename, _edit(path, f"Add a docstring to `{bare}` in {path} that says what it returns.", text,
                               tool_calls)]
    if k == 2:
        return edits[:1] + [_extract(path, f"Summarise the module {path}: its name, its purpose in one sentence, "
                                           "and its public names.", text, "module_summary", _SUMMARY_SCHEMA,
                                     tool_calls)]
    return edits + [_extract(path, f"List the functions defined in {path} with their parameters.", text,
                             "functions", _FUNCTIONS_SCHEMA, tool_calls)]


def agent_items(sources=None, max_chars: int = MAX_CHARS, tool_calls: bool = False) -> list[dict]:
    """The workload's requests, in the order they run: for each of the first three files of
    ``sources`` (``(name, text)``; default ``stdlib_sources()``) that define a function once
    trimmed to ``max_chars``, its requests (``_file_items``): 8 items over 3 files.
    ``tool_calls``: edits answered by a ``write_file`` call (``agent-tools``), else as JSON."""
    sources = stdlib_sources() if sources is None else sources
    items, files = [], 0
    for name, text in sources:
        text = trim_source(text, max_chars)
        if files == 3 or not _functions(text):
            continue
        items += _file_items(files, name, text, tool_calls)
        files += 1
    return items
