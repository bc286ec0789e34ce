"""``bench --against llama.cpp DIR`` (bench/compare/) without llama.cpp or a model: the pure
parsers on output captured from llama.cpp's llama-speculative-simple, llama-bench and
llama-server (build 0c1e570, the version vendored by llama-cpp-python 0.3.36), the tables,
the flags chosen from each binary's --help (fake binaries that print it), the command line's
parsing and dispatch of --against (the runner replaced), its one-line errors, the agent mode
against a small fake llama-server, and the old script's wrapper.  The llama-server client
has its own file, test_compare_server_client.py."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import pytest

from resispec_gguf.surfaces import cli
from resispec_gguf.bench.compare import agent, binaries, common, concurrency, runner
from script_loader import load_script
from servers import write_fake_llama_cpp

# stderr of llama-speculative-simple, trimmed (timestamps and level as it prints them)
SPEC_SIMPLE_LOG = """\
0.00.865.156 W load: control-looking token: 128247 '</s>' was not control-type; this is probably a bug in the model. its type will be overridden
0.04.721.012 I common_speculative_init_result: loading draft model '/root/.cache/resispec-gguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf'
0.19.519.408 I encoded   17 tokens in    5.190 seconds, speed:    3.275 t/s
0.19.519.443 I decoded   14 tokens in    3.917 seconds, speed:    3.574 t/s
0.19.519.444 I 
0.19.519.444 I n_draft   = 5
0.19.519.444 I n_predict = 14
0.19.519.444 I n_drafted = 20
0.19.519.444 I n_accept  = 10
0.19.519.446 I accept    = 50.000%
0.19.519.446 I 
0.19.519.447 I draft:

0.19.519.505 I common_perf_print:    sampling time =       7.26 ms
0.19.519.514 I common_perf_print: prompt eval time =   10202.95 ms /    42 tokens (  242.93 ms per token,     4.12 tokens per second)
0.19.519.518 I common_perf_print: unaccounted time =    4588.36 ms /  31.0 %      (total - sampling - prompt eval - eval) / (total)
"""

# stdout of `llama-bench -m ... -p 0 -n 8 -r 2 -t 2 -o json`, trimmed to the keys that matter
LLAMA_BENCH_JSON = """\
[
  {
    "build_commit": "0c1e570",
    "build_number": 1,
    "cpu_info": "AMD EPYC",
    "backends": "CPU",
    "model_type": "qwen2 1.5B Q4_K - Medium",
    "n_threads": 2,
    "n_prompt": 0,
    "n_gen": 8,
    "n_depth": 0,
    "avg_ns": 2609982499,
    "stddev_ns": 2047227627,
    "avg_ts": 4.427040,
    "stddev_ts": 3.472498,
    "samples_ns": [ 4057591037, 1162373961 ],
    "samples_ts": [ 1.97161, 6.88247 ]
  }
]
"""


def test_parse_spec_simple_output():
    r = binaries.parse_spec_simple_output(SPEC_SIMPLE_LOG)
    assert r["decoded_tokens"] == 14
    assert r["decode_s"] == pytest.approx(3.917)
    assert r["tokens_per_s"] == pytest.approx(3.574)
    assert (r["encoded_tokens"], r["encode_tokens_per_s"]) == (17, pytest.approx(3.275))
    assert (r["n_draft"], r["n_predict"], r["n_drafted"], r["n_accept"]) == (5, 14, 20, 10)
    assert r["accept"] == pytest.approx(0.5)


def test_parse_spec_simple_output_without_prefixes_and_nothing_drafted():
    text = "decoded    3 tokens in    0.500 seconds, speed:    6.000 t/s\nn_drafted = 0\nn_accept  = 0\naccept    = -nan%\n"
    r = binaries.parse_spec_simple_output(text)
    assert r["tokens_per_s"] == 6.0 and r["decoded_tokens"] == 3
    assert r["accept"] is None


def test_parse_spec_simple_output_missing_line():
    with pytest.raises(ValueError, match="decoded"):
        binaries.parse_spec_simple_output("error: failed to load model\n")


def test_parse_llama_bench_json():
    assert binaries.parse_llama_bench_json(LLAMA_BENCH_JSON) == {0: pytest.approx(4.42704)}


def test_parse_llama_bench_json_by_depth():
    text = LLAMA_BENCH_JSON.replace('"n_depth": 0', '"n_depth": 161')
    rows = json.loads(LLAMA_BENCH_JSON) + json.loads(text)
    rows[1]["avg_ts"] = 3.5
    assert binaries.parse_llama_bench_json(json.dumps(rows)) == {0: pytest.approx(4.42704), 161: 3.5}


def test_parse_llama_bench_json_picks_tg_tests_and_skips_noise():
    text = 'noise\n[{"n_prompt": 512, "n_gen": 0, "avg_ts": 90.0}, {"n_prompt": 0, "n_gen": 64, "avg_ts": 7.5}]'
    assert binaries.parse_llama_bench_json(text) == {0: 7.5}


@pytest.mark.parametrize("text", ["", "not json", "[{\"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 90.0}]",
                                  "[{\"n_prompt\": 16, \"n_gen\": 8, \"avg_ts\": 9.0}]", "[1, 2", "{}"])
def test_parse_llama_bench_json_errors(text):
    with pytest.raises(ValueError):
        binaries.parse_llama_bench_json(text)


def test_parse_version_and_help_flags():
    assert binaries.parse_version("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU") == "0.5.0-dev (build 1, commit 0c1e570)"
    help_text = "--spec-draft-n-max N      number of tokens\n--draft, --draft-n, --draft-max N   removed\n"
    assert binaries.help_has(help_text, "--spec-draft-n-max")
    assert binaries.help_has(help_text, "--draft-max")
    assert not binaries.help_has(help_text, "--spec-type")
    assert binaries.help_default(SPEC_HELP, "--spec-draft-n-max") == 3
    assert binaries.help_default(SPEC_HELP, "--spec-type") is None and binaries.help_default(SPEC_HELP, "--top-k") is None


def test_summary_and_table():
    runs = [{"tokens_per_s": 10.0, "tokens": 64, "accepted": 30, "drafted": 40},
            {"tokens_per_s": 20.0, "tokens": 64, "accepted": 10, "drafted": 40}]
    s = runner.summarise(runs, {"none": [5.0, 10.0], "bench": [10.0, 0.0], "server": [None, 40.0]})
    assert s["tokens_per_s"] == 15.0 and s["vs_none"] == 2.0 and s["vs_bench"] == 1.0 and s["vs_server"] == 0.5
    assert s["acceptance"] == 0.5 and s["tokens"] == 128
    table = runner.format_table([{"temperature": 1.0, "rows": {"ours none": s}}])
    assert "ours none" in table and "15.00" in table and "0.500" in table and not math.isnan(s["vs_none"])


def test_plain_summary_per_block_and_pooled():
    def runs(none, d0, at, server):
        return {"ours none": [{"tokens_per_s": x} for x in none], runner.BENCH_D0: [{"tokens_per_s": x} for x in d0],
                runner.BENCH_AT: [{"tokens_per_s": x} for x in at], runner.SERVER_ROW: [{"tokens_per_s": x} for x in server]}

    records = [{"workload": "code", "temperature": 0.8, "runs": runs([10, 20], [10, 10], [20, 20], [None, 40])},
               {"workload": "chat", "temperature": 0.8, "runs": runs([30], [10], [30], [60])}]
    assert runner.plain_ratios(records[0]["runs"]) == {"bench0": [1.0, 2.0], "bench": [0.5, 1.0], "server": [0.5]}
    lines = runner.plain_summary(records).splitlines()
    assert lines == [
        "code T=0.8: ours none / llama-bench tg at depth 0 1.500, at the prompt's depth 0.750; / llama-server 0.500 (2 prompts)",
        "chat T=0.8: ours none / llama-bench tg at depth 0 3.000, at the prompt's depth 1.000; / llama-server 0.500 (1 prompts)",
        "all: ours none / llama-bench tg at depth 0 2.000, at the prompt's depth 1.000; / llama-server 0.500 (3 prompts)",
    ]


def test_median_rows_over_rounds():
    def row(rnd, system, agg, ttft):
        return {"workload": "code", "system": system, "clients": 4, "round": rnd, "aggregate_tokens_per_s": agg,
                "per_request_tokens_per_s": agg / 4, "ttft_p50": ttft, "ttft_p95": ttft, "e2e_p50": 1.0, "e2e_p95": 1.0}

    rows = [row(0, "ours none", 10.0, 1.0), row(0, "server", 4.0, 0.1), row(1, "ours none", 14.0, 3.0),
            row(1, "server", 8.0, 0.3), row(2, "ours none", 30.0, 2.0), row(2, "server", 6.0, 0.2)]
    med = concurrency.median_rows(rows)
    assert [(r["system"], r["rounds"], r["aggregate_tokens_per_s"], r["ttft_p50"]) for r in med] == [
        ("ours none", 3, 14.0, 2.0), ("server", 3, 6.0, 0.2)]


def test_concurrency_table_ratios_per_workload_and_level():
    fig = dict(per_request_tokens_per_s=1.0, ttft_p50=0.1, ttft_p95=0.2, e2e_p50=1.0, e2e_p95=2.0)
    rows = [{"workload": "code", "system": "ours none", "clients": 1, "aggregate_tokens_per_s": 4.0, **fig},
            {"workload": "code", "system": "ours none", "clients": 4, "aggregate_tokens_per_s": 8.0, **fig},
            {"workload": "code", "system": "llama.cpp llama-server", "clients": 4, "aggregate_tokens_per_s": 6.0, **fig},
            {"workload": "edit", "system": "llama.cpp llama-server", "clients": 4, "aggregate_tokens_per_s": 6.0, **fig}]
    lines = concurrency.format_concurrency_table(rows).splitlines()
    assert lines[4].split()[4:6] == ["6.00", "0.750"]  # against ours none at 4 clients, not at 1
    assert lines[5].split()[4:6] == ["6.00", "-"]  # no ours none row for edit


def _against(d, *argv) -> int:
    """``bench --against llama.cpp d ...`` through the command line; its exit code."""
    try:
        return cli.main(["bench", "--against", "llama.cpp", str(d), *argv])
    except SystemExit as e:  # argparse's errors
        return e.code


def test_missing_binaries_exit_2(tmp_path, capsys):
    assert _against(tmp_path / "nope") == 2
    assert _against(tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a directory" in err[0] and "llama-speculative-simple" in err[1]
    assert all(line.startswith("resispec-gguf: error: --against llama.cpp ") for line in err)


# ------------------------------------------------------------------ flags read from --help

# the lines of each binary's --help that the script reads (build 0c1e570), trimmed
SPEC_HELP = """-m,    --model FNAME                    model path to load
--spec-draft-n-max N                    number of tokens to draft for speculative decoding (default: 3)
--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,ngram-map-k
--spec-draft-backend-sampling, --no-spec-draft-backend-sampling
--draft, --draft-n, --draft-max N       the argument has been removed. use --spec-draft-n-max
"""
SERVER_HELP = SPEC_HELP + """-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
-kvu,  --kv-unified, -no-kvu, --no-kv-unified
-np,   --parallel N                     number of server slots (default: -1, -1 = auto)
"""
BENCH_HELP = """usage: llama-bench [options]
  -m, --model <filename>                            (default: models/7B/ggml-model-q4_0.gguf)
  -d, --n-depth <n>                                 (default: 0)
  -fa, --flash-attn <0|1>                           (default: 0)
"""
OLD_BENCH_HELP = "  -m, --model <filename>\n  -n, --n-gen <n>\n"


def _fake_bin(d: Path, name: str, help_text: str) -> None:
    p = d / name
    p.write_text("#!/bin/sh\ncat <<'EOF'\n" + help_text + "version: 0.5.0-dev (build 1, commit 0c1e570)\nEOF\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


def _fake_bins(d: Path, *, server=True, bench_help=BENCH_HELP) -> Path:
    _fake_bin(d, "llama-speculative-simple", SPEC_HELP)
    _fake_bin(d, "llama-bench", bench_help)
    if server:
        _fake_bin(d, "llama-server", SERVER_HELP)
    return d


def test_missing_llama_server_exit_2(tmp_path, capsys):
    assert _against(_fake_bins(tmp_path, server=False)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no executable llama-server" in err[0]
    assert "build llama.cpp's llama-server target" in err[0]


@pytest.mark.parametrize("system", ["vllm", "llama-cpp", "llama.cpp2"])
def test_against_anything_but_llama_cpp_exits_2_in_one_line(tmp_path, capsys, system):
    try:
        code = cli.main(["bench", "--against", system, str(_fake_bins(tmp_path))])
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--against" in err[0] and repr(system) in err[0]
    assert "Traceback" not in captured.err and captured.out == ""


def test_against_takes_two_values(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--against", "llama.cpp"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--against" in err[0]


@pytest.mark.parametrize("argv, word", [(["--concurrency", "0,4"], "--concurrency"),
                                        (["--n-prompts", "0"], "--n-prompts"),
                                        (["--rounds", "0"], "--rounds"),
                                        (["--timeout", "0"], "--timeout"),
                                        (["--spec-rows", "none;ngram"], "unknown llama-server row 'ngram'"),
                                        (["--methods", "none,bogus"], "bogus"),
                                        (["-ngl", "99"], "no --n-gpu-layers"),
                                        (["--depth", "3"], "no --depth"),
                                        (["--sweep", "quick"], "no --sweep"),
                                        (["--repeat", "2"], "no --repeat")])
def test_bad_arguments_exit_2_in_one_line(tmp_path, capsys, argv, word):
    assert _against(_fake_bins(tmp_path), *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("resispec-gguf") and "error:" in err[0] and word in err[0]


@pytest.mark.parametrize("flag", [["--rounds", "2"], ["--no-spec-simple"], ["--draft-max", "3"], ["--timeout", "5"]])
def test_the_against_flags_need_against(capsys, flag):
    assert cli.main(["bench", *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"resispec-gguf: error: {flag[0]} applies with --against only"]


def test_bench_against_passes_its_flags_to_the_comparison(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "run", lambda options, prepare=None: calls.append((options, prepare)) or 0)
    d = _fake_bins(tmp_path)
    assert _against(d, "--target", "t.gguf", "--draft", "d.gguf", "--threads", "2", "--ctx", "2048",
                    "--workload", "code,chat", "--n-prompts", "3", "-n", "48", "--temperature", "0.8", "0",
                    "--top-k", "20", "--seed", "7", "--methods", "none,auto", "--concurrency", "1,4",
                    "--rounds", "3", "--draft-max", "3", "6", "--no-spec-simple", "--bench-reps", "2",
                    "--timeout", "30", "--json", str(tmp_path / "r.json")) == 0
    ((options, prepare),) = calls
    assert callable(prepare)
    assert options == common.Options(
        llama_cpp_bin=str(d), target="t.gguf", draft="d.gguf", threads=2, ctx=2048, workload="code,chat",
        n_prompts=3, max_tokens=48, temperature=[0.8, 0.0], top_k=20, seed=7, methods="none,auto",
        concurrency=[1, 4], rounds=3, draft_max=[3, 6], no_spec_simple=True, bench_reps=2, timeout=30.0,
        json=str(tmp_path / "r.json"))
    calls.clear()
    assert _against(d, "--workload", "agent", "--spec-rows", "none; ngram-mod", "--llama-backend-sampling") == 0
    ((options, _),) = calls
    # bench's defaults are the comparison's own
    assert options == common.Options(llama_cpp_bin=str(d), workload="agent", spec_rows=["none", "ngram-mod"],
                                     llama_backend_sampling=True)


def test_the_comparison_checks_the_binaries_before_the_build(tmp_path, monkeypatch, capsys):
    """The dispatch reaches the real runner: the binaries and the options first, then the
    command line's build check (here: refused, so nothing loads)."""
    from resispec_gguf.errors import UserError
    from resispec_gguf.llama import buildcheck

    def refuse(note=None):
        raise UserError("the build check refused")

    monkeypatch.setattr(buildcheck, "require_working_build", refuse)
    assert _against(_fake_bins(tmp_path), "--workload", "chat") == 2
    assert _against(_fake_bins(tmp_path), "--workload", "agent,code") == 2  # an option error before it
    assert _against(tmp_path / "nope") == 2  # and the binaries before both
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "the build check refused" in err[0] and "runs alone" in err[1]
    assert "not a directory" in err[2]


def test_the_old_script_runs_bench_against(tmp_path, capsys):
    script = load_script("compare_llama_cpp")
    assert script.bench_argv(["--llama-cpp-bin", "/x", "--threads", "2"]) == [
        "bench", "--against", "llama.cpp", "/x", "--threads", "2"]
    assert script.bench_argv(["--llama-cpp-bin=/x"]) == ["bench", "--against", "llama.cpp", "/x"]
    assert script.main(["--llama-cpp-bin", str(_fake_bins(tmp_path, server=False))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no executable llama-server" in err[0]


def test_commands_use_the_flags_this_build_has(tmp_path):
    llama = binaries.LlamaCpp(str(_fake_bins(tmp_path)))
    assert llama.version == "0.5.0-dev (build 1, commit 0c1e570)"
    assert llama.server_draft_max_default == 3
    bench = llama.bench_cmd("t.gguf", n=48, threads=2, reps=1, depths=(0, 161))
    assert bench[bench.index("-d") + 1] == "0,161" and bench[bench.index("-p") + 1] == "0"
    assert "-d" not in llama.bench_cmd("t.gguf", n=48, threads=2, reps=1)
    plain = llama.server_cmd("t.gguf", parallel=4, ctx=2048, threads=2)
    assert plain[plain.index("-c") + 1] == "8192" and plain[plain.index("-np") + 1] == "4"
    assert "--kv-unified" in plain and "-md" not in plain and plain[plain.index("-tb") + 1] == "2"
    spec = llama.server_cmd("t.gguf", draft="d.gguf", draft_max=5, parallel=1, ctx=2048, threads=None)
    assert spec[spec.index("-md") + 1] == "d.gguf" and spec[spec.index("--spec-draft-n-max") + 1] == "5"
    assert spec[spec.index("--spec-type") + 1] == "draft-simple" and "--no-spec-draft-backend-sampling" in spec
    assert "-t" not in spec and "--draft-max" not in spec
    on = llama.server_cmd("t.gguf", draft="d.gguf", parallel=1, ctx=2048, threads=1, backend_sampling=True)
    assert "--no-spec-draft-backend-sampling" not in on and "--spec-draft-n-max" not in on


def test_llama_cpp_runs_flash_attention_off_as_ours_on_the_cpu(tmp_path):
    """Each binary gets ``-fa off`` in its own spelling, and none where its --help lacks it."""
    llama = binaries.LlamaCpp(str(_fake_bins(tmp_path)))
    server = llama.server_cmd("t.gguf", parallel=1, ctx=2048, threads=2)
    assert server[server.index("-fa") + 1] == "off"
    bench = llama.bench_cmd("t.gguf", n=48, threads=2, reps=1)
    assert bench[bench.index("-fa") + 1] == "0"  # this llama-bench's <0|1>
    spec = llama.spec_cmd("t.gguf", "d.gguf", "p", n=8, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, draft_max=4,
                          threads=2, ctx=2048, seed=0)
    assert "-fa" not in spec  # SPEC_HELP lists no flash-attention flag


def test_a_bench_without_depth_runs_at_depth_0(tmp_path):
    llama = binaries.LlamaCpp(str(_fake_bins(tmp_path, bench_help=OLD_BENCH_HELP)))
    assert "-d" not in llama.bench_cmd("t.gguf", n=48, threads=2, reps=1, depths=(0, 161))


# ------------------------------------------------------------------ --workload agent

# the --spec-type line of the real build 0c1e570's llama-server --help
FULL_SPEC_TYPES = ("--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,"
                   "ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache\n")


def _rows(tmp_path, server_help):
    d = _fake_bins(tmp_path)
    _fake_bin(d, "llama-server", server_help)
    llama = binaries.LlamaCpp(str(d))
    return {name: cmd for name, cmd in agent.server_rows(llama, "t.gguf", "d.gguf", ctx=2048, threads=2)}


def test_spec_rows_names_the_agent_rows_to_run(tmp_path):
    d = _fake_bins(tmp_path)
    _fake_bin(d, "llama-server", SERVER_HELP.replace("--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,"
                                                     "draft-dspark,ngram-simple,ngram-map-k\n", FULL_SPEC_TYPES))
    llama = binaries.LlamaCpp(str(d))
    only = common.parse_spec_rows("none; draft-simple,ngram-mod")
    rows = agent.server_rows(llama, "t.gguf", "d.gguf", ctx=2048, threads=2, only=only)
    assert [name for name, _ in rows] == ["llama-server none", "llama-server draft-simple,ngram-mod"]
    with pytest.raises(common.CompareError, match="unknown llama-server row 'ngram'"):
        common.parse_spec_rows("none;ngram")


def test_the_agent_rows_are_the_speculative_types_this_build_has(tmp_path):
    assert binaries.spec_types(FULL_SPEC_TYPES) >= {"none", "draft-simple", "ngram-mod", "ngram-cache"}
    assert binaries.spec_types("-m, --model FNAME\n") == set()
    rows = _rows(tmp_path, SERVER_HELP.replace("--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,"
                                               "draft-dspark,ngram-simple,ngram-map-k\n", FULL_SPEC_TYPES))
    assert list(rows) == ["llama-server none", "llama-server draft-simple", "llama-server ngram-mod",
                          "llama-server draft-simple,ngram-mod", "llama-server ngram-cache"]
    assert "--spec-type" not in rows["llama-server none"] and "-md" not in rows["llama-server none"]
    mod = rows["llama-server ngram-mod"]
    assert mod[mod.index("--spec-type") + 1] == "ngram-mod" and "-md" not in mod
    both = rows["llama-server draft-simple,ngram-mod"]
    assert both[both.index("--spec-type") + 1] == "draft-simple,ngram-mod" and both[both.index("-md") + 1] == "d.gguf"
    assert all(cmd[cmd.index("-np") + 1] == "1" for cmd in rows.values())
    # the trimmed help above lists no n-gram types: only what the build has
    assert list(_rows(tmp_path, SERVER_HELP)) == ["llama-server none", "llama-server draft-simple"]
    old = _rows(tmp_path, SERVER_HELP.replace("--spec-type", "--spec-other"))  # a build before --spec-type
    assert list(old) == ["llama-server none", "llama-server draft-simple"]
    assert "--spec-type" not in old["llama-server draft-simple"] and "-md" in old["llama-server draft-simple"]


@pytest.mark.parametrize("argv", [["--workload", "agent,code"], ["--workload", "agent", "--concurrency", "1"]])
def test_the_agent_workload_runs_alone(tmp_path, capsys, argv):
    assert _against(_fake_bins(tmp_path), *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs alone" in err[0]


def test_a_sequence_summary_and_table():
    from resispec_gguf.engine import Stats

    ours = agent.ours_record(Stats(tokens=10, prompt_tokens=100, prompt_reused=40, prompt_time=2.0,
                                   prompt_target_time=1.5, prompt_draft_time=0.4, total_time=3.0,
                                   accepted_by_depth=[3], reached_by_depth=[6]))
    assert (ours["e2e"], ours["prompt_cached"], ours["accepted"], ours["drafted"]) == (5.0, 40, 3, 6)
    s = agent.summarise_sequence([ours, dict(ours, tokens=20)])
    assert s["tokens"] == 30 and s["prompt_s"] == 4.0 and s["decode_s"] == 6.0 and s["wall_s"] == 10.0
    assert s["decode_tokens_per_s"] == 5.0 and s["e2e_tokens_per_s"] == 3.0 and s["acceptance"] == 0.5
    assert s["prompt_target_s"] == 3.0 and s["prompt_tokens"] == 100
    server = agent.summarise_sequence([{"tokens": 30, "prompt_tokens": 90, "prompt_cached": 0, "prompt_s": 1.0,
                                        "decode_s": 5.0, "e2e": 6.2, "drafted": 0, "accepted": 0}])
    assert server["prompt_target_s"] is None and server["acceptance"] is None and server["e2e_tokens_per_s"] == 5.0
    table = agent.format_agent_table([{"temperature": 0.0, "rows": {"ours none": s, "llama-server none": server}}])
    line = next(ln for ln in table.splitlines() if "llama-server none" in ln)
    assert "1.667" in line and line.split()[6:8] == ["-", "-"]  # e2e 5.0 / 3.0 against ours none; no tgt/dft split


def test_an_agent_comparison_runs_every_system_through_the_sequence(tmp_path, tiny_pair):
    from types import SimpleNamespace

    from resispec_gguf.config import SamplingParams
    from resispec_gguf.bench import inputs as bench

    exe = write_fake_llama_cpp(tmp_path / "llama-server")  # a llama-server logging the seeds it was sent to --log
    log = tmp_path / "requests.log"
    llama = SimpleNamespace(server_spec_type=True, server_spec_types={"none", "draft-simple", "ngram-mod"},
                            server_cmd=lambda target, **kw: [str(exe), "--log", str(log), "--types",
                                                             kw["spec_types"] or "none"])
    items = [{"kind": "agent", "messages": [{"role": "user", "content": f"task {i}"}], "max_tokens": 3 + i}
             for i in range(3)]
    a = SimpleNamespace(ctx=512, threads=1, temperature=[0.0], draft_max=None, llama_backend_sampling=False,
                        spec_rows=None, timeout=60, seed=5, top_k=40, top_p=0.95, min_p=0.05, max_tokens=8, chain_depth=3)
    cfg = {"llama": llama, "methods": bench.parse_methods("chain"), "target": tiny_pair[0], "draft": tiny_pair[1],
           "sp0": SamplingParams(temperature=0.0, top_k=40, top_p=0.95, min_p=0.05, max_tokens=8, seed=5),
           "workloads": {"agent": items}}
    notes = []
    out = agent.run_agent(a, cfg, common.method_params, notes.append)
    (block,) = out["blocks"]
    assert list(block["rows"]) == ["llama-server none", "llama-server draft-simple", "llama-server ngram-mod",
                                   "llama-server draft-simple,ngram-mod", "ours none", "ours chain"]
    sent = [json.loads(ln) for ln in log.read_text().splitlines()]
    per_server = [[5, 4, "Say OK."], [5, 3, "task 0"], [6, 4, "task 1"], [7, 5, "task 2"]]
    assert sent == per_server * 4  # each fresh server: a warm-up, then the items in order
    assert all(len(runs) == 3 for runs in block["runs"].values())
    assert block["rows"]["llama-server ngram-mod"]["tokens"] == 3 + 4 + 5
    ours = block["rows"]["ours chain"]
    assert ours["requests"] == 3 and ours["prompt_target_s"] > 0 and ours["prompt_draft_s"] > 0
    assert all(r["tokens"] <= 3 + i for i, r in enumerate(block["runs"]["ours none"]))  # the items' own max_tokens
    assert agent.format_agent_table(out["blocks"]).count("\n") == 7 and len(notes) == 5


def test_the_agent_mode_prints_the_table_and_writes_the_report(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    row = agent.summarise_sequence([{"tokens": 8, "prompt_tokens": 90, "prompt_cached": 0, "prompt_s": 1.0,
                                     "decode_s": 1.0, "e2e": 2.1}])
    out = {"blocks": [{"temperature": 0.0, "rows": {"ours none": row}, "runs": {"ours none": []}}],
           "server_cmds": {"llama-server none": ["llama-server"]}, "threads": 1}
    monkeypatch.setattr(agent, "run_agent", lambda a, cfg: out)
    a = common.Options(llama_cpp_bin=str(tmp_path), workload="agent", json=str(tmp_path / "r.json"))
    cfg = {"llama": SimpleNamespace(version="v1"), "workloads": {"agent": [{}, {}]}, "target": "t", "draft": "d"}
    assert agent.run_mode(a, cfg) == 0
    printed = capsys.readouterr().out
    assert "ours none" in printed and "2 agent requests in sequence per system" in printed
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["results"] == [{"temperature": 0.0, "rows": {"ours none": row}}]
    assert report["llama_cpp"]["server_cmds"] == out["server_cmds"]
    assert report["config"]["llama_cpp_bin"] == str(tmp_path) and report["config"]["workload"] == "agent"
