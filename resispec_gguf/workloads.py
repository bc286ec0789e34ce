"""Built-in benchmark workloads: what people ask a local model to do, in three kinds.

* ``code`` — code completion: raw source text the model continues (no chat template).
* ``edit`` — rewrite or modify given code: the answer copies much of its context.
* ``chat`` — general questions in the chat template.

Each item is ``{"prompt": str}`` or ``{"messages": [...]}``, as in a ``--prompts`` file.
Data only: nothing here is tuned on by the engine.
"""

from __future__ import annotations

_LRU = '''class LRUCache:
    """A fixed-size cache that evicts the least recently used key."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.data = {}
        self.order = []

    def get(self, key):
        if key not in self.data:
            return None
        self.order.remove(key)
        self.order.append(key)
        return self.data[key]

    def put(self, key, value):
        if key in self.data:
            self.order.remove(key)
        elif len(self.data) >= self.capacity:
            oldest = self.order.pop(0)
            del self.data[oldest]
        self.data[key] = value
        self.order.append(key)
'''

_PARSE = '''def parse_config(lines):
    result = {}
    section = None
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            result[section] = {}
            continue
        key, value = line.split("=", 1)
        result[section][key.strip()] = value.strip()
    return result
'''

_JS = '''function groupBy(items, keyFn) {
  var groups = {};
  for (var i = 0; i < items.length; i++) {
    var key = keyFn(items[i]);
    if (!groups[key]) {
      groups[key] = [];
    }
    groups[key].push(items[i]);
  }
  return groups;
}
'''

_STATS = '''def summarize(values):
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    ordered = sorted(values)
    if n % 2 == 1:
        median = ordered[n // 2]
    else:
        median = (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"n": n, "mean": mean, "var": var, "median": median}
'''


def _user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


WORKLOADS: dict[str, list[dict]] = {
    "code": [
        {"prompt": "import os\nimport hashlib\n\n\ndef file_digest(path, algorithm=\"sha256\", chunk_size=1 << 16):\n    \"\"\"Return the hex digest of the file at path, read in chunks.\"\"\"\n"},
        {"prompt": "from dataclasses import dataclass\n\n\n@dataclass\nclass Interval:\n    start: int\n    end: int\n\n    def overlaps(self, other: \"Interval\") -> bool:\n"},
        {"prompt": "def merge_intervals(intervals):\n    \"\"\"Merge overlapping [start, end] pairs and return them sorted.\"\"\"\n    if not intervals:\n        return []\n"},
        {"prompt": "class Matrix:\n    def __init__(self, rows):\n        self.rows = [list(r) for r in rows]\n        self.n = len(self.rows)\n        self.m = len(self.rows[0]) if self.rows else 0\n\n    def __add__(self, other):\n"},
        {"prompt": "#include <stdio.h>\n#include <stdlib.h>\n\n/* Reverse a singly linked list in place and return the new head. */\nstruct node {\n    int value;\n    struct node *next;\n};\n\nstruct node *reverse(struct node *head) {\n"},
        {"prompt": "import json\nfrom pathlib import Path\n\n\ndef load_settings(path: Path, defaults: dict) -> dict:\n    \"\"\"Read a JSON settings file, fill in missing keys from defaults, and validate types.\"\"\"\n"},
        {"prompt": "// Debounce: call fn only after `wait` ms have passed without another call.\nfunction debounce(fn, wait) {\n"},
        {"prompt": "def tokenize(expression):\n    \"\"\"Split an arithmetic expression like '3 + 4*(2 - 1)' into numbers, operators and parentheses.\"\"\"\n    tokens = []\n    i = 0\n"},
    ],
    "edit": [
        _user("Add type hints and a docstring to every method of this class. Return the whole class.\n\n" + _LRU),
        _user("Rewrite this class to use collections.OrderedDict so that get and put run in O(1). Keep the same interface and return the full code.\n\n" + _LRU),
        _user("This function crashes on lines without '=' and on keys before any section. Fix both bugs and return the corrected function.\n\n" + _PARSE),
        _user("Convert this JavaScript to modern ES2020 style (const/let, arrow functions, for...of). Return only the code.\n\n" + _JS),
        _user("Rename the variables in this function to descriptive names and add comments. Return the full function.\n\n" + _STATS),
        _user("Make this function handle an empty list and a single value (return None for var). Return the full function.\n\n" + _STATS),
        _user("Translate this Python function to TypeScript with proper types. Return only the code.\n\n" + _PARSE),
    ],
    "chat": [
        _user("What is the difference between a process and a thread? Answer in a short paragraph."),
        _user("Suggest three names for a small bakery that specialises in sourdough, with one sentence each."),
        _user("How do I politely decline a meeting invitation from a colleague? Give an example message."),
        _user("Explain what a hash table is to someone who has never programmed."),
        _user("I want to start running. Give me a simple plan for the first two weeks."),
        _user("Why is the sky blue? Keep it under 100 words."),
        _user("Write a short, friendly reminder email about an overdue library book."),
    ],
}
