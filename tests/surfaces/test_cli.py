"""The command line as a user meets it: subprocesses, exit codes, one-line errors."""

import json
import subprocess
import sys

import pytest


def run(*args, stdin=None, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "resispec_gguf", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_lists_subcommands():
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("chat", "generate", "serve", "bench", "analyze", "models", "doctor"):
        assert cmd in r.stdout
    for cmd in ("chat", "generate", "serve", "bench", "analyze", "models", "doctor"):
        assert run(cmd, "--help").returncode == 0


@pytest.mark.parametrize(
    "args,needle",
    [
        (["chat", "--temp", "hot"], "--temp/--temperature: temperature must be a number"),
        (["chat", "--temp", "-1"], "temperature"),
        (["chat", "--method", "magic"], "method must be one of"),
        (["chat", "--seed", "-3"], "seed must be >= 0"),
        (["serve", "--port", "70000"], "--port: port must be in [1, 65535]"),
        (["serve", "--max-queue", "-1"], "max_queue"),
        (["serve", "--parallel", "0"], "--parallel: n_slots must be in [1, 32]"),
        (["generate", "--parallel", "33", "hi"], "--parallel"),
        (["serve", "--cache-ram", "-1"], "--cache-ram: cache_ram_mib must be in [0, 1048576]"),
        (["bench", "--cache-ram", "lots"], "--cache-ram: cache_ram_mib must be an integer"),
        (["analyze", "-k", "1,99"], "-k: draws must be in [1, 64]"),
        (["bench", "--temperature", "1", "500"], "--temperature: temperature must be in [0, 100]"),
        (["bench", "--repeat", "0"], "--repeat"),
        (["generate", "--draws", "8", "--draft-support", "4", "--method", "rrs", "hi"], "draft_support"),
        (["chat", "--top-p", "0"], "top_p"),
        (["chat", "--draws", "0"], "draws"),
        (["chat", "--ctx", "4"], "--ctx"),
        (["generate", "--target", "/nonexistent/model.gguf", "hi"], "not found"),
        (["generate", "--target", "hf:onlyrepo", "hi"], "hf:"),
        (["models", "fetch", "no-such-preset"], "preset"),
        (["serve", "--reasoning-budget", "-2"], "--reasoning-budget: reasoning_budget must be in [-1, 1000000]"),
        (["chat", "--reasoning-budget", "many"], "reasoning_budget must be an integer"),
        (["chat", "--reasoning-format", "deepseek"], "reasoning_format must be one of none, auto"),
    ],
)
def test_bad_values_give_one_line_errors(args, needle):
    r = run(*args)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if line]
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]
    assert "Traceback" not in r.stderr


def test_bad_model_files(tiny_pair, not_gguf_file, truncated_gguf, incompatible_draft):
    """After the first start (whose build check says it runs, one line before any error
    found by loading), each of these is one line."""
    from resispec_gguf.llama import buildcheck

    buildcheck.check()  # the session's verdict, as a machine that has started once has it
    for target, draft, needle in [
        (not_gguf_file, tiny_pair[1], "not a GGUF"),
        (truncated_gguf, tiny_pair[1], "truncated"),
        (tiny_pair[0], incompatible_draft, "incompatible"),
    ]:
        r = run("generate", "--target", target, "--draft", draft, "--max-tokens", 3, "hi")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


def test_piped_chat_session(tiny_pair, tmp_path):
    save = tmp_path / "conv.json"
    script = f"Hello there\n/set temp 0.5\n/set bogus 1\nSecond turn\n/stats\n/save {save}\n/exit\nnever read\n"
    r = run("chat", "--target", tiny_pair[0], "--draft", tiny_pair[1], "--max-tokens", 12, "--seed", 1, "--ctx", 512, stdin=script)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("tok/s") == 2  # one stats line per reply
    assert "acceptance by depth" in r.stdout
    assert "unknown setting" in r.stderr
    data = json.loads(save.read_text())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "user", "assistant"]
    assert data["messages"][0]["content"] == "Hello there"
    assert data["sampling"]["temperature"] == 0.5


def test_chat_context_full_is_a_message(tiny_pair):
    long_line = "word " * 400
    r = run("chat", "--target", tiny_pair[0], "--draft", tiny_pair[1], "--ctx", 256, "--max-tokens", 4, stdin=long_line + "\n/reset\nshort\n")
    assert r.returncode == 0, r.stderr
    assert "/reset" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout.count("tok/s") == 1


def test_generate_prints_text_and_stats(tiny_pair):
    r = run("generate", "--target", tiny_pair[0], "--draft", tiny_pair[1], "--temp", 0, "--max-tokens", 8, "--ctx", 256, "Once")
    assert r.returncode == 0, r.stderr
    assert "tau" in r.stderr and r.stdout.strip()


# the lines a start prints before slow work (cli.commands, buildcheck, costs, Engine.prepare):
# progress, one each, which an error's one line may follow
_PROGRESS = ("resispec-gguf: loading ", "resispec-gguf: checking that this llama.cpp build",
             "resispec-gguf: measuring what a decode", "resispec-gguf: preparing the decoding kernels",
             "resispec-gguf: auto: ")


def _said(stderr: str) -> list[str]:
    """``stderr``'s lines but the start-up's progress lines (``_PROGRESS``)."""
    return [line for line in stderr.strip().splitlines() if line and not line.startswith(_PROGRESS)]


def _one_line(r, needle):
    lines = _said(r.stderr)
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and not r.stdout.strip(), r.stdout
    return lines[0]


def test_too_small_context_is_refused_not_aborted(tiny_pair):
    """Below MIN_CTX llama.cpp aborts the process (GGML_ASSERT on n_outputs_max, exit 134)."""
    from resispec_gguf.config import MIN_CTX

    target, draft = tiny_pair
    for cmd, draft_arg, ctx, extra in (("generate", draft, MIN_CTX - 1, ["hi"]), ("chat", "", 16, []),
                                       ("serve", draft, MIN_CTX - 1, ["--port", "1"])):
        r = run(cmd, "--target", target, "--draft", draft_arg, "--ctx", ctx, *extra, stdin="")
        assert str(MIN_CTX) in _one_line(r, "--ctx")
    r = run("generate", "--target", target, "--draft", draft, "--ctx", MIN_CTX, "--threads", 1, "-n", 3, "--temp", 0, "hi")
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    # the library refuses too (in a child: a miss would abort the test process)
    code = (
        "import sys\n"
        "from resispec_gguf.engine import Engine\n"
        "from resispec_gguf.errors import UserError\n"
        f"for kw in (dict(n_ctx={MIN_CTX - 1}), dict(n_ctx=16), dict(n_ctx=512, n_batch={MIN_CTX - 1})):\n"
        "    try:\n"
        "        Engine.load(sys.argv[1], sys.argv[2], progress=False, **kw)\n"
        "    except UserError as e:\n"
        "        print('refused:', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(target), str(draft)], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("refused:") and str(MIN_CTX) in line for line in lines), p.stdout
    assert "batch" in lines[2]


def run_bytes(*args, stdin=b"", env=None, timeout=240):
    import os

    cmd = [sys.executable, "-m", "resispec_gguf"] + [a if isinstance(a, bytes) else str(a) for a in args]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def test_invalid_utf8_is_replaced_not_a_crash(tiny_pair, tmp_path):
    target, draft = tiny_pair
    common = ["generate", "--target", target, "--draft", draft, "--ctx", 256, "--threads", 1, "-n", 6, "--temp", 0,
              "--seed", 1]
    ref = run_bytes(*common, "caf\ufffd ol\ufffd".encode())
    assert ref.returncode == 0 and ref.stdout.strip(), ref.stderr
    for r in (run_bytes(*common, b"caf\xe9 ol\xff"),  # argv: not UTF-8
              run_bytes(*common, stdin=b"caf\xe9 ol\xff")):  # stdin: not UTF-8
        assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
        assert r.stdout == ref.stdout  # the same prompt as with U+FFFD typed in

    save = tmp_path / "conv.json"
    script = b"hello\ncaf\xe9 ol\xff\n/save " + str(tmp_path).encode() + b"/a\x00b\nthird\n/save " + str(save).encode() + b"\n"
    r = run_bytes("chat", "--target", target, "--draft", draft, "--ctx", 256, "--threads", 1, "-n", 3, stdin=script)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
    assert r.stdout.count(b"tok/s") == 3  # every turn answered, none lost
    lines = r.stderr.decode().strip().splitlines()
    assert lines[0] == f"resispec-gguf: loading target {target} and draft {draft} ..."  # said first
    assert _said(r.stderr.decode()) == ["resispec-gguf: target on CPU; draft on CPU",  # where the layers run
                                        "error: cannot write '%s/a\\x00b': embedded null byte" % tmp_path]
    turns = [m["content"] for m in json.loads(save.read_text())["messages"] if m["role"] == "user"]
    assert turns == ["hello", "caf\ufffd ol\ufffd", "third"]


def test_bad_stop_and_unwritable_cache_are_one_line(tiny_pair):
    target, draft = tiny_pair
    r = run("generate", "--target", target, "--draft", draft, "--stop", "", "hi")
    _one_line(r, "--stop")
    r = run_bytes("generate", "-n", 2, "hi", env={"RESISPEC_CACHE": "/proc", "HF_HUB_OFFLINE": "1"})
    r = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())
    assert "RESISPEC_CACHE" in _one_line(r, "/proc")


def test_serve_refuses_bad_keys_and_a_taken_port(tiny_pair):
    import socket

    target, draft = tiny_pair
    for key, needle in (("", "empty"), ("cl\u00e9", "ASCII")):
        _one_line(run("serve", "--target", target, "--draft", draft, "--api-key", key), needle)
    _one_line(run("serve", "--target", target, "--cors-origin", "evil.example/"), "CORS")
    _one_line(run("serve", "--target", target, "--api-key-file", "/nonexistent/key"), "/nonexistent/key")
    _one_line(run("serve", "--target", target, "--api-key", "a", "--api-key-file", "/etc/hostname"), "not both")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run("serve", "--target", target, "--draft", draft, "--port", port)
        assert "already in use" in _one_line(r, f"127.0.0.1:{port}")


def test_serve_says_whether_auth_is_on(tiny_pair):
    import os
    import signal
    import socket
    import time

    import httpx

    target, draft = tiny_pair
    for key in ("k3y", None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        args = ["serve", "--target", target, "--draft", draft, "--ctx", 256, "--threads", 1, "--port", port,
                "--method", "none"] + (["--api-key", key] if key else [])
        p = subprocess.Popen([sys.executable, "-m", "resispec_gguf", *map(str, args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            line = p.stderr.readline()
            while line.startswith(_PROGRESS):  # which models it loads, and any slow first-start work
                line = p.stderr.readline()
            assert line.startswith(f"serving target.gguf on http://127.0.0.1:{port}/v1 (method none; "), line
            assert ("auth on" in line) == (key is not None) and ("auth off" in line) == (key is None)
            assert "; 4 slots × 256 tokens, KV " in line and " MiB; " in line, line  # serve's default --parallel
            assert ", RAM prompt cache 2048 MiB; " in line, line  # --cache-ram's default
            assert line.rstrip().endswith("; target on CPU; draft on CPU)"), line  # where the layers run
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            deadline = time.monotonic() + 20
            while True:
                try:
                    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", headers=headers,
                                   json={"prompt": "hi", "max_tokens": 2, "seed": 0}, timeout=5)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline and p.poll() is None
                    time.sleep(0.1)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] in (1, 2)  # 1: an end token
            ram = httpx.get(f"http://127.0.0.1:{port}/health").json()["prompt_cache"]
            assert ram["max_mib"] == 2048 and ram["entries"] == 0, ram  # "hi" is too short to keep
            if key:
                assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401
        finally:
            os.kill(p.pid, signal.SIGINT)
            out, err = p.communicate(timeout=20)
        assert p.returncode in (0, 130) and "Traceback" not in err, err


def test_a_path_target_without_draft_says_so(tiny_pair):
    r = run("generate", "--target", tiny_pair[0], "--ctx", 256, "--threads", 1, "-n", 3, "--temp", 0, "hi")
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    note, stats = _said(r.stderr)
    assert "no draft model" in note and "--draft" in note and "auto" in stats
    r = run("generate", "--target", tiny_pair[0], "--method", "resispec", "--ctx", 256, "hi")
    assert "needs a draft model" in _one_line_after_note(r)


def _one_line_after_note(r):
    lines = [line for line in _said(r.stderr) if "note:" not in line]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_grammar_past_the_engines_limits_is_one_line(tiny_pair, tmp_path):
    # a limit llguidance meets only at the first token: found when compiling, never a traceback
    big = tmp_path / "big.lark"
    big.write_text("start: " + " | ".join(f'"w{i}x"' for i in range(21800)) + "\n")
    target, draft = tiny_pair
    r = run("generate", "--target", target, "--draft", draft, "-n", 3, "--grammar", big, "hi")
    line = _one_line(r, "--grammar")
    assert "max is 2000" in line and "w21799x" not in r.stderr and len(line) < 400


def _run_env(*args, env):
    import os

    return subprocess.run([sys.executable, "-m", "resispec_gguf", *map(str, args)], capture_output=True, text=True,
                          timeout=240, stdin=subprocess.DEVNULL, env={**os.environ, **env})


def test_a_crashing_build_is_one_line_and_exit_2_and_the_verdict_is_cached(tiny_pair, tmp_path):
    """The build check's child killed by SIGSEGV (the test hook) stands for a build that
    faults loading a quantized model: one line naming the signal and the rebuild, exit 2,
    before any model loads; the verdict is cached, so the next start does not run the child."""
    target, draft = tiny_pair
    common = ["generate", "--target", target, "--draft", draft, "--ctx", 256, "--threads", 1, "-n", 2, "hi"]
    cache = {"RESISPEC_BUILDCHECK": str(tmp_path / "buildcheck.json"), "RESISPEC_SKIP_BUILD_CHECK": "0"}
    r = _run_env(*common, env={**cache, "RESISPEC_BUILD_CHECK_FAULT": "segv"})
    line = _one_line(r, "crashes (SIGSEGV) loading and decoding a quantized model")
    assert "pip install --no-cache-dir --force-reinstall llama-cpp-python==" in line
    verdicts = json.loads((tmp_path / "buildcheck.json").read_text())
    assert [v["status"] for v in verdicts.values()] == ["crashes"]
    r = _run_env(*common, env=cache)  # no fault now, but the cached verdict stands
    _one_line(r, "crashes (SIGSEGV)")
    r = _run_env(*common, env={**cache, "RESISPEC_SKIP_BUILD_CHECK": "1"})
    assert r.returncode == 0 and r.stdout.strip(), r.stderr


def test_gpu_layers_without_a_gpu_are_one_warning_line(tiny_pair, tmp_path):
    target, draft = tiny_pair
    r = _run_env("generate", "--target", target, "--draft", draft, "--ctx", 256, "--threads", 1, "-n", 2, "-ngl", 99,
                 "hi", env={"RESISPEC_BUILDCHECK": str(tmp_path / "buildcheck.json")})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "-ngl 99 and -ngld 99" in warnings[0] and "run on the CPU" in warnings[0], r.stderr


def test_doctor_is_one_screen_with_an_exit_status(tmp_path):
    r = _run_env("doctor", env={"RESISPEC_BUILDCHECK": str(tmp_path / "buildcheck.json"),
                                "RESISPEC_CACHE": str(tmp_path / "models")})
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("resispec-gguf doctor")
    assert lines[-1] == "all well" or lines[-1].endswith("found"), r.stdout
    assert any(line.startswith("crash check") and " ok: " in line for line in lines), r.stdout
    r = _run_env("doctor", "--ctx", 10, env={})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bench_concurrency_prints_a_row_per_method_and_level(tiny_pair, tmp_path):
    target, draft = tiny_pair
    out = tmp_path / "c.json"
    r = run("bench", "--target", target, "--draft", draft, "--ctx", 256, "--threads", 1, "--workload", "code",
            "--max-tokens", 6, "--concurrency", "1,2", "--json", out)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(x["method"], x["clients"]) for x in rows] == [("none", 1), ("none", 2), ("auto", 1), ("auto", 2)]
    assert "agg tok/s" in r.stdout and "TTFT p95" in r.stdout
    bad = run("bench", "--concurrency", "0")
    assert bad.returncode == 2 and "--concurrency" in bad.stderr.strip().splitlines()[-1]


def test_generate_chat_prints_the_thinking_apart(open_think_pair):
    """``generate --chat`` on a reasoning model (its template opens the block): the budget
    closes the thinking, which goes to stderr between marks (stdout is no terminal) while
    stdout holds the answer alone; with ``--reasoning-format none`` the same reply (same seed,
    same budget) is printed whole, and splits into the same two parts."""
    from resispec_gguf.assist.lazy import FREE  # where the template leaves the reply
    from resispec_gguf.assist.reasoning import ReasoningFormat, split_reasoning

    common = ("generate", "--target", open_think_pair[0], "--draft", open_think_pair[1], "--threads", 1, "--ctx", 256,
              "--seed", 3, "-n", 12, "--chat", "--reasoning-budget", 4, "Think first.")
    split = run(*common)
    whole = run(*common, "--reasoning-format", "none")
    assert split.returncode == 0 and whole.returncode == 0, (split.stderr, whole.stderr)
    assert "</think>" in whole.stdout and "</think>" not in split.stdout
    thinking, answer = split_reasoning(ReasoningFormat("<think>", "</think>", 0, 1), FREE, whole.stdout[:-1])
    marked = split.stderr[split.stderr.index("[reasoning]\n") + 12:split.stderr.index("\n[/reasoning]\n")]
    assert marked == thinking and split.stdout == answer + "\n"


def test_generate_reply_dims_the_thinking_on_a_terminal():
    """On a terminal the thinking is dimmed on stdout, a blank line before the answer; else it
    goes to stderr between marks, closed even when the reply ends inside it."""
    import io

    from resispec_gguf.surfaces.cli.commands import _Reply

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out, err = Terminal(), io.StringIO()
    reply = _Reply(out, err)
    for part in (("Hmm", ""), (" so", ""), ("", "4."), ("", " Done")):
        reply.write(*part)
    reply.end_thinking()
    assert out.getvalue() == "\x1b[2mHmm\x1b[0m\x1b[2m so\x1b[0m\n\n4. Done" and err.getvalue() == ""
    out, err = io.StringIO(), io.StringIO()
    reply = _Reply(out, err)
    reply.write("cut", "")
    reply.end_thinking()
    assert (out.getvalue(), err.getvalue()) == ("", "[reasoning]\ncut\n[/reasoning]\n")
