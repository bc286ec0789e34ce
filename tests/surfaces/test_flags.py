"""flags.py: one option per setting of a config dataclass, with the field's flags, type, help,
default and check; a value out of the field's bounds is an argparse error; ``from_args``
builds the dataclass from the offered fields alone."""

import argparse
import dataclasses
import re

import pytest

from resispec_gguf import config
from resispec_gguf.config import DraftParams, ModelParams, SamplingParams, ServerParams, WorkerParams
from resispec_gguf.surfaces import flags

CLASSES = (SamplingParams, DraftParams, ModelParams, ServerParams, WorkerParams)


def _parser(cls, **kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    flags.add_settings(p, cls, "settings", **kw)
    return p


def _options(p) -> dict:
    return {a.dest: a for a in p._actions if a.option_strings and a.dest != "help"}


@pytest.mark.parametrize("cls", CLASSES)
def test_one_option_per_setting_with_its_flags_default_and_help(cls):
    p = _parser(cls)
    options = _options(p)
    fields = config.settings(cls)
    assert list(options) == [f.name for f in fields]  # in the dataclass's order, nothing else
    assert flags.offered(p, cls) == tuple(f.name for f in fields)
    for f in fields:
        a, k = options[f.name], config.kind(cls, f.name)
        assert set(f.metadata["flags"]) <= set(a.option_strings)
        if k.base is bool:  # --x and --no-x
            assert isinstance(a, argparse.BooleanOptionalAction) and a.default == f.default
            assert {"--no-" + x[2:] for x in f.metadata["flags"] if x.startswith("--")} <= set(a.option_strings)
        elif k.many:  # repeatable; the field's default when not given
            assert isinstance(a, argparse._AppendAction) and a.default is None
        else:
            assert a.default == f.default and a.type.__name__ == f.name
        assert a.help.startswith(f.metadata["help"].split(" (default:")[0]) and "default: " in a.help


def test_fields_without_flags_get_none():
    assert {f.name for f in dataclasses.fields(DraftParams)} - {f.name for f in config.settings(DraftParams)} \
        == {"use_draft", "use_memory"}  # use_memory: per request (--memory-size 0 for a whole run)
    assert "use_draft" not in _options(_parser(DraftParams))
    assert "n_batch" not in _options(_parser(ModelParams))


def test_the_help_shows_the_default_as_the_user_types_it():
    helps = {dest: a.help for dest, a in _options(_parser(DraftParams)).items()}
    assert helps["method"] == "verification method (default: auto)"
    assert helps["lookup"].endswith("(default: off)")
    assert _options(_parser(ServerParams))["max_queue"].help == "requests allowed to wait (default: 8)"
    assert _options(_parser(SamplingParams))["stop"].help == "stop string (repeatable) (default: none)"
    seed = _options(_parser(SamplingParams))["seed"].help
    assert seed == "random seed (default: fresh each request)"  # what None means, from config


def _bounded():
    for cls in CLASSES:
        for f in config.settings(cls):
            if isinstance(f.metadata["check"], config.Range):
                yield pytest.param(cls, f, id=f"{cls.__name__}.{f.name}")


@pytest.mark.parametrize("cls,f", list(_bounded()))
def test_bounds_come_from_the_fields_range(cls, f):
    rng, k = f.metadata["check"], config.kind(cls, f.name)
    flag = f.metadata["flags"][0]
    step = 1 if k.base is int else 0.5
    p = _parser(cls)

    def parse(value):
        return getattr(p.parse_args([flag, str(value)]), f.name)

    for end, is_open, outside in ((rng.lo, rng.lo_open, -step), (rng.hi, rng.hi_open, step)):
        if end is None:
            continue
        if is_open:
            with pytest.raises(argparse.ArgumentError, match=f"{f.name} must be"):
                parse(k.base(end))
        else:
            assert parse(k.base(end)) == k.base(end)
        with pytest.raises(argparse.ArgumentError, match=re.escape(f"{f.name} must be {rng}")):
            parse(k.base(end + outside))


def test_choices_come_from_the_fields_one_of():
    options = _options(_parser(DraftParams))
    assert options["method"].metavar == "{" + ",".join(config.METHODS) + "}"
    assert options["policy"].metavar == "{" + ",".join(config.TREE_POLICIES) + "}"
    p = _parser(DraftParams)
    for m in config.METHODS:
        assert p.parse_args(["--method", m]).method == m
    with pytest.raises(argparse.ArgumentError, match="method must be one of"):
        p.parse_args(["--method", "fastest"])


def test_booleans_lists_and_unset_words():
    p = _parser(ModelParams)
    assert p.parse_args(["--flash-attn"]).flash_attn is True
    assert p.parse_args(["--no-flash-attn"]).flash_attn is False
    assert p.parse_args([]).flash_attn is None  # the field's default: llama.cpp decides
    assert p.parse_args(["--threads", "none"]).n_threads is None
    args = _parser(ServerParams).parse_args(["--cors-origin", "*", "--cors-origin", "https://a.example"])
    assert flags.from_args(ServerParams, args).cors_origins == ("*", "https://a.example")


def test_skip_and_defaults_and_overrides():
    p = _parser(SamplingParams, skip=("temperature", "stop"), defaults={"max_tokens": 128})
    options = _options(p)
    assert "temperature" not in options and "stop" not in options
    assert options["max_tokens"].default == 128 and options["max_tokens"].help.endswith("(default: 128)")
    args = p.parse_args(["--seed", "5"])
    assert flags.from_args(SamplingParams, args) == SamplingParams(max_tokens=128, seed=5)
    assert flags.from_args(SamplingParams, args, temperature=0.0) == SamplingParams(temperature=0.0, max_tokens=128,
                                                                                   seed=5)
    assert flags.from_args(DraftParams, args) == DraftParams()  # no flags offered for it: its defaults


def test_a_bad_combination_is_a_config_error_from_from_args():
    p = _parser(DraftParams)
    args = p.parse_args(["--method", "rrs", "--draws", "8", "--draft-support", "4"])  # each value fine alone
    with pytest.raises(config.ConfigError, match="draft_support"):
        flags.from_args(DraftParams, args)


def test_list_type():
    parse = flags.list_type(DraftParams, "draws")
    assert parse("1, 4,,16") == [1, 4, 16]
    with pytest.raises(argparse.ArgumentTypeError, match="expected a comma-separated list"):
        parse(" , ")
    with pytest.raises(argparse.ArgumentTypeError, match="draws must be in"):
        parse("4,65")
    assert flags.field_type(SamplingParams, "top_p")("0.5") == 0.5
