"""The package's layering, read from its source: each sub-package imports only the layers
below it, imports form no cycle, one package imports llama_cpp, surfaces and benchmarks use
the engine's public API only, only surfaces import the benchmarks, every module has a test
file, and the docs stand alone."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "resispec_gguf"


def _dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_dotted(p): p for p in PACKAGE.rglob("*.py")}
PACKAGES = {name for name, p in MODULES.items() if p.name == "__init__.py"}

# what each layer may import from the package, besides itself (a layer's own modules are free)
BASE = {"resispec_gguf.config", "resispec_gguf.errors", "resispec_gguf.paths", "resispec_gguf.progress",
        "resispec_gguf.settings_schema"}
ALLOWED = {
    "kernels": BASE,
    "decoding": BASE | {"resispec_gguf.kernels"},
    "assist": BASE | {"resispec_gguf.kernels", "resispec_gguf.decoding.protocol"},
    "llama": BASE | {"resispec_gguf.kernels", "resispec_gguf.decoding"},
    # the benchmarks: a layer above the engine, beside the surfaces (which import it); never a surface
    "bench": BASE | {"resispec_gguf.engine", "resispec_gguf.assist", "resispec_gguf.kernels", "resispec_gguf.decoding",
                     "resispec_gguf.llama.loading", "resispec_gguf.llama.models", "resispec_gguf.llama.presets"},
}


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            pkg = pkg.rpartition(".")[0]
        base = f"{pkg}.{node.module}" if node.module else pkg
    if not base.startswith("resispec_gguf"):
        return [base]
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in MODULES else base)
    return out


def _imports(name: str) -> tuple[set[str], set[str]]:
    """``(package modules, outside top-level packages)`` that module ``name`` imports anywhere
    (at the top or inside a function)."""
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = _resolve(name, node)
        for full in names:
            if full.startswith("resispec_gguf"):
                while full not in MODULES:
                    full = full.rpartition(".")[0]
                inside.add(full)
            else:
                outside.add(full.split(".")[0])
    inside.discard(name)
    return inside, outside


GRAPH = {name: _imports(name)[0] for name in MODULES}


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or name in PACKAGES and len(parts) == 2 else "top"


def _covered(dep: str, allowed: set[str]) -> bool:
    return any(dep == a or dep.startswith(a + ".") for a in allowed)


def test_no_import_cycle():
    state = {}

    def visit(node, path):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", "import cycle: " + " -> ".join(path + [node])
        state[node] = "open"
        for nxt in sorted(GRAPH[node] - PACKAGES):
            visit(nxt, path + [node])
        state[node] = "done"

    for name in sorted(GRAPH):
        visit(name, [])


def test_each_layer_imports_only_the_layers_below():
    for name, deps in GRAPH.items():
        layer = _layer(name)
        if layer not in ALLOWED:
            continue
        own = f"resispec_gguf.{layer}"
        bad = sorted(d for d in deps if not _covered(d, ALLOWED[layer] | {own}))
        assert bad == [], (name, bad)


def test_the_settings_import_nothing_above_them():
    for name in sorted(BASE):
        assert GRAPH[name] <= BASE, (name, GRAPH[name])


def test_only_surfaces_import_surfaces_and_nothing_imports_the_command_line():
    for name, deps in GRAPH.items():
        if _layer(name) == "surfaces" or name in ("resispec_gguf", "resispec_gguf.__main__"):
            continue
        # the package re-exports create_chat_completion; nothing else below uses a surface
        assert not any(d.startswith("resispec_gguf.surfaces") for d in deps), (name, deps)
    # the command line is the package surfaces.cli: its modules import one another and flags
    cli = "resispec_gguf.surfaces.cli"

    def in_cli(name):
        return name == cli or name.startswith(cli + ".")

    assert sorted(n for n, deps in GRAPH.items() if not in_cli(n) and any(in_cli(d) for d in deps)) == [
        "resispec_gguf.__main__"]
    users = sorted(n for n, deps in GRAPH.items() if "resispec_gguf.surfaces.flags" in deps)
    assert users and all(in_cli(n) for n in users), users


def test_only_the_backend_imports_llama_cpp():
    """Only the package ``llama.backend`` (its modules) imports llama_cpp."""
    backend = "resispec_gguf.llama.backend"

    def in_backend(name):
        return name == backend or name.startswith(backend + ".")

    importers = [n for n in sorted(MODULES) if "llama_cpp" in _imports(n)[1]]
    assert importers and all(in_backend(n) for n in importers), importers
    # and only the llama layer uses it (the engine reaches models through llama.loading)
    users = sorted(n for n, deps in GRAPH.items() if not in_backend(n) and any(in_backend(d) for d in deps))
    assert users and all(_layer(n) == "llama" for n in users), users


def test_only_surfaces_import_the_benchmarks():
    """``bench`` sits above the engine: the surfaces (the command line, ``display``) import it,
    nothing below them does, and it imports no surface (``ALLOWED``)."""
    importers = sorted(n for n, deps in GRAPH.items()
                       if _layer(n) != "bench" and any(d.startswith("resispec_gguf.bench") for d in deps))
    assert importers and all(_layer(n) == "surfaces" for n in importers), importers
    assert not any(d.startswith("resispec_gguf.surfaces") for n, deps in GRAPH.items() if _layer(n) == "bench"
                   for d in deps)


def test_surfaces_never_touch_the_models_behind_the_engine():
    for name, path in MODULES.items():
        if _layer(name) not in ("surfaces", "bench"):
            continue
        hits = re.findall(r"\bengine\.(?:target|draft)\b", path.read_text(encoding="utf-8"))
        assert hits == [], (name, hits)


def test_every_package_says_what_it_is_for_and_what_it_may_not_import():
    for name in sorted(PACKAGES - {"resispec_gguf"}):
        doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))) or ""
        assert "import" in doc and len(doc) > 200, name


def test_docs_stand_alone():
    assert (ROOT / "docs" / "verification.md").is_file()
    for path in [ROOT / "README.md", *sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        assert "shared/" not in text and "the verification issue" not in text, path


def test_every_module_has_a_test_file_where_its_package_is():
    """``resispec_gguf/PKG/MOD.py`` is tested in ``tests/PKG/test_MOD*.py`` (a module of a
    sub-package such as ``surfaces/server/app.py`` by ``tests/surfaces/test_server*.py``,
    ``bench/workloads/agent.py`` by ``tests/bench/test_workloads*.py``);
    a top-level module in ``tests/test_MOD*.py``."""
    tests = ROOT / "tests"
    missing = []
    for name, path in sorted(MODULES.items()):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        parts = name.split(".")[1:]
        folder = tests.joinpath(*parts[:1]) if len(parts) > 1 else tests
        stem = parts[1] if len(parts) > 2 else parts[-1]
        if not list(folder.glob(f"test_{stem}*.py")):
            missing.append(name)
    assert missing == []


def test_no_package_is_named_like_a_test_folder():
    """``spec/`` reads as tests to structure tools and to Ruby and JavaScript readers; the engine
    lives in ``decoding/``."""
    names = {p.name for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    assert not names & {"spec", "specs", "test", "tests"}


def test_no_module_reaches_600_lines():
    """Every Python file of the package, the scripts and the tests stays under 600 lines: a
    module that grows past that is split by what changes together (docs/architecture.md)."""
    files = [p for d in ("resispec_gguf", "scripts", "tests") for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 100
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) >= 600}
    assert long == {}


def _chat_model_members() -> set[str]:
    """The members of ``assist.chatmodel.ChatModel``, read from its class body."""
    tree = ast.parse(MODULES["resispec_gguf.assist.chatmodel"].read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ChatModel")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}


def test_assist_never_calls_back_into_the_engine():
    """``assist`` is handed a model as ``chatmodel.ChatModel`` (the engine is one) and reads only
    its three parts, assist's own objects: no assist code names an engine, and a parameter
    typed ``ChatModel`` is never called and has no attribute read but the protocol's members
    (so ``model.chat_tokens(...)``, a call back into whatever was handed, fails here)."""
    members = _chat_model_members()
    assert members == {"prompts", "grammars", "chat_formats"}
    typed = set()
    for name, path in sorted(MODULES.items()):
        if _layer(name) != "assist":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            named = (node.id if isinstance(node, ast.Name) else node.arg if isinstance(node, ast.arg)
                     else node.attr if isinstance(node, ast.Attribute) else None)
            assert named is None or named.lower() not in ("engine", "engines", "_engine"), (name, node.lineno)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            handed = {a.arg for a in args if a.annotation is not None and "ChatModel" in ast.unparse(a.annotation)}
            if handed:
                typed.add(f"{name}.{node.name}")
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id in handed:
                    assert inner.attr in members, (name, node.name, inner.attr, inner.lineno)
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id in handed:
                    raise AssertionError((name, node.name, "calls the model it is handed", inner.lineno))
    # the check is not empty: chat planning's entry points take the model typed so
    assert {"resispec_gguf.assist.plan.plan_chat", "resispec_gguf.assist.plan.chat_text"} <= typed, typed


def test_no_function_is_longer_than_60_lines():
    """Every function and method of the package, from its ``def`` to the end of its body
    (decorators left out), is at most 60 lines: a longer one is split into named steps."""
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = n
    assert long == {}
