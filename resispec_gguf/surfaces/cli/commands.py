"""The commands but ``bench`` (``cli.bench_cmd``): each turns its parsed flags into settings,
loads the engine (``_load``: after the build check, with its notes on stderr) and hands both
to a library function; also the helpers ``bench`` shares (``_load``, ``_note``, the
``--json-schema``/``--grammar`` readers).  Only the command line's modules import this one.
"""

from __future__ import annotations

import contextlib
import os
import sys

from .. import flags
from ...config import DraftParams, ModelParams, ReasoningParams, SamplingParams, ServerParams, WorkerParams
from ...errors import UserError


def _note(line: str) -> None:
    print(f"resispec-gguf: {line}", file=sys.stderr)


@contextlib.contextmanager
def _load(model: ModelParams, *, announce: bool = False):
    """The engine for ``model`` (a context manager that closes it), after the build check
    (``llama.buildcheck``: a crashing build is one line, exit 2), saying on stderr when no
    draft model could be chosen, when ``-ngl`` layers found no device but the CPU, when the
    ``--memory`` file could not be read or written and, with ``announce``, where the layers
    run and what ``auto`` expects here."""
    engine = _open(model, announce=announce, loading=announce)
    try:
        yield engine
    finally:
        engine.close()
        if engine.save_warning:
            _note(f"warning: {engine.save_warning}")


def _open(model: ModelParams, *, announce: bool, loading: bool = False):
    if loading:  # said before the engine's imports (Numba, llama.cpp: a second or more on a busy machine)
        _note(_loading_line(model))
    else:
        _local_files(model)
    from ...engine import Engine
    from ...llama import buildcheck, devices

    buildcheck.require_working_build(note=_note)
    engine = Engine.load(model, note=_note)
    if model.draft is None and not engine.has_draft:
        _note("note: no draft model (only a preset target brings one; give --draft); "
              "auto and --lookup draft from the context alone")
    info = engine.info()
    if (info.get("draft") or {}).get("route") == "text":
        _note("draft vocabulary differs: text route (its text is re-tokenized for the target)")
    layers = {"n_gpu_layers": model.n_gpu_layers, "draft_gpu_layers": model.draft_gpu_layers, "rpc": model.rpc}
    warning = devices.cpu_only_warning(layers, info, buildcheck.llama_cpp_version())
    if warning:
        _note(warning)
    if engine.memory_warning:
        _note(f"warning: {engine.memory_warning}")
    if announce:
        _note(devices.summary(info))
        _note(f"auto: {engine.auto_outlook()}")
    return engine


def _local_files(model: ModelParams) -> list[tuple[str, str, str | None]]:
    """``(role, spec, kind)`` of the target and the draft (kind None: no draft), every local
    file among them refused first when it is missing or not a GGUF: such an error stays a
    start's one line, before the build check or any other line."""
    from pathlib import Path

    from ...llama.gguf_file import check_gguf_file
    from ...llama.presets import draft_spec, parse_model_spec

    out = []
    for role, spec in (("target", model.target), ("draft", draft_spec(model.target, model.draft))):
        kind = parse_model_spec(spec)[0] if spec else None
        if kind == "path":
            check_gguf_file(str(Path(spec).expanduser()))
        out.append((role, spec, kind))
    return out


def _loading_line(model: ModelParams) -> str:
    """The first line an interactive start prints (a few seconds of loading follow): which
    models it loads."""
    from ...llama.presets import PRESETS

    names = [f"{role} {PRESETS[spec].model(role).filename if kind == 'preset' else spec}" if spec else "no draft"
             for role, spec, kind in _local_files(model)]
    return f"loading {names[0]} and {names[1]} ..."


def _speculation(args) -> tuple[ModelParams, SamplingParams, DraftParams]:
    return flags.from_args(ModelParams, args), flags.from_args(SamplingParams, args), flags.from_args(DraftParams, args)




def _cmd_models(args) -> int:
    from ...llama import models

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
    from ...assist.grammar import GrammarError

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
        from ..display import dimmed

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
    from ..display import stats_line

    model, sp, dp = _speculation(args)
    constraint_args = _constraint_args(args)
    reasoning = flags.from_args(ReasoningParams, args)
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    with _load(model) as engine:
        constraint, split = _compile(engine, constraint_args), None
        if args.chat:  # the text stays text: see Engine.chat_tokens; the thinking apart, its budget applied
            from ...assist.plan import plan_chat

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
    from ..chat import run_chat

    model, sp, dp = _speculation(args)
    reasoning = flags.from_args(ReasoningParams, args)
    with _load(model, announce=True) as engine:
        return run_chat(engine, sp, dp, args.system, reasoning)


def serving_line(params: ServerParams, model: ModelParams, dp: DraftParams, engine, auth: bool, key_env: str) -> str:
    """``serve``'s line once its models are loaded: where it listens, the method, slots, KV
    and prompt cache, authentication, CORS and where the layers run (README quotes it)."""
    from ...llama.devices import summary

    host = f"[{params.host}]" if ":" in params.host else params.host
    auth_text = "auth on" if auth else f"auth off, no --api-key, --api-key-file or ${key_env}"
    cors = f"; CORS for {' '.join(params.cors_origins)}" if params.cors_origins else ""
    # a recurrent or hybrid model's memory, rollback and state size: in ``summary``'s part
    slots = f"{engine.n_slots} slots × {engine.n_ctx} tokens, KV {engine.kv_bytes() / 2**20:.0f} MiB"
    slots += f", RAM prompt cache {model.cache_ram_mib} MiB" if model.cache_ram_mib else ", no RAM prompt cache"
    return (f"serving {params.model_name} on http://{host}:{params.port}/v1 (method {dp.method}; {slots}; "
            f"{auth_text}{cors}; {summary(engine.info())})")


def _cmd_serve(args) -> int:
    try:
        from .. import server
    except ImportError as e:
        raise UserError(f"the server needs its extra: pip install 'resispec-gguf[server]' ({e.name} missing)") from None
    model, sp, dp = _speculation(args)
    params = flags.from_args(ServerParams, args)
    reasoning = flags.from_args(ReasoningParams, args)
    if params.model_name is None:
        params = params.replace(model_name=os.path.basename(model.target.rstrip("/")) or model.target)
    key = server.api_key(params)  # an unreadable key file: one line, before anything else
    sock = server.listen(params.host, params.port)  # a taken port too
    loaded = []

    def load():
        """On the server's loading thread, while /health answers 503 "loading model"."""
        engine = _open(model, announce=False, loading=True)
        loaded.append(engine)
        print(serving_line(params, model, dp, engine, key is not None, server.API_KEY_ENV), file=sys.stderr)
        if dp.method == "auto":
            _note(f"auto: {engine.auto_outlook()}")
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


def _cmd_analyze(args) -> int:
    from ...bench import inputs, measure

    prompts = [p for items in inputs.select_prompts(args.prompts, args.workload).values() for p in items]
    model = flags.from_args(ModelParams, args)
    sp = flags.from_args(SamplingParams, args)
    with _load(model) as engine:
        measure.analyze_command(engine, model, prompts, args.temperature, args.k, max_tokens=sp.max_tokens,
                              cap=args.draft_support, seed=sp.seed, rrs_samples=args.rrs_samples, json_path=args.json)
    return 0


def _cmd_doctor(args) -> int:
    from .. import doctor

    return doctor.run(ctx=args.ctx)


def _cmd_rpc_worker(args) -> int:
    from ...llama import rpc

    rpc.run_worker(flags.from_args(WorkerParams, args), lambda line: print(line, file=sys.stderr, flush=True))
    return 0
