"""Built-in benchmark workloads: what people ask a local model to do, in six kinds.

* ``code`` — code completion: raw source text the model continues (no chat template).
* ``edit`` — rewrite or modify given code: the answer copies much of its context.
* ``chat`` — general questions in the chat template.
* ``infill`` — editor completion: code files held back from the other sets, each cut at two
  random points (seeded): the model fills in the lines between a prefix and a suffix, as
  through ``/infill`` (needs a model with fill-in-the-middle tokens).
* ``agent`` — a coding agent's requests: chat requests with tools, each holding a source file
  of the running Python's standard library read by a tool call, an edit answered as JSON
  with the whole file in a string (``agent``); they run in sequence
  (``inputs.run_order``).  ``agent-tools``: the same, edits answered by a
  ``write_file`` call (for targets that call tools).

Each item is ``{"prompt": str}``, ``{"messages": [...]}`` or ``{"infill": {"input_prefix": str,
"input_suffix": str}}``, as in a ``--prompts`` file.  The texts live in ``workloads.json``
beside this module (package data), the agent's files in the standard library; this module
only shapes them into items.  Data only:
nothing here is tuned on by the engine.  Imports only the standard library.
"""

from __future__ import annotations

import json
import random
from importlib import resources

from .agent import agent_items

__all__ = ["WORKLOADS", "infill_items"]


def _text(value) -> str:
    """A text of the data file: a string, or a list of lines each ending in a newline."""
    return value if isinstance(value, str) else "".join(line + "\n" for line in value)


_DATA = json.loads(resources.files(__package__).joinpath("workloads.json").read_text(encoding="utf-8"))
_QUOTED = {name: _text(lines) for name, lines in _DATA["quoted"].items()}

# held back: the infill set's files appear nowhere else
_INFILL_FILES = [_text(lines) for lines in _DATA["infill_files"]]


def infill_items(files, cuts: int = 2, seed: int = 0) -> list[dict]:
    """Each file cut ``cuts`` times: the cursor at a random character between a fifth and four
    fifths of the file, the held-back middle running from it to the end of a line one to five
    lines further.  Deterministic in ``seed``."""
    rng = random.Random(seed)
    items = []
    for text in files:
        for _ in range(cuts):
            start = rng.randrange(len(text) // 5, 4 * len(text) // 5)
            end = start
            for _ in range(rng.randint(1, 5)):
                nl = text.find("\n", end)
                end = len(text) if nl < 0 else nl + 1
            items.append({"infill": {"input_prefix": text[:start], "input_suffix": text[end:]}})
    return items


def _user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


WORKLOADS: dict[str, list[dict]] = {
    "code": [{"prompt": _text(lines)} for lines in _DATA["code"]],
    "edit": [_user(item["ask"] + "\n\n" + _QUOTED[item["quote"]]) for item in _DATA["edit"]],
    "chat": [_user(text) for text in _DATA["chat"]],
    "infill": infill_items(_INFILL_FILES),
    "agent": agent_items(),
    "agent-tools": agent_items(tool_calls=True),
}
