"""The built-in bench workloads: read from the package data file ``workloads.json``, the same
prompts as when they were written in Python, shaped as a ``--prompts`` file's items."""

import hashlib
import json
from importlib import resources
from pathlib import Path

import pytest

from resispec_gguf.bench import measure as bench
from resispec_gguf.bench import workloads
from resispec_gguf.bench.workloads import WORKLOADS, infill, text

ROOT = Path(__file__).resolve().parents[2]

# sha256 of json.dumps(WORKLOADS, sort_keys=True), taken from the module when its prompts were
# still Python strings: the data file holds exactly those texts
WORKLOADS_SHA256 = "9957c6ee29d92632266a8d387718980053a08223fa09a465ad1c3c8dae87f6c8"


def test_the_prompts_are_the_ones_the_python_strings_held():
    assert list(WORKLOADS) == ["code", "edit", "chat", "infill", "agent", "agent-tools"]
    fixed = {w: items for w, items in WORKLOADS.items() if not w.startswith("agent")}  # agent: the running Python's files
    assert {w: len(items) for w, items in fixed.items()} == {"code": 8, "edit": 7, "chat": 7, "infill": 10}
    digest = hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()
    assert digest == WORKLOADS_SHA256
    assert WORKLOADS["code"][6] == {"prompt": "// Debounce: call fn only after `wait` ms have passed without another "
                                              "call.\nfunction debounce(fn, wait) {\n"}
    assert WORKLOADS["chat"][5] == {"messages": [{"role": "user", "content": "Why is the sky blue? Keep it under 100 words."}]}
    edit = WORKLOADS["edit"][2]["messages"][0]["content"]
    assert edit.startswith("This function crashes on lines without '=' and on keys before any section. Fix both "
                           "bugs and return the corrected function.\n\ndef parse_config(lines):\n    result = {}\n")
    assert edit.endswith("        result[section][key.strip()] = value.strip()\n    return result\n")
    assert infill.files()[3].startswith("#include <stdlib.h>\n#include <string.h>\n\ntypedef struct {\n")


def test_items_read_back_from_a_prompt_file_unchanged(tmp_path):
    """Every item has a ``--prompts`` file's shape: written as JSONL, ``parse_prompts`` reads
    the same prompt, messages or infill back."""
    for name, items in WORKLOADS.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(item.get("infill", item)) + "\n" for item in items), encoding="utf-8")
        back = bench.parse_prompts(str(path))
        assert back == [{"kind": back[0]["kind"], **item} for item in items], name
        assert {b["kind"] for b in back} == {"code": {"prompt"}, "infill": {"infill"}, "agent": {"agent"},
                                            "agent-tools": {"agent"}}.get(name, {"chat"})


def test_edit_prompts_quote_whole_code_after_the_ask():
    for item in WORKLOADS["edit"]:
        (message,) = item["messages"]
        ask, code = message["content"].split("\n\n", 1)
        assert message["role"] == "user" and "\n" not in ask and ask.endswith(".")
        assert code.endswith("\n") and code.count("\n") >= 10
        assert any(code.startswith(start) for start in ("class ", "def ", "function "))


def test_a_text_of_several_lines_is_a_list_of_lines_each_ending_in_a_newline():
    assert text.joined("one line") == "one line"
    assert text.joined(["a", "", "  b"]) == "a\n\n  b\n"
    assert text.joined([]) == ""


def test_the_data_file_is_package_data():
    """Read through importlib.resources (so an installed wheel finds it too), and declared in
    pyproject.toml so that a non-editable install ships it."""
    data = json.loads(resources.files("resispec_gguf.bench.workloads").joinpath("workloads.json").read_text(encoding="utf-8"))
    assert [text.joined(t) for t in data["infill_files"]] == infill.files()
    assert len(data["code"]) == len(WORKLOADS["code"]) and len(data["chat"]) == len(WORKLOADS["chat"])
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "workloads.json" in pyproject["tool"]["setuptools"]["package-data"]["resispec_gguf.bench.workloads"]


def test_each_workload_is_a_registration_that_says_whether_it_runs_in_sequence():
    assert workloads.names() == list(WORKLOADS)
    assert [n for n in workloads.names() if workloads.lookup(n).sequential] == ["agent", "agent-tools"]
    assert workloads.lookup("no-such-workload") is None
    assert workloads.is_sequential(WORKLOADS["agent-tools"]) and not workloads.is_sequential(WORKLOADS["code"])
    assert not workloads.is_sequential([]) and not workloads.is_sequential([{"kind": "other", "prompt": "a"}])
    with pytest.raises(ValueError, match="registered already"):
        workloads.register(workloads.Workload("code", list))


def test_a_new_workload_is_one_registration(monkeypatch):
    """Registered, it is listed, selected by name and, sequential, its items run in sequence."""
    from resispec_gguf.bench import inputs
    from resispec_gguf.bench.workloads import registry

    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    monkeypatch.setattr(registry, "_ITEMS", dict(registry.all_items()))
    loop = [{"kind": "loop", "prompt": "a"}, {"kind": "loop", "prompt": "b"}]
    workloads.register(workloads.Workload("loop", lambda: loop, sequential=True))
    assert inputs.select_prompts(None, "code,loop")["loop"] == loop and workloads.WORKLOADS["loop"] == loop
    assert inputs.is_sequential(loop) and not inputs.is_sequential(loop + WORKLOADS["chat"])
    with pytest.raises(Exception, match="choose from code, edit, chat, infill, agent, agent-tools, loop"):
        inputs.parse_workloads("nope")
