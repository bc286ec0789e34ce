"""The ``infill`` workload, editor completion: code files held back from the other sets, each
cut at two random points (seeded); the model fills in the lines between a prefix and a
suffix, as through ``/infill`` (it needs a model with fill-in-the-middle tokens).  The files
are in ``workloads.json`` (``text.data``)."""

from __future__ import annotations

import random

from .text import data, joined

__all__ = ["files", "infill_items", "items"]


def files() -> list[str]:
    """The held-back files: they appear in no other set."""
    return [joined(lines) for lines in data()["infill_files"]]


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


def items() -> list[dict]:
    """The workload: every held-back file cut twice, seed 0."""
    return infill_items(files())
