"""The package's layering, read from its source: imports flow one way, one module imports
llama_cpp, surfaces use the engine's public API only, and the docs stand alone."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "resispec_gguf"
MODULES = {p.stem: p for p in PACKAGE.glob("*.py")}
SURFACES = ("api", "bench", "chat", "cli", "display", "flags", "server")


def _imports(name: str) -> tuple[set[str], set[str]]:
    """``(package modules, outside top-level packages)`` that module ``name`` imports anywhere
    (at the top or inside a function)."""
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top, _, rest = alias.name.partition(".")
                (inside.add(rest.split(".")[0]) if top == "resispec_gguf" and rest else outside.add(top))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module.split(".")[0] != "resispec_gguf":
                outside.add(node.module.split(".")[0])
            elif node.module and node.module.split(".")[-1] in MODULES:
                inside.add(node.module.split(".")[-1])
            else:  # from . import a, b
                inside.update(a.name for a in node.names if a.name in MODULES)
    inside.discard(name)
    return inside, outside


GRAPH = {name: _imports(name)[0] for name in MODULES}


def test_no_import_cycle():
    state = {}

    def visit(node, path):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", "import cycle: " + " -> ".join(path + [node])
        state[node] = "open"
        for nxt in sorted(GRAPH[node]):
            visit(nxt, path + [node])
        state[node] = "done"

    for name in sorted(GRAPH):
        visit(name, [])


def test_nothing_imports_the_command_line():
    assert [name for name, deps in GRAPH.items() if "cli" in deps and name != "__main__"] == []
    assert [name for name, deps in GRAPH.items() if "flags" in deps] == ["cli"]


def test_only_the_backend_imports_llama_cpp():
    assert [name for name in sorted(MODULES) if "llama_cpp" in _imports(name)[1]] == ["backend"]
    # and only the engine opens models through it; surfaces never import it.  Two exceptions:
    # LlamaDraft, the draft model lent to llama-cpp-python's own Llama (it subclasses the base
    # class backend re-exports), and rpc, which serves this machine's device to a remote
    # target (no model, no engine)
    assert sorted(name for name, deps in GRAPH.items() if "backend" in deps) == ["engine", "llama_draft", "rpc"]


def test_kernels_and_settings_import_no_surface_and_no_engine():
    for name in ("config", "errors", "sampling", "verify", "tree", "lookup", "protocol", "textstream", "vocab",
                 "chat_format", "autotune", "workloads", "models", "fim"):
        assert not GRAPH[name] & (set(SURFACES) | {"engine", "backend"}), (name, GRAPH[name])


def test_surfaces_never_touch_the_models_behind_the_engine():
    for name in SURFACES:
        text = MODULES[name].read_text(encoding="utf-8")
        hits = re.findall(r"\bengine\.(?:target|draft)\b", text)
        assert hits == [], (name, hits)


def test_docs_stand_alone():
    assert (ROOT / "docs" / "verification.md").is_file()
    for path in [ROOT / "README.md", *sorted(PACKAGE.glob("*.py")), *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        assert "shared/" not in text and "the verification issue" not in text, path
