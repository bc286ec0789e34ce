"""The README's troubleshooting and server claims that code can check."""

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _pinned_llama_cpp() -> str:
    pin = re.search(r'"llama-cpp-python==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml no longer pins llama-cpp-python"
    return pin.group(1)


def test_amx_rebuild_command_matches_the_pin():
    block = re.search(r"```bash\n(CMAKE_ARGS=.*?)\n```", README, re.S)
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


def test_the_readme_says_what_the_start_up_check_does():
    from resispec_gguf.llama import buildcheck

    assert "there is no start-up check" not in README.lower()
    assert buildcheck.SKIP_ENV in README and "`doctor" in README and "buildcheck.json" in README


def test_serve_section_states_the_limits_the_code_enforces():
    from resispec_gguf.surfaces import server
    from resispec_gguf.config import MIN_CTX

    serve = README.split("### serve", 1)[1].split("\n## ", 1)[0]
    for needle in ("context_length_exceeded", "application/json", "415", "--cors-origin", "Message contents are text",
                   f"over {server.MAX_STOP_CHARS} characters", f"pool of {['no', 'one', 'two', 'three', 'four'][server.TOKENIZER_THREADS]} threads"):
        assert needle in serve, needle
    assert f"at least {MIN_CTX}" in README and f"`--ctx` below {MIN_CTX}" in README


def test_flag_table_defaults_are_the_settings_defaults():
    """The README's flag table repeats defaults for the reader; they must be config.py's."""
    from resispec_gguf import config

    flag_field = {flag: (cls, f) for cls in (config.SamplingParams, config.DraftParams, config.ModelParams)
                  for f in config.settings(cls) for flag in f.metadata["flags"]}
    table = README.split("| flag | default | meaning |", 1)[1].split("\n\n", 1)[0]
    checked = 0
    for row in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        flags = [f for f in re.findall(r"`(-[^`/ ]+)", cells[0]) if f in flag_field]
        defaults = [d.strip().strip("`") for d in cells[1].split(",")]
        if not flags or len(defaults) != len(flags) and len(defaults) != 1:
            continue
        for flag, shown in zip(flags, defaults):
            default = flag_field[flag][1].default
            if default is None:  # the table says in words what None means
                continue
            if isinstance(default, bool):
                expect = "on" if default else "off"
            elif isinstance(default, float):
                expect = f"{default:g}"
            else:
                expect = str(default) if default != () else "none"
            assert shown == expect, (flag, shown, expect)
            checked += 1
    assert checked >= 14, checked
