"""Every flag of every command given a value it may not take (continued from test_cli_e2e.py):
derived from the field's check where it has one (past each end of a Range, outside a OneOf),
else from the lists below; ``test_an_out_of_range_value_is_one_line`` expects exit 2 with one
line naming the flag, running ``cli.main`` in this process, as none of those values gets as
far as loading a model.  And ``bench --plot`` without matplotlib is refused before the run.
"""

from __future__ import annotations

import argparse
import sys

import pytest

from resispec_gguf.surfaces import cli, flags
from resispec_gguf import config
from resispec_gguf.config import DraftParams, ModelParams, SamplingParams

from cli_cases import ROOT, SETTINGS, _commands, _free_port, _options


# ---------------------------------------------------------------------------------- bad values


def _out_of_range(f) -> list[str]:
    """Values the field's own check refuses: past each end of a Range, outside a OneOf."""
    check = f.metadata["check"]
    if isinstance(check, config.Range):
        values = []
        if check.lo is not None:
            values.append(check.lo if check.lo_open else check.lo - 1)
        if check.hi is not None:
            values.append(check.hi if check.hi_open else check.hi + 1)
        return [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    if isinstance(check, config.OneOf):
        return ["no-such-" + f.name.replace("_", "-")]
    return []


# Settings whose check is a function: a value it refuses.
REFUSED_TEXT = {"stop": "", "api_key": "", "cors_origins": "evil.example/", "rpc": "127.0.0.1", "memory": ""}
# Settings and options refused only when the command runs (model resolution, binding, reading):
# the value and a word of the one-line error.
REFUSED_AT_RUN = {
    "target": ("/nonexistent/model.gguf", "model file not found: /nonexistent/model.gguf"),
    "draft": ("/nonexistent/draft.gguf", "model file not found: /nonexistent/draft.gguf"),
    "host": ("192.0.2.1", "cannot listen on 192.0.2.1"),  # TEST-NET-1: no lookup, never a local address
    "prompts": ("/nonexistent/prompts.jsonl", "cannot read prompt file /nonexistent/prompts.jsonl"),
    "json_schema": ("{not json", "--json-schema is not valid JSON"),
    "grammar": ("/nonexistent/g.gbnf", "--grammar: cannot read '/nonexistent/g.gbnf'"),
    "preset": ("no-such-preset", "unknown model preset"),
    "reference": ("/nonexistent/ref.gguf", "--reference needs --pairs"),  # (and with it: test_pairs.py)
    "api_key_file": ("/nonexistent/key.txt", "cannot read the API key file /nonexistent/key.txt"),
    "cache_dir": ("/proc/version/cache", "cannot use cache directory /proc/version/cache"),  # under a file
}
# Each command's own options (not settings): values their parsers refuse.
REFUSED_OWN = {
    "temperature": ["-1", "500"], "repeat": ["0"], "k": ["1,0", "1,65"], "draft_support": ["-1"],
    "rrs_samples": ["-1"], "workload": ["code,poetry"], "methods": ["none,fast"], "sweep": ["huge"],
    "json": ["/nonexistent/out.json"], "plot": ["/nonexistent/out.png"], "ctx": ["97", "lots"],
    "concurrency": ["0", "1,33", "two"],
    # bench --against's (a bad first value of --against itself: test_compare.py)
    "against": ["llama.cpp"], "n_prompts": ["0"], "chain_depth": ["0"], "draft_max": ["0"], "spec_rows": ["ngram"],
    "rounds": ["0"], "bench_reps": ["0"], "timeout": ["0", "soon"],
}
# Flags that take any value.
ANY_VALUE = {"model_name": "any text names the model", "system": "any text is a system prompt",
             "prompt": "any text is a prompt"}


def _setting_of(parser, dest):
    for cls in SETTINGS:
        if dest in flags.offered(parser, cls):
            return next(f for f in config.settings(cls) if f.name == dest)
    return None


def _bad_cases() -> list[tuple[str, argparse.Action, str, str | None]]:
    """``(command, action, bad value, needle)``: needle None means the error must name the flag."""
    out = []
    for cmd, parser in _commands(cli.build_parser()).items():
        for action in _options(parser):
            field = _setting_of(parser, action.dest)
            if field is not None:
                values = _out_of_range(field) or ([REFUSED_TEXT[field.name]] if field.name in REFUSED_TEXT else [])
                out += [(cmd, action, v, None) for v in values]
            else:
                out += [(cmd, action, v, None) for v in REFUSED_OWN.get(action.dest, [])]
            if action.dest in REFUSED_AT_RUN:
                value, needle = REFUSED_AT_RUN[action.dest]
                out.append((cmd, action, value, needle))
    return out


def _switch(action) -> bool:
    return action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction)


def test_every_flag_has_an_out_of_range_case():
    tested = {(cmd, a.dest) for cmd, a, _, _ in _bad_cases()}
    missing = [f"{cmd} {'/'.join(a.option_strings) or a.dest}"
               for cmd, p in _commands(cli.build_parser()).items() for a in _options(p)
               if (cmd, a.dest) not in tested and not _switch(a) and a.dest not in ANY_VALUE]
    assert not missing, f"no out-of-range value for: {', '.join(missing)} (see REFUSED_* and ANY_VALUE)"


def _bad_argv(cmd, action, value, pair) -> list[str]:
    """The command with ``value`` last (so it overrides), after what the command needs to reach
    it: the tiny pair, a prompt (rather than stdin), a free port."""
    argv = cmd.split()
    if cmd not in ("models fetch", "rpc-worker", "doctor"):
        argv += ["--target", str(pair[0]), "--draft", str(pair[1])]
    if cmd == "generate":
        argv.append("hi")
    if cmd in ("serve", "rpc-worker"):
        argv += ["--port", str(_free_port())]
    if not action.option_strings:
        return argv + [value]
    flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
    return argv + [f"{flag}={value}"]  # "=": a value may start with "-"


@pytest.mark.parametrize("cmd,action,value,needle",
                         [pytest.param(*c, id=f"{c[0]} {c[1].dest}={c[2]!r}") for c in _bad_cases()])
def test_an_out_of_range_value_is_one_line(cmd, action, value, needle, tiny_pair, capsys):
    argv = _bad_argv(cmd, action, value, tiny_pair)
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and not out.strip(), (argv, rc, err)
    assert (needle or f"argument {'/'.join(action.option_strings)}: ") in lines[0], lines[0]


def test_plot_without_matplotlib_is_refused_before_the_run(monkeypatch, capsys, tmp_path):
    """Checked before the model loads (here: a target that does not exist would be the next
    error) and before the library's benchmark runs (here: no engine to run on)."""
    from resispec_gguf.bench import measure as bench
    from resispec_gguf.errors import UserError

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc = cli.main(["bench", "--target", "/nonexistent/model.gguf", "--plot", str(tmp_path / "out.png")])
    out, err = capsys.readouterr()
    assert rc == 2 and err.splitlines() == ["resispec-gguf: error: --plot needs matplotlib: pip install -e '.[plot]'"]
    with pytest.raises(UserError, match=r"\.\[plot\]"):
        bench.bench_command(None, ModelParams(), {}, ["none"], [1.0], SamplingParams(), DraftParams(),
                            plot_path=str(tmp_path / "out.png"))
    assert 'plot = ["matplotlib' in (ROOT / "pyproject.toml").read_text()
