"""The per-request fields come from the settings' metadata (``config.setting(request=...)``),
as the command-line flags do: the parity between the two, each request field read on every
route that takes settings (chat, completions, infill, and the Anthropic and Responses
translations), and the few settings that are one-sided, each with its reason."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("starlette")

from resispec_gguf.config import (DraftParams, ModelParams, ReasoningParams, SamplingParams,  # noqa: E402
                                  ServerParams, WorkerParams, request_name)
from resispec_gguf.surfaces.server import anthropic, dialects, fields, responses  # noqa: E402
from resispec_gguf.surfaces.server.errors import ApiError  # noqa: E402
from resispec_gguf.surfaces.server.responses import ResponseStore  # noqa: E402

ALL = (SamplingParams, DraftParams, ReasoningParams, ModelParams, ServerParams, WorkerParams)

# Settings that are set when the process starts and hold for every request: which models and
# how they are opened, where the server listens and whom it answers, what an RPC worker
# serves.  A request is served by the models and the server already there.
LOAD_TIME = (ModelParams, ServerParams, WorkerParams)

# Per-request settings without a command-line flag, and why.
NO_FLAG = {
    "SamplingParams.logit_bias": "token ids belong to one model's vocabulary: a request (or the library) names them",
    "DraftParams.use_draft": "the command line says it once for the server, as --draft '' (no draft model loaded)",
    "DraftParams.use_memory": "the command line says it once for the server, as --memory-size 0 (no memory kept)",
    "ModelParams.n_batch": "llama.cpp's batch size, a load-time tuning the library's callers make",
}
# Settings with a flag that a request may not set, and why.
NO_REQUEST_FIELD = {
    "DraftParams.draft_support": "the server's tuning of its draft trees: a request sizes its tree with method, "
                                 "draws, depth and budget",
    "DraftParams.policy": "the server's tuning of its draft trees (as draft_support)",
    "DraftParams.lookup": "the server's tuning of its draft trees (as draft_support); auto decides lookup by itself",
    "DraftParams.lookup_k": "the server's tuning of its draft trees (as draft_support)",
    "DraftParams.use_draft": "whether the draft model is called is the server's (see NO_FLAG)",
}

_CHAT = {"messages": [{"role": "user", "content": "hi"}]}
_BODIES = {"chat": _CHAT, "completion": {"prompt": "hi"}, "infill": {"input_prefix": "a", "input_suffix": "b"}}
# what each route does not read under the setting's own name (it spells it otherwise, or has no use for it)
_NOT_ON = {"completion": {"reasoning_format", "reasoning_budget"},
           "infill": {"reasoning_format", "reasoning_budget", "max_tokens"}}


def _key(cls, f) -> str:
    return f"{cls.__name__}.{f.name}"


def _parse(body, kind="chat"):
    return fields.parse(body, kind, SamplingParams(), DraftParams(), 10_000, 4096, ReasoningParams(), 1000)


def test_every_setting_is_a_flag_and_a_request_field_or_says_why_not():
    no_flag, no_field = set(), set()
    for cls in ALL:
        for f in dataclasses.fields(cls):
            if not f.metadata["flags"]:
                no_flag.add(_key(cls, f))
            if request_name(f) is None and cls not in LOAD_TIME:
                no_field.add(_key(cls, f))
            if cls in LOAD_TIME:
                assert request_name(f) is None, f"{_key(cls, f)} is load-time: no request may set it"
    assert no_flag == set(NO_FLAG), "a setting has no flag: give it one, or add it to NO_FLAG with the reason"
    assert no_field == set(NO_REQUEST_FIELD), ("a per-request setting has no request field: give it "
                                               "setting(request=...), or add it to NO_REQUEST_FIELD with the reason")
    assert all(len(why) > 30 for why in (*NO_FLAG.values(), *NO_REQUEST_FIELD.values()))


def test_the_request_fields_are_the_settings_own():
    assert fields.REQUEST_SETTINGS == {
        "temperature": (SamplingParams, "temperature"), "top_k": (SamplingParams, "top_k"),
        "top_p": (SamplingParams, "top_p"), "min_p": (SamplingParams, "min_p"),
        "max_tokens": (SamplingParams, "max_tokens"), "seed": (SamplingParams, "seed"),
        "stop": (SamplingParams, "stop"), "logit_bias": (SamplingParams, "logit_bias"),
        "method": (DraftParams, "method"), "draws": (DraftParams, "draws"), "depth": (DraftParams, "depth"),
        "budget": (DraftParams, "budget"), "memory": (DraftParams, "use_memory"), "views": (DraftParams, "views"),
        "reasoning_format": (ReasoningParams, "reasoning_format"),
        "reasoning_budget": (ReasoningParams, "reasoning_budget")}


@pytest.mark.parametrize("kind", ["chat", "completion", "infill"])
@pytest.mark.parametrize("name", sorted(fields.REQUEST_SETTINGS))
def test_every_request_field_is_read_on_every_route(kind, name):
    """A value of the wrong type is refused naming the field: the route reads it."""
    if name in _NOT_ON.get(kind, ()):
        _parse({**_BODIES[kind], name: [["no type fits"]]}, kind)  # not read here: no error
        return
    with pytest.raises(ApiError) as e:
        _parse({**_BODIES[kind], name: [["no type fits"]]}, kind)
    assert e.value.status == 400 and e.value.param == name and e.value.code == "invalid_type", e.value.message


@pytest.mark.parametrize("name,value,setting", [
    ("temperature", 0, ("sampling", "temperature", 0.0)), ("top_k", 7, ("sampling", "top_k", 7)),
    ("seed", 5, ("sampling", "seed", 5)), ("stop", "END", ("sampling", "stop", ("END",))),
    ("memory", False, ("draft", "use_memory", False)), ("depth", 3, ("draft", "depth", 3)),
    ("method", "chain", ("draft", "method", "chain")), ("views", False, ("draft", "views", False)),
])
def test_a_request_field_sets_its_setting(name, value, setting):
    req = _parse({**_CHAT, name: value})
    group, attr, expected = setting
    assert getattr(getattr(req, group), attr) == expected


def test_a_range_error_names_the_request_field():
    with pytest.raises(ApiError) as e:
        _parse({**_CHAT, "draws": 0})
    assert e.value.param == "draws" and "draws must be in [1, 64]" in e.value.message
    with pytest.raises(ApiError) as e:
        _parse({**_CHAT, "reasoning_budget": -2})
    assert e.value.param == "reasoning_budget"


@pytest.mark.parametrize("dialect", ["anthropic", "responses"])
def test_the_translations_pass_every_setting_or_spell_it_their_way(dialect):
    passed, own = dialects.passed(dialect), dialects.OWN_SPELLING[dialect]
    for name, (_, setting) in fields.REQUEST_SETTINGS.items():
        assert (name in passed) != (setting in own), (dialect, name)
    body = {name: 1 for name in passed if name in fields.REQUEST_SETTINGS}
    if dialect == "anthropic":
        chat, _ = anthropic.chat_body({**body, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    else:
        chat, _ = responses.chat_body({**body, "input": "hi"}, ResponseStore())
    assert all(chat[name] == 1 for name in body)
