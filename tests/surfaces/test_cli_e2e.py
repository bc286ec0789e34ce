"""Every command and every flag through the real command line.

``cases()`` runs each command as a user does, ``python -m resispec_gguf ...`` in a subprocess
on the tiny pair (tiny_gguf.py): once with its defaults and once or more with every flag set
to a non-default value, checking the exit code, the shape of what it prints or writes, and
that nothing crashed.  ``test_every_flag_of_every_command_is_run`` reads the flags off
``cli.build_parser()`` (which makes them from config.py's fields), so a new setting or a new
option fails the suite until a case sets it (the cases are in cli_cases.py).
test_cli_bad_values.py's ``test_an_out_of_range_value_is_one_line`` gives every flag a value
it may not take, derived from the field's check where it has one, and expects exit 2 with
one line naming the flag; it runs ``cli.main`` in this process, as none of those values gets
as far as loading a model.

Cases marked ``needs=RPC`` run with the target's layers on two loopback ``rpc-worker``
processes (rpc_workers.py); without a llama-cpp-python built with RPC they are skipped.

Hermetic: an empty model cache, the Hugging Face Hub offline, no package index and a private
cost cache, so nothing is downloaded and nothing runs on the default pair.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rpc_workers
import tiny_gguf
from resispec_gguf.surfaces import cli
from resispec_gguf import config

from cli_cases import (DEFAULTS_MAY_SET, DEFAULTS_SET, NOT_RUN, PORT, ROOT, RPC, SETTINGS, Case, _commands, _free_port,
                       _options, cases)
from servers import write_fake_llama_cpp


# ---------------------------------------------------------------------------------- running them


@pytest.fixture(scope="module")
def e2e(tiny_pair, tmp_path_factory):
    """``(cases by name, environment, tmp)``: the tiny pair, a prompt file, an empty model cache."""
    tmp = tmp_path_factory.mktemp("e2e")
    lines = [{"prompt": "def add(a, b):"}, {"messages": [{"role": "user", "content": "Say hi."}]}]
    (tmp / "yes-no.gbnf").write_text('root ::= "yes" | "no"\n')
    (tmp / "key.txt").write_text("f1le-k3y\n")
    (tmp / "prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp / "cache").mkdir()
    tiny_gguf.write_incompatible_draft(tmp)  # bench --pairs' refused draft
    (tmp / "llama-bin").mkdir()
    for name in ("llama-server", "llama-bench", "llama-speculative-simple"):  # bench --against's
        write_fake_llama_cpp(tmp / "llama-bin" / name)
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]  # this checkout's package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path),
           "RESISPEC_CACHE": str(tmp / "cache"), "RESISPEC_COSTS": str(tmp / "costs.json"),
           "RESISPEC_BUILDCHECK": str(tmp / "cache" / "buildcheck.json"),
           "HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1"}
    by_name = {c.name: c for c in cases(str(tiny_pair[0]), str(tiny_pair[1]), tmp)}
    return by_name, env, tmp


def _serve(argv, env, tmp) -> subprocess.CompletedProcess:
    """Start the server, send one request, stop it with Ctrl-C."""
    import httpx

    port = int(argv[argv.index("--port") + 1])
    host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
    key = argv[argv.index("--api-key") + 1] if "--api-key" in argv else None
    if "--api-key-file" in argv:
        key = Path(argv[argv.index("--api-key-file") + 1]).read_text().splitlines()[0].strip()
    name = argv[argv.index("--model-name") + 1] if "--model-name" in argv else "target.gguf"
    err_path = tmp / f"serve-{port}.err"
    with open(err_path, "w") as err:  # a file, not a pipe: --verbose logs cannot fill it and stall the server
        p = subprocess.Popen([sys.executable, "-m", "resispec_gguf", *argv], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (announced := re.search(r"^serving .*$", err_path.read_text(), re.M)):
            assert p.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.05)
        announced = announced.group(0)
        assert announced.startswith(f"serving {name} on http://{host}:{port}/v1 "), announced
        assert ("auth on" in announced) == (key is not None), announced
        headers = {"Origin": "http://example.test"} | ({"Authorization": f"Bearer {key}"} if key else {})
        while True:  # the socket listens before uvicorn answers
            try:
                r = httpx.post(f"http://{host}:{port}/v1/chat/completions", headers=headers, timeout=30,
                               json={"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
                break
            except httpx.TransportError:
                assert p.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
                time.sleep(0.05)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == name and isinstance(body["choices"][0]["message"]["content"], str)
        assert 1 <= body["usage"]["completion_tokens"] <= 3
        cors = r.headers.get("access-control-allow-origin")
        assert cors == ("http://example.test" if "--cors-origin" in argv else None), r.headers
    finally:
        p.send_signal(signal.SIGINT)  # Ctrl-C: uvicorn shuts down, the CLI exits 130
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # SIGINT ignored (inherited so, before uvicorn runs)
            p.kill()
            out, _ = p.communicate()
    assert p.returncode == 130, err_path.read_text()[-3000:]
    return subprocess.CompletedProcess(argv, 0, out, err_path.read_text())


def _work(argv, env, tmp) -> subprocess.CompletedProcess:
    """Start an RPC worker, greet it as a client does, stop it with Ctrl-C."""
    from resispec_gguf.llama import backend

    port = int(argv[argv.index("--port") + 1])
    err_path = tmp / f"rpc-worker-{port}.err"
    with open(err_path, "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "resispec_gguf", *argv], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while rpc_workers.STARTED not in err_path.read_text():
            assert p.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.05)
        assert len(backend.rpc_hello("127.0.0.1", port)) == 3
    finally:
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
    assert p.returncode == 130, err_path.read_text()[-3000:]
    return subprocess.CompletedProcess(argv, 0, out, err_path.read_text())


@pytest.fixture(scope="module")
def rpc_endpoints(tmp_path_factory):
    """Two loopback workers for the RPC cases, started on first use."""
    if rpc_workers.skip_reason():
        pytest.skip(rpc_workers.skip_reason())
    with rpc_workers.workers(tmp_path_factory.mktemp("rpc")) as started:
        yield rpc_workers.endpoints(started)


def _run(case: Case, env, tmp, rpc: str | None = None) -> subprocess.CompletedProcess:
    port = str(_free_port())
    argv = [port if a == PORT else rpc if a == RPC else a for a in case.argv]
    if argv[0] == "serve":
        return _serve(argv, env, tmp)
    if argv[0] == "rpc-worker":
        return _work(argv, env, tmp)
    return subprocess.run([sys.executable, "-m", "resispec_gguf", *argv], cwd=ROOT, env=env, input=case.stdin,
                          stdin=None if case.stdin is not None else subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=240)


@pytest.mark.parametrize("name", [c.name for c in cases("T.gguf", "D.gguf", Path("tmp"))])
def test_command(e2e, name, request):
    by_name, env, tmp = e2e
    case = by_name[name]
    if case.needs == RPC:
        if rpc_workers.skip_reason():
            pytest.skip(rpc_workers.skip_reason())
    elif case.needs:
        pytest.importorskip(case.needs)
    rpc = request.getfixturevalue("rpc_endpoints") if RPC in case.argv else None
    r = _run(case, env, tmp, rpc)
    assert r.returncode in case.codes, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    case.check(r, tmp)
    # the build check's verdict is kept there; nothing else may be
    assert [p.name for p in (tmp / "cache").iterdir()] in ([], ["buildcheck.json"]), "a command fetched a model"


# ---------------------------------------------------------------------------------- coverage


def _words(argv) -> str:
    return " ".join(argv[:2]) if argv[0] == "models" else argv[0]


def _set_by(case: Case) -> set[str]:
    """The dests whose parsed value ``case`` moves off the command's default."""
    parser = cli.build_parser()
    argv = [("8123" if a == PORT else "127.0.0.1:50052" if a == RPC else a) for a in case.argv]  # not the default port
    words = _words(argv).split()
    parsed, default = parser.parse_args(argv), parser.parse_args(words)
    options = _options(_commands(parser)[" ".join(words)])
    return {a.dest for a in options if getattr(parsed, a.dest) != getattr(default, a.dest)}


def test_every_flag_of_every_command_is_run(tmp_path):
    covered: dict[str, set] = {}
    for case in cases("T.gguf", "D.gguf", tmp_path):
        covered.setdefault(_words(case.argv), set()).update(_set_by(case))
    # every setting config.py declares with flags, on some command ...
    unset = [f"{cls.__name__}.{f.name}" for cls in SETTINGS for f in config.settings(cls)
             if not any(f.name in names for names in covered.values())]
    assert not unset, f"no case sets these settings: {', '.join(unset)}"
    # ... and every option of every command, the settings it offers and its own
    missing = [f"{cmd} {'/'.join(a.option_strings) or a.dest}"
               for cmd, p in _commands(cli.build_parser()).items() if cmd not in NOT_RUN
               for a in _options(p) if a.dest not in covered.get(cmd, set())]
    assert not missing, f"no case in cases() sets these flags: {', '.join(missing)}"


def test_every_command_runs_with_its_defaults(tmp_path):
    defaults = {}
    for case in cases("T.gguf", "D.gguf", tmp_path):
        cmd = _words(case.argv)
        if _set_by(case) <= DEFAULTS_SET | DEFAULTS_MAY_SET.get(cmd, set()):
            defaults[cmd] = case.name
    leaves = {cmd for cmd, p in _commands(cli.build_parser()).items() if not any(
        isinstance(a, argparse._SubParsersAction) for a in p._actions)}
    assert leaves - set(NOT_RUN) <= set(defaults), leaves - set(defaults)
