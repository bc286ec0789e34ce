"""The settings' schema (settings_schema.py) on a dataclass of its own: the field helper's
metadata, type coercion and checks on construction, text parsing, lookup by any name, and
the request fields it derives."""

import dataclasses
from dataclasses import dataclass

import pytest

from resispec_gguf import settings_schema as schema
from resispec_gguf.settings_schema import ConfigError, OneOf, Range, Settings, setting


@dataclass(frozen=True)
class Toy(Settings):
    """Every kind of field the schema knows."""

    rate: float = setting(0.5, "--rate", help="a rate", check=Range(0.0, 1.0, hi_open=True), request=True)
    count: int = setting(3, "--count", "-c", help="a count", check=Range(1), request="n")
    mode: str = setting("a", "--mode", help="a mode", check=OneOf(("a", "b")))
    seed: int | None = setting(None, "--seed", help="a seed (default: none)", check=Range(0), unset=("none", "-"))
    on: bool = setting(False, "--on", help="a switch", request=True)
    words: tuple[str, ...] = setting((), "--word", help="words")
    hidden: int = setting(1, help="no flag, no request field")


def test_the_field_helper_keeps_what_the_surfaces_need():
    meta = {f.name: f.metadata for f in dataclasses.fields(Toy)}
    assert meta["count"]["flags"] == ("--count", "-c") and meta["count"]["check"] == Range(1)
    assert meta["hidden"]["flags"] == () and meta["mode"]["request"] is False
    assert [f.name for f in schema.settings(Toy)] == ["rate", "count", "mode", "seed", "on", "words"]


def test_request_fields_are_named_by_their_metadata():
    assert [(f.name, schema.request_name(f)) for f in schema.request_fields(Toy)] == [
        ("rate", "rate"), ("count", "n"), ("on", "on")]


def test_kinds_read_the_type_hints():
    assert schema.kind(Toy, "seed") == schema.Kind(int, True, False)
    assert schema.kind(Toy, "words") == schema.Kind(str, False, True)
    assert schema.kind(Toy, "rate") == schema.Kind(float, False, False)


def test_values_are_coerced_and_checked_on_construction():
    t = Toy(rate=0, count=2, on=1, words="x")
    assert t.rate == 0.0 and isinstance(t.rate, float) and t.on is True and t.words == ("x",)
    for changes, field, needle in [(dict(rate=1.0), "rate", "in [0, 1)"), (dict(count=0), "count", ">= 1"),
                                   (dict(count=1.5), "count", "an integer"), (dict(mode="c"), "mode", "one of a, b"),
                                   (dict(on="yes"), "on", "true or false"), (dict(count=None), "count", "must be set")]:
        with pytest.raises(ConfigError) as e:
            Toy(**changes)
        assert e.value.field == field and needle in str(e.value), changes
    assert Toy().replace(count=9).count == 9


def test_text_is_parsed_as_the_field_says():
    assert schema.parse_field(Toy, "rate", "0.25") == 0.25
    assert schema.parse_field(Toy, "seed", "-") is None and schema.parse_field(Toy, "seed", "7") == 7
    assert schema.parse_field(Toy, "on", "Off") is False and schema.parse_field(Toy, "words", "a b") == "a b"
    with pytest.raises(ConfigError, match="on must be on or off"):
        schema.parse_field(Toy, "on", "maybe")
    with pytest.raises(ConfigError, match="count must be an integer"):
        schema.parse_field(Toy, "count", "two")


def test_a_setting_is_found_by_any_of_its_names():
    assert schema.find_setting([Toy], "-c") == (Toy, "count") and schema.find_setting([Toy], "RATE") == (Toy, "rate")
    assert schema.short_name(dataclasses.fields(Toy)[1]) == "count"
    with pytest.raises(ConfigError, match="unknown setting 'hidden'"):
        schema.find_setting([Toy], "hidden")


def test_ranges_say_their_bounds():
    assert str(Range(0.0, 1.0, lo_open=True)) == "in (0, 1]" and str(Range(1)) == ">= 1"
    assert schema.number_text(1e6) == "1e+06" and schema.number_text(12) == "12"
    with pytest.raises(ConfigError, match=r"x must be >= 2 \(why\), got 1"):
        Range(2, why="why")("x", 1)
