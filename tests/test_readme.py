"""The claims README.md and docs/ make that code can check: the AMX rebuild command
(docs/troubleshooting.md), the start-up check (docs/cli.md), the server's limits
(docs/server.md) and the flags' defaults as the generated reference shows them (docs/cli.md)."""

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CLI = (DOCS / "cli.md").read_text(encoding="utf-8")
SERVER = (DOCS / "server.md").read_text(encoding="utf-8")
TROUBLESHOOTING = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")


def _pinned_llama_cpp() -> str:
    pin = re.search(r'"llama-cpp-python==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml no longer pins llama-cpp-python"
    return pin.group(1)


def test_amx_rebuild_command_matches_the_pin():
    block = re.search(r"```bash\n(CMAKE_ARGS=.*?)\n```", TROUBLESHOOTING, re.S)
    assert block, "the AMX troubleshooting entry is gone"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    cmake_args = dict(a.split("=", 1) for a in shlex.split(words[0].split("=", 1)[1]))
    flags = {"-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"}
    for var in ("-DCMAKE_C_FLAGS", "-DCMAKE_CXX_FLAGS"):
        assert set(cmake_args[var].split()) == flags, cmake_args
    assert words[1:] == ["pip", "install", "--no-cache-dir", "--force-reinstall",
                         f"llama-cpp-python=={_pinned_llama_cpp()}"]
    # the start-up check's crash line gives the same command
    from resispec_gguf.llama import buildcheck

    assert shlex.split(buildcheck.AMX_REBUILD) == words
    assert buildcheck.rebuild_command(_pinned_llama_cpp(), no_amx=True) == buildcheck.AMX_REBUILD


def test_the_docs_say_what_the_start_up_check_does():
    from resispec_gguf.llama import buildcheck

    check = CLI.split("## The start-up check", 1)[1].split("\n## ", 1)[0]
    assert "there is no start-up check" not in CLI.lower()
    assert buildcheck.SKIP_ENV in check and "buildcheck.json" in check and "`doctor" in CLI
    assert "python -m resispec_gguf doctor" in TROUBLESHOOTING


def test_the_server_page_states_the_limits_the_code_enforces():
    from resispec_gguf.surfaces import server
    from resispec_gguf.config import MIN_CTX

    serve = SERVER
    for needle in ("context_length_exceeded", "application/json", "415", "--cors-origin", "Message contents are text",
                   f"over {server.MAX_STOP_CHARS} characters", f"pool of {['no', 'one', 'two', 'three', 'four'][server.TOKENIZER_THREADS]} threads"):
        assert needle in serve, needle
    assert f"at least {MIN_CTX}" in CLI and f"`--ctx` below {MIN_CTX}" in TROUBLESHOOTING


def test_the_reference_shows_the_settings_defaults():
    """The generated reference takes each default from its help text, which config.py writes
    by hand where it says more than the value (``5; auto: up to 16``): it must be the field's."""
    from resispec_gguf import config

    flag_field = {flag: (cls, f) for cls in (config.SamplingParams, config.DraftParams, config.ModelParams)
                  for f in config.settings(cls) for flag in f.metadata["flags"]}
    chat = CLI.split("\n### chat\n", 1)[1].split("\n### ", 1)[0]
    checked = 0
    for row in re.findall(r"^\| (`-.*) \|$", chat, re.M):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)]
        flags = [f for f in re.findall(r"`(-[^`]+)`", cells[0]) if f in flag_field]
        if not flags:
            continue
        default = flag_field[flags[0]][1].default
        if default is None:  # the help says in words what None means
            continue
        shown = cells[2].split(";")[0].strip()
        if isinstance(default, bool):
            expect = "on" if default else "off"
        elif isinstance(default, float):
            expect = f"{default:g}"
        else:
            expect = str(default) if default != () else "none"
        assert shown == expect, (flags, shown, expect)
        checked += 1
    assert checked >= 14, checked


def _block_after(text: str, marker: str) -> list[str]:
    """The lines of the first fenced block after ``marker``."""
    return text.split(marker, 1)[1].split("```\n", 2)[1].rstrip("\n").splitlines()


def test_the_start_up_lines_readme_quotes_are_what_the_commands_print():
    """README's chat and serve start-up lines, rendered by the code that prints them (the
    README's own figures put in: its cache folder, a 4-row decode at 2.7x one row)."""
    import argparse

    from resispec_gguf.config import DraftParams, ModelParams, ServerParams
    from resispec_gguf.decoding import costcheck, costs
    from resispec_gguf.decoding.autotune import AutoTuner
    from resispec_gguf.llama import buildcheck, devices, models, presets
    from resispec_gguf.surfaces import chat, flags
    from resispec_gguf.surfaces.cli import build_parser
    from resispec_gguf.surfaces.cli.commands import _loading_line, serving_line

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    folder = "~/.cache/resispec-gguf/models"
    rows = costs.ROW_COUNTS
    target = costs.CostCurve(rows, tuple(0.1 + 0.0567 * (n - 1) for n in rows))  # 4 rows: 2.70x one
    draft = costs.CostCurve(rows, tuple(0.03 + 0.017 * (n - 1) for n in rows))
    info = {"target": {"devices": ["CPU"], "n_gpu_layers": 0}, "draft": {"devices": ["CPU"], "n_gpu_layers": 0}}
    outlook = "resispec-gguf: auto: " + costcheck.outlook(AutoTuner(target, draft, DraftParams()), target, info)
    pair = presets.PRESETS["default"]
    loading = "resispec-gguf: " + _loading_line(ModelParams())
    assert _block_after(readme, "**What the first command prints.**") == [
        loading, "resispec-gguf: " + buildcheck.RUNNING,
        *(models.download_line(m, folder) for m in (pair.target, pair.draft)),
        *("resispec-gguf: " + costs.measuring_line(name, f"{folder}/costs.json") for name in ("target", "draft")),
        "resispec-gguf: " + devices.summary(info), outlook, chat.BANNER, ">>>"]
    assert "2.7x one row on this CPU" in outlook and "4-row decode costs about 2.7× one row" in readme

    args = build_parser().parse_args(["serve"])
    model, params, dp = (flags.from_args(cls, args) for cls in (ModelParams, ServerParams, DraftParams))
    params = params.replace(model_name="default")
    engine = argparse.Namespace(n_slots=model.n_slots, n_ctx=model.n_ctx, info=lambda: info, kv_bytes=lambda: sum(
        m.kv_bytes_per_token for m in (pair.target, pair.draft)) * model.n_ctx * model.n_slots)
    assert _block_after(readme, "and once they are loaded, for the default pair") == [
        loading, serving_line(params.replace(port=8000), model, dp, engine, False, "RESISPEC_API_KEY"), outlook]
