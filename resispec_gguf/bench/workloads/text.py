"""The workloads whose texts live in the package data file ``workloads.json``: ``code`` (raw
source text the model continues, no chat template), ``edit`` (rewrite or modify the quoted
code: the answer copies much of its context) and ``chat`` (general questions in the chat
template).  Also the reader of that file, which ``infill`` shares."""

from __future__ import annotations

import functools
import json
from importlib import resources

__all__ = ["data", "joined", "code_items", "edit_items", "chat_items"]


def joined(value) -> str:
    """A text of the data file: a string, or a list of lines each ending in a newline."""
    return value if isinstance(value, str) else "".join(line + "\n" for line in value)


@functools.cache
def data() -> dict:
    """The data file, read once (package data: an installed wheel has it too)."""
    return json.loads(resources.files(__package__).joinpath("workloads.json").read_text(encoding="utf-8"))


def _user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def code_items() -> list[dict]:
    return [{"prompt": joined(lines)} for lines in data()["code"]]


def edit_items() -> list[dict]:
    quoted = {name: joined(lines) for name, lines in data()["quoted"].items()}
    return [_user(item["ask"] + "\n\n" + quoted[item["quote"]]) for item in data()["edit"]]


def chat_items() -> list[dict]:
    return [_user(text) for text in data()["chat"]]
