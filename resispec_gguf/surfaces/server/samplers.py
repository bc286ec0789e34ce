"""The request fields that shape sampling beyond the settings' own: ``logit_bias``, which is
honoured (``logit_bias``), and the samplers and outputs this server does not run, which are
refused with a 400 naming the field unless they ask for nothing (``refuse_unhonoured``).

Refused unless at their no-op value: ``frequency_penalty`` and ``presence_penalty`` (0),
``repeat_penalty`` (1), llama.cpp's ``dry_multiplier``, ``xtc_probability``, ``mirostat``,
``dynatemp_range`` (0), ``typical_p``, ``tfs_z`` (1), ``top_n_sigma`` (-1 or below 0),
``min_keep`` (0 or 1), ``ignore_eos`` (false), ``grammar`` and ``json_schema`` (empty; a
constraint is asked for with ``response_format``), and audio output (``audio``, a
``modalities`` list with more than ``"text"``).  A penalty depends on the generated history,
which differs along a draft tree's paths; it is not implemented, so it is refused rather
than answered as if applied (docs/verification.md).  The parameters of those samplers
(``repeat_last_n``, ``penalize_nl``, ``dry_base``, ``mirostat_tau``, ...) change nothing
while the samplers are off, and are ignored.

May import ``config`` and ``server.errors``; never the engine, ``llama`` or the app.
"""

from __future__ import annotations

import json
import math
import re

from ...config import MAX_LOGIT_BIAS
from .errors import bad

__all__ = ["FIELDS", "logit_bias", "refuse_unhonoured"]

# name -> (is a no-op, what the no-op value is, why it is refused)
_PENALTY = ("it depends on the generated history, which differs along the draft tree's paths, and is not "
            "implemented (the output would not be what was asked for)")
_SAMPLER = "this server does not run that sampler (it samples with temperature, top_k, top_p, min_p, logit_bias)"
_NUMERIC = {
    "frequency_penalty": (lambda v: v == 0, "0", _PENALTY),
    "presence_penalty": (lambda v: v == 0, "0", _PENALTY),
    "repeat_penalty": (lambda v: v == 1, "1", _PENALTY),
    "dry_multiplier": (lambda v: v == 0, "0", _SAMPLER),
    "xtc_probability": (lambda v: v == 0, "0", _SAMPLER),
    "mirostat": (lambda v: v == 0, "0", _SAMPLER),
    "dynatemp_range": (lambda v: v == 0, "0", _SAMPLER),
    "typical_p": (lambda v: v >= 1, "1", _SAMPLER),
    "tfs_z": (lambda v: v >= 1, "1", _SAMPLER),
    "top_n_sigma": (lambda v: v < 0, "-1", _SAMPLER),
    "min_keep": (lambda v: v <= 1, "0", "every filter here keeps at least one token, and no more on request"),
}
_OTHER = ("ignore_eos", "grammar", "json_schema", "audio", "modalities")
#: the fields this module reads, for the routes that translate their bodies (passed as they are)
FIELDS = ("logit_bias", *_NUMERIC, *_OTHER)


def number(body: dict, name: str) -> float | None:
    """A number field (None: not given; a JSON integer beyond any float: inf), else a 400."""
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad(f"{name} must be a number, got {json.dumps(v)[:80]}", name, "invalid_type")
    try:
        return float(v)
    except OverflowError:  # a JSON integer beyond any float
        return math.inf


def _refuse(name: str, why: str):
    raise bad(f"{name} is not supported: {why}", name, "unsupported_value")


def refuse_unhonoured(body: dict) -> None:
    """A 400 naming the first field of ``body`` that asks for something this server does not
    do (the module docstring's list); their no-op values pass."""
    for name, (no_op, value, why) in _NUMERIC.items():
        v = number(body, name)
        if v is not None and not no_op(v):
            _refuse(name, f"{why}; only {value} (off) is accepted, got {v:g}")
    if body.get("ignore_eos") not in (None, False):
        _refuse("ignore_eos", "a reply ends at the model's end token")
    for name in ("grammar", "json_schema"):
        if body.get(name) not in (None, "", {}):
            _refuse(name, "give the constraint as response_format (json_schema) on /v1/chat/completions")
    if body.get("audio") is not None:
        _refuse("audio", "the model serves text only (no audio output)")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        if not isinstance(modalities, list):
            raise bad("modalities must be a list such as [\"text\"]", "modalities", "invalid_type")
        _refuse("modalities", "the model serves text only: the one modality is \"text\"")


_DIGITS = re.compile(r"[0-9]{1,12}")


def _token_id(key, where: str) -> int:
    """A token id given as an integer or, as OpenAI's map keys are, a decimal string."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and _DIGITS.fullmatch(key.strip()):
        return int(key)
    raise bad(f"{where}: a token is named by its id (such as \"15043\"), got {json.dumps(key)[:60]}; biasing "
              "text is not supported (tokenize it with /tokenize)", "logit_bias", "invalid_value")


def _bias(value, tid: int) -> float:
    """A bias: a number in [-100, 100], or false (llama.cpp's way to ban a token: -inf)."""
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(f"logit_bias: the bias of token {tid} must be a number from -{MAX_LOGIT_BIAS:g} to "
                  f"{MAX_LOGIT_BIAS:g}, or false to ban it, got {json.dumps(value)[:60]}", "logit_bias",
                  "invalid_type")
    if not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
        raise bad(f"logit_bias: the bias of token {tid} must be from -{MAX_LOGIT_BIAS:g} to {MAX_LOGIT_BIAS:g} "
                  f"(or false to ban it), got {value:g}", "logit_bias", "invalid_value")
    return float(value)


def logit_bias(body: dict, n_vocab: int | None) -> tuple | None:
    """``logit_bias`` as ``(token id, bias)`` pairs sorted by id (None: not given): OpenAI's
    map ``{"15043": -100}`` or llama.cpp's list ``[[15043, -100]]``, a bias of false for -inf;
    every id below ``n_vocab`` (when known)."""
    v = body.get("logit_bias")
    if v is None:
        return None
    if isinstance(v, dict):
        items = list(v.items())
    elif isinstance(v, list):
        items = []
        for i, item in enumerate(v):
            if not (isinstance(item, list) and len(item) == 2):
                raise bad(f"logit_bias[{i}] must be a [token id, bias] pair, got {json.dumps(item)[:60]}",
                          "logit_bias", "invalid_type")
            items.append(tuple(item))
    else:
        raise bad("logit_bias must be an object {\"token id\": bias} or a list of [token id, bias] pairs",
                  "logit_bias", "invalid_type")
    pairs = {}
    for key, value in items:
        tid = _token_id(key, "logit_bias")
        if n_vocab is not None and not 0 <= tid < n_vocab:
            raise bad(f"logit_bias names token {tid}, not a token of this model (0 to {n_vocab - 1})", "logit_bias",
                      "invalid_value")
        if tid in pairs:
            raise bad(f"logit_bias names token {tid} twice", "logit_bias", "invalid_value")
        pairs[tid] = _bias(value, tid)
    return tuple(sorted(pairs.items()))
