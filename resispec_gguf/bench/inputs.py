"""What ``bench`` (and ``analyze``) run: prompt files and built-in workloads read into items,
items made into prompt tokens and plans, and the order the items run in.

An item is ``{"prompt": str}``, ``{"messages": [...]}`` (a chat request, with ``tools``,
``tool_choice`` and ``response_format`` as the OpenAI API has them) or ``{"infill":
{"input_prefix", "input_suffix"}}``; any of them may carry ``max_tokens`` (its reply's
budget when the command line sets none) and ``kind``.  Items whose kind names a sequential
workload (the agent's tool loop: ``workloads.is_sequential``) run in sequence per method
(``run_order``).

The engine comes in as an argument.
"""

from __future__ import annotations

import json
import os

from ..config import METHODS, ReasoningParams
from ..errors import FieldError, UserError
from .workloads import all_items, is_sequential

__all__ = ["parse_methods", "parse_prompts", "parse_workloads", "select_prompts", "without_max_tokens", "prompt_tokens", "prompt_plan",
           "planned_prompts", "as_run", "is_sequential", "run_order", "forget"]

_CHAT_FIELDS = ("tools", "tool_choice", "response_format")


def parse_prompts(path: str) -> list[dict]:
    """Read a JSONL prompt file: one ``{"prompt": str}``, ``{"messages": [...]}`` (with
    ``tools``, ``tool_choice``, ``response_format`` when it has them) or ``{"input_prefix":
    str, "input_suffix": str}`` (an infill) per line, each with an optional ``max_tokens``."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise UserError(f"cannot read prompt file {path}: {e.strerror}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{n}: expected an object with 'prompt' or 'messages'")
        out.append(_item(obj, f"{path}:{n}"))
    if not out:
        raise UserError(f"{path}: no prompts")
    return out


def _item(obj: dict, where: str) -> dict:
    if isinstance(obj.get("prompt"), str) and obj["prompt"]:
        item = {"kind": obj.get("kind", "prompt"), "prompt": obj["prompt"]}
    elif isinstance(obj.get("input_prefix"), str) and isinstance(obj.get("input_suffix"), str):
        item = {"kind": obj.get("kind", "infill"),
                "infill": {"input_prefix": obj["input_prefix"], "input_suffix": obj["input_suffix"]}}
    elif isinstance(obj.get("messages"), list) and obj["messages"]:
        _check_chat(obj, where)
        item = {"kind": obj.get("kind", "chat"), "messages": obj["messages"],
                **{k: obj[k] for k in _CHAT_FIELDS if obj.get(k) is not None}}
    else:
        raise UserError(f"{where}: expected a non-empty 'prompt' string, a 'messages' list or "
                        "'input_prefix' and 'input_suffix' strings")
    n = obj.get("max_tokens")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UserError(f"{where}: max_tokens must be a whole number >= 1, got {n!r}")
        item["max_tokens"] = n
    return item


def _check_chat(obj: dict, where: str) -> None:
    """A chat line's messages and tool fields, checked as a request's are (one line naming the
    field when they are not)."""
    from ..assist.chat_format import check_messages
    from ..assist.plan import check_chat_options
    from ..assist.tools import check_tool_messages

    for m in obj["messages"]:
        content = m.get("content") if isinstance(m, dict) else None
        if not (isinstance(m, dict) and m.get("role")
                and (isinstance(content, str) or (content is None and m.get("tool_calls")))):
            raise UserError(f"{where}: every message needs a role and string content (null beside tool_calls)")
    try:
        check_tool_messages(check_messages(obj["messages"]))
        check_chat_options(**{k: obj.get(k) for k in _CHAT_FIELDS})
    except FieldError as e:
        raise UserError(f"{where}: {e}") from None


def parse_methods(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in METHODS]
    if bad:
        raise UserError(f"unknown method {bad[0]!r}; choose from {', '.join(METHODS)}")
    return ["none"] + [m for m in dict.fromkeys(names) if m != "none"]


def parse_workloads(text: str) -> list[str]:
    known = all_items()
    names = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in names if w not in known]
    if bad or not names:
        raise UserError(f"unknown workload {bad[0] if bad else text!r}; choose from {', '.join(known)}")
    names = list(dict.fromkeys(names))
    empty = [w for w in names if not known[w]]
    if empty:  # agent: a Python installed without its standard library's sources
        raise UserError(f"workload {empty[0]} has no items here (it reads the Python standard library's source files)")
    return names


def select_prompts(prompts_file: str | None, workload: str) -> dict[str, list[dict]]:
    """``{workload: prompts}``: the ``--prompts`` file as one workload, else the built-in sets."""
    if prompts_file:
        return {os.path.splitext(os.path.basename(prompts_file))[0] or "prompts": parse_prompts(prompts_file)}
    return {w: all_items()[w] for w in parse_workloads(workload)}


def without_max_tokens(workloads: dict) -> dict:
    """The items without their own ``max_tokens``: a command line's ``-n`` applies to all."""
    return {w: [{k: v for k, v in item.items() if k != "max_tokens"} for item in items]
            for w, items in workloads.items()}


def prompt_tokens(engine, item) -> list[int]:
    """An item's prompt: an infill laid out as ``/infill`` does, a chat request as
    ``prompt_plan`` renders it (its tools and earlier calls included), text as it is."""
    if "infill" in item:
        return engine.infill_tokens(item["infill"]["input_prefix"], item["infill"]["input_suffix"], repo_level=True)[0]
    if "messages" in item:
        return prompt_plan(engine, item)[0]
    return engine.text_tokens(item["prompt"])


def prompt_plan(engine, item, reasoning: ReasoningParams | None = None):
    """``(tokens, plan)``: a chat item planned as a chat request is (``plan.plan_chat``, its
    tools and ``response_format`` included; on a reasoning model, its thinking's budget
    applies), plan None for the others."""
    if "messages" in item:
        from ..assist.plan import plan_chat

        plan = plan_chat(engine, item["messages"], reasoning=reasoning, **{k: item.get(k) for k in _CHAT_FIELDS})
        return plan.prompt, plan
    return prompt_tokens(engine, item), None


def planned_prompts(engine, workloads: dict, reasoning) -> dict:
    """``{workload: [(tokens, plan)]}`` (``prompt_plan``)."""
    return {w: [prompt_plan(engine, p, reasoning) for p in items] for w, items in workloads.items()}


def as_run(plan, constraint):
    """``constraint`` as a prompt's plan runs it (after the thinking of a reasoning model);
    without one, the plan's own (its tools' or ``response_format``'s; None: free text)."""
    if plan is None:
        return constraint
    return plan.constraint if constraint is None else plan.constrain(constraint)


def run_order(n_items: int, n_variants: int, sequential: bool) -> list[tuple[int, int]]:
    """``(item, variant)`` in the order they run: each item by every variant in turn
    (interleaved, so that a noisy machine slows all alike), or, ``sequential``, each
    variant's whole sequence of items in turn, so that a memory of earlier answers sees the
    same history under every variant (``forget`` before each)."""
    if sequential:
        return [(i, v) for v in range(n_variants) for i in range(n_items)]
    return [(i, v) for i in range(n_items) for v in range(n_variants)]


def forget(engine, learnt: bool = True) -> None:
    """Start a sequence cold: empty the engine's memory of past answers (shared across
    requests) if it keeps one, the models' caches and the RAM prompt cache, so that no
    method finds the prompts or the answers of the method that ran before it.  ``learnt``
    False keeps what ``auto`` learnt of the memory's candidates (``Memory.learn``), as a
    user's next request would."""
    memory = getattr(engine, "memory", None)
    if memory is not None:
        memory.clear(learnt)
    for model in (getattr(engine, "target", None), getattr(engine, "draft", None)):
        if model is not None:
            model.reset()
    cache = getattr(engine, "prompt_cache", None)
    if cache is not None:
        cache.clear()
