"""Mistral / Mistral-Nemo: ``[TOOL_CALLS]`` followed by a JSON list of calls
``[{"name": ..., "arguments": {...}, "id": "<9 letters or digits>"}]``.  The template lists
the tools in ``[AVAILABLE_TOOLS]`` and gives results back in ``[TOOL_RESULTS]``; it accepts
only call ids of nine letters or digits, so ids are made so here (the model's own when it
wrote one, and any other id a client sends is mapped to one, the same for a call and its
result).  Chosen when the chat template mentions ``[TOOL_CALLS]``.

May import its ``formats`` neighbours and ``tools``; nothing above.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import string

from ..grammar import laid_out
from ..tools import ToolRequest, own_guidance, rebased
from .base import ToolFormat

__all__ = ["MistralFormat", "mistral_id"]

_ID = re.compile(r"[A-Za-z0-9]{9}")
_ALPHABET = string.ascii_letters + string.digits


def mistral_id(call_id: str | None = None) -> str:
    """A nine-character alphanumeric id: ``call_id`` itself when it is one, else derived from
    it (the same for the same id), or fresh when there is none."""
    if call_id and _ID.fullmatch(call_id):
        return call_id
    if not call_id:
        return "".join(secrets.choice(_ALPHABET) for _ in range(9))
    digest = int.from_bytes(hashlib.sha256(call_id.encode("utf-8")).digest()[:8], "big")
    return "".join(_ALPHABET[(digest >> (6 * k)) % len(_ALPHABET)] for k in range(9))


def _item(f: dict, at: str) -> dict:
    return {"type": "object",
            "properties": {"name": {"const": f["name"]},
                           "arguments": rebased(f["parameters"], f"{at}/properties/arguments"),
                           "id": {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}},
            "required": ["name", "arguments"], "additionalProperties": False}


class MistralFormat(ToolFormat):
    """``[TOOL_CALLS][{"name": ..., "arguments": ..., "id": ...}, ...]``."""

    name = "mistral"
    open = "[TOOL_CALLS]"
    markers = (open, "[AVAILABLE_TOOLS]", "[TOOL_RESULTS]")
    example = '[TOOL_CALLS][{"name": <function-name>, "arguments": <args-json-object>, "id": <9 letters or digits>}]'

    def body_rules(self, req: ToolRequest) -> list[str]:
        chosen = [f for f in req.functions if f["name"] in req.allowed]
        if len(chosen) == 1:
            items = _item(chosen[0], "/items")
        else:
            items = {"anyOf": [_item(f, f"/items/anyOf/{i}") for i, f in enumerate(chosen)]}
        array = {"type": "array", "items": items, "minItems": 1, **({} if req.parallel else {"maxItems": 1})}
        schema = laid_out(array, own_guidance(chosen))
        return ['body: " "? calls', f"calls: %json {json.dumps(schema, ensure_ascii=False)}"]

    def read_calls(self, text: str, allowed):
        try:
            value, end = json.JSONDecoder().raw_decode(text.lstrip())
        except json.JSONDecodeError:
            return None
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list) or text.lstrip()[end:].strip():
            return None
        calls = []
        for obj in value:
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                return None
            if allowed is not None and obj["name"] not in allowed:
                return None
            args = obj.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    return None
            if not isinstance(args, dict):
                return None
            cid = obj.get("id")
            calls.append(self.call(obj["name"], args, cid if isinstance(cid, str) and _ID.fullmatch(cid) else None))
        return calls

    def new_id(self) -> str:
        return mistral_id()

    def write_calls(self, calls: list[dict]) -> str:
        return self.open + json.dumps([{"name": c["function"]["name"], "arguments": c["function"]["arguments"],
                                        "id": mistral_id(c.get("id"))} for c in calls], ensure_ascii=False)

    def native_messages(self, messages: list[dict]) -> list[dict]:
        """Every call id and ``tool_call_id`` made nine letters or digits (``mistral_id``), as
        the template demands."""
        out = []
        for m in messages:
            if m.get("tool_calls"):
                m = {**m, "tool_calls": [{**c, "id": mistral_id(c.get("id"))} for c in m["tool_calls"]]}
            if m.get("role") == "tool" and "tool_call_id" in m:
                m = {**m, "tool_call_id": mistral_id(m.get("tool_call_id"))}
            out.append(m)
        return out
