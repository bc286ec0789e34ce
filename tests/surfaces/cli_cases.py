"""The command lines test_cli_e2e.py runs, and the parser helpers it and
test_cli_bad_values.py share: a helper module, not a test file.

``cases()``: each command as a user runs it, ``python -m resispec_gguf ...`` on the tiny pair
(tiny_gguf.py), once with its defaults and once or more with every flag set to a non-default
value, each with the check of what it prints or writes; ``NOT_RUN``, the commands no case
runs.  ``_commands`` and ``_options``: every command's parser and options, read off
``cli.build_parser()``; ``_free_port``.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import rpc_workers
from resispec_gguf.surfaces import cli, flags
from resispec_gguf import config
from resispec_gguf.config import DraftParams, ModelParams, ReasoningParams, SamplingParams, ServerParams, WorkerParams

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
SETTINGS = (ModelParams, SamplingParams, DraftParams, ReasoningParams, ServerParams, WorkerParams)
PORT = "{port}"  # replaced by a free port when the case runs
RPC = "{rpc}"  # replaced by two loopback workers' endpoints when the case runs


# ---------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One command line: ``argv`` after ``python -m resispec_gguf``, its stdin, and
    ``check(result, tmp)`` for what it printed or wrote (exit 0 and no traceback are checked
    for every case)."""

    name: str
    argv: tuple[str, ...]
    check: Callable
    stdin: str | None = None
    needs: str | None = None  # a module without which the case is skipped, or RPC: an RPC build
    codes: tuple[int, ...] = (0,)  # the exit statuses it may end with


STATS = re.compile(r"^\[(\d+) tokens, [\d.]+ tok/s, tau [\d.]+ tokens/target call, acceptance (?:\d+%|-), (\w+)\]$",
                   re.M)


def _replies(text: str, count: int, method: str, most: int) -> None:
    """``count`` stats lines (one per reply) of ``method``, each with 1..``most`` tokens."""
    stats = STATS.findall(text)
    assert len(stats) == count, text
    for tokens, used in stats:
        assert 1 <= int(tokens) <= most and used == method, (tokens, used)


def generated(method: str, most: int):
    def check(r, tmp):
        assert r.stdout.endswith("\n"), r.stdout
        _replies(r.stderr, 1, method, most)
    return check


def constrained(start: str, most: int):
    """A reply matching the regex ``start`` (e.g. a JSON object's opening brace)."""
    def check(r, tmp):
        assert re.match(start, r.stdout), r.stdout
        _replies(r.stderr, 1, "auto", most)
    return check


# chat's and bench's start-up line: where llama.cpp put each model's layers
LAYERS = re.compile(r"^resispec-gguf: target on ([\w\[\]:.]+(?:, [\w\[\]:.]+)*); draft on CPU$", re.M)


def chatted(turns: int, method: str, most: int):
    def check(r, tmp):
        _replies(r.stdout, turns, method, most)
        assert len(LAYERS.findall(r.stderr)) == 1, r.stderr
    return check


def bench_table(workloads, temperatures, methods):
    def check(r, tmp):
        assert not hasattr(r, "stderr") or len(LAYERS.findall(r.stderr)) == 1, r.stderr  # (a sweep's sub-table)
        blocks = r.stdout.split("workload: ")[1:]
        assert [b.splitlines()[0] for b in blocks] == list(workloads), r.stdout
        for block in blocks:
            speeds, phases = block.split("where a request's time went", 1)
            want = [(t, m) for t in temperatures for m in methods]
            table, _, below = speeds.partition("\n\n")  # the rows, then auto's step times and sentence
            rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
            assert [(float(row[0]), row[1]) for row in rows] == want, block
            if "auto" in methods:
                assert re.search(r"^auto T=\S+: (decoded plainly|speculated) in \d+% of its steps", below, re.M), block
            rows = [line.split() for line in phases.split("\n\n")[0].splitlines()[2:] if line.strip()]
            assert [(float(row[0]), row[1]) for row in rows] == want, block
    return check


def _documented_bench_keys() -> tuple[set, set]:
    """The report's keys as docs/benchmarks.md's JSON schema paragraph names them: top level, per method."""
    schema = BENCHMARKS.split("JSON schema (`--json`):", 1)[1].split("\n\n", 1)[0]
    top, per_method = re.split(r"where each method\s+maps to", schema, maxsplit=1)
    top_keys = {"config", "machine", "models", "copy_ceiling", "peak_rss_mb", "results", "methods"}
    assert all(f"`{k}`" in top for k in top_keys), top
    return top_keys, set(re.findall(r"`(\w+)`", per_method))


def bench_report(temperatures, methods):
    table = bench_table(["prompts"], temperatures, methods)

    def check(r, tmp):
        table(r, tmp)
        report = json.loads((tmp / "bench.json").read_text())
        devices = report["machine"]["devices"]
        assert devices["draft"] == ["CPU"] and devices["target"] and all(isinstance(d, str) for d in devices["target"])
        top_keys, method_keys = _documented_bench_keys()
        assert set(report) == top_keys
        assert [(b["workload"], b["temperature"]) for b in report["results"]] == [("prompts", t) for t in temperatures]
        for block in report["results"]:
            assert list(block["methods"]) == methods
            for summary in block["methods"].values():
                assert set(summary) == method_keys
                assert summary["runs"] == 2 * 2  # --repeat 2, two prompts
        cfg = report["config"]
        assert cfg["temperatures"] == temperatures and cfg["methods"] == methods and cfg["repeat"] == 2
        assert cfg["max_tokens"] == 3 and cfg["seed"] == 5
        assert cfg["sampling"] == {"top_k": 20, "top_p": 0.9, "min_p": 0.1}
        assert cfg["draft_params"] == {"draws": 2, "depth": 2, "budget": 4, "draft_support": 8, "policy": "static"}
        assert cfg["n_ctx"] >= 256 and cfg["n_gpu_layers"] == 1
        assert set(report["models"]) == {"target", "draft"} and report["models"]["draft"]["sha256"]
    return check


def concurrent(r, tmp):
    """``--concurrency 1,2``: a row per level and method, and the JSON report says the same."""
    rows = [line.split() for line in r.stdout.splitlines()[2:] if line.strip()]
    assert [(row[1], int(row[2])) for row in rows] == [("none", 1), ("none", 2), ("chain", 1), ("chain", 2)], r.stdout
    report = json.loads((tmp / "concurrency.json").read_text())
    assert report["levels"] == [1, 2] and report["n_slots"] == 2 and len(report["rows"]) == 4


def against(r, tmp):
    """``--against llama.cpp DIR --concurrency 1 --rounds 2`` on fake binaries: a row per
    method and llama-server (without and with its draft), medians of two rounds; the report
    keeps every round and the comparison's own flags."""
    rows = [line.split() for line in r.stdout.splitlines()[2:] if line.strip() and not line.startswith("llama.cpp ")
            and not line.startswith("agg tok/s")]
    systems = [" ".join(row[1:-8]) for row in rows]
    assert systems == ["ours none", "ours chain", "llama.cpp server -np 1", "llama.cpp server -np 1 +draft n_max=2"], \
        r.stdout
    assert "llama.cpp 0.0.0-fake (build 1, commit fake); threads 1" in r.stdout
    assert f"llama.cpp 0.0.0-fake (build 1, commit fake) from {tmp / 'llama-bin'}" in r.stderr
    report = json.loads((tmp / "against.json").read_text())
    assert report["levels"] == [1] and len(report["rows"]) == 2 * 4
    config_ = report["config"]
    assert (config_["rounds"], config_["n_prompts"], config_["chain_depth"], config_["draft_max"]) == (2, 1, 2, [2])
    assert (config_["bench_reps"], config_["timeout"], config_["spec_rows"]) == (2, 60.0, ["none"])
    assert config_["no_spec_simple"] and config_["llama_backend_sampling"]
    draft_cmd = report["llama_cpp"]["server_cmds"]["llama.cpp server -np 1 +draft n_max=2"]
    assert "--no-spec-draft-backend-sampling" not in draft_cmd and draft_cmd[draft_cmd.index("-md") + 1]


def swept(r, tmp):
    """``--sweep quick``: the table of every setting, then per workload the best and the command
    that reproduces it, which parses back into that setting; the report says the same."""
    from resispec_gguf.bench import measure as bench

    names = [n for n, _ in bench.sweep_grid("quick", DraftParams())]
    table, summary = r.stdout.split("\nbest fixed setting", 1)
    bench_table(["prompts"], [0.5], names)(argparse.Namespace(stdout=table), tmp)
    report = json.loads((tmp / "sweep.json").read_text())
    assert report["config"]["sweep"] == "quick" and report["config"]["methods"] == names
    (block,) = report["results"]
    best = block["best"]
    assert f"prompts T=0.5: best {best['setting']} " in summary and best["command"] in summary
    argv = best["command"].split()[3:]
    assert argv[0] == "generate" and "--threads" in argv
    args = cli.build_parser().parse_args([a.strip("'") for a in argv])
    assert flags.from_args(DraftParams, args).method == best["draft_params"]["method"]


def plotted(r, tmp):
    assert (tmp / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def analysis(temperatures, ks, rrs=False, json_file=False):
    def check(r, tmp):
        lines = r.stdout.strip().splitlines()
        assert lines[0].split() == ["T", "K", "chain", "specinfer", "resispec", "alpha*", "nodes", "rrs(MC)",
                                    "positions"], r.stdout
        rows = [line.split() for line in lines[1:]]
        assert [(float(row[0]), int(row[1])) for row in rows] == [(t, k) for t in temperatures for k in ks], r.stdout
        for row in rows:
            assert all(0 <= float(x) <= 1 for x in row[2:6]) and (row[7] != "-") == rrs and int(row[8]) > 0, row
        if json_file:
            report = json.loads((tmp / "analyze.json").read_text())
            assert set(report) == {"config", "machine", "results"}
            assert report["config"]["temperatures"] == temperatures and report["config"]["k"] == ks
            assert [b["temperature"] for b in report["results"]] == temperatures
    return check


def paired(target: str, drafts: list[str]):
    """``--pairs``: a plain row and a row per compatible draft, a line for the refused one, and
    the JSON report valid under its schema, the target's fidelity to itself exact."""
    def check(r, tmp):
        import jsonschema

        from resispec_gguf.bench import pairs

        lines = r.stdout.strip().splitlines()
        assert lines[0].split()[:3] == ["pair", "T", "tok/s"], r.stdout
        assert [line.split()[0:3] for line in lines[2:4]] == [["target.gguf", "(plain)", "0.0"],
                                                              ["target.gguf", "+", "draft.gguf"]], r.stdout
        assert lines[4].startswith("refused target.gguf + incompatible_unspellable.gguf: draft model is incompatible")
        report = json.loads((tmp / "pairs.json").read_text())
        jsonschema.validate(report, pairs.REPORT_SCHEMA)
        rows = report["pairs"]
        assert [(x["target"], x["draft"], "error" in x) for x in rows] == [
            (target, None, False), (target, drafts[0], False), (target, drafts[1], True)]
        assert all((x["kl_mean"], x["top1"]) == (0.0, 1.0) for x in rows[:2])
    return check


def models_listed(r, tmp):
    from resispec_gguf.llama import models

    rows = r.stdout.strip().splitlines()
    assert len(rows) == 2 * len(models.PRESETS), r.stdout
    assert all(row.endswith("not cached") for row in rows), r.stdout  # the test's empty cache


def doctored(ctx: int):
    """One line per subject, each problem with its fix, the exit status saying whether there
    was one (on a machine without problems: 0); the check's verdict cached in the model cache."""
    def check(r, tmp):
        lines = r.stdout.splitlines()
        assert lines[0].startswith("resispec-gguf doctor"), r.stdout
        labels = [line.split("  ")[0] for line in lines[1:-1] if not line.startswith(" ")]
        assert labels == ["resispec-gguf", "llama-cpp-python", "recurrent", "CPU", "crash check", "devices", "numba",
                          "models", "memory", "load", "costs", "optional"], r.stdout
        assert f"at --ctx {ctx} needs about" in r.stdout and "not cached (fetched on first use)" in r.stdout
        problems = sum(line.lstrip().startswith("problem: ") for line in lines)
        assert r.returncode == (1 if problems else 0) and (lines[-1] == "all well") == (not problems), r.stdout
        assert (tmp / "cache" / "buildcheck.json").is_file()
    return check


def saved_memory(name: str, then, saved: bool = True):
    """``then``'s checks, and the ``--memory`` file ``name`` written on exit (not written
    when ``saved`` is False: ``--memory-size 0``, no memory to keep)."""
    def check(r, tmp):
        then(r, tmp)
        assert (tmp / name).is_file() == saved
        assert not saved or (tmp / name).stat().st_size > 0
    return check


def served(r, tmp):
    """Checked in ``_serve``, which sends the request."""


def worked(cache: str | None = None):
    """Checked in ``_work``, which greets the worker; ``cache``: the directory it made."""
    def check(r, tmp):
        assert r.stderr.startswith(rpc_workers.STARTED), r.stderr
        assert cache is None or (tmp / cache).is_dir()
    return check


# Every model flag set away from its default, in two spellings.
# (--threads is in every case: see cases().)
MODEL_A = ("--ctx", "256", "-ngl", "1", "-ngld", "0", "--no-flash-attn", "--verbose", "--tool-format", "hermes",
           "--parallel", "2", "--cache-ram", "64", "--memory-size", "5000")
MODEL_B = ("--ctx", "300", "--n-gpu-layers", "1", "--n-gpu-layers-draft", "0", "--flash-attn", "--verbose",
           "--tool-format", "llama3", "--parallel", "3", "--cache-ram", "0", "--memory-size", "0")
SAMPLING_A = ("--temperature", "0.5", "--top-k", "20", "--top-p", "0.9", "--min-p", "0.1", "-n", "4", "--seed", "3")
SAMPLING_B = ("--temp", "1.5", "--top-k", "5", "--top-p", "0.8", "--min-p", "0", "--max-tokens", "3", "--seed", "7")
DRAFT_A = ("--method", "resispec", "-K", "2", "--depth", "2", "--budget", "4", "--draft-support", "8", "--policy",
           "static", "--lookup", "--lookup-k", "2", "--no-views")
DRAFT_B = ("--method", "specinfer", "--draws", "3", "--depth", "3", "--budget", "6", "--draft-support", "16",
           "--policy", "static", "--lookup", "--lookup-k", "4", "--no-views")


def cases(target: str, draft: str, tmp: Path) -> list[Case]:
    # One thread everywhere: with the default (all cores) on a busy machine llama.cpp's threads
    # spin waiting for each other, and analyze's defaults take minutes instead of seconds.
    pair = ("--target", target, "--draft", draft, "--threads", "1")
    prompts = str(tmp / "prompts.jsonl")
    incompatible = str(tmp / "incompatible_unspellable.gguf")  # written by the e2e fixture
    rpc = ("--rpc", RPC, "-ngl", "99")  # the target on two workers, the draft local
    return [
        Case("generate-defaults", ("generate", *pair), generated("auto", 512), stdin="Once upon a time"),
        Case("generate-every-flag", ("generate", *pair, *MODEL_A, *SAMPLING_A, "--stop", "zq", "--stop", "qz",
                                     *DRAFT_A, "--chat", "--reasoning-format", "none", "--reasoning-budget", "4",
                                     "--memory", str(tmp / "memory.npz"), "Once upon a time"),
             saved_memory("memory.npz", generated("resispec", 4))),
        Case("generate-schema", ("generate", *pair, "-n", "6", "--json-schema", '{"type": "object"}', "Data:"),
             constrained("{", 6)),
        Case("generate-grammar", ("generate", *pair, "-n", "6", "--grammar", str(tmp / "yes-no.gbnf"), "Answer:"),
             constrained("yes\n|no\n", 6)),
        Case("chat-defaults", ("chat", *pair), chatted(1, "auto", 512), stdin="Hello\n"),
        Case("chat-every-flag", ("chat", *pair, *MODEL_B, *SAMPLING_B, *DRAFT_B, "--system", "Answer briefly.",
                                "--reasoning-format", "none", "--reasoning-budget", "4", "--memory",
                                str(tmp / "chat-memory.npz")),
             saved_memory("chat-memory.npz", chatted(2, "specinfer", 3), saved=False), stdin="Hello\n/stats\nAgain\n"),
        Case("serve-defaults", ("serve", *pair, "--port", PORT), served),
        Case("serve-api-key-file", ("serve", *pair, "--port", PORT, "--api-key-file", str(tmp / "key.txt")), served),
        Case("serve-every-flag", ("serve", *pair, *MODEL_A, *SAMPLING_B, *DRAFT_A, "--host", "localhost", "--port",
                                  PORT, "--api-key", "k3y", "--max-queue", "2", "--cors-origin", "http://example.test",
                                  "--cors-origin", "https://other.test:8443", "--model-name", "tiny-e2e",
                                  "--reasoning-format", "none", "--reasoning-budget", "8", "--memory",
                                  str(tmp / "serve-memory.npz")), served),
        # bench's true defaults (22 prompts, 6 methods, 2 temperatures, 128 tokens) take half a
        # minute even on the tiny pair: one workload and 4 tokens, the rest as it comes
        Case("bench-defaults", ("bench", *pair, "--workload", "chat", "-n", "4"),
             bench_table(["chat"], [1.0, 0.6], list(config.METHODS))),
        Case("bench-every-flag", ("bench", *pair, *MODEL_B, "--top-k", "20", "--top-p", "0.9", "--min-p", "0.1",
                                  "--max-tokens", "3", "--seed", "5", "--draws", "2", "--depth", "2", "--budget", "4",
                                  "--draft-support", "8", "--policy", "static", "--lookup", "--lookup-k", "1", "--no-views",
                                  "--memory", str(tmp / "bench-memory.npz"), "--reasoning-budget", "2",
                                  "--prompts", prompts,
                                  "--methods", "chain,resispec", "--temperature", "0", "0.5", "--repeat", "2",
                                  "--json", str(tmp / "bench.json")),
             bench_report([0.0, 0.5], ["none", "chain", "resispec"])),
        Case("bench-schema", ("bench", *pair, "--prompts", prompts, "--methods", "chain", "-n", "3", "--temperature",
                              "0.5", "--json-schema", '{"type": "object"}'),
             bench_table(["prompts"], [0.5], ["none", "chain", "none+schema", "chain+schema"])),
        Case("bench-concurrency", ("bench", *pair, "--prompts", prompts, "--methods", "none,chain", "-n", "3",
                                   "--concurrency", "1,2", "--json", str(tmp / "concurrency.json")), concurrent),
        Case("bench-against", ("bench", *pair, "--against", "llama.cpp", str(tmp / "llama-bin"), "--prompts", prompts,
                               "--methods", "none,chain", "-n", "3", "--temperature", "0.5", "--concurrency", "1",
                               "--rounds", "2", "--n-prompts", "1", "--chain-depth", "2", "--draft-max", "2",
                               "--spec-rows", "none", "--no-spec-simple", "--bench-reps", "2",
                               "--llama-backend-sampling", "--timeout", "60", "--json", str(tmp / "against.json")),
             against),
        Case("bench-sweep", ("bench", *pair, "--prompts", prompts, "--sweep", "quick", "-n", "3", "--temperature",
                             "0.5", "--json", str(tmp / "sweep.json")), swept),
        Case("bench-plot", ("bench", *pair, "--prompts", prompts, "--methods", "chain", "-n", "3", "--temperature",
                            "0.5", "--plot", str(tmp / "bench.png")), plotted, needs="matplotlib"),
        Case("bench-pairs", ("bench", "--target", target, "--draft", f"{draft},{incompatible}", "--threads", "1",
                             "--pairs", "--reference", target, "--prompts", prompts, "-n", "3", "--temperature", "0",
                             "--json", str(tmp / "pairs.json")), paired(target, [draft, incompatible])),
        Case("analyze-defaults", ("analyze", *pair), analysis([1.0, 0.6], [1, 4, 16])),
        Case("analyze-every-flag", ("analyze", *pair, *MODEL_A, "-n", "6", "--seed", "4", "--prompts", prompts,
                                    "--temperature", "0.7", "-k", "1,4", "--draft-support", "16", "--rrs-samples", "3",
                                    "--json", str(tmp / "analyze.json"), "--memory", str(tmp / "analyze-memory.npz")),
             analysis([0.7], [1, 4], rrs=True, json_file=True)),
        Case("analyze-workload", ("analyze", *pair, "--workload", "edit,chat", "--max-tokens", "4"),
             analysis([1.0, 0.6], [1, 4, 16])),
        Case("models-list", ("models", "list"), models_listed),
        Case("doctor-defaults", ("doctor",), doctored(4096), codes=(0, 1)),
        Case("doctor-every-flag", ("doctor", "--ctx", "1024"), doctored(1024), codes=(0, 1)),
        Case("generate-rpc", ("generate", *pair, *rpc, "-n", "6", "Once upon a time"), generated("auto", 6), needs=RPC),
        Case("chat-rpc", ("chat", *pair, *rpc, "-n", "4"), chatted(1, "auto", 4), stdin="Hello\n", needs=RPC),
        Case("serve-rpc", ("serve", *pair, *rpc, "--port", PORT), served, needs=RPC),
        Case("bench-rpc", ("bench", *pair, *rpc, "--workload", "chat", "-n", "4", "--methods", "chain,auto",
                           "--temperature", "0"), bench_table(["chat"], [0.0], ["none", "chain", "auto"]), needs=RPC),
        Case("analyze-rpc", ("analyze", *pair, *rpc, "--workload", "chat", "-n", "4", "--temperature", "0.6", "-k", "1"),
             analysis([0.6], [1]), needs=RPC),
        Case("rpc-worker-defaults", ("rpc-worker", "--port", PORT, "--threads", "1"), worked(), needs=RPC),
        Case("rpc-worker-every-flag", ("rpc-worker", "--host", "localhost", "--port", PORT, "--threads", "1", "--cache",
                                       str(tmp / "rpc-cache"), "--allow-remote"), worked("rpc-cache"), needs=RPC),
    ]


# Commands no case runs, and why.
NOT_RUN = {"models fetch": "downloads the preset pair (GBs); test_an_out_of_range_value_is_one_line runs its "
                           "refusal of an unknown preset"}
# What a "defaults" case may set: the pair, one thread, a free port, and what keeps it small.
DEFAULTS_SET = {"target", "draft", "n_threads", "port"}
DEFAULTS_MAY_SET = {"bench": {"workload", "max_tokens"}}


# ---------------------------------------------------------------------------------- the parsers, a port


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _commands(parser, prefix="") -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its words: ``chat``, ..., ``models``, ``models list``."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[prefix + name] = sub
                out.update(_commands(sub, prefix + name + " "))
    return out


def _options(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
