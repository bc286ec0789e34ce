"""The ``agent`` workload: tool-loop chat requests on real standard-library files, valid as
requests, in a fixed order; and bench running a tool loop method by method, the engine's
memory emptied and its caches dropped before each method's sequence (fakes record it)."""

from __future__ import annotations

import ast
import json
import os
import sysconfig

import pytest

from resispec_gguf.assist.chat_format import check_messages
from resispec_gguf.assist.plan import check_chat_options, response_schema
from resispec_gguf.assist.tools import check_tool_messages
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Stats
from resispec_gguf.errors import UserError
from resispec_gguf.bench import measure as bench
from resispec_gguf.bench import workloads
from resispec_gguf.bench.workloads import agent as aw

ITEMS = workloads.WORKLOADS["agent"]


def _stdlib(name: str) -> str:
    with open(os.path.join(sysconfig.get_paths()["stdlib"], name), encoding="utf-8") as f:
        return f.read()


def _path(item) -> str:
    return aw.file_of(item)[0]


def test_every_item_is_a_valid_chat_request_with_the_file_inline():
    assert len(ITEMS) == 8
    for item in ITEMS:
        system, user = item["messages"]
        assert (system["role"], user["role"]) == ("system", "user")
        path, text = aw.file_of(item)
        assert f"{path}:\n```python\n{text}```\n\n" in user["content"]  # the task, the fenced file, the answer
        check_tool_messages(check_messages(item["messages"]))  # raises on a malformed one
        assert "tools" not in item and "tool_choice" not in item  # no tool to call: the same prompt everywhere
        check_chat_options(None, None, None, item.get("response_format"))
        assert isinstance(response_schema(item["response_format"]), dict)
        if item["response_format"]["json_schema"]["schema"] == aw.EDIT_SCHEMA:  # an edit: the whole file as JSON
            assert item["max_tokens"] == aw.EDIT_TOKENS and "whole updated content" in user["content"]
            assert user["content"].endswith("every line of it.")
        else:  # an extraction: JSON under its schema
            assert item["max_tokens"] == aw.EXTRACT_TOKENS
        assert item["kind"] == "agent"
    json.dumps(ITEMS)


def test_the_tool_loop_variant_reads_the_file_with_read_file_and_answers_its_edits_with_write_file():
    tools = workloads.WORKLOADS["agent-tools"]
    assert len(tools) == len(ITEMS)
    for loop, item in zip(tools, ITEMS):
        system, user, call, result = loop["messages"]
        assert (system["role"], user["role"], call["role"], result["role"]) == ("system", "user", "assistant", "tool")
        assert call["tool_calls"][0]["function"]["name"] == "read_file"
        assert result["tool_call_id"] == call["tool_calls"][0]["id"]
        assert aw.file_of(loop) == aw.file_of(item)  # the same files
        assert _path(loop) in user["content"] and result["content"] not in user["content"]
        check_tool_messages(check_messages(loop["messages"]))
        options = check_chat_options(loop["tools"], loop["tool_choice"], None, loop.get("response_format"))
        assert [f["name"] for f in options.tools.functions] == ["read_file", "write_file", "list_dir", "run_tests"]
        if loop["tool_choice"] == "required":  # an edit: the whole file back through write_file
            assert "response_format" not in loop and loop["max_tokens"] == aw.EDIT_TOKENS
            assert "write_file" in user["content"]
            assert item["response_format"]["json_schema"]["schema"] == aw.EDIT_SCHEMA
        else:  # an extraction: the same schema and budget in both
            assert loop["response_format"] == item["response_format"] and loop["max_tokens"] == item["max_tokens"]


def test_the_files_are_real_standard_library_files_of_a_few_kb():
    for item in ITEMS:
        path, content = aw.file_of(item)
        real = _stdlib(path.removeprefix("src/"))
        assert 1500 <= len(content) <= aw.MAX_CHARS
        ast.parse(content)
        changed = [(a, b) for a, b in zip(content.splitlines(), real.splitlines()) if a != b]
        assert len(changed) <= 1  # the bug-fix item breaks one line; the others are the file as it is
        if changed:
            assert "fail" in item["messages"][1]["content"]


def test_the_sequence_is_fixed_edits_then_extractions_per_file():
    paths = [_path(item) for item in ITEMS]
    files = list(dict.fromkeys(paths))
    assert len(files) == 3 and paths == [files[0]] * 3 + [files[1]] * 3 + [files[2]] * 2
    edits = [item["response_format"]["json_schema"]["schema"] == aw.EDIT_SCHEMA for item in ITEMS]
    assert edits == [True, True, False] * 2 + [True, False]
    loop = workloads.WORKLOADS["agent-tools"]
    assert [item["tool_choice"] for item in loop] == ["required", "required", "none"] * 2 + ["required", "none"]
    assert aw.agent_items() == ITEMS  # the same items every time
    order = [aw.FILES.index(p.removeprefix("src/")) for p in files]
    assert order == sorted(order)  # the files in the order of preference


def test_trim_source_cuts_at_a_top_level_statement():
    text = "import os\n\n\ndef a():\n    return 1\n\n\n# about b\ndef b():\n    return 2\n"
    assert aw.trim_source(text, 1000) == text
    assert aw.trim_source(text, 40) == "import os\n\n\ndef a():\n    return 1\n"
    assert aw.trim_source(text, 5) == "import os\n"  # at least the first statement
    real = _stdlib("glob.py")
    cut = aw.trim_source(real, 3000)
    assert len(cut) <= 3000 and real.startswith(cut) and ast.parse(cut)


def test_a_bug_is_one_broken_line_inside_the_function_named():
    text = "def keep(x):\n    return x\n\n\ndef check(a, b):\n    if a == b:\n        return 0\n    return 1\n"
    broken, where = aw._with_bug(text)
    assert where == "check" and broken == text.replace("a == b", "a != b")
    assert aw._with_bug("def f():\n    return g()\n") is None


def test_files_without_a_function_once_trimmed_are_skipped():
    plain = "X = 1\n"
    small = "def one(a):\n    return a\n\n\ndef two(b):\n    if b == 0:\n        return 1\n    return b\n"
    items = aw.agent_items([("consts.py", plain), ("a.py", small), ("b.py", small), ("c.py", small), ("d.py", small)])
    assert [_path(i) for i in items] == ["src/a.py"] * 3 + ["src/b.py"] * 3 + ["src/c.py"] * 2
    assert "`two`" in items[3]["messages"][1]["content"] and "b != 0" in aw.file_of(items[3])[1]
    assert [name for name, _ in aw.stdlib_sources(("no_such_module_here.py", "glob.py"))] == ["glob.py"]


def test_an_agent_workload_without_files_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(workloads.WORKLOADS, "agent", [])
    with pytest.raises(UserError, match="workload agent has no items"):
        bench.select_prompts(None, "code,agent")


class _Logged:
    """A memory, model or prompt cache that logs being emptied."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def clear(self, learnt=True):
        self.log.append(self.name if learnt else self.name + " answers")

    def reset(self):
        self.log.append(self.name)


class _Engine:
    """What ``run_variants`` calls: ``generate``, logged in order beside the memory being
    emptied and the caches dropped."""

    def __init__(self):
        self.log = []
        self.memory = _Logged(self.log, "memory")
        self.target, self.draft = _Logged(self.log, "target"), _Logged(self.log, "draft")
        self.prompt_cache = _Logged(self.log, "ram")

    def generate(self, tokens, sp, dp, constraint=None):
        self.log.append((tokens[0], dp.method, sp.max_tokens, sp.seed))
        stats = Stats(method=dp.method, tokens=4, steps=4, target_calls=4, total_time=1.0, prompt_time=0.5,
                      prompt_target_time=0.3, prompt_draft_time=0.1)

        class _Result:
            pass

        res = _Result()
        res.stats, res.finish_reason, res.error = stats, "length", None
        return res


@pytest.mark.parametrize("kind", ["agent", "chat"])
def test_bench_runs_a_tool_loop_method_by_method_with_the_memory_emptied(monkeypatch, kind):
    monkeypatch.setattr(bench, "planned_prompts",
                        lambda engine, wl, reasoning: {w: [([i], None) for i in range(len(items))] for w, items in wl.items()})
    items = [{"kind": kind, "prompt": "a", "max_tokens": 7}, {"kind": kind, "prompt": "b"}, {"kind": kind, "prompt": "c"}]
    engine = _Engine()
    variants = [(m, DraftParams(method=m), None) for m in ("none", "chain")]
    out = bench.run_variants(engine, {"w": items}, variants, [0.0], SamplingParams(max_tokens=5, seed=3),
                             progress=False)
    warm = [(0, "none", 8, 0), (0, "chain", 8, 0)]
    cold = ["memory", "target", "draft", "ram"]
    if kind == "agent":
        assert engine.log == warm + cold + [(0, "none", 7, 3), (1, "none", 5, 4), (2, "none", 5, 5)] + cold + [
            (0, "chain", 7, 3), (1, "chain", 5, 4), (2, "chain", 5, 5)]
    else:  # interleaved, each run cold too, but what auto learnt of the memory's candidates stays
        fresh = ["memory answers", "target", "draft", "ram"]
        runs = [(0, "none", 7, 3), (0, "chain", 7, 3), (1, "none", 5, 4), (1, "chain", 5, 4), (2, "none", 5, 5),
                (2, "chain", 5, 5)]
        assert engine.log == warm + [x for run in runs for x in fresh + [run]]
    block = out[0]
    assert block["sequential"] == (kind == "agent")
    m = block["methods"]["chain"]
    assert m["end_to_end_tokens_per_s"] == pytest.approx(4 / 1.5) and m["end_to_end_vs_none"] == pytest.approx(1.0)
    assert (m["prompt_target_s"], m["prompt_draft_s"], m["prompt_host_s"]) == pytest.approx((0.3, 0.1, 0.1))
    assert m["decode_s"] == pytest.approx(1.0)
    table = bench.format_table(out)
    assert ("each method's sequence in turn" in table) == (kind == "agent")
    assert "where a request's time went" in table and "prompt tgt s" in table and "e2e tok/s" in table


def test_bench_n_sets_every_reply_else_the_items_ask_their_own():
    from resispec_gguf.surfaces import cli
    from resispec_gguf.surfaces.cli import bench_cmd

    parser = cli.build_parser()
    prompts, sp = bench_cmd._bench_inputs(parser.parse_args(["bench", "--workload", "chat,agent"]))
    assert sp.max_tokens == bench_cmd._BENCH_TOKENS and prompts["agent"] == ITEMS
    prompts, sp = bench_cmd._bench_inputs(parser.parse_args(["bench", "--workload", "agent", "-n", "9"]))
    assert sp.max_tokens == 9 and all("max_tokens" not in item for item in prompts["agent"])
    bench_help = next(a for a in parser._subparsers._group_actions[0].choices["bench"]._actions if a.dest == "max_tokens")
    assert f"default: {bench_cmd._BENCH_TOKENS}" in bench_help.help and str(aw.EDIT_TOKENS) in bench_help.help
