"""Built-in benchmark workloads: what people ask a local model to do, in four kinds.

* ``code`` — code completion: raw source text the model continues (no chat template).
* ``edit`` — rewrite or modify given code: the answer copies much of its context.
* ``chat`` — general questions in the chat template.
* ``infill`` — editor completion: code files held back from the other sets, each cut at two
  random points (seeded): the model fills in the lines between a prefix and a suffix, as
  through ``/infill`` (needs a model with fill-in-the-middle tokens).

Each item is ``{"prompt": str}``, ``{"messages": [...]}`` or ``{"infill": {"input_prefix": str,
"input_suffix": str}}``, as in a ``--prompts`` file.  Data only: nothing here is tuned on by
the engine.
"""

from __future__ import annotations

import random

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


# held back: the infill set's files appear nowhere else
_INFILL_FILES = [
    '''import argparse
import csv
import sys
from collections import Counter


def read_rows(path, delimiter=","):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter=delimiter))


def top_values(rows, column, n):
    counts = Counter(row[column] for row in rows if row.get(column))
    return counts.most_common(n)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Most frequent values of a CSV column.")
    parser.add_argument("path")
    parser.add_argument("column")
    parser.add_argument("-n", type=int, default=10, help="how many values to show")
    parser.add_argument("--delimiter", default=",")
    args = parser.parse_args(argv)
    rows = read_rows(args.path, args.delimiter)
    if rows and args.column not in rows[0]:
        print(f"no column {args.column!r}; columns: {', '.join(rows[0])}", file=sys.stderr)
        return 2
    for value, count in top_values(rows, args.column, args.n):
        print(f"{count:8d}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
''',
    '''from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    name: str
    price: float
    quantity: int = 0


@dataclass
class Inventory:
    items: dict = field(default_factory=dict)

    def add(self, item: Item) -> None:
        if item.sku in self.items:
            self.items[item.sku].quantity += item.quantity
        else:
            self.items[item.sku] = item

    def remove(self, sku: str, quantity: int) -> None:
        item = self.items.get(sku)
        if item is None:
            raise KeyError(sku)
        if quantity > item.quantity:
            raise ValueError(f"only {item.quantity} of {sku} in stock")
        item.quantity -= quantity
        if item.quantity == 0:
            del self.items[sku]

    def total_value(self) -> float:
        return sum(item.price * item.quantity for item in self.items.values())

    def low_stock(self, threshold: int = 5) -> list:
        return sorted((item for item in self.items.values() if item.quantity < threshold),
                      key=lambda item: item.quantity)
''',
    '''class EventEmitter {
  constructor() {
    this.listeners = new Map();
  }

  on(event, listener) {
    if (!this.listeners.has(event)) {
      this.listeners.set(event, []);
    }
    this.listeners.get(event).push(listener);
    return () => this.off(event, listener);
  }

  once(event, listener) {
    const wrapper = (...args) => {
      this.off(event, wrapper);
      listener(...args);
    };
    return this.on(event, wrapper);
  }

  off(event, listener) {
    const list = this.listeners.get(event);
    if (!list) {
      return;
    }
    const index = list.indexOf(listener);
    if (index !== -1) {
      list.splice(index, 1);
    }
    if (list.length === 0) {
      this.listeners.delete(event);
    }
  }

  emit(event, ...args) {
    const list = this.listeners.get(event);
    if (!list) {
      return false;
    }
    for (const listener of [...list]) {
      listener(...args);
    }
    return true;
  }
}

module.exports = { EventEmitter };
''',
    '''#include <stdlib.h>
#include <string.h>

typedef struct {
    int *data;
    size_t capacity;
    size_t head;
    size_t tail;
    size_t count;
} ring_buffer;

ring_buffer *ring_new(size_t capacity) {
    ring_buffer *rb = malloc(sizeof(ring_buffer));
    if (rb == NULL) {
        return NULL;
    }
    rb->data = malloc(capacity * sizeof(int));
    if (rb->data == NULL) {
        free(rb);
        return NULL;
    }
    rb->capacity = capacity;
    rb->head = 0;
    rb->tail = 0;
    rb->count = 0;
    return rb;
}

int ring_push(ring_buffer *rb, int value) {
    if (rb->count == rb->capacity) {
        return -1;
    }
    rb->data[rb->tail] = value;
    rb->tail = (rb->tail + 1) % rb->capacity;
    rb->count++;
    return 0;
}

int ring_pop(ring_buffer *rb, int *value) {
    if (rb->count == 0) {
        return -1;
    }
    *value = rb->data[rb->head];
    rb->head = (rb->head + 1) % rb->capacity;
    rb->count--;
    return 0;
}

void ring_free(ring_buffer *rb) {
    if (rb != NULL) {
        free(rb->data);
        free(rb);
    }
}
''',
    '''import time
from functools import wraps


def retry(times=3, delay=0.5, backoff=2.0, exceptions=(Exception,)):
    """Call the function again when it raises one of ``exceptions``, waiting longer each time."""

    def decorator(fn):
        @wraps(fn)
        def wrapper(*args, **kwargs):
            wait = delay
            for attempt in range(1, times + 1):
                try:
                    return fn(*args, **kwargs)
                except exceptions:
                    if attempt == times:
                        raise
                    time.sleep(wait)
                    wait *= backoff

        return wrapper

    return decorator


class RateLimiter:
    """Allow at most ``rate`` calls per ``period`` seconds (a token bucket)."""

    def __init__(self, rate, period=1.0):
        self.rate = rate
        self.period = period
        self.tokens = float(rate)
        self.updated = time.monotonic()

    def acquire(self):
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.updated) * self.rate / self.period)
        self.updated = now
        if self.tokens < 1.0:
            time.sleep((1.0 - self.tokens) * self.period / self.rate)
            self.tokens = 0.0
            self.updated = time.monotonic()
        else:
            self.tokens -= 1.0
''',
]


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
    "infill": infill_items(_INFILL_FILES),
}
