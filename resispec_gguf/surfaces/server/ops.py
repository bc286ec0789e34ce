"""llama.cpp server's utility routes, for the tools that use them: ``GET /health`` (no key
needed; 503 ``{"status": "loading model"}`` while the models load), ``POST /tokenize``
(``content``, ``add_special``, ``parse_special``, ``with_pieces``), ``POST /detokenize``
(``tokens``), ``POST /apply-template`` (a chat body's ``messages``, ``tools`` and template
fields to the prompt text it renders), ``GET /props`` (the chat template, context, default
generation settings, model paths, build), ``GET /slots`` (each slot's state) and
``GET /metrics`` (Prometheus text, ``metrics``).  Tokenizing and rendering run on the app's
tokenizer threads, off the event loop.

May import the other server modules but the app (which hands in its server object), the
``assist`` planner and ``config``; it uses the engine's public API only (``tokenize``,
``detokenize``, ``token_piece``, ``chat_template``, ``info``, ``has_draft``), never
``llama``.
"""

from __future__ import annotations

import dataclasses
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ... import __version__
from ...assist.chat_format import CHATML
from ...assist.plan import chat_text
from . import fields
from .metrics import CONTENT_TYPE, exposition

__all__ = ["routes"]


def routes(srv) -> list[Route]:
    """The routes, over the app's server object ``srv``."""
    def route(path, fn, method):
        return Route(path, srv.endpoint(lambda r: fn(srv, r)), methods=[method])

    return [Route("/health", srv.endpoint(lambda r: health(srv, r), needs_key=False, loading=True), methods=["GET"]),
            route("/tokenize", tokenize, "POST"), route("/detokenize", detokenize, "POST"),
            route("/apply-template", apply_template, "POST"), route("/props", props, "GET"),
            route("/slots", slots, "GET"), route("/metrics", metrics, "GET")]


async def health(srv, request: Request) -> Response:
    """Ready or loading, the slots' load and the RAM prompt cache's figures (``--cache-ram``)."""
    if srv.engine is None:
        return JSONResponse({"status": "loading model"}, status_code=503, headers={"Retry-After": "1"})
    body = {"status": "ok", "slots": srv.worker.load()}
    ram = getattr(srv.engine, "prompt_cache", None)
    if ram is not None:  # read racily, as a gauge
        body["prompt_cache"] = {"entries": len(ram), "used_mib": round(ram.used_bytes / 2**20, 1),
                                "max_mib": ram.max_bytes >> 20, "hits": ram.hits, "hit_tokens": ram.hit_tokens}
    return JSONResponse(body)


def _piece(engine, token: int):
    """llama.cpp's ``piece``: the token's text, or its bytes where they are not UTF-8 alone."""
    raw = engine.detokenize([token])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def _tokenized(engine, content: str, add_special: bool, parse_special: bool, with_pieces: bool) -> dict:
    tokens = engine.tokenize(content, add_special=add_special, parse_special=parse_special)
    if not with_pieces:
        return {"tokens": tokens}
    return {"tokens": [{"id": t, "piece": _piece(engine, t)} for t in tokens]}


async def tokenize(srv, request: Request) -> Response:
    args = fields.parse_tokenize(await srv.read_body(request))
    present, out = await srv.off_loop(request, None, _tokenized, srv.engine, *args)
    return JSONResponse(out) if present else Response(status_code=499)


async def detokenize(srv, request: Request) -> Response:
    tokens = fields.parse_detokenize(await srv.read_body(request), int(srv.engine.n_vocab))
    present, raw = await srv.off_loop(request, None, srv.engine.detokenize, tokens)
    return JSONResponse({"content": raw.decode("utf-8", "replace")}) if present else Response(status_code=499)


async def apply_template(srv, request: Request) -> Response:
    """The prompt a chat body renders to (every chat field checked as for a completion)."""
    req = srv.parse(await srv.read_body(request), "chat")
    present, text = await srv.off_loop(request, req, chat_text, srv.engine, req.prompt, req.options)
    return JSONResponse({"prompt": text}) if present else Response(status_code=499)


def _settings(srv) -> dict:
    """The default generation settings, llama.cpp's names first, this server's after."""
    sp, dp = srv.sampling_defaults, srv.draft_params
    return {"n_predict": sp.max_tokens, "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
            "min_p": sp.min_p, "seed": -1 if sp.seed is None else sp.seed, "stop": list(sp.stop),
            "speculative.n_max": dp.max_depth, "speculative.n_min": 0,
            "draft": dataclasses.asdict(dp), "reasoning": dataclasses.asdict(srv.reasoning)}


async def props(srv, request: Request) -> Response:
    engine = srv.engine
    info = engine.info()
    target, draft = info.get("target") or {}, info.get("draft") or {}
    return JSONResponse({
        "default_generation_settings": {"n_ctx": srv.n_ctx, "params": _settings(srv)},
        "total_slots": srv.worker.slots,
        "model_path": target.get("path"),
        "draft_model_path": draft.get("path"),
        "model_alias": srv.model_name,
        "chat_template": engine.chat_template or CHATML,
        "modalities": {"vision": False, "audio": False},
        "build_info": f"resispec-gguf {__version__} (llama-cpp-python {target.get('llama_cpp_python', '?')})",
    })


async def slots(srv, request: Request) -> Response:
    running = {job.lane: job for job in srv.worker.running()}
    now = time.monotonic()
    out = []
    for lane in range(srv.worker.slots):
        slot = {"id": lane, "n_ctx": srv.n_ctx, "speculative": bool(srv.engine.has_draft),
                "is_processing": lane in running}
        job = running.get(lane)
        if job is not None:
            sp, dp = job.req.sampling, job.req.draft
            slot.update({"id_task": job.id, "kind": job.req.kind, "stream": job.req.stream,
                         "n_prompt_tokens": len(job.plan.prompt) if job.plan is not None else 0,
                         "elapsed_s": round(now - job.started, 3) if job.started is not None else 0.0,
                         "params": {"n_predict": sp.max_tokens, "temperature": sp.temperature, "top_k": sp.top_k,
                                    "top_p": sp.top_p, "min_p": sp.min_p, "method": dp.method}})
        out.append(slot)
    return JSONResponse(out)


async def metrics(srv, request: Request) -> Response:
    return Response(exposition(srv.metrics, srv.worker.load()), media_type=CONTENT_TYPE)
