"""Seeded outputs stay what they were: every configuration of ``seeded_grid`` (fixed methods
with lookup, ``auto`` with and without a draft, constrained or not, with a filled memory or
none, views on and off, two requests per pass) gives exactly the tokens recorded in
``data/seeded_outputs.json``, recorded before the candidate sources shared one interface and
again when the copy anchor joined the context source and auto weighed copies under way (new
candidates; with the anchor off the grid reproduced the old record exactly).  A change that moves a uniform
(which draw, in which order) changes them; a refactoring must not."""

from __future__ import annotations

import json

import pytest

import seeded_grid


@pytest.fixture(scope="module")
def recorded():
    return json.loads(seeded_grid.DATA.read_text())


def test_the_grid_reproduces_the_recorded_seeded_outputs(recorded):
    got = seeded_grid.outputs()
    assert sorted(got) == sorted(recorded)
    changed = [label for label in recorded if got[label] != recorded[label]]
    assert changed == [], f"{len(changed)} of {len(recorded)} configurations changed, e.g. {changed[:3]}"
